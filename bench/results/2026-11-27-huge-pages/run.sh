#!/usr/bin/env bash
# The llama.cpp peer table's decode rows with the weights on 4 KiB pages (SPECDEC_HUGE_PAGES=0)
# and on 2 MiB transparent huge pages (the default), one build: for each model, each setting
# against llama.cpp in its own alternating rounds, twice, the settings alternating; the triad
# (both page sizes) before and after.
#   bash bench/results/2026-11-27-huge-pages/run.sh OUT
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT}
mkdir -p "$out"
gcc -O2 -fopenmp bench/stream_triad.c -o "$out/stream_triad"
triad() { for t in 1 2; do OMP_NUM_THREADS=$t "$out/stream_triad"; done; }
triad >"$out/triad_before.txt"
bash bench/llama_cpp/fetch_build.sh >/dev/null 2>&1
[ -d "$out/rand96" ] || python3 bench/llama_cpp/random_checkpoint.py "$out/rand96" >/dev/null
for model in "$out/rand96" models/specdec-pycode/target; do
  name=$(basename "$model")
  for round in 1 2; do
    for pages in 0 1; do
      SPECDEC_HUGE_PAGES=$pages python3 bench/llama_cpp/peer_bench.py --model "$model" \
        --dtypes f32,bf16 --spec-methods '' --out "$out/${name}_pages${pages}_round${round}"
    done
  done
done
triad >"$out/triad_after.txt"
