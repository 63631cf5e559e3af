#!/usr/bin/env python3
"""Writes a prompt set whose completions repeat their input, for NGRAM (prompt lookup).

Each prompt is one top-level function of a Python standard-library file (Debian's python3.11),
then the same function's signature again, so that the natural continuation copies the body.

  /usr/bin/python3 bench/ngram_prompts.py OUT_DIR [--count 8] [--seed 3]

writes OUT_DIR/prompts.jsonl ({"prompt": ..., "file": ...} per line) for `specdec bench --prompts`.
"""
import argparse
import glob
import json
import os
import random
import re


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--count", type=int, default=8)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--stdlib", default="/usr/lib/python3.11")
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.stdlib, "*.py")))
    random.Random(a.seed).shuffle(files)
    function = re.compile(r"^def [A-Za-z_][A-Za-z0-9_]*\([^)]*\):\n(?:(?:    .*|\s*)\n){6,30}", re.M)
    prompts = []
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            m = function.search(f.read())
        if not m:
            continue
        body = m.group(0).rstrip("\n") + "\n"
        if not 300 <= len(body) <= 1200:
            continue
        signature = body.split("\n")[0]
        prompts.append({"prompt": body + "\n\n# The same function again:\n" + signature + "\n",
                        "file": os.path.basename(path)})
        if len(prompts) == a.count:
            break
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, "prompts.jsonl"), "w") as out:
        for p in prompts:
            out.write(json.dumps(p) + "\n")
    print(f"{len(prompts)} prompts from {', '.join(p['file'] for p in prompts)}")


if __name__ == "__main__":
    main()
