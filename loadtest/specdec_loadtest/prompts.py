"""Prompt sets for the load tester.

``--prompts`` names a dataset of ``../shared/datasets`` (``humaneval``, ``gsm8k``, ``mbpp``,
``mt_bench``) or a file:

- ``.jsonl`` / ``.jsonl.gz``: per line the first present of the fields ``prompt`` (HumanEval),
  ``question`` (GSM8K), ``text`` (MBPP), ``turns[0]`` (MT-Bench), as ``specdec bench`` reads them;
- any other file: one prompt per line (``--prompt-format lines``, blank lines skipped), or
  prompts separated by blank lines (``--prompt-format paragraphs``, the format of
  ``specdec bench`` text files, which allows multi-line prompts).
"""

from __future__ import annotations

import gzip
import json
import os
import random
from typing import List, Optional

DATASETS = {
    "humaneval": "humaneval/HumanEval.jsonl.gz",
    "gsm8k": "gsm8k/test.jsonl",
    "mbpp": "mbpp/mbpp.jsonl",
    "mt_bench": "mt_bench/question.jsonl",
}
_FIELDS = ("prompt", "question", "text")


def default_datasets_dir() -> str:
    """``<repo>/../shared/datasets`` (``$SPECDEC_SHARED/datasets`` when set)."""
    shared = os.environ.get("SPECDEC_SHARED")
    if not shared:
        repo = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
        shared = os.path.join(repo, "..", "shared")
    return os.path.normpath(os.path.join(shared, "datasets"))


def resolve(spec: str, datasets_dir: Optional[str] = None) -> str:
    """The file of a dataset name (case-insensitive) or the path itself."""
    key = spec.strip().lower().replace("-", "_")
    if key in DATASETS and not os.path.exists(spec):
        return os.path.join(datasets_dir or default_datasets_dir(), DATASETS[key])
    return spec


def _read_text(path: str) -> str:
    if path.endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return f.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


def load_prompts(spec: str, *, fmt: str = "lines", limit: int = 0, shuffle: bool = False,
                 seed: int = 0, datasets_dir: Optional[str] = None) -> List[str]:
    """Prompts of ``spec`` (a dataset name or a path), in file order or shuffled with ``seed``;
    at most ``limit`` (0 = all), taken after shuffling. Raises ``ValueError`` on a bad file."""
    if fmt not in ("lines", "paragraphs"):
        raise ValueError(f"prompt format must be 'lines' or 'paragraphs', got {fmt!r}")
    path = resolve(spec, datasets_dir)
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such prompt file (datasets: {', '.join(DATASETS)})")
    text = _read_text(path)
    prompts: List[str] = []
    if ".jsonl" in os.path.basename(path):
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: line {n} is not JSON: {e}") from None
            if not isinstance(obj, dict):
                raise ValueError(f"{path}: line {n} is not a JSON object")
            p = next((obj[f] for f in _FIELDS if isinstance(obj.get(f), str) and obj[f]), None)
            turns = obj.get("turns")
            if p is None and isinstance(turns, list) and turns and isinstance(turns[0], str):
                p = turns[0]
            if not p:
                raise ValueError(f"{path}: line {n} has none of the fields prompt, question, "
                                 "text, turns")
            prompts.append(p)
    elif fmt == "lines":
        prompts = [line.rstrip("\r") for line in text.splitlines() if line.strip()]
    else:
        cur: List[str] = []
        for line in text.splitlines() + [""]:
            if line.strip():
                cur.append(line.rstrip("\r"))
            elif cur:
                prompts.append("\n".join(cur))
                cur = []
    if not prompts:
        raise ValueError(f"{path}: no prompts found")
    if shuffle:
        random.Random(f"prompts:{seed}").shuffle(prompts)
    if limit > 0:
        prompts = prompts[:limit]
    return prompts
