#!/usr/bin/env bash
# Kafka 0.7.2's bin/kafka-console-producer.sh, for Tributary: runs kafka.producer.ConsoleProducer (see kafka-run-class.sh).
exec "$(dirname "$0")/kafka-run-class.sh" kafka.producer.ConsoleProducer "$@"
