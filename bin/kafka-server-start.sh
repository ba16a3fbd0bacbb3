#!/usr/bin/env bash
# Kafka 0.7.2's bin/kafka-server-start.sh, for Tributary: starts a broker from server.properties
# (and, for Kafka 0.7.0's embedded mirror, the mirror's consumer and producer properties).
if [ $# -lt 1 ]; then
  echo "USAGE: $0 server.properties [consumer.properties producer.properties]" >&2
  exit 1
fi
exec "$(dirname "$0")/kafka-run-class.sh" kafka.Kafka "$@"
