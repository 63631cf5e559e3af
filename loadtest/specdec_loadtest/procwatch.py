"""Resident-memory sampling of service processes (``--watch-pid``) for soak runs.

A background thread reads ``VmRSS`` from ``/proc/PID/status`` of every watched process every
``interval`` seconds. The baseline is taken from the samples after
:meth:`RssWatcher.mark_baseline` (called when the first measurement window opens, i.e. after the
warm-up) and the growth of a process is (last - baseline) / baseline in percent. With a ``window``
of W seconds, baseline and last are the medians of the first W seconds after the mark and of the
last W seconds: a service's RSS swings by several percent from second to second (batches come and
go, freed heap is returned to the OS), and one sample at either end would measure the swing, not
the trend. With ``window`` 0 they are single samples.
"""

from __future__ import annotations

import os
import threading
import time
from statistics import median
from typing import Dict, List, Optional, Sequence, Tuple


def read_rss_kib(pid: int) -> Optional[int]:
    """VmRSS of ``pid`` in KiB, None when the process is gone or has no VmRSS."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def process_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return "?"


def parse_pids(specs: Sequence[str]) -> List[int]:
    """PIDs from numbers, pid files (a file holding a number) or directories (every ``*.pid``
    file in it, e.g. the ``SPECDEC_RUN_DIR`` of ``deploy/local/cluster.sh``)."""
    pids: List[int] = []
    for s in specs:
        s = s.strip()
        if not s:
            continue
        if s.isdigit():
            pids.append(int(s))
            continue
        files = ([os.path.join(s, f) for f in sorted(os.listdir(s)) if f.endswith(".pid")]
                 if os.path.isdir(s) else [s])
        if not files:
            raise ValueError(f"--watch-pid: no *.pid files in {s}")
        for path in files:
            try:
                with open(path, encoding="ascii") as f:
                    pids.append(int(f.read().strip()))
            except (OSError, ValueError):
                raise ValueError(f"--watch-pid: {path!r} is neither a PID nor a readable pid "
                                 "file") from None
    return pids


def baseline_and_last(samples: Sequence[Tuple[float, int]], base_at: float,
                      window: float) -> Tuple[Optional[float], Optional[float]]:
    """Baseline and last RSS of ``samples`` ([(seconds, KiB)], time-ordered): single samples with
    ``window`` 0, else medians of [base_at, base_at + window) and of the last ``window`` seconds."""
    after = [(t, k) for t, k in samples if t >= base_at]
    if not after:
        return None, None
    if window <= 0:
        return float(after[0][1]), float(after[-1][1])
    end = after[-1][0]
    first = [k for t, k in after if t < base_at + window]
    last = [k for t, k in after if t > end - window]
    return float(median(first)), float(median(last))


class RssWatcher:
    """Samples the RSS of ``pids`` every ``interval`` seconds in a daemon thread."""

    def __init__(self, pids: Sequence[int], interval: float = 1.0, window: float = 0.0):
        self.pids = list(pids)
        self.names = {p: process_name(p) for p in self.pids}
        self.interval = interval
        self.window = window
        self.samples: Dict[int, List[Tuple[float, Optional[int]]]] = {p: [] for p in self.pids}
        self._t0 = time.perf_counter()
        self._baseline_at: Optional[float] = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="rss-watch", daemon=True)

    def start(self) -> "RssWatcher":
        self.sample()
        self._thread.start()
        return self

    def sample(self) -> None:
        t = time.perf_counter() - self._t0
        with self._lock:
            for p in self.pids:
                self.samples[p].append((t, read_rss_kib(p)))

    def mark_baseline(self) -> None:
        """The next sample (taken now) is the baseline of the growth figures."""
        if self._baseline_at is None:
            self._baseline_at = time.perf_counter() - self._t0
            self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.interval + 1.0)
        self.sample()

    def report(self) -> Dict[str, Dict[str, object]]:
        """pid -> name, baseline/last/max RSS in MiB, growth %, alive, the window, and the
        samples ([seconds since start, MiB]) thinned to at most 600 points."""
        out: Dict[str, Dict[str, object]] = {}
        with self._lock:
            for p in self.pids:
                s = [(t, kib) for t, kib in self.samples[p] if kib is not None]
                base_at = self._baseline_at if self._baseline_at is not None else 0.0
                base, last = baseline_and_last(s, base_at, self.window)
                step = max(1, len(s) // 600)
                out[str(p)] = {
                    "name": self.names[p],
                    "alive": read_rss_kib(p) is not None,
                    "baseline_mib": base / 1024 if base is not None else None,
                    "last_mib": last / 1024 if last is not None else None,
                    "max_mib": max(k for _, k in s) / 1024 if s else None,
                    "growth_pct": ((last - base) / base * 100.0) if base and last is not None
                    else None,
                    "baseline_at_s": self._baseline_at,
                    "window_s": self.window,
                    "samples": [[round(t, 2), round(k / 1024, 2)] for t, k in s[::step]],
                }
        return out

