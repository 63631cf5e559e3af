#!/usr/bin/env python3
"""Summarizes run.sh's OUT: per variant and method, medians over the rounds of the load tester's
throughput and latencies, and of the TTFT of short and long (over 1,000 tokens) prompts from the
router's request log. Writes OUT/summary.md and OUT/summary.json.
    summarize.py OUT"""
import glob
import json
import os
import statistics
import sys

out = sys.argv[1]


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def ttft_by_length(log):
    """TTFT p50 and p90 of the short and the long prompts, per method, from a router log."""
    got = {}
    for line in open(log):
        if " request " not in line or "status=OK" not in line:
            continue
        f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
        kind = "long" if int(f["prompt_tokens"]) > 1000 else "short"
        got.setdefault((f["method"], kind), []).append(float(f["ttft_ms"]))
    return {k: (pct(v, 0.5), pct(v, 0.9)) for k, v in got.items()}


NONE = (float("nan"), float("nan"))  # no prompt of that kind


rows = {}
for path in sorted(glob.glob(os.path.join(out, "*", "results.json"))):
    cell_dir = os.path.dirname(path)
    variant = os.path.basename(cell_dir).split("-")[0]
    ttft = ttft_by_length(os.path.join(cell_dir, "router.log"))
    for c in json.load(open(path))["cells"]:
        short = ttft.get((c["method"], "short"), NONE)
        long_ = ttft.get((c["method"], "long"), NONE)
        rows.setdefault((c["method"], variant), []).append({
            "tok_s": c["throughput_tok_s"], "itl_p50": c["itl_ms"]["p50"],
            "itl_p99": c["itl_ms"]["p99"], "itl_max": c["itl_ms"]["max"],
            "ttft_p50": c["ttft_ms"]["p50"], "ttft_p99": c["ttft_ms"]["p99"],
            "short_ttft_p50": short[0], "short_ttft_p90": short[1],
            "long_ttft_p50": long_[0], "long_ttft_p90": long_[1]})
fields = ["tok_s", "itl_p50", "itl_p99", "itl_max", "ttft_p50", "ttft_p99", "short_ttft_p50",
          "short_ttft_p90", "long_ttft_p50", "long_ttft_p90"]
summary = []
lines = ["| method | variant | rounds | tok/s | ITL p50 / p99 / max ms | TTFT p50 / p99 ms "
         "| short prompts' TTFT p50 / p90 ms | long prompts' TTFT p50 / p90 ms |",
         "| --- | --- | --- | --- | --- | --- | --- | --- |"]
for key in sorted(rows, key=lambda k: (k[0], k[1] != "before", -int(k[1][7:] or 0))):
    med = {f: statistics.median(r[f] for r in rows[key]) for f in fields}
    method, variant = key
    summary.append({"method": method, "variant": variant, "rounds": len(rows[key]), **med,
                    "each_round": rows[key]})
    lines.append(f"| {method} | {variant} | {len(rows[key])} | {med['tok_s']:.0f} | "
                 f"{med['itl_p50']:.2f} / {med['itl_p99']:.1f} / {med['itl_max']:.0f} | "
                 f"{med['ttft_p50']:.1f} / {med['ttft_p99']:.0f} | "
                 f"{med['short_ttft_p50']:.1f} / {med['short_ttft_p90']:.0f} | "
                 f"{med['long_ttft_p50']:.0f} / {med['long_ttft_p90']:.0f} |")
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
open(os.path.join(out, "summary.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
