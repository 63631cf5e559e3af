#!/usr/bin/env python3
"""How far bf16 inference lands from float32 inference of the same weights, in specdec and in
llama.cpp: logit error and where greedy output first leaves the float32 output.

  python3 bench/llama_cpp/bf16_error.py [--model DIR] [--prompts 5] [-n 128] [--out DIR]

For the first --prompts HumanEval prompts (../shared/datasets/humaneval, tokenized by llama.cpp
with its BOS, at most 200 tokens):
  - logits: every prompt position's next-token logits from one prefill. specdec: bench's
    specdec-logits-probe on the HF directory, float32 weights (the reference), bf16 weights with
    bf16 activations (SPECDEC_ACTIVATIONS=bf16, Transformers' arithmetic) and bf16 weights with
    float32 activations (the CPU default). llama.cpp: `probe logits` (F32 KV cache, 1 thread) on
    the f32 and the bf16 GGUF that `specdec convert` writes. Each bf16 run is compared with its own
    system's float32 run: the largest |difference| over all positions and the vocabulary, and
    its root mean square.
  - greedy: -n tokens, EOS ignored, with each system's float32 and bf16 runs (specdec generate;
    llama.cpp `probe generate`, default KV cache); the first index where bf16 differs from float32.
Writes results.json and results.md to --out. Not in CI.
"""
import argparse
import gzip
import json
import math
import os
import struct
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
SHARED = os.path.abspath(os.path.join(REPO, "../shared"))
sys.path.insert(0, os.path.dirname(__file__))
from peer_bench import run  # noqa: E402

SPECDEC_MODES = [("f32", "f32", None), ("bf16, bf16 activations", "bf16", "bf16"),
                 ("bf16, f32 activations", "bf16", None)]


def read_f32(path):
    blob = open(path, "rb").read()
    return struct.unpack(f"<{len(blob) // 4}f", blob)


def errors(a, b):
    diff = [x - y for x, y in zip(a, b)]
    return {"max_abs": max(abs(d) for d in diff),
            "rms": math.sqrt(sum(d * d for d in diff) / len(diff))}


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def humaneval_prompts(count):
    path = os.path.join(SHARED, "datasets/humaneval/HumanEval.jsonl.gz")
    with gzip.open(path, "rt") as f:
        return [json.loads(line)["prompt"] for line in f][:count]


def specdec_logits(probe, model, dtype, activations, ids, path):
    env = dict(os.environ)
    if activations:
        env["SPECDEC_ACTIVATIONS"] = activations
    r = subprocess.run([probe, "-m", model, "--dtype", dtype, "--ids", ",".join(map(str, ids)),
                        "--out", path], capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"specdec-logits-probe exited {r.returncode}: {r.stderr[-1000:]}")
    return read_f32(path)


def specdec_greedy(binary, model, dtype, activations, ids, n):
    env = dict(os.environ)
    if activations:
        env["SPECDEC_ACTIVATIONS"] = activations
    r = subprocess.run([binary, "generate", "-m", model, "--dtype", dtype, "--threads", "1",
                        "--prompt-ids", ",".join(map(str, ids)), "-n", str(n), "--ignore-eos",
                        "--print-ids"], capture_output=True, text=True, env=env, timeout=600)
    line = [x for x in r.stderr.splitlines() if x.startswith("ids: ")]
    if r.returncode != 0 or not line:
        raise RuntimeError(f"specdec generate exited {r.returncode}: {r.stderr[-1000:]}")
    return [int(x) for x in line[0][5:].split()]


def llama_logits(probe, gguf, ids, path):
    run([probe, "logits", gguf, ",".join(map(str, ids[:-8])), ",".join(map(str, ids[-8:])),
         path])
    return read_f32(path)


def llama_greedy(probe, gguf, ids, n):
    r = run([probe, "generate", gguf, str(n), ",".join(map(str, ids)), "1"])
    return json.loads(r.stdout)["ids"]


def markdown(rows, summary, meta):
    out = [f"# bf16 against float32 of the same weights ({meta['llama_cpp']})", "",
           f"Model {meta['model']}; {len(rows)} HumanEval prompts; logits of every prompt "
           f"position; greedy {meta['n']} tokens.", "",
           "| system, mode | logit max abs error (range over prompts) | RMS | greedy leaves f32 "
           "at token (per prompt; - = never) |", "| --- | --- | --- | --- |"]
    for name, s in summary.items():
        out.append(f"| {name} | {s['max_abs'][0]:.4f}-{s['max_abs'][1]:.4f} | "
                   f"{s['rms'][0]:.4f}-{s['rms'][1]:.4f} | {s['leaves']} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(REPO, "models/specdec-pycode/target"))
    ap.add_argument("--prompts", type=int, default=5)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--specdec", default=os.path.join(REPO, "build/cli/specdec"))
    ap.add_argument("--logits-probe", default=os.path.join(REPO, "build/bench/specdec-logits-probe"))
    ap.add_argument("--work", default="/tmp/specdec-llama-cpp")
    ap.add_argument("--out", default="/tmp/specdec-bf16-error")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    probe = run([os.path.join(REPO, "bench/llama_cpp/fetch_build.sh"), args.work]).stdout.split()[-1]
    commit = run(["git", "-C", os.path.join(args.work, "llama.cpp"), "rev-parse", "--short=12",
                  "HEAD"]).stdout.strip()
    gguf = {}
    for dtype, extra in (("f32", ["--outtype", "f32"]), ("bf16", [])):
        gguf[dtype] = os.path.join(args.work, f"bf16_error_{dtype}.gguf")
        run([args.specdec, "convert", args.model, "-o", gguf[dtype]] + extra)

    rows = []
    for k, text in enumerate(humaneval_prompts(args.prompts)):
        ids = json.loads(run([probe, "generate", gguf["f32"], "1", "text:" + text, "1"]).stdout)[
            "prompt_ids"][:200]
        tmp = os.path.join(args.out, "logits.bin")
        logits = {f"specdec {name}": specdec_logits(args.logits_probe, args.model, dt, act, ids, tmp)
                  for name, dt, act in SPECDEC_MODES}
        greedy = {f"specdec {name}": specdec_greedy(args.specdec, args.model, dt, act, ids, args.n)
                  for name, dt, act in SPECDEC_MODES}
        for dt in ("f32", "bf16"):
            logits[f"llama.cpp {dt}"] = llama_logits(probe, gguf[dt], ids, tmp)
            greedy[f"llama.cpp {dt}"] = llama_greedy(probe, gguf[dt], ids, args.n)
        row = {"prompt": k, "prompt_tokens": len(ids), "compared": {}}
        for name in logits:
            ref = "specdec f32" if name.startswith("specdec") else "llama.cpp f32"
            if name == ref:
                continue
            row["compared"][name] = dict(errors(logits[name], logits[ref]),
                                         leaves_f32_at=first_difference(greedy[name], greedy[ref]))
        row["f32_specdec_vs_llama_cpp"] = errors(logits["specdec f32"], logits["llama.cpp f32"])
        rows.append(row)
        print(json.dumps(row), flush=True)

    summary = {}
    for name in rows[0]["compared"]:
        vals = [r["compared"][name] for r in rows]
        summary[name] = {
            "max_abs": (min(v["max_abs"] for v in vals), max(v["max_abs"] for v in vals)),
            "rms": (min(v["rms"] for v in vals), max(v["rms"] for v in vals)),
            "leaves": ", ".join("-" if v["leaves_f32_at"] is None else str(v["leaves_f32_at"])
                                for v in vals)}
    meta = {"llama_cpp": f"llama.cpp v0.4.0 ({commit})", "model": args.model, "n": args.n}
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "summary": summary}, f, indent=1)
    md = markdown(rows, summary, meta)
    open(os.path.join(args.out, "results.md"), "w").write(md)
    print(md)


if __name__ == "__main__":
    main()
