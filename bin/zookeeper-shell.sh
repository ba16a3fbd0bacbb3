#!/usr/bin/env bash
# Kafka 0.7.2's bin/zookeeper-shell.sh: ZooKeeper's own shell (Debian's package) on a server.
if [ $# -ne 1 ]; then
  echo "USAGE: $0 zookeeper_host:port[/path]" >&2
  exit 1
fi
exec "$(dirname "$0")/kafka-run-class.sh" org.apache.zookeeper.ZooKeeperMain -server "$1"
