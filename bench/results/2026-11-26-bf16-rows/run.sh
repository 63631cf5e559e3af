#!/usr/bin/env bash
# bf16 activations: oneDNN past 32 rows (the old limit) against the kernel at every row count,
# alternating, three rounds (docs/results/2026-11-26-bf16-rows.md). r*_default.json: a limit of
# 32 rows, the default at 15475d5 where they were measured; r*_100000.json: every row count.
cd "$(dirname "$0")/../../.."  # the repository root; build/ built
for r in 1 2 3; do for lim in default 100000; do
  if [ $lim = default ]; then export SPECDEC_LINEAR_KERNEL_MAX_ROWS=32; else export SPECDEC_LINEAR_KERNEL_MAX_ROWS=$lim; fi
  SPECDEC_ACTIVATIONS=bf16 ./build/bench/specdec-model-bench --sizes 7M,30M,100M --dtypes bf16 --ks 1,33,64,128,256 --context 200 --reps 9 --threads 2 --json bench/results/2026-11-26-bf16-rows/r${r}_$lim.json > bench/results/2026-11-26-bf16-rows/r${r}_$lim.txt 2>&1
done; done
