"""Checks the results.json of the load tester's integration runs (see run_integration.sh).

    check_results.py sweep DIR N      closed-loop sweep of AR and DFLASH_ADAPTIVE, N new tokens
    check_results.py http DIR N       the same methods at concurrency 2 over --http, with cancels
    check_results.py ar DIR N         the other methods at concurrency 3, checked against AR
    check_results.py poisson DIR N    open-loop run with client cancels

Exit status 0 when every check passes, 1 otherwise (each failed check is printed).
"""

import json
import os
import sys

_REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(_REPO, "loadtest"))

from specdec_loadtest import plots, report  # noqa: E402


def check(kind: str, out_dir: str, max_new_tokens: int) -> list:
    with open(os.path.join(out_dir, "results.json"), encoding="utf-8") as f:
        doc = json.load(f)
    bad = [f"schema: {p}" for p in report.validate(doc)]
    if not doc["ok"]:
        bad.append(f"run failures: {doc['failures']}")
    handles = doc.get("check_handles")
    if not handles or not handles.get("ok"):
        bad.append(f"--check-handles did not pass: {handles}")
    if not doc["router"].get("info", {}).get("methods"):
        bad.append("router GetInfo missing from results.json")
    cells = doc["cells"]
    want_mode = "closed" if kind in ("sweep", "http", "ar") else "open"
    if not cells:
        bad.append("no cells")
    for c in cells:
        name = f"{c['mode']} {c['level']} {c['method']}"
        if c["mode"] != want_mode:
            bad.append(f"{name}: mode {c['mode']}, expected {want_mode}")
        if c["requests"] <= 0 or c["completed"] <= 0:
            bad.append(f"{name}: {c['requests']} requests, {c['completed']} completed")
        if c["unexpected_errors"]:
            bad.append(f"{name}: unexpected errors {c['errors']}")
        ct = c["completion_tokens"]
        if ct["min"] != max_new_tokens or ct["max"] != max_new_tokens:
            bad.append(f"{name}: completion tokens {ct}, expected {max_new_tokens} (ignore-eos)")
        if c["short_completions"] or c["stream_mismatches"]:
            bad.append(f"{name}: short {c['short_completions']}, "
                       f"mismatched {c['stream_mismatches']}")
        # A load-aware router may run DFLASH_ADAPTIVE requests as plain AR under load.
        allowed = {c["method"], "AR"} if c["method"] == "DFLASH_ADAPTIVE" else {c["method"]}
        if c["method"] not in c["methods_run"] or not set(c["methods_run"]) <= allowed:
            bad.append(f"{name}: the router ran {c['methods_run']}")
        if c["method"] == "AR" and abs((c["tau_mean"] or 0) - 1.0) > 1e-9:
            bad.append(f"{name}: AR tau {c['tau_mean']}, expected 1.0")
        # Alone (closed loop at 1), DFLASH* speculates; under load a load-aware router may run
        # every step of an adaptive request as AR (tau 1, nothing drafted).
        alone = c["mode"] == "closed" and float(c["level"]) == 1.0
        if c["method"].startswith("DFLASH") and (alone or c["method"] != "DFLASH_ADAPTIVE"):
            if not (c["tau_mean"] or 0) > 1.0:
                bad.append(f"{name}: tau {c['tau_mean']}, expected > 1")
            if not c["block_sizes"] or c["drafted_tokens"] <= 0:
                bad.append(f"{name}: no block sizes / drafted tokens")
        elif c["method"].startswith("DFLASH") and not (c["tau_mean"] or 0) >= 1.0:
            bad.append(f"{name}: tau {c['tau_mean']}, expected >= 1")
        if c["throughput_tok_s"] <= 0 or c["ttft_ms"]["count"] == 0 or c["itl_ms"]["count"] == 0:
            bad.append(f"{name}: no throughput or latency samples")
        if kind == "poisson" and c["cancelled"] < 1:
            bad.append(f"{name}: no client cancels recorded")
        if kind in ("sweep", "http", "ar"):  # run with --check-ar
            arc = c.get("ar_check") or {}
            if arc.get("differ") != 0 or arc.get("checked", 0) < c["completed"]:
                bad.append(f"{name}: AR check {arc}, expected every completion equal to AR")
    if kind == "sweep":
        levels = sorted({(c["method"], c["level"]) for c in cells})
        want = sorted((m, float(lv)) for m in ("AR", "DFLASH_ADAPTIVE") for lv in (1, 2))
        if levels != want:
            bad.append(f"cells {levels}, expected {want}")
        for c in cells:
            if "metrics" not in c or not any(
                    "counters" in v for v in c["metrics"].values()):
                bad.append(f"{c['method']} {c['level']}: no /metrics delta")
    if kind == "http":
        transport = doc.get("transport") or {}
        if transport.get("kind") != "http":
            bad.append(f"transport {transport}, expected http")
        levels = sorted((c["method"], c["level"]) for c in cells)
        want = [("AR", 2.0), ("DFLASH_ADAPTIVE", 2.0)]
        if levels != want:
            bad.append(f"cells {levels}, expected {want}")
        for c in cells:
            name = f"http {c['method']}"
            if c["cancelled"] != 2 or c["completed"] != 2:
                bad.append(f"{name}: {c['completed']} completed, {c['cancelled']} cancelled, "
                           "expected 2 and 2 (seed 3)")
            # The router counts the cell's HTTP requests: the measured ones, and any filler
            # request cancelled at the end of the cell.
            counters = {}
            for v in (c.get("metrics") or {}).values():
                counters.update(v.get("counters") or {})
            http = {k: v for k, v in counters.items()
                    if k.startswith("specdec_http_requests_total{")
                    and 'endpoint="/v1/completions"' in k}
            ok = sum(v for k, v in http.items() if 'code="200"' in k)
            if ok < c["completed"] or sum(http.values()) < c["requests"]:
                bad.append(f"{name}: specdec_http_requests_total deltas {http}, expected at "
                           f"least {c['completed']} with code 200 of {c['requests']}")
    if kind == "ar":
        methods = sorted(c["method"] for c in cells)
        want = sorted(["DFLASH", "DRAFT_CHAIN", "DYSPEC_TREE", "NGRAM"])
        if methods != want:
            bad.append(f"methods {methods}, expected {want}")
    if kind == "poisson":
        mem = doc.get("memory") or {}
        if len(mem) < 3 or any(m["baseline_mib"] is None or not m["alive"] for m in mem.values()):
            bad.append(f"--watch-pid: expected the live services, got {mem and list(mem)}")
    want_pngs = [f"{p}_{want_mode}.png" for p in ("throughput", "itl_p50", "ttft", "e2e")]
    for png in want_pngs:
        if png not in doc["plots"] or not plots.is_png(os.path.join(out_dir, png)):
            bad.append(f"{png} missing or not a PNG")
    return bad


def main() -> int:
    kind, out_dir, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    bad = check(kind, out_dir, n)
    for b in bad:
        print(f"check_results {kind}: FAIL: {b}", file=sys.stderr)
    if not bad:
        print(f"check_results {kind}: ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
