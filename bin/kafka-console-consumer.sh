#!/usr/bin/env bash
# Kafka 0.7.2's bin/kafka-console-consumer.sh, for Tributary: runs kafka.consumer.ConsoleConsumer
# with bin/kafka-console-consumer-log4j.properties (log lines on standard error, so standard
# output carries only the messages).
base_dir=$(dirname "$0")
export KAFKA_OPTS="${KAFKA_OPTS:+$KAFKA_OPTS }-Dlog4j.configuration=file:$base_dir/kafka-console-consumer-log4j.properties"
exec "$base_dir/kafka-run-class.sh" kafka.consumer.ConsoleConsumer "$@"
