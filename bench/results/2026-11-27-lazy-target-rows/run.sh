#!/usr/bin/env bash
# Target rows warped on first read against all rows warped after each verify: specdec bench in
# process on the pack, T = 1, 1 thread, 40 HumanEval and the 30 held-out corpus prompts, 128
# tokens, DFLASH_ADAPTIVE, DFLASH and DRAFT_CHAIN each interleaved with AR; the builds alternate,
# three rounds. Then a profile of DFLASH alone on 15 held-out prompts with each build.
#   bash bench/results/2026-11-27-lazy-target-rows/run.sh OUT BEFORE_SPECDEC
# BEFORE_SPECDEC: build/cli/specdec of 2b4327d.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT BEFORE_SPECDEC}
before=${2:?usage: run.sh OUT BEFORE_SPECDEC}
mkdir -p "$out"
P=models/specdec-pycode
for r in 1 2 3; do
  for v in before after; do
    bin=$before
    [ "$v" = after ] && bin=build/cli/specdec
    "$bin" bench --target $P/target --draft $P/draft --dflash $P/dflash --policy $P/policy \
      --prompts ../shared/datasets/humaneval/HumanEval.jsonl.gz $P/eval/heldout_prompts.txt \
      --max-prompts 40 --methods DFLASH_ADAPTIVE,DFLASH,DRAFT_CHAIN -n 128 --threads 1 -t 1 \
      --json "$out/${v}_r$r.json" >"$out/${v}_r$r.txt" 2>&1
  done
done
for v in before after; do
  bin=$before
  [ "$v" = after ] && bin=build/cli/specdec
  perf record -o "$out/perf_$v.data" "$bin" bench --target $P/target --draft $P/draft \
    --dflash $P/dflash --policy $P/policy --prompts $P/eval/heldout_prompts.txt --max-prompts 15 \
    --methods DFLASH -n 128 --threads 1 -t 1 >"$out/profile_$v.txt" 2>&1
  perf report -i "$out/perf_$v.data" --no-children --sort sym --stdio 2>/dev/null |
    grep -E "exp|Warped|SampleFrom" >>"$out/profile_$v.txt" || true
  rm -f "$out/perf_$v.data"
done
