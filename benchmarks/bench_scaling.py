"""How the cost of FOCUS, WECHSEL, Tik-to-Tok and the ``init`` command grows with the vocabularies (issue 27, item 5).

Each point is one ``python -m harness.cli init --method M`` process (what ``tokxfer init`` runs), cold (an empty
``TOKXFER_CACHE``), on the synthetic XLM-R-shaped inputs of :mod:`benchmarks.bench_scale` built for that point's
source vocabulary, target vocabulary and embedding size; the process's wall and CPU seconds and peak RSS
(``wait4``) are recorded with the load average while it ran (:mod:`benchmarks._load`). ``init`` is the command
with ``--method random``: loading, checks, installing and saving without a method's work.

The sizes grow together, source ``8k -> 256k`` with target ``4k -> 128k`` (each target half its source,
``--sources`` / ``--targets``), at 768-d and 2048-d embeddings (``--dims``). Per method and dimension the
log-log slope of wall seconds and of peak RSS against the source vocabulary is fitted (least squares on
``log size``: 1 is linear growth, 2 quadratic), and a plot of both (``--plot``, matplotlib) is written. Issue 27
asks that a 256k x 2048 source with a 128k target initialize in at most 8 GB peak: the table marks it.

Run (the full grid takes hours and the input files of the largest points are several GB; on an idle machine)::

    python benchmarks/bench_scaling.py --work-dir /tmp/scaling --json benchmarks/results/scaling.json \\
        --plot benchmarks/results/scaling.png

Smoke test (small points only)::

    python benchmarks/bench_scaling.py --max 32000 --dims 768 --methods focus,init
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._load import LoadMonitor, banner, combine  # noqa: E402
from benchmarks.bench_scale import Sizes, build_inputs_isolated, child_env, init_command, run_child  # noqa: E402

SOURCES = (8_000, 32_000, 128_000, 256_000)
TARGETS = (4_000, 16_000, 64_000, 128_000)
DIMS = (768, 2048)
METHODS = {"focus": "focus", "wechsel": "wechsel", "tiktotok": "tiktotok", "init": "random"}
"""Benchmark name -> registered method run by ``tokxfer init`` (``init``: the command around a trivial method)."""
MEMORY_TARGET_GB = 8.0
"""Peak RSS of a 256k x 2048 source with a 128k target, at most (issue 27), in GB (10^9 bytes); the points' RSS is in
GiB (``peak_rss_gb``: ``wait4``'s KiB / 2^20, the unit of every benchmark here), compared as 8 GB = 7.45 GiB."""


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ``log y`` on ``log x`` (``None`` with fewer than two distinct positive points).

    Example:
        >>> slope([1e3, 1e4, 1e5], [2.0, 20.0, 200.0])
        1.0
    """
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys) if x > 0 and y > 0]
    if len({p[0] for p in pts}) < 2:
        return None
    mx, my = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return round(sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx, 3)


def run_point(name: str, sizes: Sizes, work: Path, threads: int, timeout: float) -> dict:
    """One method at one size: build (or reuse) the inputs, run ``tokxfer init`` cold, measure."""
    inputs = work / f"s{sizes.source_vocab}-t{sizes.target_vocab}-d{sizes.dim}"
    files = build_inputs_isolated(inputs, sizes)  # in a child: this process's peak RSS is every child's floor
    cache = Path(tempfile.mkdtemp(prefix=f"cache-{name}-", dir=work))
    out = inputs / "out" / name
    cmd = init_command(METHODS[name], files["paths"], out, sizes.seed, [])
    try:
        with LoadMonitor() as mon:
            res = run_child(cmd, child_env(threads, cache), inputs / f"{name}.log", timeout)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    return {"method": name, "source_vocab": files["sizes"]["n_source"], "target_vocab": files["sizes"]["n_target"],
            "dim": sizes.dim, "exit": res["exit"], "timed_out": res["timed_out"], "wall_s": res["wall_s"],
            "cpu_s": res["cpu_s"], "peak_rss_gb": res["peak_rss_gb"], "rss_floor_gb": res["rss_floor_gb"],
            "peak_rss_floor_bound": res["peak_rss_floor_bound"], "load": mon.record(),
            "last_output": res["last_output"] if res["exit"] else None}


def fits(points: list[dict]) -> dict:
    """Per ``method@dim``: log-log slopes of wall seconds and peak RSS against the source vocabulary."""
    out: dict = {}
    for key in sorted({(p["method"], p["dim"]) for p in points}):
        ok = [p for p in points if (p["method"], p["dim"]) == key and p["exit"] == 0]
        xs = [p["source_vocab"] for p in ok]
        out[f"{key[0]}@{key[1]}"] = {"points": len(ok), "wall_slope": slope(xs, [p["wall_s"] for p in ok]),
                                     "rss_slope": slope(xs, [p["peak_rss_gb"] for p in ok]),
                                     "busy_points": sum(p["load"]["busy"] for p in ok)}
    return out


def table(record: dict) -> str:
    """Markdown: one row per point, then the fitted slopes."""
    rows = ["| method | dim | source | target | wall s | CPU s | peak RSS GiB | load max | note |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for p in record["points"]:
        note = [] if p["exit"] == 0 else ["TIMED OUT" if p["timed_out"] else f"exit {p['exit']}"]
        if p["load"]["busy"]:
            note.append("BUSY machine: not a result")
        if p.get("peak_rss_floor_bound", False):
            note.append(f"RSS is the benchmark's own {p['rss_floor_gb']} GiB floor: an upper bound")
        if (p["source_vocab"], p["target_vocab"], p["dim"]) == (256_000, 128_000, 2048):
            note.append(f"≤ {MEMORY_TARGET_GB:g} GB: {'yes' if p['peak_rss_gb'] * 2**30 <= MEMORY_TARGET_GB * 1e9 else 'NO'}")
        rows.append(f"| {p['method']} | {p['dim']} | {p['source_vocab']:,} | {p['target_vocab']:,} | {p['wall_s']:.1f} | "
                    f"{p['cpu_s']:.1f} | {p['peak_rss_gb']:.2f} | {p['load']['max_1min']} | {'; '.join(note)} |")
    rows += ["", "| method@dim | points | wall slope | RSS slope | busy points |", "|---|---:|---:|---:|---:|"]
    for k, f in record["fits"].items():
        rows.append(f"| {k} | {f['points']} | {f['wall_slope']} | {f['rss_slope']} | {f['busy_points']} |")
    return "\n".join(rows)


def plot(record: dict, path: Path) -> None:
    """Wall seconds and peak RSS against the source vocabulary, log-log, one line per method and dimension."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for key in record["fits"]:
        method, dim = key.split("@")
        ok = sorted((p for p in record["points"] if p["method"] == method and str(p["dim"]) == dim and p["exit"] == 0),
                    key=lambda p: p["source_vocab"])
        for ax, field in zip(axes, ("wall_s", "peak_rss_gb")):
            ax.plot([p["source_vocab"] for p in ok], [p[field] for p in ok], marker="o", label=f"{key} ({record['fits'][key]['wall_slope']})")
    for ax, label in zip(axes, ("wall seconds", "peak RSS (GiB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("source vocabulary (target = half)")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7, title="method@dim (wall slope)", title_fontsize=7)
    busy = " — LOADED MACHINE, not a result" if record["load"]["busy"] else ""
    fig.suptitle(f"tokxfer init, cold, {record['threads']} threads{busy}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def _sizes(text: str, flag: str) -> list[int]:
    try:
        vals = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"{flag}: expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 1:
        raise SystemExit(f"{flag}: expected positive integers, got {text!r}")
    return vals


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sources", default=",".join(map(str, SOURCES)), help="source vocabularies (paired with --targets)")
    p.add_argument("--targets", default=",".join(map(str, TARGETS)), help="target vocabularies, one per source")
    p.add_argument("--dims", default=",".join(map(str, DIMS)), help="embedding sizes (default 768,2048)")
    p.add_argument("--methods", default=",".join(METHODS), help=f"a subset of {','.join(METHODS)}")
    p.add_argument("--max", type=int, default=None, help="run only the points whose source vocabulary is at most this (smoke test)")
    p.add_argument("--threads", type=int, default=2, help="BLAS/OpenMP threads of each process (default 2)")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds after which a point is killed")
    p.add_argument("--work-dir", type=Path, default=None, help="where the inputs are built (reused); default a temporary folder")
    p.add_argument("--json", type=Path, default=None, help="write the result here")
    p.add_argument("--plot", type=Path, default=None, help="write the log-log plot here (PNG)")
    args = p.parse_args(argv)
    sources, targets, dims = _sizes(args.sources, "--sources"), _sizes(args.targets, "--targets"), _sizes(args.dims, "--dims")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if len(sources) != len(targets):
        p.error(f"--sources and --targets pair up: got {len(sources)} sources and {len(targets)} targets")
    if bad := [m for m in methods if m not in METHODS]:
        p.error(f"--methods: unknown {bad}; expected some of {','.join(METHODS)}")
    if bad := [(s, t) for s, t in zip(sources, targets) if t < 300 or s < 2 * t]:
        p.error(f"--sources/--targets: each target must be >= 300 and each source >= 2 x its target, got {bad}")
    pairs = [(s, t) for s, t in zip(sources, targets) if args.max is None or s <= args.max]
    if not pairs:
        p.error(f"--max {args.max}: no source vocabulary of {sources} is that small")
    tmp = None if args.work_dir else tempfile.mkdtemp(prefix="bench-scaling-")
    work = Path(args.work_dir or tmp)
    work.mkdir(parents=True, exist_ok=True)
    points = []
    try:
        for dim in dims:
            for s, t in pairs:
                for m in methods:
                    print(f"{m}: {s:,} x {t:,}, dim {dim} ...", flush=True)
                    sizes = Sizes(source_vocab=s, target_vocab=t, dim=dim, dictionary=min(5000, max(200, t // 2)))
                    points.append(run_point(m, sizes, work, args.threads, args.timeout))
                    r = points[-1]
                    print(f"  exit {r['exit']}: {r['wall_s']} s, peak RSS {r['peak_rss_gb']} GiB, load max {r['load']['max_1min']}", flush=True)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    record = {"bench": "scaling", "threads": args.threads, "points": points, "fits": fits(points),
              "load": combine([r["load"] for r in points])}
    record["table"] = table(record)
    print("\n" + record["table"] + "\n\n" + banner(record["load"]))
    if args.plot:
        plot(record, args.plot)
        print(f"plot: {args.plot}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp_json = args.json.with_suffix(".json.tmp")
        tmp_json.write_text(json.dumps(record, indent=1) + "\n")
        os.replace(tmp_json, args.json)
        print(f"result: {args.json}")
    return 1 if any(r["exit"] for r in points) else 0


if __name__ == "__main__":
    raise SystemExit(main())
