#!/usr/bin/env bash
# Kafka 0.7.2's bin/zookeeper-server-start.sh: starts a ZooKeeper server (Debian's package,
# installed by scripts/install-deps.sh) from a zookeeper.properties file.
if [ $# -ne 1 ]; then
  echo "USAGE: $0 zookeeper.properties" >&2
  exit 1
fi
exec "$(dirname "$0")/kafka-run-class.sh" org.apache.zookeeper.server.quorum.QuorumPeerMain "$@"
