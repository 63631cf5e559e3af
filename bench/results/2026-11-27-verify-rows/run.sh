#!/usr/bin/env bash
# Packed multi-row products without software prefetch, against the previous build.
# 1. specdec-model-bench: bf16 passes of 1-17 rows of the 7M and 100M shapes, 1 and 2 threads, the
#    builds alternating as processes, three rounds.
# 2. specdec bench in process on the pack, 1 thread, 40 HumanEval and the 30 held-out corpus
#    prompts, 128 tokens, DFLASH_ADAPTIVE, DFLASH and DRAFT_CHAIN each interleaved with AR, at T = 0
#    and T = 1; the builds alternate, three rounds.
#   bash bench/results/2026-11-27-verify-rows/run.sh OUT BEFORE_BUILD
# BEFORE_BUILD: a build directory of 8b8351c (bench/specdec-model-bench and cli/specdec).
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT BEFORE_BUILD}
before=${2:?usage: run.sh OUT BEFORE_BUILD}
mkdir -p "$out"
bin_dir() { if [ "$1" = after ]; then echo build; else echo "$before"; fi; }
for r in 1 2 3; do
  for t in 1 2; do
    for v in before after; do
      "$(bin_dir $v)/bench/specdec-model-bench" --sizes 7M,100M --dtypes bf16 \
        --ks 1,2,3,4,8,17 --reps 30 --threads $t --context 200 \
        --json "$out/rows_${v}_t${t}_r$r.json" >"$out/rows_${v}_t${t}_r$r.txt" 2>&1
    done
  done
done
P=models/specdec-pycode
for r in 1 2 3; do
  for temp in 0 1; do
    for v in before after; do
      "$(bin_dir $v)/cli/specdec" bench --target $P/target --draft $P/draft --dflash $P/dflash \
        --policy $P/policy \
        --prompts ../shared/datasets/humaneval/HumanEval.jsonl.gz $P/eval/heldout_prompts.txt \
        --max-prompts 40 --methods DFLASH_ADAPTIVE,DFLASH,DRAFT_CHAIN -n 128 --threads 1 \
        -t $temp --json "$out/spec_${v}_T${temp}_r$r.json" >"$out/spec_${v}_T${temp}_r$r.txt" 2>&1
    done
  done
done
