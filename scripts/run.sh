#!/usr/bin/env bash
# The main job: installs dependencies, builds, converts the real pretrained stories260K model
# (../shared) to the HF layout, starts the local four-service cluster on it, and generates the
# same prompt with AR and with speculative decoding through the router, printing the text,
# acceptance length and the measured speedup.
#
# The default model pack (target, small draft LM, DFlash drafter, BlockPilot policy) is not
# trained yet; until it lands, stories260K drafts for itself, which checks the whole path but
# cannot be faster than AR (the draft costs as much as the target).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
BUILD_DIR=${BUILD_DIR:-build}
SHARED=${SPECDEC_SHARED:-../shared}
MODEL_DIR=$BUILD_DIR/models/stories260K
if [ ! -f "$MODEL_DIR/model.safetensors" ]; then
  "$BUILD_DIR/cli/specdec" convert "$SHARED/models/stories260K/stories260K.gguf" -o "$MODEL_DIR"
fi
echo "== local AR, greedy from BOS (stories260K, 256 tokens; the published sample)"
"$BUILD_DIR/cli/specdec" generate -m "$MODEL_DIR" -n 256 --ignore-eos

export TARGET_MODEL=$MODEL_DIR DRAFT_LM=$MODEL_DIR
trap 'bash deploy/local/cluster.sh stop >/dev/null' EXIT
bash deploy/local/cluster.sh start
ROUTER=127.0.0.1:${SPECDEC_PORT_BASE:-50050}
PROMPT="Once upon a time, there was a little dog named Max."
for method in AR DRAFT_CHAIN DYSPEC_TREE; do
  echo "== $method through the router"
  "$BUILD_DIR/cli/specdec" generate --router "$ROUTER" --method "$method" -p "$PROMPT" \
    -n 128 --ignore-eos 2> >(tee "$BUILD_DIR/cluster/$method.stats" >&2)
done
ar=$(sed -n 's/.*(\([0-9.]*\) tokens\/s).*/\1/p' "$BUILD_DIR/cluster/AR.stats")
for method in DRAFT_CHAIN DYSPEC_TREE; do
  sp=$(sed -n 's/.*(\([0-9.]*\) tokens\/s).*/\1/p' "$BUILD_DIR/cluster/$method.stats")
  tau=$(sed -n 's/.*tau \([0-9.]*\),.*/\1/p' "$BUILD_DIR/cluster/$method.stats")
  awk -v a="$ar" -v s="$sp" -v t="$tau" -v m="$method" \
    'BEGIN { printf "== %s: tau %.2f, measured speedup vs AR %.2fx (same prompt, same run)\n", m, t, s / a }'
done
