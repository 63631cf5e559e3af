#!/usr/bin/env bash
# The 1-token step of the 7M (the pack's shape) and 100M shapes, bf16 and f32 weights, 2 threads,
# two specdec-model-bench binaries alternating process by process (BEFORE, AFTER), PAIRS pairs;
# then the medians and the per-pair ratios.
#   bash bench/results/2026-11-27-swiglu-exp/run.sh OUT BEFORE AFTER [PAIRS]
set -euo pipefail
out=$1 before=$2 after=$3 pairs=${4:-8}
mkdir -p "$out"
for i in $(seq "$pairs"); do
  "$before" --sizes 7M,100M --dtypes bf16,f32 --threads 2 --ks 1 --reps 40 \
    --json "$out/${i}_before.json" >/dev/null 2>&1
  "$after" --sizes 7M,100M --dtypes bf16,f32 --threads 2 --ks 1 --reps 40 \
    --json "$out/${i}_after.json" >/dev/null 2>&1
done
python3 - "$out" "$pairs" <<'PY'
import json, statistics as st, sys
from collections import defaultdict
out, pairs = sys.argv[1], int(sys.argv[2])
v = defaultdict(list)
for i in range(1, pairs + 1):
    for b in ("before", "after"):
        for x in json.load(open(f"{out}/{i}_{b}.json")):
            v[(x["model"], x["dtype"], b)].append(x["ms"]["1"])
for m in ("7M", "100M"):
    for dt in ("bf16", "f32"):
        a, b = v[(m, dt, "before")], v[(m, dt, "after")]
        r = [x / y for x, y in zip(a, b)]
        print(f"{m} {dt}: before {st.median(a):.4f} ms, after {st.median(b):.4f} ms; "
              f"before/after per pair: median {st.median(r):.3f}, {min(r):.3f}-{max(r):.3f}")
PY
