#!/usr/bin/env bash
# Makes the fixture read by tests/common/io/gguf_dequantize_test.cc: ggml's own quantization of a
# few float32 rows to each block type specdec reads (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), and ggml's own
# dequantization of those blocks, in tests/data/ggml_quants/quants.safetensors:
#   source            F32 [4, 256]   the rows (a zero block, one whose largest value is negative)
#   <TYPE>.blocks     U8  [bytes]   ggml_quantize_chunk's blocks
#   <TYPE>.values     F32 [4, 256]   the type's to_float of those blocks
#
#   tests/data/ggml_quants/make_fixtures.sh        (needs npm; see bench/llama_cpp/fetch_build.sh)
set -euo pipefail
repo="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$repo"
WORK=${WORK:-/tmp/specdec-llama-cpp}
PYTHON=${PYTHON:-python3}
probe=$(bench/llama_cpp/fetch_build.sh "$WORK" | tail -n 1)
"$PYTHON" - "$WORK/quants-source.f32" <<'PY'
import math, random, struct, sys
rng = random.Random(7)
rows = []
for r in range(4):
    scale = [0.02, 1.0, 37.5, 0.3][r]
    row = [rng.gauss(0.0, scale) for _ in range(256)]
    if r == 2:
        row[32:64] = [0.0] * 32          # a block of zeros: scale 0
    if r == 3:
        row[5] = -4.0                    # the block's largest magnitude is negative
    rows += row
open(sys.argv[1], "wb").write(struct.pack("<%df" % len(rows), *rows))
PY
for t in 2:Q4_0 3:Q4_1 6:Q5_0 7:Q5_1 8:Q8_0 12:Q4_K 13:Q5_K 14:Q6_K; do
  "$probe" quantize "${t%%:*}" 256 "$WORK/quants-source.f32" "$WORK/quants-${t##*:}" >/dev/null
done
"$PYTHON" - "$WORK" tests/data/ggml_quants/quants.safetensors <<'PY'
import json, struct, sys
work, out = sys.argv[1], sys.argv[2]
parts = [("source", "F32", [4, 256], open(work + "/quants-source.f32", "rb").read())]
for name in ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]:
    blocks = open(f"{work}/quants-{name}.q", "rb").read()
    parts.append((name + ".blocks", "U8", [len(blocks)], blocks))
    parts.append((name + ".values", "F32", [4, 256], open(f"{work}/quants-{name}.f32", "rb").read()))
header, blob = {}, b""
for name, dtype, shape, data in parts:
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
    blob += data
h = json.dumps(header).encode()
h += b" " * ((8 - len(h) % 8) % 8)
open(out, "wb").write(struct.pack("<Q", len(h)) + h + blob)
PY
echo "make_fixtures: $(wc -c <tests/data/ggml_quants/quants.safetensors) bytes, llama.cpp $(git -C "$WORK/llama.cpp" rev-parse --short=12 HEAD)"
