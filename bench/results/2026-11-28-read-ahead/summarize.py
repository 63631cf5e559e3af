#!/usr/bin/env python3
"""Summarizes run.sh: per shape, dtype and rows, the time without read-ahead over the time with
it (median over processes of each process's medians), and the floor rounds' fractions."""
import glob
import json
import statistics
import sys


def main(out):
    rows = {}
    for path in sorted(glob.glob(f"{out}/compare_p*.json")):
        with open(path) as f:
            results = json.load(f)
        # Each process's rows come in order: per shape, per dtype, per k.
        shapes = {"100M": [], "7M": []}
        for r in results:
            shape = "100M" if r["params"] > 50e6 else "7M"
            shapes[shape].append(r)
        for shape, rs in shapes.items():
            ks_per_dtype = len(rs) // 2
            for i, r in enumerate(rs):
                dtype = "bf16" if i < ks_per_dtype else "f32"
                rows.setdefault((shape, dtype, r["k"]), []).append(r)
    n = len(glob.glob(f"{out}/compare_p*.json"))
    print(f"{n} processes, forwards alternating in each, 200 cached tokens, 2 threads")
    print("| shape | dtype | rows | without / with read-ahead, median (range) | ms with | ms without |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (shape, dtype, k), rs in rows.items():
        ratios = [r["no_read_ahead_ms"] / r["read_ahead_ms"] for r in rs]
        with_ms = statistics.median(r["read_ahead_ms"] for r in rs)
        without_ms = statistics.median(r["no_read_ahead_ms"] for r in rs)
        print(f"| {shape} | {dtype} | {k} | {statistics.median(ratios):.3f} "
              f"({min(ratios):.3f}-{max(ratios):.3f}) | {with_ms:.3f} | {without_ms:.3f} |")
    rounds = {}
    for path in sorted(glob.glob(f"{out}/floor_p*.json")):
        with open(path) as f:
            for r in json.load(f):
                rounds.setdefault(r["dtype"], []).extend(r["floor_rounds"])
    # A round whose triad read low ran beside other load on the machine, which slows the triad
    # more than the step: its fraction overstates.
    for label, keep in (("every round", lambda x: True),
                        ("rounds with the triad at 60 GB/s or more", lambda x: x["triad_gbs"] >= 60)):
        print(f"\nfloor, {label}:")
        for dtype, rs in rounds.items():
            kept = [x for x in rs if keep(x)]
            if not kept:
                continue
            fs = [x["fraction"] for x in kept]
            gbs = [x["triad_gbs"] for x in kept]
            print(f"  {dtype}: median {statistics.median(fs):.2f} ({min(fs):.2f}-{max(fs):.2f}), "
                  f"{len(fs)} rounds, triad {min(gbs):.1f}-{max(gbs):.1f} GB/s")


if __name__ == "__main__":
    main(sys.argv[1])
