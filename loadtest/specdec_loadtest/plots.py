"""PNG plots of a run, drawn by gnuplot.

For every load mode of the run (closed-loop concurrency, open-loop rate) one data file
``plot_<mode>.dat`` (a block per method) and these plots, one line per method:

- ``throughput_<mode>.png``: output tokens/s against the load level;
- ``itl_p50_<mode>.png``: median inter-token latency;
- ``ttft_<mode>.png``: TTFT p50 (solid) and p99 (dashed);
- ``e2e_<mode>.png``: end-to-end latency p50 (solid) and p99 (dashed);

and ``rss.png`` (resident memory of the watched processes over time) when ``--watch-pid`` was
given. The script, ``plots.gp``, refers to files by name and is run inside the output
directory, so it can be edited and re-run there (``gnuplot plots.gp``).
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from typing import Dict, List, Optional, Sequence, Tuple

# Columns of plot_<mode>.dat (1-based in gnuplot).
COLUMNS = ("level", "tok_s", "req_s", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "e2e_p50",
           "e2e_p99", "tau")
_COL = {name: i + 1 for i, name in enumerate(COLUMNS)}
_XLABEL = {"closed": "concurrency (requests in flight)", "open": "offered rate (requests/s)"}
_TITLE = {"closed": "closed loop", "open": "open loop (Poisson)"}


def _fmt(v: Optional[float]) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "NaN"
    return f"{v:.6g}"


def methods_of(cells: Sequence[Dict[str, object]], mode: str) -> List[str]:
    """The methods of ``mode`` in first-seen order."""
    seen: List[str] = []
    for c in cells:
        if c["mode"] == mode and c["method"] not in seen:
            seen.append(str(c["method"]))
    return seen


def data_text(cells: Sequence[Dict[str, object]], mode: str) -> str:
    """plot_<mode>.dat: per method (in first-seen order) a block of rows sorted by level,
    blocks separated by two blank lines (gnuplot's ``index``)."""
    blocks = []
    for method in methods_of(cells, mode):
        rows = sorted((c for c in cells if c["mode"] == mode and c["method"] == method),
                      key=lambda c: float(c["level"]))  # type: ignore[arg-type]
        lines = [f"# {method}: " + " ".join(COLUMNS)]
        for c in rows:
            vals = [c["level"], c["throughput_tok_s"], c["requests_per_s"],
                    c["ttft_ms"]["p50"], c["ttft_ms"]["p99"],  # type: ignore[index]
                    c["itl_ms"]["p50"], c["itl_ms"]["p99"],  # type: ignore[index]
                    c["e2e_ms"]["p50"], c["e2e_ms"]["p99"], c["tau_mean"]]  # type: ignore[index]
            lines.append(" ".join(_fmt(v) for v in vals))  # type: ignore[arg-type]
        blocks.append("\n".join(lines))
    return "\n\n\n".join(blocks) + "\n"


def _quote(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _plot(png: str, title: str, xlabel: str, ylabel: str, series: List[str],
          logx: bool) -> List[str]:
    return [
        f"set output {_quote(png)}",
        f"set title {_quote(title)}",
        f"set xlabel {_quote(xlabel)}",
        f"set ylabel {_quote(ylabel)}",
        "set logscale x 2" if logx else "unset logscale x",
        "set yrange [0:*]",
        "plot " + ", \\\n     ".join(series),
    ]


def script_text(cells: Sequence[Dict[str, object]], *, terminal: str = "pngcairo",
                rss: bool = False, title_suffix: str = "") -> Tuple[str, List[str]]:
    """The gnuplot script for ``cells`` and the PNG files it writes (names only)."""
    size = "size 900,560"
    font = " font 'sans,10'" if terminal == "pngcairo" else ""
    out = ["# Plots of a specdec load test; run inside the output directory: gnuplot plots.gp",
           f"set terminal {terminal} noenhanced {size}{font}",
           "set grid", "set key outside right top", "set datafile missing 'NaN'",
           "set style data linespoints"]
    pngs: List[str] = []
    suffix = f" ({title_suffix})" if title_suffix else ""
    for mode in ("closed", "open"):
        methods = methods_of(cells, mode)
        if not methods:
            continue
        dat = _quote(f"plot_{mode}.dat")
        levels = [float(c["level"]) for c in cells if c["mode"] == mode]  # type: ignore[arg-type]
        logx = mode == "closed" and min(levels) > 0 and len(set(levels)) > 1
        xtics = ", ".join(f"{lv:g}" for lv in sorted(set(levels)))
        out.append(f"set xtics ({xtics})")
        lo, hi = min(levels), max(levels)
        if logx:  # a margin around the outermost levels keeps their tics and points visible
            out.append(f"set xrange [{lo / 1.25:g}:{hi * 1.25:g}]")
        else:
            pad = (hi - lo) * 0.05 if hi > lo else max(abs(lo) * 0.5, 0.5)
            out.append(f"set xrange [{max(lo - pad, 0):g}:{hi + pad:g}]")

        def series(col: str, label: str = "", dash: int = 1) -> List[str]:
            return [f"{dat} index {i} using 1:{_COL[col]} lc {i + 1} dt {dash} pt {i + 1} lw 2 "
                    f"title {_quote(m + label)}" for i, m in enumerate(methods)]

        x = _XLABEL[mode]
        t = _TITLE[mode] + suffix
        for png, title, ylabel, ser in (
            (f"throughput_{mode}.png", f"Output throughput, {t}", "output tokens/s",
             series("tok_s")),
            (f"itl_p50_{mode}.png", f"Inter-token latency p50, {t}", "ms / token",
             series("itl_p50")),
            (f"ttft_{mode}.png", f"Time to first token p50 (solid) / p99 (dashed), {t}", "ms",
             series("ttft_p50", " p50") + series("ttft_p99", " p99", 2)),
            (f"e2e_{mode}.png", f"End-to-end latency p50 (solid) / p99 (dashed), {t}", "ms",
             series("e2e_p50", " p50") + series("e2e_p99", " p99", 2)),
        ):
            out += _plot(png, title, x, ylabel, ser, logx)
            pngs.append(png)
        out += ["unset xtics", "set xtics", "set autoscale x"]
    if rss:
        out += ["unset logscale x", "set xtics", "set autoscale x",
                "set output 'rss.png'", "set title 'Resident memory of the watched processes'",
                "set xlabel 'seconds since start'", "set ylabel 'RSS (MiB)'", "set yrange [0:*]",
                "plot for [i=0:*] 'rss.dat' index i using 1:2 with lines lw 2 "
                "title columnheader(1)"]
        pngs.append("rss.png")
    out.append("unset output")
    return "\n".join(out) + "\n", pngs


def rss_data_text(memory: Dict[str, Dict[str, object]]) -> str:
    """rss.dat: per process a block headed by its name, rows ``seconds MiB``."""
    blocks = []
    for pid, m in memory.items():
        lines = [f'"{m["name"]}({pid})"']
        lines += [f"{t} {v}" for t, v in m["samples"]]  # type: ignore[union-attr]
        blocks.append("\n".join(lines))
    return "\n\n\n".join(blocks) + "\n"


def pick_terminal(gnuplot: str = "gnuplot") -> str:
    """``pngcairo`` when this gnuplot has it, else ``png`` (libgd)."""
    try:
        r = subprocess.run([gnuplot, "-e", "set terminal pngcairo"], capture_output=True,
                           text=True, timeout=20)
        if r.returncode == 0 and "unknown" not in r.stderr.lower():
            return "pngcairo"
    except (OSError, subprocess.SubprocessError):
        pass
    return "png"


def render(cells: Sequence[Dict[str, object]], out_dir: str, *,
           memory: Optional[Dict[str, Dict[str, object]]] = None, title_suffix: str = "",
           gnuplot: str = "gnuplot") -> Tuple[List[str], str]:
    """Writes the data files and plots.gp into ``out_dir`` and runs gnuplot there.

    Returns (PNG files that exist afterwards, an error message or ""). Without gnuplot the data
    and the script are still written and the message says so.
    """
    os.makedirs(out_dir, exist_ok=True)
    for mode in ("closed", "open"):
        if methods_of(cells, mode):
            with open(os.path.join(out_dir, f"plot_{mode}.dat"), "w", encoding="utf-8") as f:
                f.write(data_text(cells, mode))
    have_rss = bool(memory) and any(m.get("samples") for m in memory.values())  # type: ignore
    if have_rss:
        with open(os.path.join(out_dir, "rss.dat"), "w", encoding="utf-8") as f:
            f.write(rss_data_text(memory))  # type: ignore[arg-type]
    exe = shutil.which(gnuplot)
    terminal = pick_terminal(exe) if exe else "pngcairo"
    text, pngs = script_text(cells, terminal=terminal, rss=have_rss, title_suffix=title_suffix)
    with open(os.path.join(out_dir, "plots.gp"), "w", encoding="utf-8") as f:
        f.write(text)
    if not exe:
        return [], "gnuplot is not installed (apt-get install gnuplot-nox); plots.gp written"
    r = subprocess.run([exe, "plots.gp"], cwd=out_dir, capture_output=True, text=True,
                       timeout=120)
    made = [p for p in pngs if os.path.isfile(os.path.join(out_dir, p))]
    err = ""
    if r.returncode != 0 or len(made) != len(pngs):
        err = f"gnuplot exited {r.returncode}: {r.stderr.strip()[-500:]}"
    return made, err


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def is_png(path: str) -> bool:
    """Whether ``path`` starts with the PNG signature."""
    try:
        with open(path, "rb") as f:
            return f.read(8) == PNG_MAGIC
    except OSError:
        return False
