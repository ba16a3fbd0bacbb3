#!/usr/bin/env bash
# Shared by kafka-server-stop.sh and zookeeper-server-stop.sh (not a 0.7.2 script):
#   stop-processes.sh <what> <pgrep pattern> [properties file]
# Sends SIGINT (SIGTERM to one that ignores SIGINT) to this user's processes matching the
# pattern; given a properties file, only to those started with it (their command-line words,
# relative ones resolved against their directory). Finding nothing is an error only when a file
# was given.
what=$1
pattern=$2
shift 2
pids=$(pgrep -u "$(id -u)" -f "$pattern" || true)
if [ $# -ge 1 ]; then
  wanted=$(readlink -f -- "$1")
  chosen=""
  for pid in $pids; do
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
  echo "no $what running${1:+ with $1}" >&2
  # Given a file, finding nothing to stop is an error (a wrong path must not pass for done).
  [ $# -ge 1 ] && exit 1
  exit 0
fi
# SIGINT, as 0.7.2 sends; but a process that ignores it (a JVM started as a background job of a
# non-interactive shell, `zookeeper-server-start.sh ... &`, begins with SIGINT ignored and keeps
# it so) would never stop: it gets SIGTERM, which runs the same shutdown hooks.
for pid in $pids; do
  ignored=$(sed -n 's/^SigIgn:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null)
  if [ -n "$ignored" ] && (( 0x$ignored & 2 )); then
    kill -TERM "$pid" && echo "$what $pid ignores SIGINT: sent SIGTERM" >&2
  else
    kill -INT "$pid"
  fi
done
echo "asked $(echo $pids | wc -w) $what(s) to stop:$(printf ' %s' $pids)" >&2
