#!/usr/bin/env bash
# Kafka 0.7.2's bin/kafka-server-stop.sh, for Tributary: asks the brokers of this machine
# (`tributary server` processes of this user) to stop, with SIGINT as 0.7.2 does; each flushes
# its logs, leaves ZooKeeper and exits. Given a server.properties path (Tributary's addition),
# only the brokers started with that file. Says how many it signalled.
# The binary's name starts with "tributary" (as built, or as TRIBUTARY_BIN names it).
exec "$(dirname "$0")/stop-processes.sh" broker \
  '(^|/)tributary[^ /]*( --[a-z-]+[ =][a-z]+)* server( |$)' "$@"
