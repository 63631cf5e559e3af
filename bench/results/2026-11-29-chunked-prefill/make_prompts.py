#!/usr/bin/env python3
"""Writes the chunked-prefill benchmark's prompts as JSON lines: the first 84 HumanEval prompts in
order, and after every 7th of them a long prompt (HumanEval prompts joined until it has at least
3,400 characters: about 1,500 tokens of the pack's tokenizer). Reads ../shared (or
$SPECDEC_SHARED); writes nothing into the repository.
    make_prompts.py OUT.jsonl"""
import gzip
import json
import os
import sys

shared = os.environ.get("SPECDEC_SHARED", os.path.join(os.path.dirname(__file__), "../../../../shared"))
with gzip.open(os.path.join(shared, "datasets/humaneval/HumanEval.jsonl.gz"), "rt") as f:
    prompts = [json.loads(line)["prompt"] for line in f]
longs, i = [], 0
while len(longs) < 12:
    text = ""
    while len(text) < 3400:
        text += prompts[i % len(prompts)] + "\n"
        i += 1
    longs.append(text)
with open(sys.argv[1], "w") as out:
    for k, p in enumerate(prompts[:84]):
        out.write(json.dumps({"prompt": p}) + "\n")
        if k % 7 == 6:
            out.write(json.dumps({"prompt": longs[k // 7]}) + "\n")
