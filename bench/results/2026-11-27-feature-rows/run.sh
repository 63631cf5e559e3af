#!/usr/bin/env bash
# DFLASH_ADAPTIVE against AR in process on the pack, two `specdec` binaries alternating round by
# round (BEFORE and AFTER), at T = 1 and T = 0, 2 threads; one line per (round, binary, T, set):
# round, binary, T, set, tau, speedup over AR in the same run.
#   bash bench/results/2026-11-27-feature-rows/run.sh BEFORE AFTER [ROUNDS] > rounds.txt
set -euo pipefail
before=$1 after=$2 rounds=${3:-6}
P=models/specdec-pycode
for i in $(seq "$rounds"); do
  for bin in before after; do
    exe=$before
    [ "$bin" = after ] && exe=$after
    for t in 1 0; do
      "$exe" bench --target $P/target --draft $P/draft --dflash $P/dflash --policy $P/policy \
        --prompts ../shared/datasets/humaneval/HumanEval.jsonl.gz $P/eval/heldout_prompts.txt \
        --max-prompts 40 --methods DFLASH_ADAPTIVE -n 128 --threads 2 -t "$t" 2>&1 |
        grep ADAPTIVE | awk -v b="$bin" -v t="$t" -v i="$i" '{print i, b, "T="t, $1, $6, $7}'
    done
  done
done
