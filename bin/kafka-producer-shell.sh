#!/usr/bin/env bash
# Kafka 0.7.2's bin/kafka-producer-shell.sh, for Tributary: runs kafka.tools.ProducerShell (see kafka-run-class.sh).
exec "$(dirname "$0")/kafka-run-class.sh" kafka.tools.ProducerShell "$@"
