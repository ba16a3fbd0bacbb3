#!/usr/bin/env bash
# Kafka 0.7.2's bin/kafka-replay-log-producer.sh, for Tributary: runs kafka.tools.ReplayLogProducer (see kafka-run-class.sh).
exec "$(dirname "$0")/kafka-run-class.sh" kafka.tools.ReplayLogProducer "$@"
