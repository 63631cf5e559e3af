"""Deterministic randomness of a load test: Poisson arrival times, planned client cancels and
per-request sampling seeds.

Everything is derived from the run's ``--seed`` and the position of a request in its cell, never
from the method, so every method of a load level sees the same arrivals, the same prompts and
the same cancels.
"""

from __future__ import annotations

import random
from typing import List, Optional


def poisson_arrivals(rate: float, duration_s: float, seed: int) -> List[float]:
    """Arrival offsets (seconds from the cell's start, ascending, all < ``duration_s``) of a
    Poisson process of ``rate`` requests/s: exponential inter-arrival times with mean 1/rate.

    The same (rate, duration, seed) always gives the same list.
    """
    if rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    if duration_s < 0:
        raise ValueError(f"duration must be >= 0, got {duration_s}")
    rng = random.Random(f"poisson:{seed}:{rate!r}")
    out: List[float] = []
    t = rng.expovariate(rate)
    while t < duration_s:
        out.append(t)
        t += rng.expovariate(rate)
    return out


def cancel_point(seed: int, seq: int, fraction: float, max_new_tokens: int) -> Optional[int]:
    """Whether request ``seq`` of a cell is cancelled by the client, and after how many tokens.

    With probability ``fraction`` returns k, uniform in 1..max_new_tokens-1: the client cancels
    once it has received at least k tokens (mid-stream: at least one token streamed, not all).
    Returns None otherwise, or when max_new_tokens < 2.
    """
    if fraction <= 0 or max_new_tokens < 2:
        return None
    rng = random.Random(f"cancel:{seed}:{seq}")
    if rng.random() >= fraction:
        return None
    return rng.randint(1, max_new_tokens - 1)


def new_tokens(seed: int, seq: int, low: int, high: int) -> int:
    """The tokens request ``seq`` asks for: ``high``, or uniform in low..high when 0 < low < high
    (varied lengths, so that a closed loop's requests do not all finish in lockstep)."""
    if low <= 0 or low >= high:
        return high
    return random.Random(f"length:{seed}:{seq}").randint(low, high)


def request_seed(seed: int, seq: int) -> int:
    """The sampling seed of request ``seq`` (matters only for temperature > 0)."""
    return (seed * 1_000_003 + seq * 7_919 + 1) % (2**63)
