#!/usr/bin/env bash
# The main job: installs dependencies, builds, converts the real pretrained stories260K model
# (../shared) into the HF layout and generates text with it.
#   scripts/run.sh [extra `specdec generate` flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
SHARED=${SPECDEC_SHARED:-../shared}
MODEL_DIR=${BUILD_DIR:-build}/models/stories260K
if [ ! -f "$MODEL_DIR/model.safetensors" ]; then
  ./"${BUILD_DIR:-build}"/cli/specdec convert "$SHARED/models/stories260K/stories260K.gguf" \
    -o "$MODEL_DIR"
fi
echo "== greedy from BOS (stories260K, 256 tokens)"
./"${BUILD_DIR:-build}"/cli/specdec generate -m "$MODEL_DIR" -n 256 --ignore-eos "$@"
echo "== sampled, T=1.0 top-p 0.9, prompt 'Once upon a time'"
./"${BUILD_DIR:-build}"/cli/specdec generate -m "$MODEL_DIR" -p "Once upon a time" -n 120 \
  -t 1.0 --top-p 0.9 --seed 133742 "$@"
