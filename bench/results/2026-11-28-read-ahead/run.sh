#!/usr/bin/env bash
# Products that read the next matrix ahead as their threads finish (parallel_linear.h) against
# products that do not, in one process: specdec-model-bench --compare-read-ahead loads the same
# random weights both ways and alternates their forwards. PROCS processes (default 4) of the 100M
# and 7M (the pack's) shapes, bf16 and f32, 1, 4 and 17 rows at 200 cached tokens, 2 threads;
# then PROCS processes of the 1-token step against the triad's floor (100M, 2 threads).
#   [PROCS=4] bash bench/results/2026-11-28-read-ahead/run.sh OUT
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT}
mkdir -p "$out"
bin=build/bench/specdec-model-bench
for p in $(seq "${PROCS:-4}"); do
  "$bin" --sizes 100M,7M --dtypes bf16,f32 --ks 1,4,17 --reps 40 --threads 2 --compare-read-ahead \
    --json "$out/compare_p$p.json" >"$out/compare_p$p.txt" 2>&1
done
for p in $(seq "${PROCS:-4}"); do
  "$bin" --sizes 100M --dtypes bf16,f32 --ks 1 --reps 40 --threads 2 --floor 2 \
    --json "$out/floor_p$p.json" >"$out/floor_p$p.txt" 2>&1
done
