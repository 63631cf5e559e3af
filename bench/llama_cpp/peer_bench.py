#!/usr/bin/env python3
"""specdec against llama.cpp on the same weights, prompt ids and threads: AR decode and prefill.

  python3 bench/llama_cpp/peer_bench.py [--model DIR] [--threads 1,2] [--dtypes f32,bf16]
                                        [--rounds 5] [-n 128] [--prompt-tokens 128] [--out DIR]

llama.cpp comes from bench/llama_cpp/fetch_build.sh (release v0.4.0, from the npm registry) and
runs through its probe (`probe generate`: greedy, EOS ignored, llama.cpp's default context
settings). The model is exported with `specdec convert` (f32: --outtype f32; bf16: as stored).
specdec runs `specdec generate --dtype D --threads T --prompt-ids ...` on the HF directory. Both
time the prompt's pass (prefill) and the other n - 1 tokens (decode) alike. The two systems
alternate within every round, in turns, and each cell reports the median over the rounds, the
ratio specdec / llama.cpp (decode tokens/s; prefill llama.cpp ms / specdec ms: above 1 means
specdec is faster), and whether both generated the same tokens. Then the speculative rows
(speculative_rows.py; --spec-methods '' skips them): llama.cpp's draft-model speculation against
specdec's methods on one held-out prompt, bf16. Writes results.json and results.md to --out.
Not in CI.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "../.."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import speculative_rows  # noqa: E402

SPECDEC_LINE = re.compile(r"prefill ([0-9.]+) ms, decode ([0-9.]+) ms \(([0-9.]+) tokens/s\)")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... exited {r.returncode}: {r.stderr[-2000:]}")
    return r


def llama_cpp(probe, gguf, ids, n, threads):
    r = run([probe, "generate", gguf, str(n), ",".join(map(str, ids)), str(threads)])
    j = json.loads(r.stdout)
    return {"prefill_ms": j["prefill_ms"], "decode_tps": j["decode_tokens_per_s"], "ids": j["ids"]}


def specdec(binary, model, dtype, ids, n, threads):
    r = run([binary, "generate", "-m", model, "--dtype", dtype, "--threads", str(threads),
             "--prompt-ids", ",".join(map(str, ids)), "-n", str(n), "--ignore-eos",
             "--print-ids"])
    m = SPECDEC_LINE.search(r.stderr)
    got = re.search(r"ids: ([0-9 ]+)", r.stderr)
    if m is None or got is None:
        raise RuntimeError(f"specdec generate printed no timings: {r.stderr[-1000:]}")
    return {"prefill_ms": float(m.group(1)), "decode_tps": float(m.group(3)),
            "ids": [int(x) for x in got.group(1).split()]}


def prompt_ids(probe, gguf, tokens):
    """The first `tokens` ids (BOS included) of the held-out corpus prompts, as llama.cpp
    tokenizes them."""
    text = open(os.path.join(REPO, "models/specdec-pycode/eval/heldout_prompts.txt")).read()
    r = run([probe, "generate", gguf, "1", "text:" + text[:20000], "1"])
    ids = json.loads(r.stdout)["prompt_ids"]
    if len(ids) < tokens:
        raise RuntimeError(f"the prompt text has only {len(ids)} tokens")
    return ids[:tokens]


def cell_summary(samples):
    med = {k: statistics.median(s[k] for s in samples) for k in ("prefill_ms", "decode_tps")}
    return med


def markdown(rows, meta):
    out = [f"# specdec against llama.cpp ({meta['llama_cpp']})", "",
           f"Model {meta['model']}; prompt {meta['prompt_tokens']} tokens; {meta['n']} tokens "
           f"generated; medians of {meta['rounds']} alternating rounds.", "",
           "| dtype | threads | decode tok/s specdec | llama.cpp | ratio | prefill ms specdec "
           "| llama.cpp | ratio | same tokens |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        out.append(f"| {r['dtype']} | {r['threads']} | {r['specdec']['decode_tps']:.1f} | "
                   f"{r['llama_cpp']['decode_tps']:.1f} | {r['decode_ratio']:.2f} | "
                   f"{r['specdec']['prefill_ms']:.2f} | {r['llama_cpp']['prefill_ms']:.2f} | "
                   f"{r['prefill_ratio']:.2f} | {r['same_tokens']}/{meta['rounds']} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.path.join(REPO, "models/specdec-pycode/target"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--specdec", default=os.path.join(REPO, "build/cli/specdec"))
    ap.add_argument("--work", default="/tmp/specdec-llama-cpp")
    ap.add_argument("--out", default="/tmp/specdec-peer-bench")
    ap.add_argument("--spec-methods", default="DRAFT_CHAIN,DFLASH",
                    help="specdec methods of the speculative rows ('' for none)")
    ap.add_argument("--draft-length", type=int, default=4,
                    help="draft tokens per step: llama.cpp's --draft-max, DRAFT_CHAIN's K")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    fetch = run(["bash", os.path.join(REPO, "bench/llama_cpp/fetch_build.sh"), a.work])
    probe = fetch.stdout.strip().splitlines()[-1]
    version = fetch.stderr.strip().splitlines()[-1]
    ggufs = {}
    for dtype in a.dtypes.split(","):
        ggufs[dtype] = os.path.join(a.work, f"peer-{os.path.basename(a.model)}-{dtype}.gguf")
        extra = ["--outtype", "f32"] if dtype == "f32" else []
        run([a.specdec, "convert", a.model, "-o", ggufs[dtype]] + extra)
    ids = prompt_ids(probe, ggufs[a.dtypes.split(",")[0]], a.prompt_tokens)
    samples = {}
    for rnd in range(a.rounds):
        for dtype in a.dtypes.split(","):
            for threads in map(int, a.threads.split(",")):
                runs = [("specdec", lambda: specdec(a.specdec, a.model, dtype, ids, a.n, threads)),
                        ("llama_cpp", lambda: llama_cpp(probe, ggufs[dtype], ids, a.n, threads))]
                if rnd % 2:
                    runs.reverse()
                for system, fn in runs:
                    samples.setdefault((dtype, threads, system), []).append(fn())
        print(f"round {rnd + 1}/{a.rounds} done", file=sys.stderr)
    rows = []
    for dtype in a.dtypes.split(","):
        for threads in map(int, a.threads.split(",")):
            s, l = samples[(dtype, threads, "specdec")], samples[(dtype, threads, "llama_cpp")]
            ms, ml = cell_summary(s), cell_summary(l)
            rows.append({"dtype": dtype, "threads": threads, "specdec": ms, "llama_cpp": ml,
                         "decode_ratio": ms["decode_tps"] / ml["decode_tps"],
                         "prefill_ratio": ml["prefill_ms"] / ms["prefill_ms"],
                         "same_tokens": sum(x["ids"] == y["ids"] for x, y in zip(s, l)),
                         "rounds": {"specdec": s, "llama_cpp": l}})
    meta = {"llama_cpp": version, "model": os.path.relpath(a.model, REPO), "n": a.n,
            "prompt_tokens": len(ids), "rounds": a.rounds, "cpu_count": os.cpu_count()}
    md = markdown(rows, meta)
    spec_rows = []
    if a.spec_methods:
        ar = {r["threads"]: r["llama_cpp"]["decode_tps"] for r in rows if r["dtype"] == "bf16"}
        spec_rows = speculative_rows.measure(a, ar, a.work)
        md += speculative_rows.markdown(spec_rows)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "speculative_rows": spec_rows}, f, indent=1)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
