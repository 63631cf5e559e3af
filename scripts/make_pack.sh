#!/usr/bin/env bash
# Regenerates the embedded model pack end to end with specdec's own trainers:
#   corpus -> tokenizer -> tokenize -> target LM + AR draft LM -> DFlash drafter -> policy data
#   -> BlockPilot policy -> benchmark.
#   scripts/make_pack.sh [stage...]     stages: data target draft dflash policy bench (default all)
# Environment: WORK (scratch, default /tmp/specdec-pack), PACK (output, default
# models/specdec-pycode), DEVICE (cpu|cuda), DTYPE (compute dtype), TRAIN (trainer binary),
# TARGET_BUDGET / DRAFT_BUDGET / DFLASH_BUDGET (training seconds; 0 = run all steps).
# Every trainer resumes from its checkpoint directory under WORK when re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/specdec-pack}
PACK=${PACK:-models/specdec-pycode}
DEVICE=${DEVICE:-cpu}
DTYPE=${DTYPE:-$([ "$DEVICE" = cpu ] && echo f32 || echo bf16)}
TRAIN=${TRAIN:-build/train/specdec-train}
stages=${*:-data target draft dflash policy bench}
mkdir -p "$WORK" "$PACK"

has() { [[ " $stages " == *" $1 "* ]]; }

if has data; then
  # Debian main, PSF license (see sources.json for versions).
  pkgs="libpython3.11-stdlib libpython3.11-testsuite python3-setuptools python3-pip"
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get install -y -q $pkgs >/dev/null
  fi
  args=()
  for p in $pkgs; do args+=(--package "$p"); done
  $TRAIN corpus "${args[@]}" --ext .py --exclude /lib2to3/tests/data/ --exclude /_vendor/ \
    --heldout 0.03 --out "$WORK/corpus"
  $TRAIN tokenizer --corpus "$WORK/corpus/train.jsonl" --vocab-size 4096 --out "$WORK/tokenizer"
  $TRAIN tokenize --corpus "$WORK/corpus/train.jsonl" --tokenizer "$WORK/tokenizer" \
    --out "$WORK/train.tok"
  $TRAIN tokenize --corpus "$WORK/corpus/heldout.jsonl" --tokenizer "$WORK/tokenizer" \
    --out "$WORK/heldout.tok"
  cp "$WORK/corpus/sources.json" "$PACK/corpus_sources.json"
fi

if has target; then
  $TRAIN lm --train "$WORK/train.tok" --heldout "$WORK/heldout.tok" --tokenizer "$WORK/tokenizer" \
    --out "$PACK/target" --checkpoint "$WORK/ckpt-target" \
    --hidden 256 --intermediate 768 --layers 8 --heads 4 --kv-heads 2 \
    --batch 64 --seq-len 512 --steps 20000 --lr 1.5e-3 --warmup 0.02 --weight-decay 0.1 \
    --eval-every 250 --eval-batches 8 --checkpoint-every 1000 \
    --dtype "$DTYPE" --device "$DEVICE" --time-budget "${TARGET_BUDGET:-0}"
fi

if has draft; then
  $TRAIN lm --train "$WORK/train.tok" --heldout "$WORK/heldout.tok" --tokenizer "$WORK/tokenizer" \
    --out "$PACK/draft" --checkpoint "$WORK/ckpt-draft" \
    --hidden 128 --intermediate 384 --layers 2 --heads 2 --kv-heads 1 \
    --batch 64 --seq-len 512 --steps 20000 --lr 3e-3 --warmup 0.02 --weight-decay 0.1 \
    --eval-every 250 --eval-batches 8 --checkpoint-every 1000 \
    --dtype "$DTYPE" --device "$DEVICE" --time-budget "${DRAFT_BUDGET:-0}"
fi

if has dflash; then
  $TRAIN dflash --target "$PACK/target" --prompts "$WORK/train.tok" --out "$PACK/dflash" \
    --checkpoint "$WORK/ckpt-dflash" --layers 2 --block-size 16 \
    --gen-sequences 32768 --gen-batch 4096 --prompt-len 64 --gen-len 192 --greedy-frac 0.5 \
    --batch 64 --anchors 32 --steps 20000 --lr 6e-4 --warmup 0.04 \
    --eval-every 200 --checkpoint-every 1000 \
    --dtype "$DTYPE" --device "$DEVICE" --time-budget "${DFLASH_BUDGET:-0}"
fi

if has policy; then
  $TRAIN policy-data --target "$PACK/target" --dflash "$PACK/dflash" --prompts "$WORK/train.tok" \
    --out "$WORK/policy-data" --num-prompts "${POLICY_PROMPTS:-1536}" --max-new-tokens 64 \
    --min-prompt-len 16 --max-prompt-len 160 --labels acceptance
  # The acceptance curve from the 16 largest log-probabilities: the raw logits overfit the 1229
  # training prompts (MODEL_CARD.md).
  $TRAIN policy --data "$WORK/policy-data" --out "$PACK/policy" --input-top-k 16 --hidden 64 \
    --epochs 60 --dropout 0.2 --lr 1e-3
fi

if has bench; then
  echo "bench: see MODEL_CARD.md for the command"
fi
