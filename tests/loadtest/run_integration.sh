#!/usr/bin/env bash
# Integration test of the load tester (loadtest/specdec_loadtest): starts a local cluster on the
# embedded pack (target, AR draft, DFlash drafter, BlockPilot policy) on a free port base, runs a
# tiny closed-loop sweep (concurrency 1,2; AR and DFLASH_ADAPTIVE; 32 tokens), the same methods at
# concurrency 2 over the router's HTTP front (--http) with client cancels, the other methods at
# concurrency 3 (every completion checked against AR's, --check-ar), and a tiny Poisson
# run with client cancels (its rate and window scaled to the speed the sweep measured), checks their results.json (tests/loadtest/check_results.py), checks
# that --check-handles fails on an endpoint that does not answer, and always stops the cluster.
#
#   tests/loadtest/run_integration.sh
#
# Environment: BUILD_DIR (default <repo>/build), SPECDEC_PACK (default models/specdec-pycode),
# SPECDEC_PORT_BASE (default: first free of 21650, 21660, ...; /metrics from SPECDEC_METRICS_BASE,
# default the port base - 10000; the HTTP front on SPECDEC_HTTP_PORT, default the port base + 4;
# all below the kernel's ephemeral ports), PYTHON (default /usr/bin/python3
# if it imports grpc, else python3).
# Exit status: 0 pass, 1 failure, 77 skipped (no grpc python, no binaries).
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
export BUILD_DIR="${BUILD_DIR:-$repo/build}"
PACK="${SPECDEC_PACK:-models/specdec-pycode}"
export TARGET_MODEL="$PACK/target" DRAFT_LM="$PACK/draft" DFLASH_MODEL="$PACK/dflash"
export POLICY_MODEL="$PACK/policy"
N=32

if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  if /usr/bin/python3 -c 'import grpc, grpc_tools, google.protobuf' 2>/dev/null; then
    PYTHON=/usr/bin/python3
  fi
fi
if ! "$PYTHON" -c 'import grpc, grpc_tools, google.protobuf' 2>/dev/null; then
  echo "run_integration: SKIP: $PYTHON lacks grpc/grpc_tools/protobuf" >&2
  exit 77
fi
for f in "$BUILD_DIR/services/target/specdec-target" "$BUILD_DIR/services/drafter/specdec-drafter" \
         "$BUILD_DIR/services/policy/specdec-policy" "$BUILD_DIR/services/router/specdec-router" \
         "$TARGET_MODEL/config.json" "$DFLASH_MODEL/config.json" "$POLICY_MODEL/config.json"; do
  [ -e "$f" ] || { echo "run_integration: SKIP: $f is missing" >&2; exit 77; }
done

port_free() {  # port: no listener on 127.0.0.1
  ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
if [ -z "${SPECDEC_PORT_BASE:-}" ]; then
  for base in $(seq 21650 10 21950); do
    mbase=$((base - 10000))
    ok=1
    for off in 0 1 2 3; do
      port_free $((base + off)) && port_free $((mbase + off)) || ok=0
    done
    port_free $((base + 4)) || ok=0
    if [ "$ok" = 1 ]; then SPECDEC_PORT_BASE=$base; break; fi
  done
  : "${SPECDEC_PORT_BASE:?run_integration: no free port base in 21650..21950}"
fi
export SPECDEC_PORT_BASE
MBASE=${SPECDEC_METRICS_BASE:-$((SPECDEC_PORT_BASE - 10000))}
export SPECDEC_METRICS_BASE=$MBASE
export SPECDEC_HTTP_PORT=${SPECDEC_HTTP_PORT:-$((SPECDEC_PORT_BASE + 4))}
SPECDEC_RUN_DIR="$(mktemp -d "${TMPDIR:-/tmp}/specdec-loadtest.XXXXXX")"
export SPECDEC_RUN_DIR
OUT="$SPECDEC_RUN_DIR/out"

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

bash clients/python/generate_protos.sh >/dev/null || { echo "run_integration: proto generation failed" >&2; exit 1; }
if ! bash deploy/local/cluster.sh start; then
  echo "run_integration: the cluster did not start" >&2
  exit 1
fi

prompts=humaneval
if [ ! -f "$("$PYTHON" -c 'import sys; sys.path.insert(0, "loadtest")
from specdec_loadtest import prompts; print(prompts.resolve("humaneval"))')" ]; then
  prompts="$PACK/eval/heldout_prompts.txt --prompt-format paragraphs"
fi
LT=("$PYTHON" loadtest/specdec_loadtest --router "127.0.0.1:$SPECDEC_PORT_BASE" --quiet
    --max-new-tokens "$N" --ignore-eos --max-prompts 16 --wait-ready 60)
HANDLES="127.0.0.1:$((MBASE + 1)),127.0.0.1:$((MBASE + 2))"
export PYTHONDONTWRITEBYTECODE=1
fail=0

echo "== closed-loop sweep"
# shellcheck disable=SC2086
"${LT[@]}" --prompts $prompts --concurrency 1,2 --methods AR,DFLASH_ADAPTIVE --requests 4 \
  --duration 0 --warmup 0.5 --cooldown 0.2 --out "$OUT/sweep" --check-ar \
  --metrics-url "127.0.0.1:$MBASE,127.0.0.1:$((MBASE + 1))" --check-handles "$HANDLES" \
  || { echo "run_integration: the sweep exited $?" >&2; fail=1; }
"$PYTHON" tests/loadtest/check_results.py sweep "$OUT/sweep" "$N" || fail=1

echo "== closed loop over the HTTP front (--http) with client cancels"
# --router only answers GetInfo here. Seed 3 cancels the 1st and 3rd of the 4 measured requests
# of each cell (no warm-up: the measured ones are the first 4); closing their connections must
# release their KV handles like a gRPC cancel (--check-handles).
# shellcheck disable=SC2086
"${LT[@]}" --http "http://127.0.0.1:$SPECDEC_HTTP_PORT" --prompts $prompts --concurrency 2 \
  --methods AR,DFLASH_ADAPTIVE --requests 4 --duration 0 --warmup 0 --cooldown 0.2 \
  --cancel-fraction 0.5 --seed 3 --out "$OUT/http" --metrics-url "127.0.0.1:$MBASE" \
  --check-handles "$HANDLES" --check-ar \
  || { echo "run_integration: the HTTP run exited $?" >&2; fail=1; }
"$PYTHON" tests/loadtest/check_results.py http "$OUT/http" "$N" || fail=1

echo "== every method under load equals AR (--check-ar)"
# Three requests in flight of one method at a time, each request's tokens against its prompt's
# AR completion alone: batch-invariant decoding, chains and trees included.
# shellcheck disable=SC2086
"${LT[@]}" --prompts $prompts --concurrency 3 --methods DFLASH,DRAFT_CHAIN,DYSPEC_TREE,NGRAM \
  --requests 6 --duration 0 --warmup 0 --cooldown 0.2 --check-ar --out "$OUT/ar" \
  --check-handles "$HANDLES" \
  || { echo "run_integration: the AR check exited $?" >&2; fail=1; }
"$PYTHON" tests/loadtest/check_results.py ar "$OUT/ar" "$N" || fail=1

# The open-loop load follows this machine's speed, as the sweep measured it: at most 3 requests/s
# and half the rate 2 concurrent DFLASH_ADAPTIVE requests sustained, for a window of at least
# 4 s, 8 of their median end-to-end latencies and 6 arrivals (at most 60 s), so that requests
# complete and some are cancelled on a fast machine and on a slow one alike.
read -r RATE WINDOW < <("$PYTHON" - "$OUT/sweep/results.json" <<'PY'
import json, sys
cells = json.load(open(sys.argv[1]))["cells"]
def cell(level):
    return next((c for c in cells if c["method"] == "DFLASH_ADAPTIVE" and c["level"] == level), None)
c1, c2 = cell(1) or cell(1.0), cell(2) or cell(2.0)
req_s = (c2 or {}).get("requests_per_s") or 0.5
e2e_s = ((c1 or {}).get("e2e_ms") or {}).get("p50") or 1000.0
rate = max(0.1, min(3.0, 0.5 * req_s))
print(f"{rate:.2f} {min(60.0, max(4.0, 8 * e2e_s / 1000.0, 6 / rate)):.1f}")
PY
) || { RATE=3; WINDOW=4; }
echo "== open-loop Poisson run with client cancels (${RATE}/s for ${WINDOW} s)"
# shellcheck disable=SC2086
"${LT[@]}" --prompts $prompts --rate "$RATE" --methods DFLASH_ADAPTIVE --duration "$WINDOW" --warmup 0.5 \
  --cancel-fraction 0.3 --seed 1 --cooldown 0.2 --out "$OUT/poisson" \
  --watch-pid "$SPECDEC_RUN_DIR" --watch-interval 0.5 --check-handles "$HANDLES" \
  || { echo "run_integration: the Poisson run exited $?" >&2; fail=1; }
"$PYTHON" tests/loadtest/check_results.py poisson "$OUT/poisson" "$N" || fail=1

echo "== --check-handles fails on an endpoint without specdec_kv_handles"
# The router's /metrics has no specdec_kv_handles: the check must fail the run (exit 1).
# shellcheck disable=SC2086
"${LT[@]}" --prompts $prompts --concurrency 1 --methods AR --requests 1 --duration 0 \
  --warmup 0 --check-handles "127.0.0.1:$MBASE" --check-grace 0 >/dev/null 2>&1
rc=$?
if [ "$rc" -ne 1 ]; then
  echo "run_integration: --check-handles on the router's /metrics exited $rc, expected 1" >&2
  fail=1
fi

[ "$fail" = 0 ] && echo "run_integration: ok"
exit "$fail"
