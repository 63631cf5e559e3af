#!/usr/bin/env bash
# The attention kernel's float path on AVX-512 registers against its AVX2 loops (BEFORE: a
# specdec-model-bench built from the commit before).
#   1. specdec-attention-bench: both loops alternated in one process, the 100M shape's heads
#      (12 query heads, 4 KV heads, 64 elements), 12 layers, one thread.
#   2. PAIRS process pairs (default 4) of 1-token and 17-row forwards at 1,024 cached tokens, the
#      7M (the pack's) and 100M shapes, bf16, 2 threads.
# The floor pairs (short context) come from bench/results/2026-11-27-compute-pool/run.sh.
#   [PAIRS=4] bash bench/results/2026-11-28-attention-avx512/run.sh OUT BEFORE
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT BEFORE}
before=${2:?usage: run.sh OUT BEFORE}
mkdir -p "$out"
build/bench/specdec-attention-bench --configs 1:200:1,1:1024:1,8:256:1,1:256:17,8:256:17,1:0:150 \
  --layers 12 --heads 12 --kv-heads 4 --rounds 7 --json "$out/attention.json" >"$out/attention.txt"
for pair in $(seq "${PAIRS:-4}"); do
  for build in before after; do
    bin=build/bench/specdec-model-bench
    [ "$build" = before ] && bin=$before
    "$bin" --sizes 100M,7M --dtypes bf16 --ks 1,17 --context 1024 --reps 40 --threads 2 \
      --json "$out/long_${build}_p$pair.json" >"$out/long_${build}_p$pair.txt" 2>&1
  done
done
