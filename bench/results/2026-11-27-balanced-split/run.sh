#!/usr/bin/env bash
# Products split by claims (BalancedParallelFor) against ATen's static halves: the model bench's
# 1-token step against the triad's floor, the two builds' processes alternating (4 rounds, each
# process 3 floor rounds), then the llama.cpp peer table's AR rows on this build.
#   bash bench/results/2026-11-27-balanced-split/run.sh OUT BEFORE_MODEL_BENCH
# BEFORE_MODEL_BENCH: specdec-model-bench built from this commit with common/model/ops.cc of
# de6e02d (the static halves).
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:?usage: run.sh OUT BEFORE_MODEL_BENCH}
before=${2:?usage: run.sh OUT BEFORE_MODEL_BENCH}
after=build/bench/specdec-model-bench
mkdir -p "$out"
for round in 1 2 3 4; do
  for build in before after; do
    bin=$before
    [ "$build" = after ] && bin=$after
    "$bin" --sizes 100M --dtypes bf16,f32 --ks 1,32 --reps 40 --threads 2 --floor 3 \
      --json "$out/${build}_t2_r$round.json" >"$out/${build}_t2_r$round.txt" 2>&1
  done
done
bash bench/llama_cpp/fetch_build.sh >/dev/null 2>&1
[ -d "$out/rand96" ] || python3 bench/llama_cpp/random_checkpoint.py "$out/rand96" >/dev/null
for model in "$out/rand96" models/specdec-pycode/target; do
  python3 bench/llama_cpp/peer_bench.py --model "$model" --dtypes f32,bf16 --spec-methods '' \
    --out "$out/peer_$(basename "$model")"
done
