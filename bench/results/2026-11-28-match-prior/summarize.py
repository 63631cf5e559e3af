"""Medians and ranges of run.sh's rounds: each arm's DFLASH_ADAPTIVE and NGRAM speedup over AR
(same run), DFLASH_ADAPTIVE over NGRAM, and DFLASH_ADAPTIVE's tau, per dataset and temperature.
Usage: python3 summarize.py OUT"""
import collections, glob, json, os, re, statistics, sys

out = sys.argv[1]
rows = collections.defaultdict(list)  # (t, dataset, arm) -> [(adaptive, ngram, tau)]
for path in sorted(glob.glob(os.path.join(out, "r*_t*_*.json"))):
    m = re.match(r"r(\d+)_t(\d)_(\w+)\.json", os.path.basename(path))
    t, arm = m.group(2), m.group(3)
    by = collections.defaultdict(dict)
    for r in json.load(open(path))["results"]:
        by[r["dataset"]][r["method"]] = r
    for ds, methods in by.items():
        a, n = methods["DFLASH_ADAPTIVE"], methods["NGRAM"]
        assert a["matches_ar"] == a["prompts"] or t != "0", (path, ds)
        rows[(t, ds, arm)].append((a["speedup_vs_ar"], n["speedup_vs_ar"], a["tau"]))

def fmt(xs):
    return f"{statistics.median(xs):.3f} ({min(xs):.3f}-{max(xs):.3f})"

print("| T | dataset | arm | rounds | ADAPTIVE/AR | NGRAM/AR | ADAPTIVE/NGRAM | ADAPTIVE tau |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for (t, ds, arm), v in sorted(rows.items()):
    print(f"| {t} | {ds} | {arm} | {len(v)} | {fmt([x[0] for x in v])} | "
          f"{fmt([x[1] for x in v])} | {fmt([x[0] / x[1] for x in v])} | "
          f"{statistics.median(x[2] for x in v):.2f} |")
