#!/usr/bin/env python3
"""Summarizes run.sh's output directory: per-pair ratios (before over after) and medians."""
import glob
import json
import statistics
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def main(out):
    pairs = sorted({int(p.rsplit("_p", 1)[1].split(".")[0]) for p in glob.glob(f"{out}/floor_after_p*.json")})
    print(f"{len(pairs)} pairs")
    print("\n1-token step of the 100M shape, 2 threads, fraction of the triad's floor (median of each process's rounds):")
    print("| dtype | before: median (range) | after: median (range) | step ms before/after, median of pairs |")
    print("| --- | --- | --- | --- |")
    for dtype in ("bf16", "f32"):
        frac = {"before": [], "after": []}
        ratios = []
        for p in pairs:
            row = {}
            for b in ("before", "after"):
                r = next(x for x in load(f"{out}/floor_{b}_p{p}.json") if x["dtype"] == dtype)
                frac[b].append(r["floor_fraction_median"])
                row[b] = r["ms"]["1"]
            ratios.append(row["before"] / row["after"])
        f = {b: f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" for b, v in frac.items()}
        print(f"| {dtype} | {f['before']} | {f['after']} | {statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f}) |")
    print("\nForwards, bf16: time before over after, median of pairs (range); medians of ms")
    print("| threads | shape | rows | before/after | ms before | ms after |")
    print("| --- | --- | --- | --- | --- | --- |")
    for t in (2, 1):
        for shape in ("100M", "7M"):
            for k in ("1", "4", "17"):
                ratios, ms = [], {"before": [], "after": []}
                for p in pairs:
                    v = {}
                    for b in ("before", "after"):
                        r = next(x for x in load(f"{out}/rows_t{t}_{b}_p{p}.json") if x["model"] == shape)
                        v[b] = r["ms"][k]
                        ms[b].append(v[b])
                    ratios.append(v["before"] / v["after"])
                print(f"| {t} | {shape} | {k} | {statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f}) "
                      f"| {statistics.median(ms['before']):.3f} | {statistics.median(ms['after']):.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])
