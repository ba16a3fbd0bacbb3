#!/usr/bin/env bash
# The main job: a source cluster and a mirror cluster, as the original mirroring patch describes
# them, from the sample configs in config/ (files unchanged):
#   source: ZooKeeper :2181 (zookeeper.properties) + broker 0 :9092 (server.properties)
#   mirror: ZooKeeper :2171 (mirror-zookeeper.properties) + broker 0 :9095 started with three
#           files (mirror-server.properties mirror-consumer.properties mirror-producer.properties)
# Messages are produced to the source (with durable acknowledgements) while a progress line
# shows the mirror following; the mirror broker is killed with SIGKILL mid-way and restarted
# some batches later; `mirror-status --watch` shows it catching up (the live view); a scrape of
# its Prometheus endpoint (--metrics.port; the seed's files stay unchanged) and
# consumer-offset-checker show its lag, and a count proves nothing was lost.
# Everything started here is stopped at the end, even on Ctrl-C.
#
# TRIBUTARY_BIN=<path> uses an already built binary instead of building the release one.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh >/dev/null
bin=${TRIBUTARY_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release --locked -p tributary-tools
  bin=target/release/tributary
fi
work=$(mktemp -d)
pids=()
mirror_pid=""
cleanup() {
  [ -n "$mirror_pid" ] && kill -TERM "$mirror_pid" 2>/dev/null || true
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "(stopped everything; logs are in $work)"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for port in 2181 2171 9092 9095 9404 9405; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "error: port $port is in use; stop whatever listens there (the sample configs use 2181, 2171, 9092, 9095; metrics 9404, 9405)" >&2
    exit 1
  fi
done
# The sample configs keep their data under /tmp; start from nothing.
rm -rf /tmp/zookeeper /tmp/mirror-zookeeper /tmp/tributary-logs /tmp/mirror-kafka-logs

wait_port() {
  for _ in $(seq 150); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.2
  done
  echo "error: nothing listens on :$1 (see $work)" >&2
  exit 1
}
zookeeper() {
  java -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar org.apache.zookeeper.server.quorum.QuorumPeerMain "$1" >"$work/$2.log" 2>&1 &
  pids+=($!)
}
start_mirror() {
  RUST_LOG=info "$bin" server --metrics.port 9405 \
    config/mirror-server.properties config/mirror-consumer.properties config/mirror-producer.properties \
    >>"$work/mirror-broker.log" 2>&1 &
  mirror_pid=$!
  wait_port 9095
}
# The mirror's lag (bytes of the source it has not committed yet), from the seed's tool.
lag() {
  "$bin" consumer-offset-checker --group KafkaMirror --zkconnect localhost:2181 --topic "$topic" 2>/dev/null |
    awk '/Consumer lag = [0-9-]/ {s += $4; n++} END {if (n == 0) print "-"; else print s}'
}
progress() {
  local size
  size=$("$bin" consumer-offset-checker --group KafkaMirror --zkconnect localhost:2181 --topic "$topic" 2>/dev/null |
    awk '/Log size = [0-9-]/ {s += $4} END {print s + 0}')
  printf '\r   source log end %10s bytes | mirror lag %10s bytes   ' "$size" "$(lag)"
}

echo "== source cluster: ZooKeeper :2181, broker 0 :9092"
zookeeper config/zookeeper.properties source-zookeeper
wait_port 2181
RUST_LOG=info "$bin" server --metrics.port 9404 config/server.properties 2>"$work/source-broker.log" &
pids+=($!)
wait_port 9092

echo "== mirror cluster: ZooKeeper :2171, broker 0 :9095 with the embedded mirror (the seed's three files; metrics on :9405)"
zookeeper config/mirror-zookeeper.properties mirror-zookeeper
wait_port 2171
start_mirror

topic="demo"
batches=12
per_batch=5000
total=$((batches * per_batch))

echo "== producing $total messages to '$topic' on the source in $batches batches (durable acks)"
for b in $(seq "$batches"); do
  seq $(((b - 1) * per_batch + 1)) $((b * per_batch)) | sed 's/^/message-/' |
    "$bin" console-producer --zookeeper localhost:2181 --topic "$topic" --acks 2>>"$work/producer.log"
  progress
  if [ "$b" -eq 5 ]; then
    echo
    echo "== SIGKILL of the mirror broker (mid-way); the source goes on, the mirror restarts after batch 9"
    kill -KILL "$mirror_pid"
    wait "$mirror_pid" 2>/dev/null || true
    mirror_pid=""
  fi
  if [ "$b" -eq 9 ]; then
    echo
    echo "== restarting the mirror broker: it resumes from its last commit"
    start_mirror
  fi
  sleep 0.5
done
echo

echo "== the live view: mirror-status --watch (redraws every second until the mirror has caught up)"
timeout 180 "$bin" mirror-status --zkconnect localhost:2181 --group KafkaMirror -v --watch --until-caught-up ||
  echo "(the mirror did not catch up within 180 s; see $work/mirror-broker.log)"
echo

echo "== the mirror's Prometheus endpoint (http://localhost:9405/metrics), its lag and counters"
sleep 6   # the mirror measures its lag every 5 s
curl -s http://localhost:9405/metrics | grep -E '^tributary_(mirror_lag_(bytes|seconds)|mirror_(messages|bytes|gaps)_total|producer_(acked|failed)_total)' ||
  echo "(curl is not installed; the endpoint is http://localhost:9405/metrics)"

echo "== consumer-offset-checker --group KafkaMirror --zkconnect localhost:2181 (the seed's way)"
"$bin" consumer-offset-checker --group KafkaMirror --zkconnect localhost:2181

echo "== counting what the mirror cluster holds (console-consumer on :2171)"
"$bin" console-consumer --zookeeper localhost:2171 --topic "$topic" --from-beginning --consumer-timeout-ms 5000 \
  2>/dev/null >"$work/mirrored.txt"
distinct=$(sort -u "$work/mirrored.txt" | grep -c '^message-' || true)
lines=$(grep -c '^message-' "$work/mirrored.txt" || true)
missing=$((total - distinct))
echo
echo "== summary"
echo "   produced to the source (acknowledged): $total"
echo "   distinct messages in the mirror:       $distinct"
echo "   lost:                                  $missing"
echo "   duplicates (resent after the SIGKILL): $((lines - distinct))"
if [ "$missing" -ne 0 ]; then
  echo "error: the mirror is missing $missing messages" >&2
  exit 1
fi
echo "   the mirror holds every message, through a SIGKILL of the mirror broker"
