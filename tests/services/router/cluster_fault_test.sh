#!/usr/bin/env bash
# Fault test on the real cluster: four service processes (deploy/local/cluster.sh) serving the
# embedded pack, clients through `specdec generate --router`.
#   1. kill -9 the drafter while a DFLASH stream is running: the request completes, its tokens
#      equal AR's, the summary says it finished as AR, and the router counts the fallback;
#      later requests degrade to AR while the drafter is down.
#   2. kill -9 a client mid-stream: the target and drafter release every KV handle.
#   3. kill -9 the target: a request gets UNAVAILABLE well within its deadline and the router
#      stays up.
# Usage: cluster_fault_test.sh BUILD_DIR
set -euo pipefail
BUILD_DIR=$(cd "${1:?usage: $0 BUILD_DIR}" && pwd)
cd "$(dirname "$0")/../../.."
PACK=models/specdec-pycode
export BUILD_DIR TARGET_MODEL=$PACK/target DRAFT_LM=$PACK/draft DFLASH_MODEL=$PACK/dflash
# DFLASH requests go through the drafter service here (its faults, fallbacks and metrics are
# what this test checks), not through a target-hosted drafter.
export TARGET_DRAFTING=0
# Ports below the kernel's ephemeral range (32768+), so no client socket of a parallel test can
# hold one of them.
export POLICY_MODEL=$PACK/policy SPECDEC_PORT_BASE=${SPECDEC_PORT_BASE:-25050}
export SPECDEC_METRICS_BASE=${SPECDEC_METRICS_BASE:-$((SPECDEC_PORT_BASE - 10000))}
# f32: the AR comparison after a mid-request fallback mixes block-verified and single-token KV
# entries; in bf16 that can flip a near-tied argmax (docs/design.md §2.6), in f32 it does not here.
export SPECDEC_DTYPE=f32
RUN=$(mktemp -d)
export SPECDEC_RUN_DIR=$RUN/cluster
ROUTER=127.0.0.1:$SPECDEC_PORT_BASE
MROUTER=$SPECDEC_METRICS_BASE
SPECDEC="$BUILD_DIR/cli/specdec"
cleanup() {
  bash deploy/local/cluster.sh stop >/dev/null 2>&1 || true
  rm -rf "$RUN"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$RUN"/*.err "$SPECDEC_RUN_DIR"/*.log; do
    [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }
  done
  exit 1
}
metric() {  # name-with-labels: the sample's value on the router's /metrics (0 if absent)
  curl -sf "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m {print $2; found=1} END {if (!found) print 0}'
}
ids_of() { sed -n 's/^ids://p' "$1"; }

bash deploy/local/cluster.sh start >/dev/null
PROMPT='def fibonacci(n):'
N=400

# ---- 1. the drafter dies mid-stream.
"$SPECDEC" generate --router "$ROUTER" --method AR -p "$PROMPT" -n $N --ignore-eos --print-ids \
  >"$RUN/ar.out" 2>"$RUN/ar.err" || fail "AR generation failed"
[ -n "$(ids_of "$RUN/ar.err")" ] || fail "AR printed no ids"
"$SPECDEC" generate --router "$ROUTER" --method DFLASH -p "$PROMPT" -n $N --ignore-eos \
  --print-ids >"$RUN/df.out" 2>"$RUN/df.err" &
client=$!
for _ in $(seq 200); do [ -s "$RUN/df.out" ] && break; sleep 0.01; done
kill -9 "$(cat "$SPECDEC_RUN_DIR/drafter.pid")"
wait $client || fail "the DFLASH request failed when the drafter died"
[ "$(ids_of "$RUN/df.err")" = "$(ids_of "$RUN/ar.err")" ] ||
  fail "tokens after the drafter died differ from AR"
grep -q "finished as AR" "$RUN/df.err" || {
  # The request may have finished before the kill landed; then the next one must degrade.
  "$SPECDEC" generate --router "$ROUTER" --method DFLASH -p "$PROMPT" -n $N --ignore-eos \
    --print-ids >"$RUN/df2.out" 2>"$RUN/df2.err" || fail "DFLASH with the drafter down failed"
  grep -q "finished as AR" "$RUN/df2.err" || fail "no drafter fallback reported"
  [ "$(ids_of "$RUN/df2.err")" = "$(ids_of "$RUN/ar.err")" ] || fail "degraded tokens differ"
  echo "note: the first request finished before the kill landed; the next one degraded"
}
fallbacks=$(metric "$MROUTER" 'specdec_fallbacks_total{kind="drafter"}')
awk -v f="$fallbacks" 'BEGIN {exit !(f >= 1)}' || fail "router counted $fallbacks drafter fallbacks"
echo "ok: drafter killed mid-stream, output equals AR, fallback counted ($fallbacks)"

# ---- 2. a client killed mid-stream releases its handles on the target.
"$SPECDEC" generate --router "$ROUTER" --method AR -p "$PROMPT" -n 2000 --ignore-eos \
  >"$RUN/long.out" 2>"$RUN/long.err" &
client=$!
for _ in $(seq 200); do [ -s "$RUN/long.out" ] && break; sleep 0.01; done
kill -9 $client
wait $client 2>/dev/null || true
MTARGET=$((MROUTER + 1))
for _ in $(seq 100); do
  [ "$(metric $MTARGET specdec_kv_handles)" = 0 ] && break
  sleep 0.05
done
[ "$(metric $MTARGET specdec_kv_handles)" = 0 ] || fail "target still holds KV handles"
echo "ok: client killed mid-stream, target handles back to 0"

# ---- 3. the target dies: UNAVAILABLE within the deadline, the router stays up.
kill -9 "$(cat "$SPECDEC_RUN_DIR/target.pid")"
start=$(date +%s%N)
if "$SPECDEC" generate --router "$ROUTER" --method AR -p "$PROMPT" -n 8 --timeout-ms 3000 \
  >"$RUN/down.out" 2>"$RUN/down.err"; then
  fail "a request succeeded with the target down"
fi
ms=$((($(date +%s%N) - start) / 1000000))
grep -q "UNAVAILABLE" "$RUN/down.err" || fail "expected UNAVAILABLE, got: $(cat "$RUN/down.err")"
[ $ms -lt 3500 ] || fail "the error took $ms ms (deadline 3000)"
kill -0 "$(cat "$SPECDEC_RUN_DIR/router.pid")" || fail "the router died"
curl -sf "http://127.0.0.1:$MROUTER/metrics" >/dev/null || fail "router /metrics is down"
echo "ok: target killed, UNAVAILABLE after $ms ms, router still up"
