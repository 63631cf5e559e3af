"""The speculative rows of the peer benchmark (peer_bench.py --spec-methods).

Both systems decode the same prompt text greedily (EOS ignored) with the pack's target in bf16:
  - llama.cpp: `llama-speculative-simple` (built by fetch_build.sh) with the pack's draft model
    as its draft (-md, both exported by `specdec convert`; --spec-type draft-simple,
    --spec-draft-n-max K); its own report gives
    the decoded tokens and the decode time (the prompt's pass excluded).
  - specdec: `specdec bench` in process, AR and each method of --spec-methods on the same
    prompt; tokens/s over each request's whole time (the prompt's pass included, so specdec's
    rows carry a cost llama.cpp's do not).
Each system's speculative tokens/s is also given over its own AR tokens/s (llama.cpp's AR: the
probe's greedy decode of the AR rows).
"""
import json
import os
import re
import subprocess
import tempfile

DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([0-9.]+) seconds")
ACCEPT = re.compile(r"accept\s+=\s+([0-9.]+)%")


def llama_speculative(binary, target, draft, prompt_file, n, threads, k):
    r = subprocess.run([binary, "-m", target, "-md", draft, "-f", prompt_file, "-n", str(n),
                        "--spec-type", "draft-simple", "--spec-draft-n-max", str(k),
                        "--spec-draft-n-min", "0", "--temp", "0", "--ignore-eos",
                        "-t", str(threads), "-td", str(threads), "-c", "1024"],
                       capture_output=True, text=True, timeout=900)
    text = r.stdout + r.stderr
    m = DECODED.search(text)
    if r.returncode != 0 or m is None:
        raise RuntimeError(f"llama-speculative-simple exited {r.returncode}: {text[-1500:]}")
    acc = ACCEPT.search(text)
    return {"tokens": int(m.group(1)), "decode_s": float(m.group(2)),
            "decode_tps": int(m.group(1)) / float(m.group(2)),
            "accept_pct": float(acc.group(1)) if acc else None}


def specdec_methods(binary, pack, prompt_file, n, threads, methods, k):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        r = subprocess.run([binary, "bench", "--target", f"{pack}/target", "--draft",
                            f"{pack}/draft", "--dflash", f"{pack}/dflash", "--prompts",
                            prompt_file, "--max-prompts", "1", "--methods", ",".join(methods),
                            "-n", str(n), "--threads", str(threads), "--dtype", "bf16",
                            "--draft-length", str(k), "--json", out],
                           capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            raise RuntimeError(f"specdec bench exited {r.returncode}: {r.stderr[-1500:]}")
        rows = json.load(open(out))["results"]
    return {row["method"]: row for row in rows}


def measure(a, probe_ar_tps, version_dir):
    """Rows for bf16 at every thread count, medians over a.rounds alternating rounds."""
    import statistics
    pack = os.path.dirname(os.path.abspath(a.model))
    spec_bin = os.path.join(version_dir, "llama.cpp/build/bin/llama-speculative-simple")
    ggufs = {}
    for name in ("target", "draft"):
        ggufs[name] = os.path.join(a.work, f"spec-{name}-bf16.gguf")
        subprocess.run([a.specdec, "convert", f"{pack}/{name}", "-o", ggufs[name]], check=True,
                       capture_output=True)
    text = open(os.path.join(pack, "eval/heldout_prompts.txt")).read().split("\n\n")[0]
    prompt_file = os.path.join(a.work, "spec-prompt.txt")
    with open(prompt_file, "w") as f:
        f.write(text + "\n\n")
    methods = a.spec_methods.split(",")
    rows = []
    for threads in map(int, a.threads.split(",")):
        ll, sd = [], []
        for rnd in range(a.rounds):
            runs = [lambda: ll.append(llama_speculative(spec_bin, ggufs["target"], ggufs["draft"],
                                                        prompt_file, a.n, threads,
                                                        a.draft_length)),
                    lambda: sd.append(specdec_methods(a.specdec, pack, prompt_file, a.n,
                                                      threads, methods, a.draft_length))]
            for fn in (runs if rnd % 2 == 0 else runs[::-1]):
                fn()
        llama_tps = statistics.median(x["decode_tps"] for x in ll)
        row = {"threads": threads, "draft_length": a.draft_length,
               "llama_cpp": {"draft_model_tps": llama_tps,
                             "accept_pct": statistics.median(x["accept_pct"] or 0 for x in ll),
                             "ar_tps": probe_ar_tps.get(threads),
                             "rounds": ll},
               "specdec": {}}
        for m in ["AR"] + methods:
            row["specdec"][m] = {
                "tps": statistics.median(x[m]["tokens_per_s"] for x in sd),
                "tau": statistics.median(x[m]["tau"] for x in sd),
                "matches_ar": min(x[m]["matches_ar"] for x in sd)}
        rows.append(row)
    return rows


def markdown(rows):
    out = ["", "## Speculative decoding (bf16, greedy; llama.cpp: draft model; specdec: its "
           "methods on the same draft model and its DFlash drafter)", "",
           "| threads | method | specdec tok/s | over specdec AR | tau | =AR | llama.cpp "
           "draft-model tok/s | over llama.cpp AR | accepted | specdec / llama.cpp |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        ll = r["llama_cpp"]
        ar = r["specdec"]["AR"]["tps"]
        for m, s in r["specdec"].items():
            if m == "AR":
                continue
            over_ll_ar = f"{ll['draft_model_tps'] / ll['ar_tps']:.2f}" if ll["ar_tps"] else "-"
            out.append(f"| {r['threads']} | {m} | {s['tps']:.1f} | {s['tps'] / ar:.2f} | "
                       f"{s['tau']:.2f} | {s['matches_ar']}/1 | {ll['draft_model_tps']:.1f} | "
                       f"{over_ll_ar} | {ll['accept_pct']:.0f}% | "
                       f"{s['tps'] / ll['draft_model_tps']:.2f} |")
    return "\n".join(out) + "\n"
