#!/bin/bash
# The lookup index against the scan, as whole builds, with `specdec bench` on the pack in
# process: the build before (BEFORE_SPECDEC, e.g. a copy of build/cli/specdec built at the
# commit before) and this one (build/cli/specdec) alternating.
#   1. the standard sets (all of HumanEval and the held-out prompts), T = 0 and T = 1,
#      STD_ROUNDS rounds (default 3);
#   2. long prompts (8 HumanEval prompts joined, their last 1,900 tokens), T = 0,
#      LONG_ROUNDS rounds (default 4).
# Usage: bash run.sh OUT BEFORE_SPECDEC
set -euo pipefail
out=$1; before=$2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
shared=${SPECDEC_SHARED:-$root/../shared}
pack=$root/models/specdec-pycode
mkdir -p "$out"
python3 "$here/long_prompts.py" "$shared/datasets/humaneval/HumanEval.jsonl.gz" "$out/long.txt"
common=(--target "$pack/target" --draft "$pack/draft" --dflash "$pack/dflash" --policy "$pack/policy"
        --methods AR,NGRAM,DFLASH_ADAPTIVE -n 128 --threads 2 --max-prompts 0)
bin_of() { if [ "$1" = head ]; then echo "$before"; else echo "$root/build/cli/specdec"; fi; }
for r in $(seq 1 "${STD_ROUNDS:-3}"); do
  for t in 0 1; do
    for b in head index; do
      "$(bin_of $b)" bench "${common[@]}" -t "$t" \
        --prompts "$shared/datasets/humaneval/HumanEval.jsonl.gz" "$pack/eval/heldout_prompts.txt" \
        --json "$out/r${r}_t${t}_$b.json" > "$out/r${r}_t${t}_$b.txt" 2>&1
    done
  done
done
for r in $(seq 1 "${LONG_ROUNDS:-4}"); do
  for b in head index; do
    "$(bin_of $b)" bench "${common[@]}" -t 0 --prompts "$out/long.txt" --max-prompt-tokens 1900 \
      --json "$out/long_r${r}_$b.json" > "$out/long_r${r}_$b.txt" 2>&1
  done
done
