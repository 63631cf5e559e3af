#!/usr/bin/env bash
# Runs every `specdec train` subcommand for a few steps on a tiny configuration, then serves the
# result with `specdec bench` (DFLASH_ADAPTIVE must equal AR), so the trainers keep working.
#   train_smoke_test.sh <specdec binary>
set -euo pipefail
specdec=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
$specdec train corpus --package libpython3.11-stdlib --ext .py --max-file-bytes 6000 \
  --heldout 0.1 --out corpus
$specdec train tokenizer --corpus corpus/train.jsonl --vocab-size 600 --out tok
$specdec train tokenize --corpus corpus/train.jsonl --tokenizer tok --out train.tok
$specdec train tokenize --corpus corpus/heldout.jsonl --tokenizer tok --out heldout.tok
$specdec train lm --train train.tok --heldout heldout.tok --tokenizer tok --out target \
  --hidden 32 --intermediate 64 --layers 2 --heads 2 --kv-heads 1 --batch 4 --seq-len 32 \
  --steps 6 --eval-every 3 --eval-batches 1 --checkpoint-every 3 --threads 1
# Resume: asking for more steps continues from the checkpoint at step 6.
$specdec train lm --train train.tok --heldout heldout.tok --tokenizer tok --out target \
  --hidden 32 --intermediate 64 --layers 2 --heads 2 --kv-heads 1 --batch 4 --seq-len 32 \
  --steps 8 --eval-every 3 --eval-batches 1 --checkpoint-every 3 --threads 1 2>&1 |
  tee lm2.log
grep -q "resuming from target/checkpoint at step 6" lm2.log
$specdec train dflash --target target --prompts train.tok --out dflash --layers 1 \
  --block-size 4 --gen-sequences 8 --gen-batch 4 --prompt-len 8 --gen-len 12 --batch 4 \
  --anchors 2 --steps 4 --eval-every 2 --threads 1
# Resume: the drafter continues from its checkpoint on the generations it saved.
$specdec train dflash --target target --prompts train.tok --out dflash --layers 1 \
  --block-size 4 --gen-sequences 8 --gen-batch 4 --prompt-len 8 --gen-len 12 --batch 4 \
  --anchors 2 --steps 6 --eval-every 2 --threads 1 2>&1 | tee dflash2.log
grep -q "reusing 160 generated tokens" dflash2.log
grep -q "resuming from dflash/checkpoint at step 4" dflash2.log
python3 -c 'import json; assert [json.loads(l)["step"] for l in open("dflash/checkpoint/log.jsonl")] == [2, 4, 6]'
# Acceptance labels (the default; measured at T = 0.9, which the policy's config records) and
# the older candidates labels, each with its policy.
$specdec train policy-data --target target --dflash dflash --prompts train.tok --out pdata \
  --num-prompts 6 --part-size 4 --max-new-tokens 8 --min-prompt-len 4 --max-prompt-len 12 \
  --temperature 0.9 --workers 1
$specdec train policy --data pdata --out policy --hidden 16 --epochs 2 --heldout-frac 0.34
$specdec train policy-data --target target --dflash dflash --prompts train.tok --out pdata_c \
  --labels candidates --num-prompts 6 --part-size 4 --max-new-tokens 8 --min-prompt-len 4 \
  --max-prompt-len 12 --radius 1 --workers 1
$specdec train policy --data pdata_c --out policy_c --hidden 16 --epochs 2 --heldout-frac 0.34
python3 - <<'PY'
import json
a = json.load(open("policy/config.json"))
assert a["head"] == "acceptance" and a["positions"] == 3, a  # block 4: positions 0..2
assert abs(a["acceptance_temperature"] - 0.9) < 1e-9, a
m = json.load(open("policy/training.json"))["metrics"]
assert len(m["per_block"]) == 3 and m["heldout_tau_abs_error_policy"] >= 0, m
c = json.load(open("policy_c/config.json"))
assert c["head"] == "candidates" and c["block_sizes"] == [3, 4, 5], c
PY
for f in target/config.json target/model.safetensors target/tokenizer.json \
  dflash/config.json dflash/model.safetensors policy/config.json policy/model.safetensors \
  policy_c/model.safetensors pdata_c/part-00001.safetensors \
  pdata/part-00000.safetensors pdata/part-00001.safetensors corpus/sources.json; do
  test -s "$f" || { echo "missing $f"; exit 1; }
done
printf 'def add(a, b):\n    return' > prompts.txt
$specdec bench --target target --dflash dflash --policy policy --prompts prompts.txt \
  --methods DFLASH,DFLASH_ADAPTIVE -n 12 --threads 1 --json bench.json | tee bench.log
python3 - <<'PY'
import json
rows = json.load(open("bench.json"))
rows = rows.get("rows", rows) if isinstance(rows, dict) else rows
text = json.dumps(rows)
assert "DFLASH_ADAPTIVE" in text, text
PY
grep -E "DFLASH_ADAPTIVE" bench.log | grep -q "1/1"
$specdec bench --target target --dflash dflash --policy policy_c --prompts prompts.txt \
  --methods DFLASH_ADAPTIVE -n 12 --threads 1 | grep -E "DFLASH_ADAPTIVE" | grep -q "1/1"
echo "train smoke test passed"
