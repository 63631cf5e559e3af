#!/usr/bin/env bash
# The target's prefill budget per scheduler iteration (--iteration-prefill-max-rows) against no
# budget (0: every queued prompt in one iteration), on the local cluster with the pack: ROUNDS
# (default 3) alternating rounds, each variant on a fresh cluster, each round a closed loop of
# LEVEL (default 16) requests of 128 tokens (equal lengths: requests that start together keep
# starting together) and an open loop of RATE (default 24) Poisson arrivals per second, AR and
# DFLASH_ADAPTIVE, T = 0, HumanEval prompts. Writes OUT/<variant>-<round>/ (the load tester's
# results.json) and OUT/summary.md / summary.json (medians over the rounds).
#   bash bench/results/2026-11-29-prefill-budget/run.sh OUT
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT}
mkdir -p "$out"
. bench/pack_cluster_env.sh /tmp/prefill-budget-cluster
for round in $(seq 1 "${ROUNDS:-3}"); do
  for variant in none:0 budget:256; do
    name=${variant%%:*}
    SPECDEC_ITERATION_PREFILL_MAX_ROWS=${variant#*:} bash deploy/local/cluster.sh start >/dev/null
    for load in "--concurrency ${LEVEL:-16}" "--rate ${RATE:-24}"; do
      mode=${load%% *}
      # shellcheck disable=SC2086  # $load is two words
      /usr/bin/python3 loadtest/specdec_loadtest --router 127.0.0.1:53050 $load \
        --methods AR,DFLASH_ADAPTIVE --prompts humaneval --max-new-tokens 128 --ignore-eos \
        --temperature 0 --duration "${DURATION:-10}" --warmup 3 --fail-on-error --no-plots \
        --out "$out/$name-$round-${mode#--}" >"$out/$name-$round-${mode#--}.txt" 2>&1 ||
        echo "load tester exit $?" >>"$out/$name-$round-${mode#--}.txt"
    done
    bash deploy/local/cluster.sh stop >/dev/null
  done
done
/usr/bin/python3 - "$out" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(os.path.join(out, "*", "results.json"))):
    name = os.path.basename(os.path.dirname(path))
    variant = name.split("-")[0]
    for c in json.load(open(path))["cells"]:
        key = (c["mode"], c["level"], c["method"], variant)
        rows.setdefault(key, []).append({
            "tok_s": c["throughput_tok_s"], "ttft_p50": c["ttft_ms"]["p50"],
            "ttft_p99": c["ttft_ms"]["p99"], "itl_p50": c["itl_ms"]["p50"],
            "itl_p99": c["itl_ms"]["p99"], "e2e_p50": c["e2e_ms"]["p50"]})
fields = ["tok_s", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "e2e_p50"]
summary, lines = [], ["| load | method | prefill budget | rounds | tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | E2E p50 ms |",
                      "| --- | --- | --- | --- | --- | --- | --- | --- |"]
for key in sorted(rows):
    med = {f: statistics.median(r[f] for r in rows[key]) for f in fields}
    mode, level, method, variant = key
    load = f"{level} in flight" if mode == "closed" else f"{level}/s arrivals"
    summary.append({"mode": mode, "level": level, "method": method, "variant": variant,
                    "rounds": len(rows[key]), **med})
    lines.append(f"| {load} | {method} | {variant} | {len(rows[key])} | {med['tok_s']:.0f} | "
                 f"{med['ttft_p50']:.1f} / {med['ttft_p99']:.1f} | {med['itl_p50']:.2f} / "
                 f"{med['itl_p99']:.1f} | {med['e2e_p50']:.0f} |")
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
