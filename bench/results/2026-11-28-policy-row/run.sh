#!/usr/bin/env bash
# BlockPilot's per-request prediction time before and after its row path, in process on the pack:
# DFLASH_ADAPTIVE on all 164 HumanEval prompts and the held-out prompts, T=0 and T=1, 64 tokens,
# the two builds alternating, ROUNDS rounds. Prints policy ms per request, the block sizes chosen
# and DFLASH_ADAPTIVE/AR per run.
#   bash bench/results/2026-11-28-policy-row/run.sh BEFORE_BIN AFTER_BIN [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
BEFORE=$1 AFTER=$2 ROUNDS=${3:-2}
P=models/specdec-pycode
OUT=$(mktemp -d)
for r in $(seq "$ROUNDS"); do
  for t in 0 1; do
    for side in before after; do
      bin=$BEFORE
      [ "$side" = after ] && bin=$AFTER
      "$bin" bench --target $P/target --draft $P/draft --dflash $P/dflash --policy $P/policy \
        --prompts ../shared/datasets/humaneval/HumanEval.jsonl.gz $P/eval/heldout_prompts.txt \
        --max-prompts 0 --methods DFLASH_ADAPTIVE -n 64 --threads 2 -t "$t" \
        --json "$OUT/$side-$t-$r.json" >/dev/null 2>&1
    done
  done
done
/usr/bin/python3 - "$OUT" "$ROUNDS" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print("| T | round | dataset | build | policy ms per request | block sizes chosen | DFLASH_ADAPTIVE / AR |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for t in (0, 1):
    for r in range(1, rounds + 1):
        for side in ("before", "after"):
            for row in json.load(open(f"{out}/{side}-{t}-{r}.json"))["results"]:
                if row["method"] != "DFLASH_ADAPTIVE":
                    continue
                # before the row path the bench did not report the policy's time
                ms = row.get("policy_ms_per_request")
                ms = "n/a" if ms is None else f"{ms:.3f}"
                sizes = " ".join(f"{k}:{v}" for k, v in sorted(row["block_sizes"].items(), key=lambda kv: int(kv[0])))
                print(f"| {t} | {r} | {row['dataset']} | {side} | {ms} | {sizes} | {row['speedup_vs_ar']:.3f} |")
PY
