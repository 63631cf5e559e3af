"""Drives the router with load: closed-loop concurrency and open-loop Poisson arrivals.

Each request runs on its own thread (gRPC Python, and ``http.client`` for the HTTP transport,
release the GIL while they wait for the next message). The stream loop only timestamps chunks
with ``time.perf_counter`` and appends to lists; all statistics are computed after the cell
(:mod:`specdec_loadtest.stats`). The transport is the client's: the SDK's ``specdec.Client``
(gRPC ``Generate``) or :class:`specdec_loadtest.http_client.HttpClient` (streamed
``POST /v1/completions``); both yield chunks of token ids and end with a summary, so the records
and their statistics are the same.

Closed loop at concurrency c: c workers each keep one request in flight, issuing the next as soon
as the previous ends. Requests issued during the warm-up, and after the measurement window has
closed, are not measured; the load goes on until every measured request has finished, then the
remaining unmeasured ones are cancelled, so every measured request ran at exactly c requests in
flight. The window closes after ``duration_s`` or, when ``max_requests`` measured requests have
been issued, once the last of them has finished (whichever comes first).

Open loop at rate r: requests are sent at the arrivals of a seeded Poisson process regardless of
completions. Arrivals during the warm-up are not measured; when the window ends, measured
requests still in flight are counted as ``unfinished`` and every request still in flight is
cancelled.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import schedule
from .stats import ABORTED, CANCELLED, ERROR, OK, RequestRecord, summarize

perf_counter = time.perf_counter


@dataclass(frozen=True)
class LoadConfig:
    """Request options and cell bounds shared by every cell of a run."""

    max_new_tokens: int = 64
    min_new_tokens: int = 0  # > 0: each request asks for uniform min..max tokens
    ignore_eos: bool = True
    temperature: float = 0.0
    temperatures: Tuple[float, ...] = ()  # several: request n takes temperatures[n % count]
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    block_size: int = 0
    draft_length: int = 0
    timeout_s: float = 300.0
    cancel_fraction: float = 0.0
    warmup_s: float = 2.0
    duration_s: float = 20.0          # 0 = bounded by max_requests only (closed loop)
    max_requests: int = 0             # closed loop: measured requests per cell, 0 = no limit
    max_inflight: int = 512           # open loop: arrivals beyond this many in flight are dropped
    keep_tokens: bool = False         # keep each request's token ids (RequestRecord.token_ids)

    def temperature_of(self, seq: int) -> float:
        """The temperature of request ``seq``."""
        if self.temperatures:
            return self.temperatures[seq % len(self.temperatures)]
        return self.temperature


@dataclass
class CellRun:
    """The raw outcome of one cell: its records, window and side figures."""

    mode: str                         # "closed" or "open"
    method: str
    level: float                      # concurrency or rate
    records: List[RequestRecord]
    w0: float
    w1: float
    t_begin: float
    t_end: float
    client_cpu_s: float
    extra: Dict[str, object]


class _Active:
    """The streams in flight, so that the end of a cell can cancel them."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.streams: Dict[int, Tuple[object, RequestRecord]] = {}
        self.closing = False
        self.aborted: set = set()

    def add(self, rec: RequestRecord, stream) -> bool:
        """Registers a stream; False (and the stream is cancelled) if the cell is closing."""
        with self.lock:
            if not self.closing:
                self.streams[rec.seq] = (stream, rec)
                return True
            self.aborted.add(rec.seq)
        stream.cancel()
        return False

    def remove(self, rec: RequestRecord) -> None:
        with self.lock:
            self.streams.pop(rec.seq, None)

    def was_aborted(self, rec: RequestRecord) -> bool:
        with self.lock:
            return rec.seq in self.aborted

    def abort_all(self) -> int:
        """Marks the cell closing and cancels every stream in flight; returns how many."""
        with self.lock:
            self.closing = True
            victims = list(self.streams.values())
            for _, rec in victims:
                self.aborted.add(rec.seq)
        for stream, _ in victims:
            try:
                stream.cancel()
            except Exception:  # noqa: BLE001 - a stream that just ended may refuse
                pass
        return len(victims)


class Runner:
    """Runs cells against one router ``client``: a ``specdec.Client``, or a client that names
    its options and error classes (``options_cls``, ``error_cls``: the HTTP transport's)."""

    def __init__(self, client, prompts: Sequence[str], cfg: LoadConfig,
                 on_window_open: Optional[Callable[[], None]] = None):
        if not prompts:
            raise ValueError("no prompts")
        self.client = client
        self.prompts = list(prompts)
        self.cfg = cfg
        self._on_window_open = on_window_open
        self._window_opened = False
        if hasattr(client, "options_cls"):
            self._options_cls = client.options_cls
            self._error_cls = client.error_cls
        else:
            from specdec import GenerateOptions, SpecdecError  # grpc only where requests are made
            self._options_cls = GenerateOptions
            self._error_cls = SpecdecError

    def _window_open(self) -> None:
        if not self._window_opened:
            self._window_opened = True
            if self._on_window_open is not None:
                self._on_window_open()

    def asked_tokens(self, seq: int) -> int:
        c = self.cfg
        return schedule.new_tokens(c.seed, seq, c.min_new_tokens, c.max_new_tokens)

    def options(self, method: str, seq: int, request_id: str):
        c = self.cfg
        return self._options_cls(
            method=method, max_new_tokens=self.asked_tokens(seq),
            temperature=c.temperature_of(seq),
            top_k=c.top_k, top_p=c.top_p, seed=schedule.request_seed(c.seed, seq),
            ignore_eos=c.ignore_eos, block_size=c.block_size, draft_length=c.draft_length,
            request_id=request_id)

    def new_record(self, seq: int, measured: bool) -> RequestRecord:
        c = self.cfg
        asked = self.asked_tokens(seq)
        return RequestRecord(
            seq=seq, prompt_index=seq % len(self.prompts), measured=measured, t_start=0.0,
            cancel_after=schedule.cancel_point(c.seed, seq, c.cancel_fraction, asked),
            asked_tokens=asked)

    def run_request(self, rec: RequestRecord, method: str, tag: str, active: _Active) -> None:
        """Runs one request to its end, filling ``rec``. Never raises."""
        opts = self.options(method, rec.seq, f"loadtest-{tag}-{rec.seq}")
        prompt = self.prompts[rec.prompt_index]
        times = rec.chunk_times
        ntoks = rec.chunk_tokens
        cancel_after = rec.cancel_after
        kept = rec.token_ids if self.cfg.keep_tokens else None
        got = 0
        bs_sum = bs_steps = 0
        stream = None
        rec.t_start = perf_counter()
        try:
            stream = self.client.generate_stream(prompt, opts, timeout=self.cfg.timeout_s)
            if not active.add(rec, stream):
                rec.t_end = perf_counter()
                rec.status = ABORTED
                return
            for chunk in stream:
                times.append(perf_counter())
                n = len(chunk.token_ids)
                ntoks.append(n)
                if kept is not None:
                    kept.extend(chunk.token_ids)
                got += n
                step = chunk.step
                if step is not None and step.batch_size:
                    bs_sum += step.batch_size
                    bs_steps += 1
                if cancel_after is not None and got >= cancel_after:
                    stream.cancel()
                    rec.t_end = perf_counter()
                    rec.status = CANCELLED
                    break
            else:
                rec.t_end = perf_counter()
                s = stream.summary
                if s is None:  # cancelled from another thread between two messages
                    rec.status = ABORTED if active.was_aborted(rec) else ERROR
                    rec.error_code, rec.error_message = "INTERNAL", "stream ended without a Summary"
                else:
                    rec.status = OK
                    rec.tau = s.tau
                    rec.verify_steps = s.verify_steps
                    rec.drafted_tokens = s.drafted_tokens
                    rec.accepted_tokens = s.accepted_tokens
                    rec.committed_tokens = s.committed_tokens
                    rec.completion_tokens = s.completion_tokens
                    rec.block_size = s.block_size
                    rec.finish_reason = s.finish_reason
                    rec.drafter_fallback = s.drafter_fallback
                    rec.policy_fallback = s.policy_fallback
                    rec.method_run = s.method
        except self._error_cls as e:
            rec.t_end = perf_counter()
            if active.was_aborted(rec):
                rec.status = ABORTED
            else:
                rec.status = ERROR
                rec.error_code, rec.error_message = e.code_name, e.message
                retry_after_s = getattr(e, "retry_after_s", None)  # the SDK's retry hint
                if retry_after_s is not None:
                    rec.error_message += f" (retry-after-ms: {round(retry_after_s * 1000)})"
        except Exception as e:  # noqa: BLE001 - a client-side failure is recorded, not raised
            rec.t_end = perf_counter()
            rec.status = ERROR
            rec.error_code, rec.error_message = "CLIENT", f"{type(e).__name__}: {e}"
        finally:
            rec.batch_size_sum, rec.batch_size_steps = bs_sum, bs_steps
            if stream is not None:
                active.remove(rec)

    # ---------------------------------------------------------------- closed loop

    def closed_loop(self, method: str, concurrency: int) -> CellRun:
        """One closed-loop cell (see the module docstring)."""
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        c = self.cfg
        if c.duration_s <= 0 and c.max_requests <= 0:
            raise ValueError("a closed-loop cell needs a duration or a request count")
        records: List[RequestRecord] = []
        active = _Active()
        cond = threading.Condition()
        st = {"seq": 0, "issued": 0, "outstanding": 0, "stop": False, "closed_at": None,
              "last_measured_done": None}
        tag = f"{method}-c{concurrency}"
        cpu0 = time.process_time()
        t_begin = perf_counter()
        w0 = t_begin + c.warmup_s
        w1_planned = w0 + c.duration_s if c.duration_s > 0 else None

        def closed(now: float) -> bool:
            """Whether the measurement window is closed for new measured requests."""
            if st["closed_at"] is not None:
                return True
            if w1_planned is not None and now >= w1_planned:
                st["closed_at"] = w1_planned
                return True
            if c.max_requests and st["issued"] >= c.max_requests:
                return True
            return False

        def maybe_finish(now: float) -> None:
            if not st["stop"] and closed(now) and st["outstanding"] == 0:
                st["stop"] = True
                cond.notify_all()

        def worker() -> None:
            while True:
                with cond:
                    if st["stop"]:
                        return
                    now = perf_counter()
                    measured = now >= w0 and not closed(now)
                    seq = st["seq"]
                    st["seq"] += 1
                    if measured:
                        st["issued"] += 1
                        st["outstanding"] += 1
                rec = self.new_record(seq, measured)
                records.append(rec)
                self.run_request(rec, method, tag, active)
                with cond:
                    if measured:
                        st["outstanding"] -= 1
                        st["last_measured_done"] = rec.t_end
                    maybe_finish(perf_counter())

        threads = [threading.Thread(target=worker, name=f"lt-{tag}-{i}", daemon=True)
                   for i in range(concurrency)]
        for t in threads:
            t.start()
        deadline = (w1_planned if w1_planned is not None else w0) + c.timeout_s + 30.0
        if w1_planned is None:  # count-bounded: allow every request its timeout
            deadline += c.timeout_s * (c.max_requests / concurrency + 1)
        with cond:
            while not st["stop"]:
                now = perf_counter()
                if now >= w0:
                    self._window_open()
                maybe_finish(now)
                if now > deadline:
                    st["stop"] = True
                    break
                cond.wait(0.05)
        if st["closed_at"] is not None:
            w1 = float(st["closed_at"])
        else:
            w1 = float(st["last_measured_done"] or perf_counter())
        active.abort_all()
        for t in threads:
            t.join(timeout=c.timeout_s + 5.0)
        t_end = perf_counter()
        return CellRun("closed", method, concurrency, records, w0, w1, t_begin, t_end,
                       time.process_time() - cpu0,
                       {"stuck_threads": sum(1 for t in threads if t.is_alive())})

    # ---------------------------------------------------------------- open loop

    def open_loop(self, method: str, rate: float) -> CellRun:
        """One open-loop (Poisson) cell (see the module docstring)."""
        c = self.cfg
        if c.duration_s <= 0:
            raise ValueError("an open-loop cell needs a duration")
        arrivals = schedule.poisson_arrivals(rate, c.warmup_s + c.duration_s, c.seed)
        records: List[RequestRecord] = []
        active = _Active()
        threads: List[threading.Thread] = []
        lags: List[float] = []
        dropped = 0
        inflight = [0]  # requests started and not finished (registered or not)
        inflight_lock = threading.Lock()

        def run_one(rec: RequestRecord) -> None:
            try:
                self.run_request(rec, method, tag, active)
            finally:
                with inflight_lock:
                    inflight[0] -= 1

        tag = f"{method}-r{rate:g}"
        cpu0 = time.process_time()
        t_begin = perf_counter()
        w0 = t_begin + c.warmup_s
        w1 = w0 + c.duration_s
        for seq, offset in enumerate(arrivals):
            target = t_begin + offset
            delay = target - perf_counter()
            if delay > 0:
                time.sleep(delay)
            now = perf_counter()
            lags.append(now - target)
            measured = offset >= c.warmup_s
            if measured:
                self._window_open()
            with inflight_lock:
                full = inflight[0] >= c.max_inflight
                if not full:
                    inflight[0] += 1
            if full:
                dropped += int(measured)
                continue
            rec = self.new_record(seq, measured)
            records.append(rec)
            t = threading.Thread(target=run_one, args=(rec,), name=f"lt-{tag}-{seq}",
                                 daemon=True)
            t.start()
            threads.append(t)
        delay = w1 - perf_counter()
        if delay > 0:
            time.sleep(delay)
        self._window_open()
        active.abort_all()
        for t in threads:
            t.join(timeout=max(1.0, c.timeout_s))
        t_end = perf_counter()
        return CellRun("open", method, rate, records, w0, w1, t_begin, t_end,
                       time.process_time() - cpu0,
                       {"arrivals": len(arrivals),
                        "measured_arrivals": sum(1 for a in arrivals if a >= c.warmup_s),
                        "dropped": dropped,
                        "dispatch_lag_ms": summarize(lags, 1e3),
                        "stuck_threads": sum(1 for t in threads if t.is_alive())})


__all__ = ["LoadConfig", "CellRun", "Runner", "OK", "CANCELLED", "ABORTED", "ERROR"]
