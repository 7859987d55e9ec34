#!/usr/bin/env bash
# usage: scripts/services/tls-certs.sh   (the services run it in their TLS=1 mode)
#   Makes a throwaway CA and a server certificate for 127.0.0.1 and localhost, signed by it,
#   in $FENCEPOST_STATE/tls (default REPO/.state/tls), once: ca.pem, server.pem, server.key,
#   and other-ca.pem, a CA that signed nothing (what a client trusting the wrong CA has).
#   Prints the directory. The keys are test material: never commit them.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DIR=${FENCEPOST_STATE:-$REPO/.state}/tls

if [ ! -f "$DIR/server.pem" ]; then
  command -v openssl >/dev/null || { echo "tls-certs: openssl is needed (apt-get install openssl)" >&2; exit 1; }
  mkdir -p "$DIR"
  tmp=$(mktemp -d "$DIR/new.XXXXXX")
  ca() {  # ca NAME: a self-signed CA certificate NAME.pem with its key NAME.key
    openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
      -subj "/CN=fencepost test $1" -keyout "$tmp/$1.key" -out "$tmp/$1.pem" \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  }
  ca ca; ca other-ca
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$tmp/server.key" -out "$tmp/server.csr" 2>/dev/null
  printf '%s\n' 'subjectAltName=IP:127.0.0.1,DNS:localhost' 'basicConstraints=CA:FALSE' \
    'keyUsage=critical,digitalSignature,keyEncipherment' 'extendedKeyUsage=serverAuth' >"$tmp/server.ext"
  openssl x509 -req -in "$tmp/server.csr" -CA "$tmp/ca.pem" -CAkey "$tmp/ca.key" -CAcreateserial \
    -days 30 -extfile "$tmp/server.ext" -out "$tmp/server.pem" 2>/dev/null
  chmod 644 "$tmp"/*.pem; chmod 600 "$tmp"/*.key
  mv "$tmp"/ca.pem "$tmp"/ca.key "$tmp"/other-ca.pem "$tmp"/server.key "$DIR"/
  mv "$tmp"/server.pem "$DIR"/  # last: its presence means the set is complete
  rm -rf "$tmp"
fi
echo "$DIR"
