#!/usr/bin/env bash
# DFLASH_ADAPTIVE against AR in process on the pack, before (BEFORE: a `specdec` binary built
# from the commit before temperature classes) and after, alternating: T = 1 and T = 0, 1 and 2
# threads, three rounds (ROUNDS=N: N); 40 HumanEval prompts and the held-out corpus's 30, 128
# tokens.
#   bash bench/results/2026-11-27-temperature-classes/run.sh OUT BEFORE
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT BEFORE}
before=${2:?usage: run.sh OUT BEFORE}
mkdir -p "$out"
P=models/specdec-pycode
for round in $(seq "${ROUNDS:-3}"); do
  for t in 1 0; do
    for threads in 1 2; do
      for build in before after; do
        bin=build/cli/specdec
        [ "$build" = before ] && bin=$before
        "$bin" bench --target $P/target --draft $P/draft --dflash $P/dflash --policy $P/policy \
          --prompts ../shared/datasets/humaneval/HumanEval.jsonl.gz $P/eval/heldout_prompts.txt \
          --methods DFLASH_ADAPTIVE --max-prompts 40 -n 128 --threads "$threads" -t "$t" \
          --json "$out/t${t}_threads${threads}_round${round}_${build}.json" >/dev/null 2>&1
      done
    done
  done
done
