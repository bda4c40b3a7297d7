#!/usr/bin/env bash
# Makes a throwaway PKI for the TLS tests in DIR: a CA (ca.crt, ca.key), a
# server certificate for localhost and 127.0.0.1 (server.crt, server.key) and
# a client certificate whose subject CN is CLIENT_CN (client.crt,
# client.key), all P-256 keys valid for two days. Each run makes a new CA,
# so two directories never trust each other. Nothing made here is kept.
# usage: make_test_pki.sh DIR [CLIENT_CN]
set -euo pipefail
dir="$1"; client_cn="${2:-alice}"
mkdir -p "$dir"; cd "$dir"
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
leaf() {  # name subject extensions
  key "$1.key"
  openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
key ca.key
openssl req -x509 -new -key ca.key -subj "/CN=tally test CA $RANDOM$RANDOM" -days 2 -out ca.crt
leaf server "/CN=localhost" "subjectAltName=DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth"
leaf client "/CN=$client_cn" "extendedKeyUsage=clientAuth"
rm -f ca.srl
