#!/usr/bin/env bash
# Installs what the tests and the demo use, when missing: from Debian, a Java runtime, ZooKeeper
# (the end-to-end tests start their own server on a free port), snappy-java (the codec library of
# Kafka 0.7's clients), OpenSSL's command line and Python 3 (the TLS tests) and npm; from the npm
# registry, node-kafka (a Kafka 0.7 client). Needs root (or sudo) for apt-get.
set -euo pipefail

need=()
command -v java >/dev/null || need+=(default-jre-headless)
[ -f /usr/share/java/snappy-java.jar ] || need+=(libsnappy-java)
[ -f /usr/lib/x86_64-linux-gnu/jni/libsnappyjava.so ] || need+=(libsnappy-jni)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v npm >/dev/null || need+=(npm)
# A real Prometheus server scrapes a broker and a mirror in tests/tests/metrics_e2e.rs.
command -v prometheus >/dev/null || need+=(prometheus)
# The TLS tests make certificates and handshake with OpenSSL's command line and Python's ssl.
command -v openssl >/dev/null || need+=(openssl)
command -v python3 >/dev/null || need+=(python3)
# The demo reads the mirror's metrics endpoint.
command -v curl >/dev/null || need+=(curl)

if [ ${#need[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${need[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${need[@]}"
fi

# node-kafka 0.2.3, a real Kafka 0.7 client, for the interoperability test (from the npm registry).
here="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -d "$here/tests/node/node_modules/kafka" ]; then
  npm ci --prefix "$here/tests/node" --no-audit --no-fund
fi
