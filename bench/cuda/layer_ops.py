#!/usr/bin/env python3
"""Where a bf16 decoding step of a Qwen3 shape spends its time on a CUDA GPU, operator by operator.

Runs PyTorch's own operators, the ATen kernels that specdec's CUDA path calls (rms_norm, linear,
addmm, index_copy_, scaled_dot_product_attention), on random weights of every layer. Each kind
of operator is captured for all layers in one CUDA graph and replayed, so a row is that
operator's share of one step; the last rows replay the whole step's operators in order. Products
report the bandwidth their weight bytes imply. Attention is timed three ways: as specdec calls it
(the cache's whole capacity, the unwritten slots masked by an additive bias), without a mask,
and as a matmul/softmax composition.

  python3 bench/cuda/layer_ops.py [--sizes qwen3-0.6b,qwen3-4b] [--capacity 1024] [--json F]
"""
import argparse
import json

import torch
import torch.nn.functional as F

SHAPES = {
    "qwen3-0.6b": dict(hidden=1024, inter=3072, heads=16, kv=8, d=128, layers=28, vocab=151936),
    "qwen3-4b": dict(hidden=2560, inter=9728, heads=32, kv=8, d=128, layers=36, vocab=151936),
}


def graph_ms(fn, reps=30):
    """Median ms of one replay of a CUDA graph of fn()."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm-up: handles, workspaces
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def layer_tensors(s, capacity, dev):
    bf = dict(device=dev, dtype=torch.bfloat16)
    h, q, kv = s["hidden"], s["heads"] * s["d"], s["kv"] * s["d"]
    return dict(
        norm=torch.rand(h, **bf) + 0.5, qkv=torch.randn(q + 2 * kv, h, **bf) * 0.02,
        o=torch.randn(h, q, **bf) * 0.02, gate_up=torch.randn(2 * s["inter"], h, **bf) * 0.02,
        down=torch.randn(h, s["inter"], **bf) * 0.02,
        keys=torch.randn(s["kv"], capacity, s["d"], **bf),
        values=torch.randn(s["kv"], capacity, s["d"], **bf))


def measure(name, s, capacity, dev):
    layers = [layer_tensors(s, capacity, dev) for _ in range(s["layers"])]
    bf = dict(device=dev, dtype=torch.bfloat16)
    g, d, kvh = s["heads"] // s["kv"], s["d"], s["kv"]
    x = torch.randn(1, s["hidden"], **bf)
    attn_in = torch.randn(1, s["heads"] * d, **bf)
    gu = torch.randn(1, 2 * s["inter"], **bf)
    act = torch.randn(1, s["inter"], **bf)
    q = torch.randn(1, kvh, g, d, **bf)
    k_new = torch.randn(1, kvh, d, **bf)
    slot = torch.tensor([capacity // 2], device=dev)
    bias = torch.zeros(g, capacity, **bf)
    bias[:, capacity // 2 + 1:] = float("-inf")
    embed = torch.randn(s["vocab"], s["hidden"], **bf) * 0.02
    L = s["layers"]

    def each(op):
        return lambda: [op(w) for w in layers]

    rows = []

    def row(op_name, fn, weight_bytes=0):
        ms = graph_ms(fn)
        rows.append(dict(op=op_name, ms=ms, gbps=weight_bytes / ms / 1e6 if weight_bytes else None))

    wb = lambda key: sum(w[key].numel() * 2 for w in layers)
    row("rms_norm x2", each(lambda w: (F.rms_norm(x, (s["hidden"],), w["norm"], 1e-6),
                                       F.rms_norm(x, (s["hidden"],), w["norm"], 1e-6))))
    row("qkv linear", each(lambda w: F.linear(x, w["qkv"])), wb("qkv"))
    row("cache writes (index_copy_ x2)",
        each(lambda w: (w["keys"].index_copy_(1, slot, k_new.transpose(0, 1)),
                        w["values"].index_copy_(1, slot, k_new.transpose(0, 1)))))
    row("attention: SDPA, masked capacity",
        each(lambda w: F.scaled_dot_product_attention(q, w["keys"].unsqueeze(0),
                                                      w["values"].unsqueeze(0), bias)))
    row("attention: SDPA, no mask",
        each(lambda w: F.scaled_dot_product_attention(q, w["keys"].unsqueeze(0),
                                                      w["values"].unsqueeze(0))))

    bool_mask = bias == 0
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backends = [("efficient", SDPBackend.EFFICIENT_ATTENTION),
                    ("cuDNN", SDPBackend.CUDNN_ATTENTION), ("math", SDPBackend.MATH)]
    except ImportError:
        backends = []
    for label, backend in backends:
        for mask_label, mask in (("bias", bias), ("bool mask", bool_mask)):
            def forced(w, backend=backend, mask=mask):
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(q, w["keys"].unsqueeze(0),
                                                          w["values"].unsqueeze(0), mask)
            try:
                row(f"attention: SDPA {label}, {mask_label}", each(forced))
            except RuntimeError as e:
                print(f"attention: SDPA {label}, {mask_label}: not available ({str(e)[:60]})")

    def composed(w):
        scores = torch.matmul(q[0], w["keys"].transpose(1, 2)).float() * d ** -0.5 + bias
        return torch.matmul(torch.softmax(scores, -1).to(torch.bfloat16), w["values"])
    row("attention: matmul composition", each(composed))
    row("o addmm (+ residual)", each(lambda w: torch.addmm(x, attn_in, w["o"].t())), wb("o"))
    row("gate_up linear", each(lambda w: F.linear(x, w["gate_up"])), wb("gate_up"))
    row("silu * up (2 kernels)",
        each(lambda w: F.silu(gu[:, :s["inter"]]) * gu[:, s["inter"]:]))
    row("down addmm (+ residual)", each(lambda w: torch.addmm(x, act, w["down"].t())), wb("down"))
    row("lm_head linear (once)", lambda: F.linear(x, embed), embed.numel() * 2)
    total = sum(r["ms"] for r in rows if not r["op"].startswith("attention: ") or
                r["op"] == "attention: SDPA, masked capacity")
    weight_bytes = sum(wb(k) for k in ("qkv", "o", "gate_up", "down")) + embed.numel() * 2
    products = sum(r["ms"] for r in rows if r["gbps"])
    print(f"\n{name}: {L} layers, KV capacity {capacity}, weights {weight_bytes / 1e9:.2f} GB")
    print(f"{'operator (all layers)':38s} {'ms/step':>8s} {'GB/s':>7s}")
    for r in rows:
        gbps = f"{r['gbps']:7.0f}" if r["gbps"] else ""
        print(f"{r['op']:38s} {r['ms']:8.3f} {gbps:>7s}")
    print(f"{'sum (SDPA masked; q/k norm+RoPE not incl.)':38s} {total:8.3f}")
    print(f"{'products alone':38s} {products:8.3f} {weight_bytes / products / 1e6:7.0f}")
    return dict(size=name, capacity=capacity, layers=L, weight_bytes=weight_bytes, rows=rows,
                sum_ms=total, products_ms=products)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="qwen3-0.6b,qwen3-4b")
    p.add_argument("--capacity", type=int, default=1024)
    p.add_argument("--json")
    a = p.parse_args()
    torch.manual_seed(0)
    dev = torch.device("cuda")
    print(torch.cuda.get_device_name(), "torch", torch.__version__)
    out = [measure(n, SHAPES[n], a.capacity, dev) for n in a.sizes.split(",")]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), results=out), f, indent=1)


if __name__ == "__main__":
    main()
