#!/bin/sh
# Make a private CA and one certificate for the scheduler, workers and clients (none is committed).
#   deploy/make-tls-certs.sh OUTDIR [HOSTNAME ...]
# Then: dask scheduler --protocol tls --tls-ca-file OUTDIR/ca.pem --tls-cert OUTDIR/node.pem --tls-key OUTDIR/node-key.pem
#       dask worker tls://HOST:8786 --tls-ca-file ... --tls-cert ... --tls-key ...
#       daskmicro submit SPEC --scheduler tls://HOST:8786 --tls-ca-file ... --tls-cert ... --tls-key ...
set -eu
OUT=${1:?usage: make-tls-certs.sh OUTDIR [HOSTNAME ...]}
shift
mkdir -p "$OUT"
umask 077
SAN="IP:127.0.0.1,DNS:localhost"
for h in "$@"; do SAN="$SAN,DNS:$h"; done
openssl req -x509 -newkey rsa:3072 -nodes -days 365 -subj "/CN=daskmicro-ca" \
    -keyout "$OUT/ca-key.pem" -out "$OUT/ca.pem"
openssl req -newkey rsa:3072 -nodes -subj "/CN=daskmicro-node" -keyout "$OUT/node-key.pem" -out "$OUT/node.csr"
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$SAN" > "$OUT/node.ext"
openssl x509 -req -in "$OUT/node.csr" -CA "$OUT/ca.pem" -CAkey "$OUT/ca-key.pem" -CAcreateserial \
    -days 365 -extfile "$OUT/node.ext" -out "$OUT/node.pem"
rm -f "$OUT/node.csr" "$OUT/node.ext"
echo "wrote $OUT/ca.pem, $OUT/node.pem, $OUT/node-key.pem (keep ca-key.pem offline)"
