#!/usr/bin/env bash
# Makes the certificates of the TLS tests in DIR with openssl: a CA, a server certificate for
# 127.0.0.1/localhost, a client certificate, a client certificate of another CA, and an expired
# client certificate of the first CA.
#   tests/services/common/make_test_certs.sh DIR
set -euo pipefail
cd "$1"
key() { openssl genrsa -out "$1.key" 2048 2>/dev/null; }
ca() {  # name
  key "$1"
  openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=$1" 2>/dev/null
}
signed() {  # name ca days [extfile]
  key "$1"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$1" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -set_serial "$RANDOM$RANDOM" \
    -days "$3" ${4:+-extfile "$4"} -out "$1.pem" 2>/dev/null
}
ca ca
ca other_ca
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > server.ext
signed server ca 2 server.ext
signed other_server other_ca 2 server.ext
signed client ca 2
signed other_client other_ca 2
signed expired_client ca -1
