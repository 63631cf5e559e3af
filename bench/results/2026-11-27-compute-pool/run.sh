#!/usr/bin/env bash
# The model's parallel loops on the compute pool (common/model/compute_pool.cc) against OpenMP's
# regions (BEFORE: a specdec-model-bench built from the commit before), processes alternating,
# PAIRS pairs (default 8): 1-token steps of the 100M shape against the triad's floor (bf16 and
# f32, 2 threads, 2 floor rounds per process), and forwards of 1, 4 and 17 rows of the 100M and
# 7M (the pack's) shapes in bf16 at 2 and 1 threads. The two pools cannot be compared inside one
# process: each one's idle workers spin on the cores the other's need.
#   [PAIRS=8] bash bench/results/2026-11-27-compute-pool/run.sh OUT BEFORE
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT BEFORE}
before=${2:?usage: run.sh OUT BEFORE}
mkdir -p "$out"
for pair in $(seq "${PAIRS:-8}"); do
  for build in before after; do
    bin=build/bench/specdec-model-bench
    [ "$build" = before ] && bin=$before
    "$bin" --sizes 100M --dtypes bf16,f32 --ks 1 --reps 40 --threads 2 --floor 2 \
      --json "$out/floor_${build}_p$pair.json" >"$out/floor_${build}_p$pair.txt" 2>&1
    for t in 2 1; do
      "$bin" --sizes 100M,7M --dtypes bf16 --ks 1,4,17 --reps 40 --threads "$t" \
        --json "$out/rows_t${t}_${build}_p$pair.json" >"$out/rows_t${t}_${build}_p$pair.txt" 2>&1
    done
  done
done
