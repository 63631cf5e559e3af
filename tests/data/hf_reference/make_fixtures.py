#!/usr/bin/env python3
"""Writes the Transformers reference fixtures that hf_reference_test compares specdec against.

Needs PyTorch and Hugging Face `transformers` (the GPU machine has both; scripts/gpu_checks.sh
runs this). For each of a small random Qwen3 (tied embeddings) and a small random Llama
(untied, llama3 RoPE scaling) it writes, under OUT/<name>/:
  config.json, model.safetensors    the model, saved by Transformers itself (float32)
  expected/model.safetensors        logits of the whole sequence (prompt + verify tokens):
                                    logits_f64 (float64 forward, stored as float32),
                                    logits_f32 (float32, CPU, eager attention),
                                    logits_bf16 (bfloat16 weights and compute, CPU)
  expected.json                     prompt and verify token ids, versions, seeds, error summary

  python3 tests/data/hf_reference/make_fixtures.py OUT_DIR
"""
import copy
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

VOCAB = 320
SEED = 1234
WEIGHT_STD = 0.08


def common_kwargs():
    return dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                max_position_embeddings=256, rms_norm_eps=1e-6, attention_bias=False,
                bos_token_id=0, eos_token_id=1, pad_token_id=2)


def rope_kwargs(theta, scaling):
    """RoPE settings in the form this Transformers takes (v5: rope_parameters)."""
    if int(transformers.__version__.split(".")[0]) >= 5:
        params = {"rope_type": "default", "rope_theta": theta}
        if scaling:
            params.update(scaling)
        return {"rope_parameters": params}
    return {"rope_theta": theta, "rope_scaling": scaling}


def build(name):
    if name == "qwen3":
        cfg = transformers.Qwen3Config(**common_kwargs(), tie_word_embeddings=True,
                                       **rope_kwargs(1e6, None))
        cls = transformers.Qwen3ForCausalLM
    else:
        scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
        cfg = transformers.LlamaConfig(**common_kwargs(), tie_word_embeddings=False,
                                       **rope_kwargs(500000.0, scaling))
        cls = transformers.LlamaForCausalLM
    try:
        cfg._attn_implementation = "eager"  # the plain softmax(QK^T)V reference
    except Exception as e:  # noqa: BLE001 (a Transformers that refuses: its default attention)
        print("attention implementation left at the default:", e)
    torch.manual_seed(SEED)
    model = cls(cfg).float().eval()
    gen = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            values = torch.randn(p.shape, generator=gen) * WEIGHT_STD
            if "norm" in pname:
                values += 1.0
            p.copy_(values)
    return model


def logits_of(model, ids, dtype):
    m = copy.deepcopy(model).to(dtype).eval()
    with torch.no_grad():
        out = m(input_ids=torch.tensor([ids]), use_cache=False)
    return out.logits[0].to(torch.float64)


def main(out_dir):
    gen = torch.Generator().manual_seed(SEED + 1)
    prompt = torch.randint(3, VOCAB, (16,), generator=gen).tolist()
    verify = torch.randint(3, VOCAB, (7,), generator=gen).tolist()
    ids = prompt + verify
    for name in ("qwen3", "llama"):
        model = build(name)
        d = os.path.join(out_dir, name)
        os.makedirs(os.path.join(d, "expected"), exist_ok=True)
        model.save_pretrained(d)
        f64 = logits_of(model, ids, torch.float64)
        f32 = logits_of(model, ids, torch.float32)
        bf16 = logits_of(model, ids, torch.bfloat16)
        save_file({"logits_f64": f64.to(torch.float32).contiguous(),
                   "logits_f32": f32.to(torch.float32).contiguous(),
                   "logits_bf16": bf16.to(torch.float32).contiguous()},
                  os.path.join(d, "expected", "model.safetensors"))
        summary = {
            "model": name, "prompt_ids": prompt, "verify_ids": verify, "seed": SEED,
            "weight_std": WEIGHT_STD, "transformers": transformers.__version__,
            "torch": torch.__version__,
            "max_abs_f32_vs_f64": (f32 - f64).abs().max().item(),
            "max_abs_bf16_vs_f64": (bf16 - f64).abs().max().item(),
            "max_abs_logit": f64.abs().max().item(),
        }
        with open(os.path.join(d, "expected.json"), "w") as f:
            json.dump(summary, f, indent=1)
        print(json.dumps(summary))
        print(open(os.path.join(d, "config.json")).read())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
