#!/usr/bin/env bash
# Integration test of the router's OpenAI-compatible HTTP API with the official `openai` npm
# client (tests/openai/openai_api.test.mjs): starts a local cluster on the embedded pack (target,
# AR draft, DFlash drafter, BlockPilot policy; the router with the Qwen3 chat template from
# tests/data/chat_templates) on a free port base, installs the pinned npm packages when missing
# (package-lock.json), runs the test, and always stops the cluster.
#
#   tests/openai/run_openai_test.sh
#
# Environment: BUILD_DIR (default <repo>/build), SPECDEC_PACK (default models/specdec-pycode).
# Exit status: 0 pass, 1 failure.
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
export BUILD_DIR="${BUILD_DIR:-$repo/build}"
PACK="${SPECDEC_PACK:-models/specdec-pycode}"
export TARGET_MODEL="$PACK/target" DRAFT_LM="$PACK/draft" DFLASH_MODEL="$PACK/dflash"
export POLICY_MODEL="$PACK/policy"
export CHAT_TEMPLATE="$repo/tests/data/chat_templates/qwen3.jinja"

command -v node >/dev/null && command -v npm >/dev/null || {
  echo "run_openai_test: FAIL: node and npm are needed (scripts/install_deps.sh installs them)" >&2
  exit 1
}
if [ ! -d tests/openai/node_modules/openai ]; then
  (cd tests/openai && npm ci --no-audit --no-fund --loglevel=error) || {
    echo "run_openai_test: FAIL: npm ci" >&2
    exit 1
  }
fi

port_free() {  # port: no listener on 127.0.0.1
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
for base in $(seq 23650 10 23950); do
  ok=1
  for off in 0 1 2 3 4; do
    port_free $((base + off)) && port_free $((base - 10000 + off)) || ok=0
  done
  if [ "$ok" = 1 ]; then export SPECDEC_PORT_BASE=$base; break; fi
done
: "${SPECDEC_PORT_BASE:?run_openai_test: no free port base in 23650..23950}"
export SPECDEC_METRICS_BASE=$((SPECDEC_PORT_BASE - 10000))
export SPECDEC_HTTP_PORT=$((SPECDEC_PORT_BASE + 4))
SPECDEC_RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/specdec-openai.XXXXXX")"
export SPECDEC_RUN_DIR
trap 'bash deploy/local/cluster.sh stop >/dev/null 2>&1; rm -rf "$SPECDEC_RUN_DIR"' EXIT

bash deploy/local/cluster.sh start || { echo "run_openai_test: FAIL: cluster start" >&2; exit 1; }
export SPECDEC_HTTP_URL="http://127.0.0.1:$SPECDEC_HTTP_PORT"
export SPECDEC_GRPC_ADDR="127.0.0.1:$SPECDEC_PORT_BASE"
export SPECDEC_PROTO_DIR="$repo/proto"
export SPECDEC_TARGET_METRICS="http://127.0.0.1:$((SPECDEC_METRICS_BASE + 1))/metrics"
export SPECDEC_ROUTER_METRICS="http://127.0.0.1:$SPECDEC_METRICS_BASE/metrics"
(cd tests/openai && node --test --test-concurrency=1 openai_api.test.mjs)
status=$?
if [ $status -ne 0 ]; then
  echo "run_openai_test: FAIL; the router's log:" >&2
  tail -n 30 "$SPECDEC_RUN_DIR/router.log" >&2
fi
exit $status
