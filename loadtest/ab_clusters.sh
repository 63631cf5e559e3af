#!/usr/bin/env bash
# A/B comparison of two cluster configurations on this machine: starts one local cluster per
# configuration (deploy/local/cluster.sh, ports 53050 and 54050), then runs the same load-test
# cells against them alternately, REPS times, so that both see the same drift of a shared
# machine, and prints mean throughput, ITL p50 and mean target batch per method and load.
#
#   loadtest/ab_clusters.sh "ENV_A" "ENV_B" CONCURRENCY METHODS SECONDS REPS [loadtest args...]
#   loadtest/ab_clusters.sh SPECDEC_BATCH_WAIT_MAX_US=0 SPECDEC_BATCH_WAIT_MAX_US=2000 2,4,8 AR 5 3
#
# ENV_A / ENV_B: space-separated VAR=value settings for the services of each cluster (e.g.
# SPECDEC_MAX_BATCH=1). Models: TARGET_MODEL, DRAFT_LM, DFLASH_MODEL, POLICY_MODEL, default the
# embedded pack. Results: $AB_OUT (default /tmp/specdec-ab)/{A,B}-REP/results.json.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 6 ] || { sed -n 2,13p "$0" >&2; exit 2; }
A=$1 B=$2 CONC=$3 METHODS=$4 DUR=$5 REPS=$6
shift 6
PACK=models/specdec-pycode
export TARGET_MODEL=${TARGET_MODEL:-$PACK/target} DRAFT_LM=${DRAFT_LM:-$PACK/draft}
export DFLASH_MODEL=${DFLASH_MODEL:-$PACK/dflash} POLICY_MODEL=${POLICY_MODEL:-$PACK/policy}
OUT=${AB_OUT:-/tmp/specdec-ab}
PY=/usr/bin/python3
BUILD_DIR=${BUILD_DIR:-build}
stop_all() {
  SPECDEC_RUN_DIR=$BUILD_DIR/cluster-ab-A bash deploy/local/cluster.sh stop >/dev/null 2>&1 || true
  SPECDEC_RUN_DIR=$BUILD_DIR/cluster-ab-B bash deploy/local/cluster.sh stop >/dev/null 2>&1 || true
}
trap stop_all EXIT
# shellcheck disable=SC2086
env $A SPECDEC_PORT_BASE=53050 SPECDEC_RUN_DIR=$BUILD_DIR/cluster-ab-A bash deploy/local/cluster.sh start >/dev/null
# shellcheck disable=SC2086
env $B SPECDEC_PORT_BASE=54050 SPECDEC_RUN_DIR=$BUILD_DIR/cluster-ab-B bash deploy/local/cluster.sh start >/dev/null
mkdir -p "$OUT"
for r in $(seq "$REPS"); do
  for side in A:53050 B:54050; do
    n=${side%%:*} port=${side##*:}
    m=$((port - 53050 + 12090))
    $PY loadtest/specdec_loadtest --router 127.0.0.1:$port --concurrency "$CONC" --methods "$METHODS" \
      --prompts humaneval --max-new-tokens 64 --ignore-eos --duration "$DUR" --warmup 1 \
      --out "$OUT/$n-$r" --no-plots --quiet \
      --metrics-url 127.0.0.1:$m,127.0.0.1:$((m + 1)),127.0.0.1:$((m + 2)) "$@" >/dev/null
  done
done
$PY - "$OUT" "$REPS" "$A" "$B" <<'PY'
import collections, json, sys
out, reps, a_env, b_env = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
agg = collections.defaultdict(list)
for side in "AB":
    for r in range(1, reps + 1):
        with open(f"{out}/{side}-{r}/results.json") as f:
            for c in json.load(f)["cells"]:
                agg[(c["method"], c["concurrency"], side)].append(c)
def mean(xs):
    xs = [x for x in xs if x is not None]  # cells without samples (no ITL, no batch) count as absent
    return sum(xs) / len(xs) if xs else 0.0
def p50(cell, key):
    stat = cell.get(key)
    return stat.get("p50") if isinstance(stat, dict) else None
print(f"A: {a_env}\nB: {b_env}")
print(f"{'method':16s} {'c':>3s} {'A tok/s':>8s} {'B tok/s':>8s}  B/A  {'ITL p50 A|B ms':>15s}  {'batch A|B':>10s}  runs A | B")
for m, c in sorted({(k[0], k[1]) for k in agg}):
    a, b = agg[(m, c, "A")], agg[(m, c, "B")]
    ta, tb = mean([x["throughput_tok_s"] for x in a]), mean([x["throughput_tok_s"] for x in b])
    ia, ib = mean([p50(x, "itl_ms") for x in a]), mean([p50(x, "itl_ms") for x in b])
    ba, bb = mean([x.get("batch_size_mean") for x in a]), mean([x.get("batch_size_mean") for x in b])
    runs = " ".join(f"{x['throughput_tok_s']:.0f}" for x in a) + " | " + " ".join(
        f"{x['throughput_tok_s']:.0f}" for x in b)
    print(f"{m:16s} {c:3d} {ta:8.1f} {tb:8.1f} {tb / ta if ta else 0:5.2f} {ia:7.2f}|{ib:<7.2f} "
          f"{ba:5.2f}|{bb:<5.2f}  {runs}")
PY
