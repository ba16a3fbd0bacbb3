#!/usr/bin/env bash
# Kafka 0.7.2's bin/zookeeper-server-stop.sh: stops the ZooKeeper servers of this user with
# SIGINT (SIGTERM when the JVM ignores SIGINT, as one started by `... &` in a script does).
# Unlike 0.7.2's (which matched "zookeeper" anywhere, brokers included), only ZooKeeper's own
# server class is matched; given a zookeeper.properties path (Tributary's addition), only the
# server started with that file.
exec "$(dirname "$0")/stop-processes.sh" "ZooKeeper server" \
  'org\.apache\.zookeeper\.server\.quorum\.QuorumPeerMain' "$@"
