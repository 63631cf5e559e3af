#!/usr/bin/env bash
# Makes the llama.cpp reference fixtures read by tests/common/model/llama_cpp_reference_test.cc:
# for each model, llama.cpp's float32 logits of a prompt and of a verify chunk on top of its cache,
# with the ids, in tests/data/llama_cpp_reference/<name>/ (expected.json, logits.safetensors).
#
#   tests/data/llama_cpp_reference/make_fixtures.sh        (after scripts/build.sh; needs npm)
#
# llama.cpp: bench/llama_cpp/fetch_build.sh (release v0.4.0, from the npm registry), driven by
# its probe (`probe logits`: F32 KV cache, 1 thread) in $WORK (default /tmp/specdec-llama-cpp).
# Models, each exported with `specdec convert DIR -o M.gguf --outtype f32`:
#   qwen3, llama   the random Transformers fixtures of tests/data/hf_reference (same ids), with a
#                  320-token tokenizer trained here by `specdec train tokenizer` (GGUF needs one;
#                  the ids are given, so it is never used to tokenize);
#   pack           the embedded pack's target, the prompt tokenized by llama.cpp itself.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$repo"
WORK=${WORK:-/tmp/specdec-llama-cpp}
SPECDEC=${SPECDEC:-build/cli/specdec}
PYTHON=${PYTHON:-python3}
out_root=tests/data/llama_cpp_reference
probe=$(bench/llama_cpp/fetch_build.sh "$WORK" | tail -n 1)
commit=$(git -C "$WORK/llama.cpp" rev-parse --short=12 HEAD)

# A 320-token tokenizer for the random fixtures (their embeddings have 320 rows).
"$PYTHON" - "$WORK/corpus.jsonl" <<'PY'
import json, sys
text = open("models/specdec-pycode/eval/heldout_prompts.txt").read()
with open(sys.argv[1], "w") as f:
    for i, chunk in enumerate(text.split("\n\n")):
        f.write(json.dumps({"path": str(i), "text": chunk}) + "\n")
PY
"$SPECDEC" train tokenizer --corpus "$WORK/corpus.jsonl" --vocab-size 320 --out "$WORK/tok320" \
  >/dev/null

ids() {  # the comma-separated ids under KEY of a JSON file
  "$PYTHON" -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))[sys.argv[2]])))' "$1" "$2"
}

fixture() {  # name model_dir prompt verify
  local name=$1 dir=$2 prompt=$3 verify=$4 out="$out_root/$1"
  mkdir -p "$out"
  "$SPECDEC" convert "$dir" -o "$WORK/$name.gguf" --outtype f32 2>/dev/null
  "$probe" logits "$WORK/$name.gguf" "$prompt" "$verify" "$WORK/$name.bin" \
    >"$WORK/$name.json" 2>"$WORK/$name.log"
  "$PYTHON" - "$WORK/$name.json" "$WORK/$name.bin" "$out" "$commit" "$prompt" <<'PY'
import json, struct, sys
meta, blob, out, commit, prompt = json.load(open(sys.argv[1])), open(sys.argv[2], "rb").read(), sys.argv[3], sys.argv[4], sys.argv[5]
header = {"logits_f32": {"dtype": "F32", "shape": [meta["rows"], meta["vocab"]],
                         "data_offsets": [0, len(blob)]}}
h = json.dumps(header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(out + "/logits.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + blob)
meta.update({"llama_cpp": "v0.4.0 (" + commit + "), CPU, 1 thread, F32 KV cache, no flash attention, float32 GGUF from specdec convert --outtype f32"})
if prompt.startswith("text:"):
    meta["prompt_text"] = prompt[5:]
json.dump(meta, open(out + "/expected.json", "w"), indent=1)
open(out + "/expected.json", "a").write("\n")
PY
  echo "make_fixtures: $name -> $out ($(wc -c <"$out/logits.safetensors") bytes)"
}

for name in qwen3 llama; do
  dir="$WORK/$name-hf"
  rm -rf "$dir" && mkdir -p "$dir"
  cp tests/data/hf_reference/$name/{config.json,model.safetensors} "$WORK/tok320"/tokenizer*.json "$dir/"
  fixture "$name" "$dir" "$(ids tests/data/hf_reference/$name/expected.json prompt_ids)" \
    "$(ids tests/data/hf_reference/$name/expected.json verify_ids)"
done
fixture pack models/specdec-pycode/target "text:def add(a, b):
    return" "text: a + b
"
