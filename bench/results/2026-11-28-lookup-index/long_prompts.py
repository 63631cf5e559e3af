"""Writes long prompts for the lookup-index run: each is 8 consecutive HumanEval prompts joined
(blank lines dropped, since a blank line separates the prompts of a text file for
`specdec bench --prompts`). Usage: python3 long_prompts.py HumanEval.jsonl.gz OUT.txt"""
import gzip
import json
import sys

problems = [json.loads(line)["prompt"] for line in gzip.open(sys.argv[1], "rt")]
with open(sys.argv[2], "w") as out:
    for i in range(0, 160, 8):
        text = "\n".join(problems[i:i + 8])
        lines = [line for line in text.splitlines() if line.strip()]
        out.write("\n".join(lines) + "\n\n")
