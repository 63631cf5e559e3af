#!/usr/bin/env python3
"""Summarizes run.sh's pairs: per shape, dtype and rows, time before over after."""
import glob
import json
import statistics
import sys


def main(out):
    pairs = sorted({int(p.rsplit("_p", 1)[1].split(".")[0]) for p in glob.glob(f"{out}/after_p*.json")})
    print(f"{len(pairs)} pairs, 200 cached tokens, 2 threads")
    print("| shape | dtype | rows | before/after, median of pairs (range) | ms before | ms after |")
    print("| --- | --- | --- | --- | --- | --- |")
    for size in ("100M", "7M"):
        for dtype in ("bf16", "f32"):
            for k in ("1", "17"):
                ms = {"before": [], "after": []}
                for p in pairs:
                    for b in ms:
                        with open(f"{out}/{b}_p{p}.json") as f:
                            row = next(x for x in json.load(f) if x["model"] == size and x["dtype"] == dtype)
                        ms[b].append(row["ms"][k])
                r = [b / a for b, a in zip(ms["before"], ms["after"])]
                print(f"| {size} | {dtype} | {k} | {statistics.median(r):.3f} ({min(r):.2f}-{max(r):.2f}) "
                      f"| {statistics.median(ms['before']):.3f} | {statistics.median(ms['after']):.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])
