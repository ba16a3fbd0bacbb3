#!/usr/bin/env bash
# The main job, as far as it exists today: a ZooKeeper and a Tributary broker started from the
# sample configs (config/zookeeper.properties, config/server.properties: ports 2181 and 9092,
# data under /tmp), then the console tools against them: produce lines, consume them, list
# offsets, dump the segment. It grows into the source + mirror cluster demo with the mirror.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh
cargo build --release --locked -p tributary
bin=target/release/tributary
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

for port in 2181 9092; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "error: port $port is in use; stop whatever listens there (or edit config/*.properties)" >&2
    exit 1
  fi
done

echo "== ZooKeeper on :2181 (config/zookeeper.properties)"
java -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar org.apache.zookeeper.server.quorum.QuorumPeerMain \
  config/zookeeper.properties >"$work/zookeeper.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/2181) 2>/dev/null && break
  sleep 0.2
done

echo "== broker 0 on :9092 (config/server.properties), log in $work/broker.log"
RUST_LOG=info "$bin" server config/server.properties 2>"$work/broker.log" &
pids+=($!)
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/9092) 2>/dev/null && break
  sleep 0.2
done
grep -m1 "registered broker" "$work/broker.log" || true

topic="demo-$(date +%s)"
echo "== console-producer: three lines to topic $topic (snappy), broker found through ZooKeeper"
printf 'the first message\nthe second message\nthe third message\n' |
  "$bin" console-producer --zookeeper localhost:2181 --topic "$topic" --compress 2

echo "== simple-consumer: partition 0 from offset 0 (messages are visible once flushed, within ~2 s)"
timeout 30 "$bin" simple-consumer --server kafka://localhost:9092 --topic "$topic" --offset 0 --print-offsets --max-messages 3

echo "== get-offsets: latest (newest first) and earliest"
"$bin" get-offsets --server kafka://localhost:9092 --topic "$topic" --time -1 --offsets 5
"$bin" get-offsets --server kafka://localhost:9092 --topic "$topic" --time -2

echo "== dump-log: the segment on disk"
"$bin" dump-log --noprint "/tmp/tributary-logs/$topic-0/00000000000000000000.kafka" | tail -4

echo "== shutting down (SIGTERM: flush, checkpoint, clean-shutdown marker)"
