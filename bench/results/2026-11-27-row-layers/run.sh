#!/usr/bin/env bash
# The row layers (common/model/row_layer.h) against ATen's operators between the kernels:
# 1. in one process, the two loads' forwards alternating (--compare-row-layers), 1 and 2 threads;
# 2. the 1-token step against the triad's floor, processes with SPECDEC_ROW_LAYERS=0 and 1
#    alternating (3 rounds, each process 3 floor rounds).
#   bash bench/results/2026-11-27-row-layers/run.sh OUT
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT}
bench=build/bench/specdec-model-bench
mkdir -p "$out"
for run in 1 2; do
  for t in 1 2; do
    "$bench" --sizes 7M,100M --dtypes bf16,f32 --ks 1,17 --reps 60 --threads "$t" \
      --compare-row-layers --json "$out/compare_t${t}_run$run.json" >"$out/compare_t${t}_run$run.txt" 2>&1
  done
done
for round in 1 2 3; do
  for rows in 0 1; do
    SPECDEC_ROW_LAYERS=$rows "$bench" --sizes 100M --dtypes bf16,f32 --ks 1 --reps 40 --threads 2 \
      --floor 3 --json "$out/floor_rows${rows}_r$round.json" >"$out/floor_rows${rows}_r$round.txt" 2>&1
  done
done
