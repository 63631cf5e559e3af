#!/usr/bin/env bash
# DFLASH_ADAPTIVE in process before and after probe waits per temperature class: BEFORE is a
# `specdec` binary of the previous commit; the two alternate, T = 1 five rounds, then T = 0
# three rounds; 40 HumanEval prompts and the 30 held-out corpus prompts, 128 tokens, 1 thread.
#   bash bench/results/2026-11-27-probe-waits/run.sh OUT BEFORE
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT BEFORE}
before=${2:?usage: run.sh OUT BEFORE}
mkdir -p "$out"
P=models/specdec-pycode
for t in 1 0; do
  rounds=5
  [ "$t" = 0 ] && rounds=3
  for r in $(seq $rounds); do
    for b in before after; do
      bin=build/cli/specdec
      [ $b = before ] && bin=$before
      $bin bench --target $P/target --draft $P/draft --dflash $P/dflash --policy $P/policy \
        --prompts ../shared/datasets/humaneval/HumanEval.jsonl.gz $P/eval/heldout_prompts.txt \
        --max-prompts 40 --methods DFLASH_ADAPTIVE -n 128 --threads 1 -t $t \
        --json "$out/t${t}_r${r}_$b.json" >"$out/t${t}_r${r}_$b.txt" 2>&1
    done
  done
done
