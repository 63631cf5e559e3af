#!/usr/bin/env bash
# The llama.cpp peer table on this build: a random 96.4M Qwen3 shape (AR decode and prefill) and
# the pack's target (and its speculative rows), f32 and bf16, 1 and 2 threads, 5 rounds
# alternating with llama.cpp; the triad before and after; then the 100M shape's 1-token step
# against the triad's floor in 8 processes (bf16 and f32, 2 threads, 2 rounds each).
#   bash bench/results/2026-11-28-peer/run.sh OUT
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT}
mkdir -p "$out"
gcc -O2 -fopenmp bench/stream_triad.c -o "$out/stream_triad"
triad() { for t in 1 2; do OMP_NUM_THREADS=$t "$out/stream_triad"; done; }
triad >"$out/triad_before.txt"
bash bench/llama_cpp/fetch_build.sh >"$out/fetch_build.txt" 2>&1
[ -d "$out/rand96" ] || python3 bench/llama_cpp/random_checkpoint.py "$out/rand96" >/dev/null
python3 bench/llama_cpp/peer_bench.py --model "$out/rand96" --dtypes f32,bf16 --spec-methods '' \
  --out "$out/peer_rand96"
python3 bench/llama_cpp/peer_bench.py --model models/specdec-pycode/target --dtypes f32,bf16 \
  --out "$out/peer_target"
triad >"$out/triad_after.txt"
for p in $(seq 8); do
  build/bench/specdec-model-bench --sizes 100M --dtypes bf16,f32 --ks 1 --reps 40 --threads 2 \
    --floor 2 --json "$out/floor_p$p.json" >"$out/floor_p$p.txt" 2>&1
done
