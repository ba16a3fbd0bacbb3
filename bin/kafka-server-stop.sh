#!/usr/bin/env bash
# Kafka 0.7.2's bin/kafka-server-stop.sh, for Tributary: asks the brokers of this machine
# (`tributary server` processes of this user) to stop, with SIGINT as 0.7.2 does; each flushes
# its logs, leaves ZooKeeper and exits. Given a server.properties path (Tributary's addition),
# only the brokers started with that file. Says how many it signalled.
pattern='(^|/)tributary( --[a-z-]+ [a-z]+)* server( |$)'
pids=$(pgrep -u "$(id -u)" -f "$pattern" || true)
if [ $# -ge 1 ]; then
  wanted=$(readlink -f "$1")
  chosen=""
  for pid in $pids; do
    for word in $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null); do
      if [ "$(readlink -f "$word" 2>/dev/null)" = "$wanted" ]; then
        chosen="$chosen $pid"
        break
      fi
    done
  done
  pids=$chosen
fi
if [ -z "$pids" ]; then
  echo "no broker running${1:+ with $1}" >&2
  exit 0
fi
kill -INT $pids
echo "asked $(echo $pids | wc -w) broker(s) to stop:$(printf ' %s' $pids)" >&2
