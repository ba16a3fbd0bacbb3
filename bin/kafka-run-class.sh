#!/usr/bin/env bash
# Tributary's stand-in for Kafka 0.7.2's bin/kafka-run-class.sh: runs the Tributary command that
# replaces a Kafka 0.7 class, with the class's own arguments.
#
#   bin/kafka-run-class.sh kafka.tools.GetOffsetShell --server kafka://localhost:9092 --topic t --time -1
#
# The binary: $TRIBUTARY_BIN, else target/release/tributary or target/debug/tributary under
# this checkout, else `tributary` on the PATH.
#
# The environment 0.7.2's script reads:
# - KAFKA_OPTS: its -Dlog4j.configuration=file:<path> is honoured (see below); every JVM option
#   in it (-Xmx, -server, -D..., -XX:...) has no meaning here and is ignored, said in one line.
# - KAFKA_JMX_OPTS, JMX_PORT: no JVM, no JMX; the metrics endpoint (--metrics.port, or
#   metrics.port in server.properties) replaces it. Ignored, said in one line.
# - The log4j file (config/log4j.properties unless KAFKA_OPTS names another): its levels become
#   RUST_LOG (log4j.rootLogger=INFO -> info; log4j.logger.kafka.perf=DEBUG -> kafka.perf=debug)
#   unless RUST_LOG is set, and log lines go to standard output as log4j's ConsoleAppender does,
#   or to standard error when the file's appender says Target=System.err (as
#   config/log4j.properties does, so tools' results are not mixed with log lines).
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "USAGE: $0 classname [opts]" >&2
  exit 1
fi

base_dir=$(cd "$(dirname "$0")/.." && pwd)

find_tributary() {
  if [ -n "${TRIBUTARY_BIN:-}" ]; then
    echo "$TRIBUTARY_BIN"
  elif [ -x "$base_dir/target/release/tributary" ]; then
    echo "$base_dir/target/release/tributary"
  elif [ -x "$base_dir/target/debug/tributary" ]; then
    echo "$base_dir/target/debug/tributary"
  elif command -v tributary >/dev/null 2>&1; then
    command -v tributary
  else
    echo "error: no tributary binary: build it (cargo build --release -p tributary), put it on the PATH or set TRIBUTARY_BIN" >&2
    exit 1
  fi
}

class=$1
shift

# Kafka 0.7's classes and the Tributary subcommand that replaces each. Names 0.7.0 used, and the
# kafka.tools.* perf names 0.7.2's own scripts call (which 0.7.2 itself lacks), are accepted too.
subcommand=""
case "$class" in
  kafka.Kafka) subcommand=server ;;
  kafka.tools.MirrorMaker) subcommand=mirror-maker ;;
  kafka.consumer.ConsoleConsumer) subcommand=console-consumer ;;
  kafka.producer.ConsoleProducer) subcommand=console-producer ;;
  kafka.perf.ProducerPerformance | kafka.tools.ProducerPerformance) subcommand=producer-perf ;;
  kafka.perf.ConsumerPerformance | kafka.tools.ConsumerPerformance) subcommand=consumer-perf ;;
  kafka.perf.SimpleConsumerPerformance | kafka.tools.SimpleConsumerPerformance) subcommand=simple-consumer-perf ;;
  kafka.tools.SimpleConsumerShell) subcommand=simple-consumer-shell ;;
  kafka.tools.GetOffsetShell) subcommand=get-offsets ;;
  kafka.tools.ConsumerOffsetChecker) subcommand=consumer-offset-checker ;;
  kafka.tools.DumpLogSegments) subcommand=dump-log ;;
  kafka.tools.ExportZkOffsets) subcommand=export-zk-offsets ;;
  kafka.tools.ImportZkOffsets) subcommand=import-zk-offsets ;;
  kafka.utils.UpdateOffsetsInZK) subcommand=update-offsets-in-zk ;;
  kafka.tools.VerifyConsumerRebalance) subcommand=verify-consumer-rebalance ;;
  kafka.tools.ReplayLogProducer) subcommand=replay-log-producer ;;
  kafka.tools.ConsumerShell) subcommand=consumer-shell ;;
  kafka.tools.ProducerShell) subcommand=producer-shell ;;
  kafka.tools.JmxTool) subcommand=jmx-tool ;;
  org.apache.zookeeper.server.quorum.QuorumPeerMain | org.apache.zookeeper.ZooKeeperMain)
    # ZooKeeper is Debian's (scripts/install-deps.sh installs it); it runs on Java.
    # ZooKeeper 3.5+ starts an admin server on port 8080, which a second server on the machine
    # cannot take (0.7's configs and system tests run several); 0.7's ZooKeeper had none.
    # netty-codec is missing from Debian's jar manifest and needed by secureClientPort (TLS).
    exec java -Dzookeeper.admin.enableServer=false \
      -cp "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/netty-codec.jar" "$class" "$@"
    ;;
  *)
    {
      echo "error: $class is not a Kafka 0.7 class Tributary replaces. Known classes:"
      sed -n 's/^  \([a-z][A-Za-z.]*\)\( | [A-Za-z.]*\)*) subcommand=\([a-z-]*\) ;;$/  \1\2 -> tributary \3/p' "$0"
      echo "  org.apache.zookeeper.server.quorum.QuorumPeerMain, org.apache.zookeeper.ZooKeeperMain -> Debian's ZooKeeper"
    } >&2
    exit 1
    ;;
esac

# JVM-only settings: one line, once, when any was given.
jvm_only=""
kafka_opts_log4j=""
for opt in ${KAFKA_OPTS:-}; do
  case "$opt" in
    -Dlog4j.configuration=file:*) kafka_opts_log4j=${opt#-Dlog4j.configuration=file:} ;;
    -Dlog4j.configuration=*) kafka_opts_log4j=${opt#-Dlog4j.configuration=} ;;
    *) jvm_only="$jvm_only $opt" ;;
  esac
done
[ -n "${KAFKA_JMX_OPTS:-}" ] && jvm_only="$jvm_only KAFKA_JMX_OPTS"
[ -n "${JMX_PORT:-}" ] && jvm_only="$jvm_only JMX_PORT=$JMX_PORT"
if [ -n "$jvm_only" ]; then
  echo "note: ignoring JVM-only settings (no JVM here; JMX is replaced by the metrics endpoint):$jvm_only" >&2
fi

# Logging from the log4j file: levels into RUST_LOG, the console appender's stream.
log4j=${kafka_opts_log4j:-$base_dir/config/log4j.properties}
log_to=stdout
if [ -f "$log4j" ]; then
  if [ -z "${RUST_LOG:-}" ]; then
    # Levels lowercased (log4j's FATAL is error, ALL is trace); logger names kept as written.
    directives=$(awk '
      function level(l) {
        l = tolower(l)
        if (l == "fatal") return "error"
        if (l == "all") return "trace"
        if (l == "trace" || l == "debug" || l == "info" || l == "warn" || l == "error" || l == "off") return l
        printf "note: %s: log4j level \"%s\" is not one Tributary knows (TRACE DEBUG INFO WARN ERROR FATAL OFF ALL); that line is ignored\n", FILENAME, l > "/dev/stderr"
        return ""
      }
      /^[[:space:]]*#/ { next }
      match($0, /^[[:space:]]*log4j\.rootLogger[[:space:]]*=[[:space:]]*[A-Za-z]+/) {
        split(substr($0, RSTART, RLENGTH), kv, "="); gsub(/[[:space:]]/, "", kv[2]); l = level(kv[2]); if (l != "") print l; next
      }
      match($0, /^[[:space:]]*log4j\.logger\.[^=[:space:]]+[[:space:]]*=[[:space:]]*[A-Za-z]+/) {
        line = substr($0, RSTART, RLENGTH); eq = index(line, "=")
        name = substr(line, 1, eq - 1); sub(/^[[:space:]]*log4j\.logger\./, "", name); gsub(/[[:space:]]/, "", name)
        lvl = substr(line, eq + 1); gsub(/[[:space:]]/, "", lvl)
        l = level(lvl); if (l != "") print name "=" l
      }' "$log4j" | paste -sd, -)
    [ -n "$directives" ] && export RUST_LOG="$directives"
  fi
  # log4j reads the property as `Target` or `target` and its value in any case (0.7.2's own
  # bin/kafka-console-consumer-log4j.properties writes `target`); `key: value` is a property too.
  if grep -Eiq '^[[:space:]]*log4j\.appender\.[^=:[:space:]]*\.target[[:space:]]*[=:][[:space:]]*System\.err[[:space:]]*$' "$log4j"; then
    log_to=stderr
  fi
elif [ -n "$kafka_opts_log4j" ]; then
  echo "note: log4j configuration $kafka_opts_log4j not found; using the default levels" >&2
fi

tributary=$(find_tributary)
exec "$tributary" --log-to "$log_to" "$subcommand" "$@"
