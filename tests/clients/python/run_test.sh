#!/usr/bin/env bash
# Integration test of the Python SDK (clients/python): starts a local cluster (target + AR draft
# LM + router) on a free port base, runs test_sdk.py against it, then restarts the cluster with
# the router requiring API keys (SPECDEC_API_KEYS = a keys file that test_sdk.py writes) and runs
# test_sdk.py's KeyedRouterTest against that, then once more with the router serving mTLS
# (certificates of tests/services/common/make_test_certs.sh, which needs openssl) and runs
# TlsRouterTest against that; always stops the cluster.
#
#   tests/clients/python/run_test.sh
#
# Environment: BUILD_DIR (default <repo>/build), TARGET_MODEL / DRAFT_LM (default
# $BUILD_DIR/models/stories260K, else the embedded pack), SPECDEC_PORT_BASE (default: first free of 20650, 20660, ...;
# /metrics from SPECDEC_METRICS_BASE, default the port base - 10000; both below the kernel's
# ephemeral ports),
# PYTHON (default: /usr/bin/python3 if it imports grpc, else python3).
# Exit status: 0 pass, 1 failure, 77 skipped (no grpc/grpc_tools python, no binaries or model).
set -uo pipefail
repo="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$repo"
export BUILD_DIR="${BUILD_DIR:-$repo/build}"
# The first cluster's router must require no key and serve plaintext, whatever the caller's
# environment says (and the services talk plaintext to each other throughout).
unset SPECDEC_API_KEYS SPECDEC_KEYED_ROUTER SPECDEC_TLS_CERTS
for service in ROUTER TARGET DRAFTER POLICY; do
  unset "SPECDEC_${service}_TLS_CERT" "SPECDEC_${service}_TLS_KEY" "SPECDEC_${service}_TLS_CLIENT_CA"
done
unset SPECDEC_BACKEND_TLS_CA SPECDEC_BACKEND_TLS_CERT SPECDEC_BACKEND_TLS_KEY
export TARGET_MODEL="${TARGET_MODEL:-$BUILD_DIR/models/stories260K}"
export DRAFT_LM="${DRAFT_LM:-$TARGET_MODEL}"

if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  if /usr/bin/python3 -c 'import grpc, grpc_tools, google.protobuf' 2>/dev/null; then
    PYTHON=/usr/bin/python3
  fi
fi
if ! "$PYTHON" -c 'import grpc, grpc_tools, google.protobuf' 2>/dev/null; then
  echo "run_test: SKIP: $PYTHON lacks grpc/grpc_tools/protobuf" \
       "(apt-get install python3-grpcio python3-grpc-tools python3-protobuf)" >&2
  exit 77
fi
# The default model is the real stories260K, converted from ../shared on first use; a clone
# without ../shared uses the embedded pack's target and draft model instead.
gguf="$repo/../shared/models/stories260K/stories260K.gguf"
if [ ! -e "$TARGET_MODEL/config.json" ] && [ -f "$gguf" ] && [ -x "$BUILD_DIR/cli/specdec" ]; then
  "$BUILD_DIR/cli/specdec" convert "$gguf" -o "$TARGET_MODEL" >/dev/null 2>&1 || true
fi
if [ ! -e "$TARGET_MODEL/config.json" ] && [ ! -f "$gguf" ] &&
   [ "$TARGET_MODEL" = "$BUILD_DIR/models/stories260K" ]; then
  TARGET_MODEL="$repo/models/specdec-pycode/target" DRAFT_LM="$repo/models/specdec-pycode/draft"
  export TARGET_MODEL DRAFT_LM
fi
for f in "$BUILD_DIR/services/target/specdec-target" "$BUILD_DIR/services/drafter/specdec-drafter" \
         "$BUILD_DIR/services/router/specdec-router" "$TARGET_MODEL/config.json"; do
  [ -e "$f" ] || { echo "run_test: SKIP: $f is missing" >&2; exit 77; }
done

port_free() {  # port: no listener on 127.0.0.1
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
if [ -z "${SPECDEC_PORT_BASE:-}" ]; then
  for base in $(seq 20650 10 20950); do
    mbase=$((base - 10000))
    if port_free "$base" && port_free $((base + 1)) && port_free $((base + 2)) &&
       port_free "$mbase" && port_free $((mbase + 1)) && port_free $((mbase + 2)); then
      SPECDEC_PORT_BASE=$base
      break
    fi
  done
  : "${SPECDEC_PORT_BASE:?run_test: no free port base in 20650..20950}"
fi
export SPECDEC_PORT_BASE
export SPECDEC_METRICS_BASE=${SPECDEC_METRICS_BASE:-$((SPECDEC_PORT_BASE - 10000))}
SPECDEC_RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/specdec-pysdk.XXXXXX")"
export SPECDEC_RUN_DIR

cleanup() {
  local rc=$?
  bash deploy/local/cluster.sh stop >/dev/null 2>&1 || true
  if [ "$rc" -ne 0 ]; then
    for log in "$SPECDEC_RUN_DIR"/*.log; do
      [ -f "$log" ] || continue
      echo "---- $(basename "$log") (last 20 lines)" >&2
      tail -n 20 "$log" >&2
    done
  fi
  rm -rf "$SPECDEC_RUN_DIR"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Generate the protobuf modules up front (import would do it too, but fail loudly here).
bash clients/python/generate_protos.sh >/dev/null || { echo "run_test: proto generation failed" >&2; exit 1; }

if ! bash deploy/local/cluster.sh start; then
  echo "run_test: the cluster did not start" >&2
  exit 1
fi

SPECDEC_ADDRESS="127.0.0.1:$SPECDEC_PORT_BASE" PYTHONDONTWRITEBYTECODE=1 \
  "$PYTHON" tests/clients/python/test_sdk.py || exit 1

# API keys: the same cluster again, its router started with a keys file (cluster.sh passes no
# router flags; the router reads --api-keys from SPECDEC_API_KEYS). No key is UNAUTHENTICATED,
# the right one gets tokens, a revoked one is PERMISSION_DENIED, limits give retry hints.
keys="$SPECDEC_RUN_DIR/api_keys.json"
PYTHONDONTWRITEBYTECODE=1 "$PYTHON" tests/clients/python/test_sdk.py --write-api-keys "$keys" ||
  { echo "run_test: could not write $keys" >&2; exit 1; }
bash deploy/local/cluster.sh stop >/dev/null
if ! SPECDEC_API_KEYS="$keys" bash deploy/local/cluster.sh start; then
  echo "run_test: the cluster with API keys did not start" >&2
  exit 1
fi
SPECDEC_ADDRESS="127.0.0.1:$SPECDEC_PORT_BASE" SPECDEC_KEYED_ROUTER=1 PYTHONDONTWRITEBYTECODE=1 \
  "$PYTHON" tests/clients/python/test_sdk.py KeyedRouterTest || exit 1

# mTLS: the cluster again, its router's client port serving TLS with the test certificates and
# requiring a client certificate signed by their CA (the router reads --tls-cert, --tls-key and
# --tls-client-ca from SPECDEC_ROUTER_TLS_*). The right client certificate gets tokens; none, one
# of another CA, an expired one, the wrong CA or plaintext are refused.
command -v openssl >/dev/null || { echo "run_test: openssl is needed for the mTLS part" >&2; exit 1; }
certs="$SPECDEC_RUN_DIR/certs"
mkdir -p "$certs"
bash tests/services/common/make_test_certs.sh "$certs" ||
  { echo "run_test: make_test_certs.sh failed" >&2; exit 1; }
bash deploy/local/cluster.sh stop >/dev/null
if ! SPECDEC_ROUTER_TLS_CERT="$certs/server.pem" SPECDEC_ROUTER_TLS_KEY="$certs/server.key" \
     SPECDEC_ROUTER_TLS_CLIENT_CA="$certs/ca.pem" bash deploy/local/cluster.sh start; then
  echo "run_test: the cluster with an mTLS router did not start" >&2
  exit 1
fi
SPECDEC_ADDRESS="127.0.0.1:$SPECDEC_PORT_BASE" SPECDEC_TLS_CERTS="$certs" PYTHONDONTWRITEBYTECODE=1 \
  "$PYTHON" tests/clients/python/test_sdk.py TlsRouterTest
