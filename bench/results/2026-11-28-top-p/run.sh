#!/usr/bin/env bash
# Top-k and top-p without sorting the vocabulary (levels of keys, common/sampling/sampler.cc)
# against the commit before: the pack in process, AR and DFLASH_ADAPTIVE at T = 1 with top-p 0.9,
# 2 threads, 40 HumanEval and 30 held-out prompts, 128 tokens, the two `specdec` binaries
# alternating round by round; one line per (round, binary, set, method): round, binary, set,
# method, tokens/s, speedup over AR in the same run.
#   bash bench/results/2026-11-28-top-p/run.sh BEFORE AFTER [ROUNDS] > rounds.txt
set -euo pipefail
before=$1 after=$2 rounds=${3:-4}
P=models/specdec-pycode
for i in $(seq "$rounds"); do
  for bin in before after; do
    exe=$before
    [ "$bin" = after ] && exe=$after
    "$exe" bench --target $P/target --draft $P/draft --dflash $P/dflash --policy $P/policy \
      --prompts ../shared/datasets/humaneval/HumanEval.jsonl.gz $P/eval/heldout_prompts.txt \
      --max-prompts 40 --methods AR,DFLASH_ADAPTIVE -n 128 --threads 2 -t 1 --top-p 0.9 2>&1 |
      awk -v b="$bin" -v i="$i" '$2 == "AR" || $2 == "DFLASH_ADAPTIVE" {print i, b, $1, $2, $5, $7}'
  done
done
