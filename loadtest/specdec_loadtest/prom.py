"""Scraping the services' Prometheus ``/metrics`` endpoints.

Used for two things: the per-cell delta of selected counters (``--metrics-url``; gauges are
stored as their before/after values), and the end-of-run leak check ``--check-handles``: every
listed endpoint must report ``specdec_kv_handles`` = 0 (summed over its label sets) within a
grace period once the load has stopped.
"""

from __future__ import annotations

import re
import time
import urllib.request
from typing import Dict, List, Optional, Sequence, Tuple

# Series stored per cell by default (full match on the metric name, without labels). Histogram
# buckets and per-position counters are left out to keep results.json small.
DEFAULT_SELECT = (
    r"specdec_(requests_total|fallbacks_total|block_size_chosen_total"
    r"|spec_decode_num_(drafts|draft_tokens|accepted_tokens)_total"
    r"|(target|drafter)_operations_total|policy_requests_total|http_requests_total"
    r"|(target_compute|drafter_compute|target_queue|stage_latency|request_latency"
    r"|time_to_first_token|inter_token_latency|policy_latency|http_request_duration)"
    r"_seconds_(sum|count)"
    r"|kv_handles|kv_cache_bytes|active_sessions|active_requests)"
)
KV_HANDLES = "specdec_kv_handles"

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})?\s+(\S+)(?:\s+\S+)?\s*$")


def normalize_url(url: str) -> str:
    """``host:port`` -> ``http://host:port/metrics``; full URLs are kept."""
    url = url.strip()
    if "://" not in url:
        url = "http://" + url
        if url.count("/") == 2:
            url += "/metrics"
    return url


def fetch(url: str, timeout: float = 5.0) -> str:
    """The text of ``url`` (raises ``OSError`` / ``urllib.error.URLError`` on failure)."""
    with urllib.request.urlopen(normalize_url(url), timeout=timeout) as resp:
        return resp.read().decode("utf-8", errors="replace")


def parse(text: str) -> Tuple[Dict[str, float], Dict[str, str]]:
    """Samples (``name{labels}`` -> value) and declared types (name -> counter, gauge, ...) of
    a Prometheus text exposition. Unparsable lines are skipped."""
    samples: Dict[str, float] = {}
    types: Dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split()
            if len(parts) >= 4 and parts[1] == "TYPE":
                types[parts[2]] = parts[3]
            continue
        m = _LINE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        samples[m.group(1) + (m.group(2) or "")] = value
    return samples, types


def metric_name(series: str) -> str:
    """The metric name of a series key (``a{b="c"}`` -> ``a``)."""
    return series.split("{", 1)[0]


def is_counter(name: str, types: Dict[str, str]) -> bool:
    """Counters and the _sum/_count/_total parts of histograms and summaries only grow."""
    if types.get(name) == "counter":
        return True
    for suffix in ("_sum", "_count", "_total"):
        if name.endswith(suffix) and types.get(name[: -len(suffix)]) in ("histogram", "summary",
                                                                       "counter"):
            return True
    return name.endswith("_total") and name not in types


def select(samples: Dict[str, float], pattern: str) -> Dict[str, float]:
    """The samples whose metric name fully matches ``pattern``."""
    rx = re.compile(pattern)
    return {k: v for k, v in samples.items() if rx.fullmatch(metric_name(k))}


def delta(before: Dict[str, float], after: Dict[str, float],
          types: Dict[str, str]) -> Dict[str, Dict[str, object]]:
    """Counters: after - before (non-zero ones only; a series missing before counts from 0).
    Gauges: their before and after values."""
    counters: Dict[str, float] = {}
    gauges: Dict[str, Dict[str, Optional[float]]] = {}
    for key in sorted(set(before) | set(after)):
        name = metric_name(key)
        if is_counter(name, types):
            d = after.get(key, 0.0) - before.get(key, 0.0)
            if d != 0:
                counters[key] = d
        else:
            gauges[key] = {"before": before.get(key), "after": after.get(key)}
    return {"counters": counters, "gauges": gauges}


class Scraper:
    """Scrapes a list of endpoints; failures are recorded, never raised."""

    def __init__(self, urls: Sequence[str], pattern: str = DEFAULT_SELECT, timeout: float = 5.0):
        self.urls = [normalize_url(u) for u in urls]
        self.pattern = pattern
        self.timeout = timeout

    def snapshot(self) -> Dict[str, Dict[str, object]]:
        """url -> {"samples", "types"} or {"error"}."""
        out: Dict[str, Dict[str, object]] = {}
        for url in self.urls:
            try:
                samples, types = parse(fetch(url, self.timeout))
                out[url] = {"samples": select(samples, self.pattern), "types": types}
            except Exception as e:  # noqa: BLE001 - any scrape failure is reported, not fatal
                out[url] = {"error": f"{type(e).__name__}: {e}"}
        return out

    @staticmethod
    def diff(before: Dict[str, Dict[str, object]],
             after: Dict[str, Dict[str, object]]) -> Dict[str, Dict[str, object]]:
        """url -> delta (see :func:`delta`) or {"error"}."""
        out: Dict[str, Dict[str, object]] = {}
        for url in after:
            b, a = before.get(url, {}), after[url]
            if "error" in a or "error" in b:
                out[url] = {"error": a.get("error") or b.get("error")}
                continue
            out[url] = delta(b["samples"], a["samples"], a["types"])  # type: ignore[arg-type]
        return out


def kv_handles(text: str) -> Optional[float]:
    """The sum of ``specdec_kv_handles`` over its label sets, None when absent."""
    samples, _ = parse(text)
    vals = [v for k, v in samples.items() if metric_name(k) == KV_HANDLES]
    return sum(vals) if vals else None


def check_handles(urls: Sequence[str], grace_s: float = 10.0,
                  interval_s: float = 0.5) -> Dict[str, object]:
    """Polls every endpoint until all report ``specdec_kv_handles`` == 0 or ``grace_s`` passed.

    Returns {"ok": bool, "waited_s": float, "endpoints": {url: {"kv_handles": v} or
    {"error": msg}}}. An endpoint that cannot be scraped or has no such metric fails the check.
    """
    t0 = time.monotonic()
    while True:
        endpoints: Dict[str, Dict[str, object]] = {}
        ok = True
        for url in [normalize_url(u) for u in urls]:
            try:
                v = kv_handles(fetch(url))
            except Exception as e:  # noqa: BLE001
                endpoints[url] = {"error": f"{type(e).__name__}: {e}"}
                ok = False
                continue
            if v is None:
                endpoints[url] = {"error": f"no {KV_HANDLES} metric"}
                ok = False
            else:
                endpoints[url] = {"kv_handles": v}
                ok = ok and v == 0
        waited = time.monotonic() - t0
        if ok or waited >= grace_s:
            return {"ok": ok, "waited_s": round(waited, 3), "endpoints": endpoints}
        time.sleep(interval_s)


def split_list(value: str) -> List[str]:
    """``"a,b,,c"`` -> ``["a", "b", "c"]``."""
    return [v.strip() for v in value.split(",") if v.strip()]
