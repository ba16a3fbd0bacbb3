#!/usr/bin/env bash
# Makes a test certificate authority and certificates for Tributary's TLS listeners and links,
# with the openssl commands docs/security.md walks through (EC P-256 keys, PEM files).
#
#   scripts/make-tls-certs.sh DIR [BROKER_HOST...]
#
# Writes into DIR:
#   ca.crt ca.key              the CA that brokers and clients trust (ssl.ca.location)
#   broker.crt broker.key      a broker's certificate, for localhost, 127.0.0.1 and BROKER_HOSTs
#   client.crt client.key      a client's certificate, subject CN=mirror-east (a principal)
#   expired.crt expired.key    a client certificate of the same CA that has already expired
#   other-ca.crt other-ca.key  a second CA that brokers do not trust
#   stranger.crt stranger.key  a client certificate of that second CA
# For tests and trials; a production CA's key lives elsewhere (docs/security.md).
set -euo pipefail
dir=${1:?usage: make-tls-certs.sh DIR [BROKER_HOST...]}
shift
mkdir -p "$dir"
cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# ca NAME SUBJECT: a self-signed CA certificate valid ten years.
ca() {
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -out "$1.crt" -days 3650 -subj "$2" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
}

# leaf NAME CA SUBJECT DAYS EXTENSIONS: a certificate signed by CA (DAYS < 0: already expired).
leaf() {
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "$3"
  printf '%b\n' "$5" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.crt" -CAkey "$2.key" -CAcreateserial \
    -days "$4" -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}

names="DNS:localhost,IP:127.0.0.1"
for host in "$@"; do
  if [[ $host =~ ^[0-9.]+$ ]]; then names+=",IP:$host"; else names+=",DNS:$host"; fi
done
client_ext='basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth'
ca ca "/CN=Tributary test CA"
leaf broker ca "/CN=broker" 825 \
  "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=$names"
leaf client ca "/O=Tributary/CN=mirror-east" 825 "$client_ext"
leaf expired ca "/CN=expired" -1 "$client_ext"
ca other-ca "/CN=Some other CA"
leaf stranger other-ca "/CN=stranger" 825 "$client_ext"
rm -f ./*.srl
chmod 600 ./*.key
