"""Medians (and ranges) over rounds of the cluster's tokens/s ratios in the lookup-runs script's
output (bench/results/2026-11-27-lookup-runs/run.sh OUT BEFORE_BUILD): DFLASH_ADAPTIVE and
NGRAM over AR, and DFLASH_ADAPTIVE over NGRAM, per set and build. Usage: cluster_summary.py OUT"""
import collections, glob, os, re, statistics, sys

rows = collections.defaultdict(list)
for path in glob.glob(os.path.join(sys.argv[1], "*_round*_*.txt")):
    s, build = re.match(r"(\w+)_round\d+_(\w+)\.txt", os.path.basename(path)).group(1, 2)
    tps, same = {}, {}
    for line in open(path):
        f = line.split()
        if f and f[0] in ("AR", "NGRAM", "DFLASH_ADAPTIVE"):
            tps[f[0]] = float(f[3])
            same[f[0]] = f[-1]
    a, n, ar = tps["DFLASH_ADAPTIVE"], tps["NGRAM"], tps["AR"]
    rows[(s, build)].append((a / ar, n / ar, a / n, same["DFLASH_ADAPTIVE"]))

def fmt(xs):
    return f"{statistics.median(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"

print("| set | build | rounds | DFLASH_ADAPTIVE/AR | NGRAM/AR | DFLASH_ADAPTIVE/NGRAM | =in process |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for (s, build), v in sorted(rows.items()):
    print(f"| {s} | {build} | {len(v)} | {fmt([x[0] for x in v])} | {fmt([x[1] for x in v])} | "
          f"{fmt([x[2] for x in v])} | {' '.join(x[3] for x in v)} |")
