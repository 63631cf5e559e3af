#!/usr/bin/env bash
# The float32 rows of the llama.cpp peer table before and after the f32 kernel streams a lone
# row's weights (AVX-512 machine): each build against llama.cpp in its own alternating rounds,
# the triad before and after. BEFORE is a `specdec` binary built from the previous commit.
#   bash bench/results/2026-11-27-f32-stream/run.sh OUT BEFORE
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT BEFORE}
before=${2:?usage: run.sh OUT BEFORE}
mkdir -p "$out"
gcc -O2 -fopenmp bench/stream_triad.c -o "$out/stream_triad"
triad() { for t in 1 2; do OMP_NUM_THREADS=$t "$out/stream_triad"; done; }
triad >"$out/triad_before.txt"
bash bench/llama_cpp/fetch_build.sh >/dev/null 2>&1
[ -d "$out/rand96" ] || python3 bench/llama_cpp/random_checkpoint.py "$out/rand96" >/dev/null
for model in "$out/rand96" models/specdec-pycode/target; do
  name=$(basename "$model")
  python3 bench/llama_cpp/peer_bench.py --model "$model" --dtypes f32 --spec-methods '' \
    --specdec "$before" --out "$out/${name}_before"
  python3 bench/llama_cpp/peer_bench.py --model "$model" --dtypes f32,bf16 --spec-methods '' \
    --out "$out/${name}_after"
done
triad >"$out/triad_after.txt"
