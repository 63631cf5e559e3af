#!/usr/bin/env python3
"""A Qwen3 checkpoint of a chosen shape with random bf16 weights and the pack's tokenizer.

  python3 bench/llama_cpp/random_checkpoint.py OUT_DIR [--hidden 768] [--layers 12]
      [--intermediate 2688] [--heads 12] [--kv-heads 4] [--head-dim 64] [--seed 7]

The default shape is the model bench's 100M with the pack's vocabulary of 4,096: 96.4M
parameters, 193 MB of bf16 weights, too large for this machine's caches, so its decoding is bound
by memory bandwidth. Weights are uniform in about +-0.03 (norm weights 1), enough for timing
and for comparing two runtimes' tokens; the text they generate means nothing. Needs only the
Python standard library. Not in CI.
"""
import argparse
import json
import math
import os
import random
import shutil
import struct

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
PACK_TARGET = os.path.join(REPO, "models/specdec-pycode/target")

# High bytes of a bf16 value: sign and the upper 7 exponent bits. 0x3C/0xBC with a random low
# byte give magnitudes in [2^-8, 2^-6 * 2) = [0.0039, 0.031).
HIGH = bytes(0x3C if b < 128 else 0xBC for b in range(256))


def random_bf16(count, rng):
    raw = bytearray(rng.randbytes(2 * count))
    raw[1::2] = bytes(raw[1::2]).translate(HIGH)
    return bytes(raw)


def tensor_specs(a, vocab):
    h, kv, q = a.hidden, a.kv_heads * a.head_dim, a.heads * a.head_dim
    specs = [("model.embed_tokens.weight", [vocab, h]), ("model.norm.weight", [h])]
    for i in range(a.layers):
        p = f"model.layers.{i}."
        specs += [(p + "input_layernorm.weight", [h]), (p + "post_attention_layernorm.weight", [h]),
                  (p + "self_attn.q_proj.weight", [q, h]), (p + "self_attn.k_proj.weight", [kv, h]),
                  (p + "self_attn.v_proj.weight", [kv, h]), (p + "self_attn.o_proj.weight", [h, q]),
                  (p + "self_attn.q_norm.weight", [a.head_dim]),
                  (p + "self_attn.k_norm.weight", [a.head_dim]),
                  (p + "mlp.gate_proj.weight", [a.intermediate, h]),
                  (p + "mlp.up_proj.weight", [a.intermediate, h]),
                  (p + "mlp.down_proj.weight", [h, a.intermediate])]
    return specs


def write_safetensors(path, specs, rng):
    header, offset = {}, 0
    for name, shape in specs:
        size = 2 * math.prod(shape)
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name, shape in specs:
            count = math.prod(shape)
            f.write(b"\x80\x3f" * count if name.endswith("norm.weight") else random_bf16(count, rng))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--intermediate", type=int, default=2688)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    config = json.load(open(os.path.join(PACK_TARGET, "config.json")))
    config.update({"hidden_size": a.hidden, "num_hidden_layers": a.layers,
                   "intermediate_size": a.intermediate, "num_attention_heads": a.heads,
                   "num_key_value_heads": a.kv_heads, "head_dim": a.head_dim})
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(os.path.join(PACK_TARGET, name), a.out)
    specs = tensor_specs(a, config["vocab_size"])
    write_safetensors(os.path.join(a.out, "model.safetensors"), specs, random.Random(a.seed))
    params = sum(math.prod(s) for _, s in specs)
    print(f"{a.out}: {params / 1e6:.1f}M parameters")


if __name__ == "__main__":
    main()
