#!/usr/bin/env bash
# The f32 forward of the random 100M shape at 1 to 128 rows, the previous build (BEFORE, a
# `specdec-model-bench` binary built from the previous commit) and this one alternating, two
# rounds per thread count, the triad after each pair.
#   bash bench/results/2026-11-27-f32-stream/compare.sh OUT BEFORE
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: compare.sh OUT BEFORE}
before=${2:?usage: compare.sh OUT BEFORE}
mkdir -p "$out"
gcc -O2 -fopenmp bench/stream_triad.c -o "$out/stream_triad"
for run in 1 2; do
  for t in 1 2; do
    for build in before after; do
      bin=build/bench/specdec-model-bench
      [ "$build" = before ] && bin=$before
      "$bin" --sizes 100M --dtypes f32 --threads "$t" --ks 1,2,3,4,5,8,17,128 --reps 9 \
        --context 200 --json "$out/f32_t${t}_run${run}_${build}.json"
    done
    OMP_NUM_THREADS=$t "$out/stream_triad"
  done
done
