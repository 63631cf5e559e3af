#!/usr/bin/env python3
"""Writes the fuzz harnesses' seed corpora (tests/fuzz/corpus/<harness>/): small valid inputs of
each format, made here byte by byte, plus the repository's own configs and templates.

    python3 tests/fuzz/make_seeds.py
"""
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def out(harness, name, data):
    d = os.path.join(HERE, "corpus", harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None):
    header, blob = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + blob


def gguf_string(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(kv, tensors, alignment=32):
    body = struct.pack("<4sIQQ", b"GGUF", 3, len(tensors), len(kv))
    for key, (vtype, value) in kv.items():
        body += gguf_string(key) + struct.pack("<I", vtype)
        if vtype == 4:  # uint32
            body += struct.pack("<I", value)
        elif vtype == 6:  # float32
            body += struct.pack("<f", value)
        elif vtype == 8:  # string
            body += gguf_string(value)
    offset, data = 0, b""
    for name, (ggml_type, dims, raw) in tensors.items():
        body += gguf_string(name) + struct.pack("<I", len(dims))
        body += b"".join(struct.pack("<Q", d) for d in dims)
        body += struct.pack("<IQ", ggml_type, offset)
        data += raw + b"\0" * (-len(raw) % alignment)
        offset = len(data)
    body += b"\0" * (-len(body) % alignment)
    return body + data


def varint(n):
    b = b""
    while True:
        c = n & 0x7F
        n >>= 7
        b += bytes([c | (0x80 if n else 0)])
        if not n:
            return b


def field(number, wire, payload):
    key = varint(number << 3 | wire)
    return key + (varint(len(payload)) + payload if wire == 2 else varint(payload))


def main():
    shutil.rmtree(os.path.join(HERE, "corpus"), ignore_errors=True)
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.25)
    out("safetensors_fuzzer", "one_f32", safetensors({"w": ("F32", [2, 2], f32)}))
    out("safetensors_fuzzer", "two_with_metadata",
        safetensors({"a": ("BF16", [2], b"\x80\x3f\x00\x40"), "b": ("F32", [1], f32[:4])},
                    {"format": "pt"}))
    out("gguf_fuzzer", "llama_tiny",
        gguf({"general.architecture": (8, "llama"), "llama.context_length": (4, 128),
              "llama.rope.freq_base": (6, 10000.0)},
             {"token_embd.weight": (0, [2, 2], f32)}))
    for name, seed in (("target", "target"), ("draft", "draft"), ("dflash", "dflash"),
                       ("policy", "policy_acceptance")):
        src = os.path.join(ROOT, "models/specdec-pycode", name, "config.json")
        out("model_config_fuzzer", seed, open(src, "rb").read())
    # The label-head policy format, still loadable.
    out("model_config_fuzzer", "policy",
        json.dumps({"architecture": "BlockPilot", "block_sizes": [14, 15, 16, 17, 18],
                    "hidden_size": 64, "training_block_size": 16, "vocab_size": 4096}, indent=2))
    tiny_tok = {"version": "1.0", "added_tokens": [{"id": 0, "content": "<s>", "special": True}],
                "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
                "post_processor": None, "decoder": {"type": "ByteLevel"},
                "model": {"type": "BPE", "vocab": {"<s>": 0, "d": 1, "e": 2, "f": 3, "de": 4, "def": 5,
                                                    "Ġ": 6},
                          "merges": ["d e", "de f"]}}
    out("tokenizer_json_fuzzer", "byte_level_bpe", json.dumps(tiny_tok))
    for i, text in enumerate(["def f(x):\n    return x\n", "héllo ✓ 世界", "\t\t  \n\n", "x" * 300]):
        out("tokenizer_encode_fuzzer", f"text{i}", text)
    out("generate_request_fuzzer", "text_ar", field(1, 2, b"def f(x):") + field(3, 0, 1) + field(5, 0, 16))
    out("generate_request_fuzzer", "ids_dflash",
        field(2, 2, field(1, 2, b"".join(varint(t) for t in (5, 6, 7)))) + field(3, 0, 4) +
        field(8, 0, 4) + field(5, 0, 8))
    out("generate_request_fuzzer", "stop_strings",
        field(1, 2, b"x") + field(7, 2, b"\n") + field(13, 0, 1) + field(17, 2, b"target"))
    bodies = {
        "completion": {"model": "target", "prompt": "def f(x):", "max_tokens": 8, "temperature": 0,
                       "stop": ["\n"], "speculative": {"method": "DFLASH", "block_size": 4}},
        "completion_ids": {"prompt": [1, 2, 3], "stream": True, "stream_options": {"include_usage": True}},
        "chat": {"model": "target", "messages": [{"role": "system", "content": "Be brief."},
                                                 {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                 "max_completion_tokens": 4, "chat_template_kwargs": {"enable_thinking": False}},
        "chat_tools": {"messages": [{"role": "user", "content": "x"},
                                    {"role": "assistant", "content": None,
                                     "tool_calls": [{"type": "function",
                                                     "function": {"name": "f", "arguments": {"a": 1}}}]},
                                    {"role": "tool", "content": "1"}]},
    }
    for name, body in bodies.items():
        out("openai_request_fuzzer", name, json.dumps(body))
    # Found by the fuzzer: a content part whose "type" is an object threw out of the parser.
    out("openai_request_fuzzer", "regression_part_type_object",
        '{"messages": [{"role": "user", "content": [{"type": {"name": "f"}}]},'
        ' {"role": "tool", "content": "1"}]}')
    # Found by the fuzzer: 10,000 unary '+' overflowed the parser's stack (now refused).
    out("jinja_parse_fuzzer", "regression_deep_unary", "{{- x " + "+" * 10000 + "y }}")
    for name in ("qwen3", "llama3", "llama3_2"):
        src = os.path.join(ROOT, "tests/data/chat_templates", name + ".jinja")
        out("jinja_parse_fuzzer", name, open(src, "rb").read())


if __name__ == "__main__":
    main()
