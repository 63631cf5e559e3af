#!/usr/bin/env bash
# The main job: installs dependencies, builds, checks the runtime on the real pretrained
# stories260K model (../shared, its published greedy sample), then starts the local four-service
# cluster on the embedded model pack (models/specdec-pycode: target, AR draft LM, DFlash drafter,
# BlockPilot policy) and generates the same code prompt with AR and with every speculative method
# through the router, printing the text, acceptance length, block size and measured speedup.
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

PACK=${SPECDEC_PACK:-models/specdec-pycode}
export TARGET_MODEL=$PACK/target DRAFT_LM=$PACK/draft DFLASH_MODEL=$PACK/dflash
export POLICY_MODEL=$PACK/policy
trap 'bash deploy/local/cluster.sh stop >/dev/null' EXIT
# One request at a time, each method shown as itself: the router's load awareness (on by default;
# it may run DFLASH_ADAPTIVE steps as AR while it measures which arm is faster at the current
# load) is for serving concurrent load, see loadtest/.
export SPECDEC_LOAD_AWARE=${SPECDEC_LOAD_AWARE:-false}
bash deploy/local/cluster.sh start
ROUTER=127.0.0.1:${SPECDEC_PORT_BASE:-50050}
PROMPT=$'def is_palindrome(text: str) -> bool:\n    """Return True if text reads the same backwards."""\n'
methods="AR DFLASH_ADAPTIVE DFLASH DRAFT_CHAIN DYSPEC_TREE NGRAM"
# Warm-up, not timed: a fresh cluster's first request per method pays one-time set-up (streams,
# allocations, cold caches) that would otherwise count against whichever method runs first.
for method in $methods; do
  "$BUILD_DIR/cli/specdec" generate --router "$ROUTER" --method "$method" -p "$PROMPT" \
    -n 16 --ignore-eos >/dev/null 2>&1
done
for method in $methods; do
  echo "== $method through the router"
  "$BUILD_DIR/cli/specdec" generate --router "$ROUTER" --method "$method" -p "$PROMPT" \
    -n 128 --ignore-eos 2> >(tee "$BUILD_DIR/cluster/$method.stats" >&2)
done
ar=$(sed -n 's/.*(\([0-9.]*\) tokens\/s).*/\1/p' "$BUILD_DIR/cluster/AR.stats")
for method in ${methods#AR }; do
  sp=$(sed -n 's/.*(\([0-9.]*\) tokens\/s).*/\1/p' "$BUILD_DIR/cluster/$method.stats")
  tau=$(sed -n 's/.*tau \([0-9.]*\),.*/\1/p' "$BUILD_DIR/cluster/$method.stats")
  awk -v a="$ar" -v s="$sp" -v t="$tau" -v m="$method" 'BEGIN {
    printf "== %s: tau %.2f, measured speedup vs AR %.2fx (same prompt, same run)\n", m, t, s / a
    # A step of the method commits tau tokens and costs tau / speedup AR steps (its draft, its
    # larger verify pass, its round trips): speculation pays where that cost stays below tau.
    if (s < a) printf "   %s does not pay here: a step commits %.2f tokens but costs %.2f AR steps\n", m, t, t * a / s
  }'
done
echo "== Speculation pays where a verify of many rows costs about one step (a GPU, a larger model);"
echo "   on a small CPU model a block's rows cost nearly as much as steps. DFLASH_ADAPTIVE measures"
echo "   that on this machine (the router's warm-up times every candidate block before it serves)"
echo "   and picks AR, a lookup of repeated text or a small block per step."
