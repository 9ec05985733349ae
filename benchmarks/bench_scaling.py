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

The reference implementations beside ours (``--references``, instead of the grid): for each ``--reference-scales``
value and each of FOCUS and WECHSEL, the end-to-end benchmark ``bench_focus.py`` / ``bench_wechsel.py --end-to-end
--scale S --variants reference`` runs as a child process on its own files (source 32k x S, target 16k x S pieces,
768-d; built first in a child of their own, untimed by the run and killed after ``--build-timeout``; reused under
``--work-dir``): ``deepfocus.FOCUS(...)`` / ``WECHSEL(...).apply(...)`` and our method on the same files in the same
run, each after loading. Per method and scale the record holds the sizes, the reference's seconds and ours, their
ratio (:func:`benchmarks._load.ratio`: never a result when the run's load was busy), both worker processes' walls
and the run's load record; per method the log-log slopes of the reference's and of our seconds against the source
vocabulary. A run killed after ``--timeout`` seconds is recorded as ``timed out`` with the step it was in
(``killed_in``), a failed one as ``failed`` with its last line: where the references do not run, the record says
so. The plot draws the references dashed beside ours::

    python benchmarks/bench_scaling.py --references --work-dir /tmp/scaling-refs --timeout 1800 \\
        --json benchmarks/results/scaling_references.json --plot benchmarks/results/scaling_references.png
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

from benchmarks._e2e import subprocess_env  # noqa: E402
from benchmarks._load import LoadMonitor, banner, combine, ratio, shown  # noqa: E402
from benchmarks.bench_scale import Sizes, build_inputs_isolated, child_env, init_command, run_child  # noqa: E402

SOURCES = (8_000, 32_000, 128_000, 256_000)
TARGETS = (4_000, 16_000, 64_000, 128_000)
DIMS = (768, 2048)
METHODS = {"focus": "focus", "wechsel": "wechsel", "tiktotok": "tiktotok", "init": "random"}
"""Benchmark name -> registered method run by ``tokxfer init`` (``init``: the command around a trivial method)."""
MEMORY_TARGET_GB = 8.0
"""Peak RSS of a 256k x 2048 source with a 128k target, at most (issue 27), in GB (10^9 bytes); the points' RSS is in
GiB (``peak_rss_gb``: ``wait4``'s KiB / 2^20, the unit of every benchmark here), compared as 8 GB = 7.45 GiB."""
REFERENCES = {"focus": ("bench_focus", "deepfocus"), "wechsel": ("bench_wechsel", "wechsel")}
"""``--references``: method -> (its end-to-end benchmark, the reference package that benchmark runs beside ours)."""
REFERENCE_SCALES = (0.25, 0.5, 1.0, 2.0)
"""``--references``: the end-to-end benchmarks' ``--scale`` values (source 32k x scale, target 16k x scale: sources
8k -> 64k). Scale 4 (128k / 64k) builds too, but its files alone took 10 min (FOCUS's) and 12 min (WECHSEL's) to
build beside another job on 2 cores (single-threaded SentencePiece and fastText over 100 MB of text per method).
Builds grow about linearly with the scale, so 0.25 to 2 together cost about what scale 4 alone does: without it a
fresh run, builds included, should stay well under an hour on 2 idle cores (an estimate, not yet measured)."""
E2E_SEED, E2E_LANGUAGE = 0, "near"
"""The end-to-end benchmarks' defaults (``--seed``; ``bench_wechsel.py --language``), passed to them explicitly."""
RUN_STEPS = (("running tokxfer", "tokxfer"), ("running deepfocus", "reference"), ("running wechsel", "reference"),
             ("building inputs", "inputs"))
"""Lines the end-to-end benchmarks print as each step starts -> the step (where a timed-out run was killed)."""


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


def build_reference_inputs(method: str, scale: float, work: Path, timeout: float) -> dict:
    """The end-to-end benchmark's own ``e2e_files`` in a child (untimed by the run, which then reuses the files).

    Returns ``exit``, ``timed_out``, ``wall_s`` (this call: seconds when the files were there already), the last
    line of output, and ``manifest`` (the built files' sizes and ``build_s``; ``None`` when the build did not finish).
    """
    module = REFERENCES[method][0]
    extra = f", {E2E_LANGUAGE!r}" if method == "wechsel" else ""
    code = (f"from pathlib import Path; from benchmarks.{module} import e2e_files; "
            f"e2e_files(Path({str(work)!r}), {float(scale)!r}, {E2E_SEED}{extra})")
    work.mkdir(parents=True, exist_ok=True)
    res = run_child([sys.executable, "-c", code], subprocess_env(1, work), work.parent / f"{work.name}.build.log", timeout)
    manifest = work / "manifest.json"
    done = res["exit"] == 0 and manifest.is_file()
    return {"exit": res["exit"], "timed_out": res["timed_out"], "wall_s": res["wall_s"], "last_output": res["last_output"],
            "manifest": json.loads(manifest.read_text()) if done else None}


def reference_command(method: str, scale: float, work: Path, out: Path, threads: int) -> list[str]:
    """``bench_focus.py`` / ``bench_wechsel.py --end-to-end`` with the ``reference`` variant only, on the files in ``work``."""
    script = Path(__file__).resolve().parent / f"{REFERENCES[method][0]}.py"
    cmd = [sys.executable, str(script), "--end-to-end", "--scale", repr(float(scale)), "--seed", str(E2E_SEED),
           "--variants", "reference", "--threads", str(threads), "--work-dir", str(work), "--json", str(out)]
    return cmd + (["--language", E2E_LANGUAGE] if method == "wechsel" else [])


def read_reference(method: str, rec: dict) -> dict:
    """The timings of one end-to-end record: the reference's call and ours (after loading, same files, same run),
    their ratio (a result only when the run's ``load`` was not busy), our method's steps (``ours_steps_s``, where the
record has them), the worker processes' walls."""
    walls = rec["wall_s_information_only"]
    if method == "focus":
        ref, ours_s, ref_wall = rec["deepfocus"], rec["variants"]["reference"]["method_s"], walls["deepfocus"]
        ref_s = ref["focus_s"]
    else:
        ref, ours_s, ref_wall = rec["reference"], rec["variants"]["reference"]["method_s_information_only"], walls["reference"]
        ref_s = ref["wechsel_s"]
    return {"reference_s": ref_s, "reference_load_s": ref["load_s"], "ours_s": ours_s, "ratio": ratio(ref_s, ours_s, rec["load"]),
            "ours_steps_s": rec["variants"]["reference"].get("method_timings_s"),
            "reference_process_s": ref_wall, "ours_process_s": walls["tokxfer-reference"], "load": rec["load"]}


def killed_in(log: Path) -> str:
    """The step a killed end-to-end run was in (:data:`RUN_STEPS`, from its log; ``start``: before any)."""
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines() if log.is_file() else []
    for line in reversed(lines):
        if step := next((name for prefix, name in RUN_STEPS if line.startswith(prefix)), None):
            return step
    return "start"


def reference_point(method: str, scale: float, root: Path, threads: int, timeout: float, build_timeout: float) -> dict:
    """One method's end-to-end benchmark at one scale: build (or reuse) its files, run it (``timeout``), read its JSON.

    Every run gives a record: ``status`` is ``ok``, ``timed out`` (with ``killed_in``: the step), ``failed``,
    ``build timed out`` or ``build failed``; the timings are ``None`` where the run did not finish.
    """
    work = root / f"{method}-scale{scale:g}"
    entry = {"method": method, "reference": REFERENCES[method][1], "scale": scale, "n_source": None, "n_target": None,
             "dim": None, "status": None, "exit": None, "timed_out": False, "killed_in": None, "reference_s": None,
             "reference_load_s": None, "ours_s": None, "ours_steps_s": None, "ratio": None, "reference_process_s": None, "ours_process_s": None,
             "run_wall_s": None, "build_s": None, "build_wall_s": None, "load": None, "last_output": None}  # fmt: skip
    build = build_reference_inputs(method, scale, work, build_timeout)
    entry["build_wall_s"] = build["wall_s"]
    if build["manifest"] is None:
        entry.update(status="build timed out" if build["timed_out"] else "build failed", exit=build["exit"],
                     timed_out=build["timed_out"], last_output=build["last_output"])
        return entry
    sizes = build["manifest"]["sizes"]
    entry.update(n_source=sizes["n_source"], n_target=sizes["n_target"], dim=sizes["dim"], build_s=build["manifest"]["build_s"])
    out, log = root / f"{work.name}.json", root / f"{work.name}.log"
    out.unlink(missing_ok=True)  # never a previous run's result
    shutil.rmtree(work / "tokxfer-cache", ignore_errors=True)  # ours cold, as in the grid
    env = subprocess_env(threads, work)
    env["PYTHONUNBUFFERED"] = "1"
    with LoadMonitor() as mon:
        res = run_child(reference_command(method, scale, work, out, threads), env, log, timeout)
    entry.update(exit=res["exit"], timed_out=res["timed_out"], run_wall_s=res["wall_s"], load=mon.record())
    if res["exit"] == 0 and out.is_file():
        entry.update(status="ok", **read_reference(method, json.loads(out.read_text())))
    else:
        entry.update(status="timed out" if res["timed_out"] else "failed", killed_in=killed_in(log), last_output=res["last_output"])
    return entry


def reference_fits(entries: list[dict]) -> dict:
    """Per method: log-log slopes of the reference's and our seconds against the source vocabulary (finished runs),
    and the scales where the run did not finish."""
    out: dict = {}
    for method in dict.fromkeys(e["method"] for e in entries):
        mine = [e for e in entries if e["method"] == method]
        ok = [e for e in mine if e["status"] == "ok"]
        xs = [e["n_source"] for e in ok]
        out[method] = {"reference": REFERENCES[method][1], "points": len(ok),
                       "reference_slope": slope(xs, [e["reference_s"] for e in ok]), "ours_slope": slope(xs, [e["ours_s"] for e in ok]),
                       "busy_points": sum(e["load"]["busy"] for e in ok),
                       "not_run": [{"scale": e["scale"], "n_source": e["n_source"], "status": e["status"]} for e in mine if e["status"] != "ok"]}
    return out


def _cell(v: float | None) -> str:
    return "—" if v is None else f"{v:.2f}"


def reference_table(record: dict) -> str:
    """Markdown: one row per method and scale (the reference beside ours, same files), then the fitted slopes."""
    rows = ["| method | reference | scale | source | target | dim | reference s | ours s | reference / ours | reference process s | "
            "ours process s | load max | note |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for e in record["references"]:
        note = []
        if e["status"] == "timed out":
            note.append(f"TIMED OUT after {e['run_wall_s']:.0f} s (in the {e['killed_in']} step)")
        elif e["status"] != "ok":
            note.append(f"{e['status'].upper()} (exit {e['exit']}): {e['last_output']}")
        if e["load"] and e["load"]["busy"]:
            note.append("BUSY machine: not a result")
        size = [f"{v:,}" if v is not None else "—" for v in (e["n_source"], e["n_target"], e["dim"])]
        rows.append(f"| {e['method']} | {e['reference']} | {e['scale']:g} | {' | '.join(size)} | {_cell(e['reference_s'])} | "
                    f"{_cell(e['ours_s'])} | {shown(e['ratio']) if e['ratio'] else '—'} | {_cell(e['reference_process_s'])} | "
                    f"{_cell(e['ours_process_s'])} | {e['load']['max_1min'] if e['load'] else '—'} | {'; '.join(note)} |")
    rows += ["", "| method (reference) | points | reference slope | ours slope | busy points | did not run (scale: status) |",
             "|---|---:|---:|---:|---:|---|"]
    for m, f in record["reference_fits"].items():
        missing = ", ".join(f"{x['scale']:g}: {x['status']}" for x in f["not_run"])
        rows.append(f"| {m} ({f['reference']}) | {f['points']} | {f['reference_slope']} | {f['ours_slope']} | {f['busy_points']} | {missing} |")
    return "\n".join(rows)


def table(record: dict) -> str:
    """Markdown: one row per point, then the fitted slopes (a ``--references`` record: :func:`reference_table`)."""
    if record.get("mode") == "references":
        return reference_table(record)
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
    """Log-log against the source vocabulary: the grid's wall seconds and peak RSS, one line per method and
    dimension; for a ``--references`` record, one panel of the reference implementations (dashed) beside ours (solid)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = record.get("mode") != "references"
    fig, axes = plt.subplots(1, 2 if grid else 1, figsize=(11 if grid else 8.5, 4.2), squeeze=False)
    axes = list(axes[0])
    if grid:
        _plot_grid(axes, record)
    else:
        _plot_references(axes[0], record)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("source vocabulary (target = half)")
        ax.grid(True, which="both", alpha=0.3)
    busy = " — LOADED MACHINE, not a result" if record["load"]["busy"] else ""
    what = "tokxfer init, cold" if grid else "references (dashed) beside tokxfer, same files"
    fig.suptitle(f"{what}, {record['threads']} threads{busy}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def _plot_grid(axes: list, record: dict) -> None:
    for key in record["fits"]:
        method, dim = key.split("@")
        ok = sorted((p for p in record["points"] if p["method"] == method and str(p["dim"]) == dim and p["exit"] == 0),
                    key=lambda p: p["source_vocab"])
        for ax, field in zip(axes, ("wall_s", "peak_rss_gb")):
            ax.plot([p["source_vocab"] for p in ok], [p[field] for p in ok], marker="o", label=f"{key} ({record['fits'][key]['wall_slope']})")
    for ax, label in zip(axes, ("wall seconds", "peak RSS (GiB)")):
        ax.set_ylabel(label)
    axes[0].legend(fontsize=7, title="method@dim (wall slope)", title_fontsize=7)


def _plot_references(ax, record: dict) -> None:
    for i, (method, fit) in enumerate(record["reference_fits"].items()):
        ok = sorted((e for e in record["references"] if e["method"] == method and e["status"] == "ok"), key=lambda e: e["n_source"])
        xs, color = [e["n_source"] for e in ok], f"C{i}"
        missing = "".join(f"; {x['status']} at scale {x['scale']:g}" for x in fit["not_run"])
        ax.plot(xs, [e["reference_s"] for e in ok], color=color, linestyle="--", marker="s",
                label=f"{fit['reference']} ({fit['reference_slope']}{missing})")
        ax.plot(xs, [e["ours_s"] for e in ok], color=color, marker="o", label=f"tokxfer {method} ({fit['ours_slope']})")
    ax.set_ylabel("seconds of the method call (after loading)")
    ax.legend(fontsize=7, title="implementation (slope)", title_fontsize=7)


def _work_dir(given: Path | None, prefix: str) -> tuple[str | None, Path]:
    """``(temporary folder to remove or None, the work folder)``: ``--work-dir``, else a new temporary one."""
    tmp = None if given else tempfile.mkdtemp(prefix=prefix)
    work = Path(given or tmp)
    work.mkdir(parents=True, exist_ok=True)
    return tmp, work


def run_references(p: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``--references``: each method's end-to-end benchmark at each scale; 1 when a run or a build failed
    (a time-out is a result: the reference, or ours, does not run within ``--timeout``)."""
    scales = _sizes(args.reference_scales, "--reference-scales", float)
    methods = [m.strip() for m in args.reference_methods.split(",") if m.strip()]
    if not methods or (bad := [m for m in methods if m not in REFERENCES]):
        p.error(f"--reference-methods: unknown {bad if methods else '(none)'}; expected some of {','.join(REFERENCES)}")
    tmp, work = _work_dir(args.work_dir, "bench-scaling-refs-")
    entries = []
    try:
        for scale in scales:
            for m in methods:
                print(f"{m}: the reference ({REFERENCES[m][1]}) beside tokxfer, scale {scale:g} ...", flush=True)
                entries.append(reference_point(m, scale, work, args.threads, args.timeout, args.build_timeout))
                e = entries[-1]
                print(f"  {e['status']}: {e['n_source']} x {e['n_target']}, reference {e['reference_s']} s, ours {e['ours_s']} s "
                      f"(run {e['run_wall_s']} s, inputs {e['build_wall_s']} s)", flush=True)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    record = {"bench": "scaling", "mode": "references", "threads": args.threads, "timeout_s": args.timeout,
              "build_timeout_s": args.build_timeout, "reference_scales": scales, "points": [], "fits": {},
              "references": entries, "reference_fits": reference_fits(entries), "load": combine([e["load"] for e in entries])}
    record["table"] = table(record)
    print("\n" + record["table"] + "\n\n" + banner(record["load"]))
    write_outputs(record, args)
    return 1 if any(e["status"] not in ("ok", "timed out") for e in entries) else 0


def write_outputs(record: dict, args: argparse.Namespace) -> None:
    """``--plot`` and ``--json`` (written atomically)."""
    if args.plot:
        plot(record, args.plot)
        print(f"plot: {args.plot}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        tmp_json = args.json.with_suffix(".json.tmp")
        tmp_json.write_text(json.dumps(record, indent=1) + "\n")
        os.replace(tmp_json, args.json)
        print(f"result: {args.json}")


def _sizes(text: str, flag: str, kind: type = int) -> list:
    """Comma-separated positive ``kind`` values (``int``: sizes; ``float``: ``--reference-scales``)."""
    what = "integers" if kind is int else "numbers"
    try:
        vals = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"{flag}: expected comma-separated {what}, got {text!r}") from None
    if not vals or min(vals) <= 0:
        raise SystemExit(f"{flag}: expected positive {what}, got {text!r}")
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
    p.add_argument("--references", action="store_true",
                   help="instead of the grid: bench_focus.py / bench_wechsel.py --end-to-end (deepfocus, wechsel beside ours) per scale")
    p.add_argument("--reference-scales", default=",".join(f"{s:g}" for s in REFERENCE_SCALES),
                   help="--references: the benchmarks' --scale values (source 32k x scale, target 16k x scale)")
    p.add_argument("--reference-methods", default=",".join(REFERENCES), help=f"--references: a subset of {','.join(REFERENCES)}")
    p.add_argument("--build-timeout", type=float, default=3600.0, help="--references: seconds after which building one scale's files is killed")
    args = p.parse_args(argv)
    if args.references:
        return run_references(p, args)
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
    tmp, work = _work_dir(args.work_dir, "bench-scaling-")
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
    write_outputs(record, args)
    return 1 if any(r["exit"] for r in points) else 0


if __name__ == "__main__":
    raise SystemExit(main())
