#!/usr/bin/env bash
# Kafka 0.7.2's bin/kafka-server-stop.sh, for Tributary: asks the brokers of this machine
# (`tributary server` processes of this user) to stop, with SIGINT as 0.7.2 does; each flushes
# its logs, leaves ZooKeeper and exits. Given a server.properties path (Tributary's addition),
# only the brokers started with that file. Says how many it signalled.
# The binary's name starts with "tributary" (as built, or as TRIBUTARY_BIN names it).
pattern='(^|/)tributary[^ /]*( --[a-z-]+[ =][a-z]+)* server( |$)'
pids=$(pgrep -u "$(id -u)" -f "$pattern" || true)
if [ $# -ge 1 ]; then
  wanted=$(readlink -f -- "$1")
  chosen=""
  for pid in $pids; do
    # The process's own words (NUL-separated), relative ones resolved against its directory.
    while IFS= read -r -d '' word; do
      case "$word" in
        /*) path=$word ;;
        *) path="$(readlink "/proc/$pid/cwd" 2>/dev/null)/$word" ;;
      esac
      if [ "$(readlink -f -- "$path" 2>/dev/null)" = "$wanted" ]; then
        chosen="$chosen $pid"
        break
      fi
    done < "/proc/$pid/cmdline"
  done
  pids=$chosen
fi
if [ -z "$pids" ]; then
  echo "no broker running${1:+ with $1}" >&2
  # Given a file, finding nothing to stop is an error (a wrong path must not pass for done).
  [ $# -ge 1 ] && exit 1
  exit 0
fi
kill -INT $pids
echo "asked $(echo $pids | wc -w) broker(s) to stop:$(printf ' %s' $pids)" >&2
