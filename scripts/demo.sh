#!/usr/bin/env bash
# The main job, as far as it exists today: build the `tributary` binary, check every sample
# configuration (the seed's mirror configs among them), and dump a log segment.
# It grows into the source + mirror cluster demo as the broker and mirror land.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release --locked -p tributary
bin=target/release/tributary

echo "== every sample configuration, as Tributary reads it"
"$bin" check-config config/*.properties | grep -E '^config/|ignored'

echo
echo "== the mirror's embedded consumer and producer settings"
"$bin" check-config config/mirror-consumer.properties config/mirror-producer.properties \
  | grep -E 'group_id|topics|enqueue_timeout|producer_type|BrokerEndpoint|host|port' | sed 's/^ */  /'

echo
echo "The broker (and the source + mirror demo) arrive with the broker and mirror issues."
