#!/usr/bin/env bash
# Kafka 0.7.2's bin/zookeeper-server-stop.sh: stops the ZooKeeper servers of this user with
# SIGINT. Unlike 0.7.2's (which matched "zookeeper" anywhere, brokers included), only ZooKeeper's
# own server class is matched; given a zookeeper.properties path (Tributary's addition), only
# the server started with that file.
pids=$(pgrep -u "$(id -u)" -f 'org\.apache\.zookeeper\.server\.quorum\.QuorumPeerMain' || true)
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
  echo "no ZooKeeper server running${1:+ with $1}" >&2
  # Given a file, finding nothing to stop is an error (a wrong path must not pass for done).
  [ $# -ge 1 ] && exit 1
  exit 0
fi
kill -INT $pids
echo "asked $(echo $pids | wc -w) ZooKeeper server(s) to stop:$(printf ' %s' $pids)" >&2
