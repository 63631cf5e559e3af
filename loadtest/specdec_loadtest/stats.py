"""Per-request records and the statistics of one load-test cell.

A *cell* is one (method, load level) pair: a closed-loop concurrency or an open-loop arrival
rate. While a cell runs, every request leaves a :class:`RequestRecord` (monotonic
``time.perf_counter`` timestamps of its start, of every streamed chunk and of its end, plus the
router's Summary fields). :func:`aggregate_cell` turns the records of a cell and its measurement
window into the dictionary stored in ``results.json``.

Definitions (also in ``loadtest/README.md``):

- **TTFT**: first streamed chunk minus the request's start (taken just before the RPC is made).
- **ITL** (inter-token latency): for chunk *i* > 0 of a request, the gap to chunk *i-1* divided
  by the tokens in chunk *i*, counted once per token of that chunk (token-weighted). A chunk of 4
  tokens arriving 40 ms after the previous one contributes four samples of 10 ms.
- **chunk gap**: the same gaps, one sample per chunk (not divided).
- **TPOT**: per request, (last chunk - first chunk) / (tokens - tokens of the first chunk): the
  request's mean ITL.
- **E2E**: end of the stream (Summary received) minus start; completed requests only.
- **Throughput**: tokens whose chunk arrived inside the window, over the window's length, counted
  from every request of the cell (also warm-up and filler requests, which keep the load level
  constant); **requests/s**: requests that completed inside the window, over its length.

Percentiles interpolate linearly between the two nearest ranks (numpy's default "linear").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence

# RequestRecord.status values.
OK = "ok"                # the stream ended with a Summary
CANCELLED = "cancelled"  # cancelled by the load tester on purpose (--cancel-fraction)
ABORTED = "aborted"      # cancelled by the load tester because its cell ended (see unfinished)
ERROR = "error"          # any gRPC error the load tester did not cause
RUNNING = "running"      # not finished (yet)


@dataclass
class RequestRecord:
    """What one request did. Times are ``time.perf_counter()`` seconds."""

    seq: int                       # 0-based issue order within the cell
    prompt_index: int
    measured: bool                 # issued inside the measurement window
    t_start: float
    cancel_after: Optional[int] = None  # planned client cancel after this many tokens
    asked_tokens: int = 0          # its max_new_tokens (0: the cell's)
    chunk_times: List[float] = field(default_factory=list)
    chunk_tokens: List[int] = field(default_factory=list)
    t_end: Optional[float] = None
    status: str = RUNNING
    error_code: str = ""
    error_message: str = ""
    # From the router's Summary (completed requests only). None: the transport does not report
    # it (the HTTP front has no accepted tokens or fallbacks).
    tau: Optional[float] = None
    verify_steps: int = 0
    drafted_tokens: int = 0
    accepted_tokens: Optional[int] = 0
    committed_tokens: int = 0
    completion_tokens: int = 0
    block_size: int = 0
    finish_reason: str = ""
    drafter_fallback: Optional[bool] = False
    policy_fallback: Optional[bool] = False
    method_run: str = ""
    # Target batch sizes reported in the chunks' StepStats (0 = not reported).
    batch_size_sum: int = 0
    batch_size_steps: int = 0
    # The streamed token ids (LoadConfig.keep_tokens only; else empty).
    token_ids: List[int] = field(default_factory=list)

    @property
    def streamed_tokens(self) -> int:
        return sum(self.chunk_tokens)

    @property
    def ttft(self) -> Optional[float]:
        return self.chunk_times[0] - self.t_start if self.chunk_times else None

    @property
    def e2e(self) -> Optional[float]:
        return self.t_end - self.t_start if self.t_end is not None else None


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of ``values``, linear interpolation between closest ranks.

    ``values`` need not be sorted; raises ``ValueError`` when empty or q is out of range.
    """
    if not values:
        raise ValueError("percentile of an empty sequence")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q = {q} is out of range [0, 100]")
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    frac = pos - lo
    return data[lo] + (data[hi] - data[lo]) * frac


def summarize(values: Sequence[float], scale: float = 1.0) -> Dict[str, Optional[float]]:
    """count, mean, min, p50, p90, p99, max of ``values`` multiplied by ``scale``.

    The statistics are None when there are no values (count 0).
    """
    n = len(values)
    if n == 0:
        return {"count": 0, "mean": None, "min": None, "p50": None, "p90": None, "p99": None,
                "max": None}
    data = sorted(v * scale for v in values)
    return {
        "count": n,
        "mean": sum(data) / n,
        "min": data[0],
        "p50": percentile(data, 50),
        "p90": percentile(data, 90),
        "p99": percentile(data, 99),
        "max": data[-1],
    }


def itl_samples(chunk_times: Sequence[float], chunk_tokens: Sequence[int]) -> List[float]:
    """Token-weighted inter-token latencies of one request (seconds), see the module docstring.

    Chunk *i* > 0 contributes ``chunk_tokens[i]`` samples of ``gap_i / chunk_tokens[i]``; empty
    chunks (no tokens) contribute nothing, their gap is carried into the next chunk's.
    """
    out: List[float] = []
    prev: Optional[float] = None
    for t, n in zip(chunk_times, chunk_tokens):
        if n <= 0:
            continue
        if prev is not None:
            out.extend([(t - prev) / n] * n)
        prev = t
    return out


def chunk_gaps(chunk_times: Sequence[float], chunk_tokens: Sequence[int]) -> List[float]:
    """Gaps between consecutive non-empty chunks of one request (seconds)."""
    times = [t for t, n in zip(chunk_times, chunk_tokens) if n > 0]
    return [b - a for a, b in zip(times, times[1:])]


def tpot(chunk_times: Sequence[float], chunk_tokens: Sequence[int]) -> Optional[float]:
    """Mean time per output token after the first chunk (seconds); None below two chunks."""
    pairs = [(t, n) for t, n in zip(chunk_times, chunk_tokens) if n > 0]
    if len(pairs) < 2:
        return None
    tokens_after_first = sum(n for _, n in pairs[1:])
    return (pairs[-1][0] - pairs[0][0]) / tokens_after_first


def tokens_in_window(records: Iterable[RequestRecord], w0: float, w1: float) -> int:
    """Tokens of all ``records`` whose chunk arrived in [w0, w1]."""
    total = 0
    for r in records:
        for t, n in zip(r.chunk_times, r.chunk_tokens):
            if w0 <= t <= w1:
                total += n
    return total


def timeline(records: Iterable[RequestRecord], w0: float, w1: float,
             bucket_s: float) -> List[Dict[str, float]]:
    """Throughput over time inside the window: one entry per ``bucket_s`` seconds (the last
    bucket may be shorter): start offset, output tokens/s, completed requests/s, errors."""
    if bucket_s <= 0 or w1 <= w0:
        return []
    nb = max(1, math.ceil((w1 - w0) / bucket_s - 1e-9))
    toks = [0] * nb
    done = [0] * nb
    errs = [0] * nb

    def bucket(t: float) -> Optional[int]:
        if t < w0 or t > w1:
            return None
        return min(int((t - w0) / bucket_s), nb - 1)

    for r in records:
        for t, n in zip(r.chunk_times, r.chunk_tokens):
            b = bucket(t)
            if b is not None:
                toks[b] += n
        if r.t_end is not None:
            b = bucket(r.t_end)
            if b is not None:
                if r.status == OK:
                    done[b] += 1
                elif r.status == ERROR:
                    errs[b] += 1
    out = []
    for i in range(nb):
        start = i * bucket_s
        length = min(bucket_s, (w1 - w0) - start)
        length = length if length > 0 else bucket_s
        out.append({"t_s": round(start, 3), "tok_s": toks[i] / length,
                    "req_s": done[i] / length, "errors": errs[i]})
    return out


def _known_sum(values: Iterable[Optional[int]]) -> Optional[int]:
    """The sum of ``values`` (bools count 1), or None when any of them is None (not reported)."""
    total = 0
    for v in values:
        if v is None:
            return None
        total += int(v)
    return total


def aggregate_cell(records: Sequence[RequestRecord], w0: float, w1: float, *,
                   max_new_tokens: int, ignore_eos: bool,
                   timeline_bucket_s: float = 0.0) -> Dict[str, object]:
    """The statistics of one cell (see the module docstring for the definitions).

    ``records`` are all requests of the cell, measured or not; [w0, w1] is the measurement
    window (perf_counter seconds). Latencies are reported in milliseconds.
    """
    window = max(w1 - w0, 1e-9)
    measured = [r for r in records if r.measured]
    completed = [r for r in measured if r.status == OK]
    cancelled = [r for r in measured if r.status == CANCELLED]
    unfinished = [r for r in measured if r.status in (ABORTED, RUNNING)]
    errored = [r for r in measured if r.status == ERROR]

    errors: Dict[str, Dict[str, object]] = {}
    for r in errored:
        e = errors.setdefault(r.error_code or "UNKNOWN", {"count": 0, "sample": r.error_message})
        e["count"] = int(e["count"]) + 1

    with_tokens = [r for r in completed + cancelled if r.chunk_times]
    ttft = [r.ttft for r in with_tokens if r.ttft is not None]
    itl: List[float] = []
    gaps: List[float] = []
    tpots: List[float] = []
    for r in with_tokens:
        itl.extend(itl_samples(r.chunk_times, r.chunk_tokens))
        gaps.extend(chunk_gaps(r.chunk_times, r.chunk_tokens))
        tp = tpot(r.chunk_times, r.chunk_tokens)
        if tp is not None:
            tpots.append(tp)
    e2e = [r.e2e for r in completed if r.e2e is not None]

    taus = [r.tau for r in completed if r.tau is not None]
    verify_steps = sum(r.verify_steps for r in completed)
    committed = sum(r.committed_tokens for r in completed)
    drafted = sum(r.drafted_tokens for r in completed)
    accepted = _known_sum(r.accepted_tokens for r in completed)
    blocks: Dict[str, int] = {}
    for r in completed:
        if r.block_size > 0:
            blocks[str(r.block_size)] = blocks.get(str(r.block_size), 0) + 1
    blocks = dict(sorted(blocks.items(), key=lambda kv: int(kv[0])))
    ctoks = [r.completion_tokens for r in completed]
    bs_steps = sum(r.batch_size_steps for r in measured)
    bs_sum = sum(r.batch_size_sum for r in measured)
    done_in_window = sum(1 for r in records
                         if r.status == OK and r.t_end is not None and w0 <= r.t_end <= w1)
    out_tokens = tokens_in_window(records, w0, w1)

    cell: Dict[str, object] = {
        "window_s": w1 - w0,
        "requests": len(measured),
        "completed": len(completed),
        "cancelled": len(cancelled),
        "unfinished": len(unfinished),
        "errors": errors,
        "unexpected_errors": len(errored),
        "output_tokens": out_tokens,
        "throughput_tok_s": out_tokens / window,
        "requests_per_s": done_in_window / window,
        "ttft_ms": summarize(ttft, 1e3),
        "itl_ms": summarize(itl, 1e3),
        "chunk_gap_ms": summarize(gaps, 1e3),
        "tpot_ms": summarize(tpots, 1e3),
        "e2e_ms": summarize(e2e, 1e3),
        "tau_mean": sum(taus) / len(taus) if taus else None,
        "tau_aggregate": committed / verify_steps if verify_steps else None,
        "block_sizes": blocks,
        "drafted_tokens": drafted,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / drafted if drafted and accepted is not None else None,
        "completion_tokens": {
            "min": min(ctoks) if ctoks else None,
            "max": max(ctoks) if ctoks else None,
            "mean": sum(ctoks) / len(ctoks) if ctoks else None,
        },
        # Completed requests with fewer tokens than asked although EOS was ignored.
        "short_completions": (sum(1 for r in completed
                                  if r.completion_tokens < (r.asked_tokens or max_new_tokens))
                              if ignore_eos else 0),
        # Completed requests whose streamed token count differs from the Summary's.
        "stream_mismatches": sum(1 for r in completed if r.streamed_tokens != r.completion_tokens),
        "fallbacks": {"drafter": _known_sum(r.drafter_fallback for r in completed),
                      "policy": _known_sum(r.policy_fallback for r in completed)},
        "methods_run": sorted({r.method_run for r in completed if r.method_run}),
        "batch_size_mean": bs_sum / bs_steps if bs_steps else None,
    }
    if timeline_bucket_s > 0:
        cell["timeline"] = timeline(records, w0, w1, timeline_bucket_s)
    return cell
