"""Reporting: the per-cell dictionaries, the ``results.json`` document and its validation, and
the table printed to stdout (plain text or Markdown)."""

from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Sequence

from .stats import aggregate_cell

SCHEMA = "specdec-loadtest/1"

# Keys every cell of results.json has (validate() checks them).
CELL_KEYS = (
    "mode", "method", "level", "window_s", "requests", "completed", "cancelled", "unfinished",
    "errors", "unexpected_errors", "output_tokens", "throughput_tok_s", "requests_per_s",
    "ttft_ms", "itl_ms", "chunk_gap_ms", "tpot_ms", "e2e_ms", "tau_mean", "tau_aggregate",
    "block_sizes", "drafted_tokens", "accepted_tokens", "acceptance_rate", "completion_tokens",
    "short_completions", "stream_mismatches", "fallbacks", "client_cpu_util",
)
DIST_KEYS = ("count", "mean", "min", "p50", "p90", "p99", "max")
DIST_FIELDS = ("ttft_ms", "itl_ms", "chunk_gap_ms", "tpot_ms", "e2e_ms")


def cell_dict(run, *, max_new_tokens: int, ignore_eos: bool, timeline_bucket_s: float = 0.0,
              metrics: Optional[Dict[str, object]] = None) -> Dict[str, object]:
    """The results.json entry of a finished cell (``run`` is a runner.CellRun)."""
    cell: Dict[str, object] = {
        "mode": run.mode,
        "method": run.method,
        "level": run.level,
        ("concurrency" if run.mode == "closed" else "rate"): run.level,
    }
    cell.update(aggregate_cell(run.records, run.w0, run.w1, max_new_tokens=max_new_tokens,
                               ignore_eos=ignore_eos, timeline_bucket_s=timeline_bucket_s))
    wall = max(run.t_end - run.t_begin, 1e-9)
    cell["cell_wall_s"] = wall
    cell["client_cpu_s"] = run.client_cpu_s
    cell["client_cpu_util"] = run.client_cpu_s / wall
    cell.update(run.extra)
    if metrics is not None:
        cell["metrics"] = metrics
    return cell


def results_document(*, config: Dict[str, object], router: Dict[str, object],
                     cells: List[Dict[str, object]], host: Dict[str, object],
                     transport: Optional[Dict[str, object]] = None,
                     started_at: str, finished_at: str,
                     memory: Optional[Dict[str, object]] = None,
                     check_handles: Optional[Dict[str, object]] = None,
                     plots: Sequence[str] = (), failures: Sequence[str] = (),
                     summary: Optional[List[Dict[str, object]]] = None) -> Dict[str, object]:
    """The whole results.json document (``summary``: summarize_rounds of repeated cells;
    ``transport``: how the requests were sent, {"kind": "grpc", "address", "tls",
    "client_cert"} or {"kind": "http", "url", "model", "models"}; documents without it are from
    gRPC runs)."""
    doc = {
        "schema": SCHEMA,
        "started_at": started_at,
        "finished_at": finished_at,
        "config": config,
        "router": router,
        "transport": transport,
        "host": host,
        "cells": cells,
        "memory": memory,
        "check_handles": check_handles,
        "plots": list(plots),
        "failures": list(failures),
        "ok": not failures,
    }
    if summary is not None:
        doc["summary"] = summary
    return doc


def validate(doc: Dict[str, object]) -> List[str]:
    """Problems of a results.json document (empty when it is well-formed)."""
    problems: List[str] = []
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema is {doc.get('schema')!r}, expected {SCHEMA!r}")
    for key in ("config", "router", "host", "cells", "ok", "failures", "plots"):
        if key not in doc:
            problems.append(f"missing top-level key {key!r}")
    cells = doc.get("cells")
    if not isinstance(cells, list):
        return problems + ["cells is not a list"]
    for i, cell in enumerate(cells):
        if not isinstance(cell, dict):
            problems.append(f"cells[{i}] is not an object")
            continue
        for key in CELL_KEYS:
            if key not in cell:
                problems.append(f"cells[{i}] lacks {key!r}")
        if cell.get("mode") not in ("closed", "open"):
            problems.append(f"cells[{i}].mode is {cell.get('mode')!r}")
        for key in DIST_FIELDS:
            dist = cell.get(key)
            if isinstance(dist, dict):
                missing = [k for k in DIST_KEYS if k not in dist]
                if missing:
                    problems.append(f"cells[{i}].{key} lacks {missing}")
                elif dist["count"] and not (dist["min"] <= dist["p50"] <= dist["p90"]
                                            <= dist["p99"] <= dist["max"]):
                    problems.append(f"cells[{i}].{key} percentiles are not ordered")
        errors = cell.get("errors")
        if isinstance(errors, dict):
            total = sum(int(e.get("count", 0)) for e in errors.values())
            if total != cell.get("unexpected_errors"):
                problems.append(f"cells[{i}]: errors by code sum to {total}, "
                                f"unexpected_errors is {cell.get('unexpected_errors')}")
        parts = sum(int(cell.get(k, 0) or 0) for k in ("completed", "cancelled", "unfinished",
                                                       "unexpected_errors"))
        if "requests" in cell and parts != cell["requests"]:
            problems.append(f"cells[{i}]: completed + cancelled + unfinished + errors = {parts}, "
                            f"requests = {cell['requests']}")
    return problems


def write_json(path: str, doc: Dict[str, object]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)


def _num(v: Optional[float], digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _pair(dist: Dict[str, Optional[float]], digits: int = 1) -> str:
    return f"{_num(dist.get('p50'), digits)}/{_num(dist.get('p99'), digits)}"


def _blocks(hist: Dict[str, int]) -> str:
    return " ".join(f"{k}:{v}" for k, v in hist.items()) or "-"


def _level(cell: Dict[str, object]) -> str:
    if cell["mode"] == "closed":
        return f"c={int(cell['level'])}"  # type: ignore[arg-type]
    return f"r={cell['level']:g}/s"


def table_rows(cells: Sequence[Dict[str, object]]) -> List[List[str]]:
    """Header and rows of the summary table."""
    rows = [["load", "method", "reqs", "done", "canc", "unfin", "err", "tok/s", "req/s",
             "TTFT p50/p99 ms", "ITL p50/p99 ms", "E2E p50/p99 ms", "tau", "blocks"]]
    for c in cells:
        rows.append([
            _level(c), str(c["method"]), str(c["requests"]), str(c["completed"]),
            str(c["cancelled"]), str(c["unfinished"]), str(c["unexpected_errors"]),
            _num(c["throughput_tok_s"]), _num(c["requests_per_s"], 2),  # type: ignore[arg-type]
            _pair(c["ttft_ms"]), _pair(c["itl_ms"], 2), _pair(c["e2e_ms"], 0),  # type: ignore
            _num(c["tau_mean"], 2), _blocks(c["block_sizes"]),  # type: ignore[arg-type]
        ])
    return rows


def format_table(cells: Sequence[Dict[str, object]], fmt: str = "text") -> str:
    """The summary table as aligned text or as a Markdown table."""
    rows = table_rows(cells)
    if fmt == "markdown":
        out = ["| " + " | ".join(rows[0]) + " |", "|" + "|".join(" --- " for _ in rows[0]) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
        return "\n".join(out)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    left = {0, 1, 13}
    lines = []
    for r in rows:
        lines.append("  ".join(v.ljust(w) if i in left else v.rjust(w)
                               for i, (v, w) in enumerate(zip(r, widths))).rstrip())
    return "\n".join(lines)


def _median(xs: Sequence[float]) -> Optional[float]:
    v = sorted(x for x in xs if x is not None)
    if not v:
        return None
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def summarize_rounds(cells: Sequence[Dict[str, object]],
                     versus: Optional[str] = None) -> List[Dict[str, object]]:
    """One entry per (mode, level, method), in first-seen order, over the rounds of --repeat:
    the median of the cells' throughputs, ITL p50s and taus, every round's throughput, and the
    ratio of the median throughput to the best median of the level (``vs_best``). With
    ``versus`` (a method), entries of that method also get ``versus_best_other``: its median over
    the best median of the level's other methods, and ``itl_p50_vs_ar``: its median ITL p50
    minus AR's (when AR ran at that level)."""
    groups: Dict[tuple, List[Dict[str, object]]] = {}
    for c in cells:
        groups.setdefault((c["mode"], c["level"], c["method"]), []).append(c)
    out: List[Dict[str, object]] = []
    for (mode, level, method), cs in groups.items():
        out.append({
            "mode": mode, "level": level, "method": method, "rounds": len(cs),
            "throughput_tok_s": _median([c["throughput_tok_s"] for c in cs]),  # type: ignore
            "throughput_rounds": [c["throughput_tok_s"] for c in cs],
            "itl_p50_ms": _median([c["itl_ms"]["p50"] for c in cs]),  # type: ignore[index]
            "tau_mean": _median([c["tau_mean"] for c in cs]),  # type: ignore[misc]
            "unexpected_errors": sum(int(c["unexpected_errors"]) for c in cs),  # type: ignore
        })
    for e in out:
        same = [o for o in out if o["mode"] == e["mode"] and o["level"] == e["level"]]
        best = max((o["throughput_tok_s"] or 0) for o in same)
        e["vs_best"] = (e["throughput_tok_s"] or 0) / best if best > 0 else None
        if versus and e["method"] == versus:
            others = [o["throughput_tok_s"] or 0 for o in same if o["method"] != versus]
            e["versus_best_other"] = ((e["throughput_tok_s"] or 0) / max(others)
                                      if others and max(others) > 0 else None)
            ar = [o for o in same if o["method"] == "AR"]
            e["itl_p50_vs_ar"] = (e["itl_p50_ms"] - ar[0]["itl_p50_ms"]
                                  if ar and e["itl_p50_ms"] is not None
                                  and ar[0]["itl_p50_ms"] is not None else None)
    return out


def median_cells(cells: Sequence[Dict[str, object]]) -> List[Dict[str, object]]:
    """Per (mode, level, method) the cell of median throughput (the lower middle one of an even
    count), in first-seen order: what the plots draw when cells were repeated."""
    groups: Dict[tuple, List[Dict[str, object]]] = {}
    for c in cells:
        groups.setdefault((c["mode"], c["level"], c["method"]), []).append(c)
    out = []
    for cs in groups.values():
        ranked = sorted(cs, key=lambda c: c["throughput_tok_s"])  # type: ignore[arg-type,return-value]
        out.append(ranked[(len(ranked) - 1) // 2])
    return out


def format_summary(summary: Sequence[Dict[str, object]], versus: Optional[str] = None) -> str:
    """The --repeat summary as aligned text."""
    rows = [["load", "method", "rounds", "tok/s median", "tok/s each round", "vs best",
             "ITL p50 ms", "tau"]]
    if versus:
        rows[0] += [f"{versus} / best other", "ITL p50 - AR's"]
    for e in summary:
        row = [_level(e), str(e["method"]), str(e["rounds"]), _num(e["throughput_tok_s"]),
               " ".join(_num(x, 0) for x in e["throughput_rounds"]),  # type: ignore[union-attr]
               _num(e["vs_best"], 2), _num(e["itl_p50_ms"], 2),  # type: ignore[arg-type]
               _num(e["tau_mean"], 2)]  # type: ignore[arg-type]
        if versus:
            row += [_num(e.get("versus_best_other"), 2),  # type: ignore[arg-type]
                    _num(e.get("itl_p50_vs_ar"), 2)]  # type: ignore[arg-type]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) if i in (0, 1, 4) else v.rjust(w)
                               for i, (v, w) in enumerate(zip(r, widths))).rstrip()
                     for r in rows)


def format_errors(cells: Sequence[Dict[str, object]]) -> str:
    """One line per (cell, gRPC code) with a sample message; empty when there were none."""
    lines = []
    for c in cells:
        for code, e in c["errors"].items():  # type: ignore[union-attr]
            lines.append(f"{_level(c)} {c['method']}: {code} x{e['count']}: {e['sample']}")
    return "\n".join(lines)
