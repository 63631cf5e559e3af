#!/usr/bin/env bash
# Packed (blocks of 16) against row-major bf16 weights on the AVX-512 BF16 path, forwards
# alternating in one process, the triad after each run; two runs per thread count.
#   bash bench/results/2026-11-26-peer-avx512/compare.sh OUT
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: compare.sh OUT}
mkdir -p "$out"
gcc -O2 -fopenmp bench/stream_triad.c -o "$out/stream_triad"
for run in 1 2; do
  for t in 1 2; do
    build/bench/specdec-model-bench --sizes 100M --threads "$t" --ks 1,3,4,5,8,16,17,128 \
      --reps 21 --context 200 --compare-packing --json "$out/compare_packing_t${t}_run${run}.json"
    OMP_NUM_THREADS=$t "$out/stream_triad"
  done
done
