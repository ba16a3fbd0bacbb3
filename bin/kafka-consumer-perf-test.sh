#!/usr/bin/env bash
# Kafka 0.7.2's bin/kafka-consumer-perf-test.sh, for Tributary: runs kafka.perf.ConsumerPerformance (see kafka-run-class.sh).
exec "$(dirname "$0")/kafka-run-class.sh" kafka.perf.ConsumerPerformance "$@"
