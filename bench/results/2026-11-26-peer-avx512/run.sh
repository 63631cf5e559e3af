#!/usr/bin/env bash
# The llama.cpp peer table on the AVX-512 (BF16) machine: the triad before and after, the random
# 96.4M Qwen3 shape, then the pack with its speculative rows. Nothing else running.
#   bash bench/results/2026-11-26-peer-avx512/run.sh OUT
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT}
mkdir -p "$out"
gcc -O2 -fopenmp bench/stream_triad.c -o "$out/stream_triad"
triad() { for t in 1 2; do OMP_NUM_THREADS=$t "$out/stream_triad"; done; }
triad >"$out/triad_before.txt"
bash bench/llama_cpp/fetch_build.sh >/dev/null 2>&1
python3 bench/llama_cpp/random_checkpoint.py "$out/rand96" >/dev/null
python3 bench/llama_cpp/peer_bench.py --model "$out/rand96" --spec-methods '' --out "$out/peer96"
python3 bench/llama_cpp/peer_bench.py --out "$out/peerpack"
triad >"$out/triad_after.txt"
