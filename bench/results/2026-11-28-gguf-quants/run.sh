#!/usr/bin/env bash
# The pack's target through llama.cpp's quantizer and back: `specdec convert` writes it as an F32
# GGUF, llama-quantize (llama.cpp v0.4.0) makes Q8_0, Q5_K_M, Q4_K_M, Q5_1 and Q4_0 files of it
# (all but the first with a Q6_K embedding), `specdec convert` reads each back into a checkpoint,
# and specdec runs them: per file, the largest logit difference from the original over the
# positions of five held-out prompts' greedy continuations, how often the top token agrees, and
# how many greedy 64-token continuations equal the original's; and, against llama.cpp running the
# GGUF file itself (its probe: f32 KV cache, 1 thread), the same two logit measures.
#
#   bash bench/results/2026-11-28-gguf-quants/run.sh OUT      (after scripts/build.sh; needs npm)
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${1:?OUT}
mkdir -p "$OUT"
WORK=${WORK:-/tmp/specdec-llama-cpp}
bench/llama_cpp/fetch_build.sh "$WORK" >/dev/null
ninja -C "$WORK/llama.cpp/build" llama-quantize >/dev/null
SPECDEC=build/cli/specdec PROBE=build/bench/specdec-logits-probe
TARGET=models/specdec-pycode/target
$SPECDEC convert $TARGET -o "$OUT/target-f32.gguf" --outtype f32 >/dev/null
for t in Q8_0 Q5_K_M Q4_K_M Q5_1 Q4_0; do
  "$WORK/llama.cpp/build/bin/llama-quantize" "$OUT/target-f32.gguf" "$OUT/target-$t.gguf" $t \
    >"$OUT/quantize-$t.log" 2>&1
  $SPECDEC convert "$OUT/target-$t.gguf" -o "$OUT/hf-$t" >/dev/null
done
python3 - "$OUT" "$SPECDEC" "$PROBE" "$TARGET" "$WORK/probe" <<'PY'
import os, struct, subprocess, sys
out, specdec, probe, target, peer = sys.argv[1:6]
prompts = open("models/specdec-pycode/eval/heldout_prompts.txt").read().split("\n\n")[:5]
def generate(model, prompt):
    r = subprocess.run([specdec, "generate", "-m", model, "-p", prompt, "-n", "64", "--dtype", "f32",
                        "--ignore-eos", "--print-ids", "--threads", "2"], capture_output=True, text=True, check=True)
    line = next(l for l in r.stderr.splitlines() if l.startswith("ids:"))
    return [int(x) for x in line[4:].split()]
def logits(model, ids, name):
    path = f"{out}/{name}.bin"
    subprocess.run([probe, "-m", model, "--ids", ",".join(map(str, ids)), "--out", path, "--dtype", "f32"],
                   capture_output=True, check=True)
    return floats(path)
def floats(path):
    data = open(path, "rb").read()
    return struct.unpack("<%df" % (len(data) // 4), data)
def peer_logits(gguf, ids, name):
    path = f"{out}/{name}.bin"
    subprocess.run([peer, "logits", gguf, ",".join(map(str, ids[:32])), ",".join(map(str, ids[32:])), path],
                   capture_output=True, check=True)
    return floats(path)
def compare(a, b, rows):
    vocab, worst, agree = len(a) // rows, 0.0, 0
    for r in range(rows):
        ra, rb = a[r * vocab:(r + 1) * vocab], b[r * vocab:(r + 1) * vocab]
        worst = max(worst, max(abs(x - y) for x, y in zip(ra, rb)))
        agree += ra.index(max(ra)) == rb.index(max(rb))
    return worst, agree
models = {"original (bf16 weights)": target}
kinds = ["Q8_0", "Q5_K_M", "Q4_K_M", "Q5_1", "Q4_0"]
models.update({t: f"{out}/hf-{t}" for t in kinds})
size = {t: os.path.getsize(f"{out}/target-{t}.gguf") for t in kinds}
rows = []
base_runs = [generate(target, p) for p in prompts]
for name, model in models.items():
    same, worst, agree, total, peer_worst, peer_agree = 0, 0.0, 0, 0, 0.0, 0
    for i, p in enumerate(prompts):
        same += generate(model, p) == base_runs[i]
        ids = base_runs[i]
        mine = logits(model, ids, f"{name[:6]}{i}")
        w, a = compare(logits(target, ids, f"base{i}"), mine, len(ids))
        worst, agree, total = max(worst, w), agree + a, total + len(ids)
        if name in size:
            w, a = compare(peer_logits(f"{out}/target-{name}.gguf", ids, f"peer{name}{i}"), mine, len(ids))
            peer_worst, peer_agree = max(peer_worst, w), peer_agree + a
    rows.append((name, size.get(name), worst, agree / total, same, peer_worst, peer_agree / total))
print("| weights | GGUF bytes | max abs logit difference | top-1 agreement | greedy 64 tokens equal "
      "| llama.cpp on the GGUF: max abs difference | top-1 agreement |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for name, sz, worst, agree, same, pw, pa in rows:
    peer_cells = f"{pw:.4f} | {pa:.4f}" if sz else "- | -"
    print(f"| {name} | {sz if sz else '-'} | {worst:.4f} | {agree:.4f} | {same}/5 | {peer_cells} |")
PY
