#!/usr/bin/env bash
# The services' answers written by a sender thread (SessionLoop) against the build before
# (BEFORE: that build's directory), on the local cluster with the pack: ROUNDS (default 3)
# alternating rounds, each variant on a fresh cluster, closed loops of LEVELS (default 4,16)
# requests of 128 tokens, METHODS (default AR,DFLASH_ADAPTIVE), T = TEMPERATURE (default 0),
# HumanEval prompts. Writes OUT/<variant>-<round>/ (the load tester's results.json) and
# OUT/summary.md / summary.json: medians over the rounds, and the median of the paired rounds'
# throughput ratios (after / before).
#   bash bench/results/2026-11-29-answer-thread/run.sh OUT BEFORE_BUILD_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
out=${1:?usage: run.sh OUT BEFORE_BUILD_DIR}
before=${2:?usage: run.sh OUT BEFORE_BUILD_DIR}
mkdir -p "$out"
. bench/pack_cluster_env.sh /tmp/answer-thread-cluster
for round in $(seq 1 "${ROUNDS:-3}"); do
  for variant in "before:$before" "after:build"; do
    IFS=: read -r name dir <<<"$variant"
    BUILD_DIR=$dir bash deploy/local/cluster.sh start >/dev/null
    /usr/bin/python3 loadtest/specdec_loadtest --router 127.0.0.1:53050 \
      --concurrency "${LEVELS:-4,16}" --methods "${METHODS:-AR,DFLASH_ADAPTIVE}" \
      --prompts humaneval --max-new-tokens 128 --ignore-eos --temperature "${TEMPERATURE:-0}" \
      --duration "${DURATION:-10}" --warmup 3 --fail-on-error --no-plots \
      --out "$out/$name-$round" >"$out/$name-$round.txt" 2>&1 ||
      echo "load tester exit $?" >>"$out/$name-$round.txt"
    BUILD_DIR=$dir bash deploy/local/cluster.sh stop >/dev/null
  done
done
/usr/bin/python3 - "$out" <<'PY'
import glob, json, os, statistics, sys
out = sys.argv[1]
cells = {}  # (level, method, variant) -> {round: cell}
for path in sorted(glob.glob(os.path.join(out, "*", "results.json"))):
    variant, rnd = os.path.basename(os.path.dirname(path)).split("-")
    for c in json.load(open(path))["cells"]:
        cells.setdefault((c["level"], c["method"], variant), {})[rnd] = c
lines = ["| requests | method | variant | rounds | tok/s | after / before (paired rounds) | ITL p50 / p99 ms | TTFT p50 ms |",
         "| --- | --- | --- | --- | --- | --- | --- | --- |"]
summary = []
for (level, method, variant) in sorted(cells, key=lambda k: (k[0], k[1], k[2] != "before")):
    rounds = cells[(level, method, variant)]
    med = lambda f: statistics.median(f(c) for c in rounds.values())
    tok, itl50, itl99 = med(lambda c: c["throughput_tok_s"]), med(lambda c: c["itl_ms"]["p50"]), med(lambda c: c["itl_ms"]["p99"])
    ttft = med(lambda c: c["ttft_ms"]["p50"])
    ratio = ""
    if variant == "after":
        base = cells.get((level, method, "before"), {})
        pairs = sorted(rounds[r]["throughput_tok_s"] / base[r]["throughput_tok_s"] for r in rounds if r in base)
        if pairs:
            ratio = f"{statistics.median(pairs):.3f} ({pairs[0]:.3f}-{pairs[-1]:.3f})"
    summary.append({"level": level, "method": method, "variant": variant, "rounds": len(rounds),
                    "tok_s": tok, "itl_p50": itl50, "itl_p99": itl99, "ttft_p50": ttft, "ratio": ratio})
    lines.append(f"| {level} | {method} | {variant} | {len(rounds)} | {tok:.0f} | {ratio} | {itl50:.2f} / {itl99:.1f} | {ttft:.1f} |")
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
