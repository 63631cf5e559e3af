#!/usr/bin/env python3
"""Summarizes run.sh's long-context pairs: per shape and rows, time before over after."""
import glob
import json
import statistics
import sys


def main(out):
    pairs = sorted({int(p.rsplit("_p", 1)[1].split(".")[0]) for p in glob.glob(f"{out}/long_after_p*.json")})
    print(f"{len(pairs)} pairs, 1,024 cached tokens, bf16, 2 threads")
    print("| shape | rows | before/after, median of pairs (range) | ms before | ms after |")
    print("| --- | --- | --- | --- | --- |")
    for size in ("100M", "7M"):
        for k in ("1", "17"):
            ms = {"before": [], "after": []}
            for p in pairs:
                for b in ms:
                    with open(f"{out}/long_{b}_p{p}.json") as f:
                        row = next(x for x in json.load(f) if x["model"] == size)
                    ms[b].append(row["ms"][k])
            ratios = [b / a for b, a in zip(ms["before"], ms["after"])]
            print(f"| {size} | {k} | {statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f}) "
                  f"| {statistics.median(ms['before']):.3f} | {statistics.median(ms['after']):.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])
