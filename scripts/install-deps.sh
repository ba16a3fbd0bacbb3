#!/usr/bin/env bash
# Installs the Debian packages the tests use, when missing: a Java runtime, ZooKeeper (the
# end-to-end tests start their own server on a free port) and snappy-java (the codec library of
# Kafka 0.7's clients, for the interoperability tests). Needs root (or sudo).
set -euo pipefail

need=()
command -v java >/dev/null || need+=(default-jre-headless)
[ -f /usr/share/java/snappy-java.jar ] || need+=(libsnappy-java)
[ -f /usr/lib/x86_64-linux-gnu/jni/libsnappyjava.so ] || need+=(libsnappy-jni)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
[ ${#need[@]} -eq 0 ] && exit 0

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing: ${need[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${need[@]}"
