#!/usr/bin/env bash
# `specdec convert FILE.gguf --outtype bf16` against the default F32 output, on the pack's target
# through llama-quantize (llama.cpp v0.4.0; Q8_0 and Q4_K_M): the size of each model.safetensors,
# and the logits over five held-out prompts' greedy 64-token continuations computed in bf16 from each
# conversion (`specdec-logits-probe --dtype bf16`): the largest difference between the two, which
# is 0 when the bf16 file holds exactly the values a bf16 load of the F32 file rounds to.
#
#   bash bench/results/2026-11-28-gguf-bf16/run.sh OUT      (after scripts/build.sh; needs npm)
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${1:?OUT}
mkdir -p "$OUT"
WORK=${WORK:-/tmp/specdec-llama-cpp}
bench/llama_cpp/fetch_build.sh "$WORK" >/dev/null
ninja -C "$WORK/llama.cpp/build" llama-quantize >/dev/null
SPECDEC=build/cli/specdec PROBE=build/bench/specdec-logits-probe
$SPECDEC convert models/specdec-pycode/target -o "$OUT/target-f32.gguf" --outtype f32 >/dev/null 2>&1
for t in Q8_0 Q4_K_M; do
  "$WORK/llama.cpp/build/bin/llama-quantize" "$OUT/target-f32.gguf" "$OUT/target-$t.gguf" $t \
    >"$OUT/quantize-$t.log" 2>&1
  $SPECDEC convert "$OUT/target-$t.gguf" -o "$OUT/hf-$t-auto" >/dev/null 2>&1
  $SPECDEC convert "$OUT/target-$t.gguf" -o "$OUT/hf-$t-bf16" --outtype bf16 >/dev/null 2>&1
done
/usr/bin/python3 - "$OUT" "$SPECDEC" "$PROBE" <<'PY'
import json, os, struct, subprocess, sys
out, specdec, probe = sys.argv[1:4]
prompts = open("models/specdec-pycode/eval/heldout_prompts.txt").read().split("\n\n")[:5]
def ids_of(prompt):
    r = subprocess.run([specdec, "generate", "-m", "models/specdec-pycode/target", "-p", prompt,
                        "-n", "64", "--ignore-eos", "--print-ids"], capture_output=True, text=True,
                       check=True)
    line = next(l for l in r.stderr.splitlines() if l.startswith("ids:"))
    return [int(x) for x in line[4:].split()]
def logits(model, ids, name):
    path = f"{out}/{name}.bin"
    subprocess.run([probe, "-m", model, "--ids", ",".join(map(str, ids)), "--out", path,
                    "--dtype", "bf16"], capture_output=True, check=True)
    data = open(path, "rb").read()
    return struct.unpack("<%df" % (len(data) // 4), data)
print("| file | F32 output (auto) | BF16 output | torch_dtype | largest bf16-logit difference between the two |")
print("| --- | --- | --- | --- | --- |")
for t in ("Q8_0", "Q4_K_M"):
    auto, bf16 = f"{out}/hf-{t}-auto", f"{out}/hf-{t}-bf16"
    worst = 0.0
    for i, p in enumerate(prompts):
        ids = ids_of(p)
        a, b = logits(auto, ids, f"{t}-auto-{i}"), logits(bf16, ids, f"{t}-bf16-{i}")
        worst = max(worst, max(abs(x - y) for x, y in zip(a, b)))
    mb = lambda d: os.path.getsize(f"{d}/model.safetensors") / 1e6
    dtype = json.load(open(f"{bf16}/config.json"))["torch_dtype"]
    print(f"| {t} | {mb(auto):.1f} MB | {mb(bf16):.1f} MB | {dtype} | {worst:g} |")
PY
