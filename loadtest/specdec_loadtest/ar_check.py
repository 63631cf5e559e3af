"""Greedy completions under load against AR alone.

At temperature 0 every method is promised to produce AR's tokens whatever runs beside it
(docs/design.md, "Lossless"). :func:`references` runs each prompt once with AR, alone, for the
cell's largest token count; :func:`compare` then checks every request of a cell that kept its
tokens (``LoadConfig.keep_tokens``) against its prompt's reference:

- a completed request must stream the reference's first ``n`` tokens, where ``n`` is what it
  asked for (or the reference's length, when the reference stopped earlier at a stop token);
- a request that ended otherwise (cancelled, failed) must have streamed a prefix of it.

Only requests with the cell's own options are comparable: the load tester sends every request
of a run with the same sampling options, so one reference per prompt suffices.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

from .stats import OK


def references(runner, timeout_s: float = 300.0) -> List[List[int]]:
    """AR's tokens for every prompt of ``runner`` (one request at a time, nothing beside it)."""
    cfg = runner.cfg
    if cfg.temperature != 0.0:
        raise ValueError("the AR check needs greedy decoding (--temperature 0)")
    out: List[List[int]] = []
    for i, prompt in enumerate(runner.prompts):
        opts = runner._options_cls(  # noqa: SLF001 - the runner's transport decides the class
            method="AR", max_new_tokens=cfg.max_new_tokens, temperature=0.0,
            ignore_eos=cfg.ignore_eos, request_id=f"loadtest-ar-reference-{i}")
        stream = runner.client.generate_stream(prompt, opts, timeout=timeout_s)
        tokens: List[int] = []
        for chunk in stream:
            tokens.extend(chunk.token_ids)
        out.append(tokens)
    return out


def check_record(rec, reference: Sequence[int], max_new_tokens: int) -> Optional[str]:
    """None when ``rec`` agrees with ``reference``, else a one-line description."""
    got = list(rec.token_ids)
    if rec.status == OK:
        want = list(reference[:min(rec.asked_tokens or max_new_tokens, len(reference))])
    else:
        want = list(reference[:len(got)])
    if got == want:
        return None
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b),
                 min(len(got), len(want)))
    return (f"request {rec.seq} (prompt {rec.prompt_index}, {rec.method_run or rec.status}): "
            f"{len(got)} tokens against AR's {len(want)}, first difference at token {first}")


def compare(records, refs: Sequence[Sequence[int]], max_new_tokens: int) -> Dict[str, object]:
    """Checks every record; returns {"checked", "equal", "differ", "examples" (at most 5)}."""
    checked = equal = 0
    examples: List[str] = []
    for rec in records:
        if not rec.token_ids and rec.status != OK:
            continue  # nothing streamed: nothing to compare
        checked += 1
        problem = check_record(rec, refs[rec.prompt_index], max_new_tokens)
        if problem is None:
            equal += 1
        elif len(examples) < 5:
            examples.append(problem)
    return {"checked": checked, "equal": equal, "differ": checked - equal, "examples": examples}


__all__ = ["references", "check_record", "compare"]
