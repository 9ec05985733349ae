"""Figures from tables and records (matplotlib, Agg canvas; no pyplot, no global backend switch).

* :func:`plot_language_bars` — per-language grouped bars of one metric, error bars = sample std.
* :func:`plot_curves` — a curve from the records (default ``lapt_loss``) per method, mean over
  seeds with a ±std band.
* :func:`plot_gold_alignment` — gold-alignment diagnostics (top-1/top-5) per method.
* :func:`write_spec_plots` — every figure of one leaderboard (what ``tokxfer leaderboard`` writes
  next to the tables): the three above, chosen from the table's columns and the records.

Images are written with a fixed dpi and without the ``Software`` PNG tag, so one matplotlib and
font set gives the same pixels for the same inputs; bytes are not promised across versions.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from harness.files import open_atomic
from harness.inputs import name_problem
from harness.run.records import TrialRecord, as_trial_records
from leaderboards.aggregate import Table, matches_where, summarize
from leaderboards.render import write_text_atomic

__all__ = ["plot_language_bars", "plot_curves", "plot_gold_alignment", "SpecPlot", "write_spec_plots", "lapt_curves"]

DPI = 150
"""Resolution of every figure (fixed, so repeated renders give the same image)."""


def _save(fig: Figure, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fmt = path.suffix.lstrip(".").lower() or "png"
    # no "Software" tag (it names the matplotlib version); PNG carries no date otherwise.
    # Written beside and renamed, so a failed save never leaves a truncated image behind.
    metadata = {"Software": None} if fmt == "png" else None
    with open_atomic(path, "wb") as f:  # never through a link, never half an image
        fig.savefig(f, format=fmt, bbox_inches="tight", dpi=DPI, metadata=metadata)
    return path


def _grouped_bars(ax, groups: Sequence[str], series: Mapping[str, tuple[list[float], list[float]]]) -> None:
    x = np.arange(len(groups))
    k = max(len(series), 1)
    width = 0.8 / k
    # the default cycle repeats after 10 colours; a leaderboard can have more rows than that
    colors = [colormaps["tab20"](i % 20) for i in range(k)] if k > 10 else [None] * k
    for i, (name, (means, stds)) in enumerate(series.items()):
        ax.bar(x + (i - (k - 1) / 2) * width, means, width, yerr=stds, capsize=3, label=name, color=colors[i])
    ax.set_xticks(x, groups)
    if len(groups) > 4:
        for t in ax.get_xticklabels():
            t.set_rotation(30)
            t.set_horizontalalignment("right")
    ax.legend(fontsize="small", frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def plot_language_bars(
    table: Table, metric: str, path: str | os.PathLike, task: str | None = None, include_average: bool = True
) -> Path:
    """Grouped bars: languages on x, one bar per method, error bars = sample std (0 when n < 2).

    Args:
        table: an aggregated table.
        metric: metric name (a column metric of the table).
        path: output image path (``.png``, ``.pdf``, ``.svg``).
        task: restrict to this task's columns (default: the first task having the metric).
        include_average: also plot the ``avg`` column when the spec has one.

    Returns:
        The written path.

    Raises:
        ValueError: the table has no column for the metric.
    """
    cols = [c for c in table.columns if c.metric.name == metric and (task is None or c.task == task)]
    if not cols:
        raise ValueError(f"table {table.spec.name!r} has no column for metric {metric!r}")
    task = cols[0].task
    cols = [c for c in cols if c.task == task and (include_average or not c.is_average)]
    m = cols[0].metric
    series = {}
    for row in table.rows:
        means, stds = [], []
        for c in cols:
            cell = row.cells[c.key]
            means.append(cell.mean * m.scale if cell.mean is not None else math.nan)
            stds.append(abs(cell.std * m.scale) if cell.std is not None else 0.0)
        series[row.label] = (means, stds)
    fig = Figure(figsize=(max(4.0, 1.2 * len(cols) * max(1, len(series)) / 2), 3.5))
    ax = fig.add_subplot()
    _grouped_bars(ax, [c.language if c.task_id is None else f"{c.language}\n{c.task_id}" for c in cols], series)
    ax.set_ylabel(f"{m.label} {m.arrow}" + (f" (×{m.scale:g})" if m.scale != 1 else ""))
    ax.set_title(f"{table.spec.name}: {task}")
    return _save(fig, path)


def plot_curves(
    records: Iterable[TrialRecord | Mapping],
    path: str | os.PathLike,
    curve: str = "lapt_loss",
    methods: Sequence[str] | None = None,
    language: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> Path:
    """One line per method (and target language, when several): mean over seeds of
    ``record["curves"][curve]`` at shared steps, with a ±std band; a group whose seeds share no
    steps is drawn seed by seed.

    Args:
        records: trial records (only ``status == "ok"`` ones with the curve are used).
        path: output image path.
        curve: curve name in the records.
        methods: restrict/order methods (default: all with the curve, sorted).
        language: restrict to one target language.
        labels: method id → legend label (default: the id).

    Raises:
        ValueError: no record has the curve.
    """
    groups: dict[tuple[str, str], list[dict[int, float]]] = defaultdict(list)
    for r in as_trial_records(records):
        pts = (r.curves or {}).get(curve)
        lang = str(r.target_language)
        if not r.ok or not pts or (language is not None and lang != language):
            continue
        groups[(str(r.method_id), lang)].append({int(s): float(v) for s, v in pts})
    if not groups:
        raise ValueError(f"no record has a {curve!r} curve")
    order = list(methods) if methods else sorted({m for m, _ in groups})
    keys = sorted((k for k in groups if k[0] in order), key=lambda k: (order.index(k[0]), k[1]))
    if not keys:
        raise ValueError(f"no record of the methods {', '.join(order)} has a {curve!r} curve")
    labels = labels or {}
    several_langs = len({lang for _, lang in keys}) > 1
    fig = Figure(figsize=(6, 3.5))
    ax = fig.add_subplot()
    for key in keys:
        runs = groups[key]
        label = labels.get(key[0], key[0])
        name = f"{label} · {key[1]}" if several_langs else label
        steps = sorted(set.intersection(*(set(run) for run in runs)))
        if steps:
            vals = np.array([[run[s] for s in steps] for run in runs])
            mean = vals.mean(axis=0)
            (line,) = ax.plot(steps, mean, label=f"{name} (n={len(runs)})")
            if len(runs) > 1:
                std = vals.std(axis=0, ddof=1)
                ax.fill_between(steps, mean - std, mean + std, alpha=0.2, color=line.get_color())
        else:
            for i, run in enumerate(runs):
                s = sorted(run)
                ax.plot(s, [run[k] for k in s], alpha=0.6, label=name if i == 0 else None)
    ax.set_xlabel("step")
    ax.set_ylabel(curve)
    if language is not None:
        ax.set_title(language)
    ax.legend(fontsize="small", frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


def plot_gold_alignment(
    records: Iterable[TrialRecord | Mapping],
    path: str | os.PathLike,
    metrics: Sequence[str] = ("gold_top1", "gold_top5"),
    language: str | None = None,
    methods: Sequence[str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Path:
    """Bars of gold-alignment diagnostics per method (mean ± std over seeds, in %).

    One initialization can serve several tasks; each (method, target language, seed) counts once.

    Args:
        records: trial records.
        path: output image path.
        metrics: keys of ``record["init"]["diagnostics"]`` (fractions).
        language: restrict to one target language (default: all).
        methods: restrict/order methods (default: all with diagnostics, sorted).
        labels: method id → axis label (default: the id).

    Raises:
        ValueError: no record (of the methods) has the diagnostics.
    """
    seen: dict[tuple, dict[str, float]] = {}
    for r in as_trial_records(records):
        diag = r.init_diagnostics
        lang = r.target_language
        if not r.ok or not diag or (language is not None and lang != language):
            continue
        seen.setdefault((str(r.method_id), lang, r.seed), diag)
    if not seen:
        raise ValueError("no record has init diagnostics" + (f" for target language {language!r}" if language else ""))
    found = {k[0] for k in seen}
    methods = [m for m in methods if m in found] if methods else sorted(found)
    if not methods:
        raise ValueError("no record of the requested methods has init diagnostics")
    labels = labels or {}
    series = {}
    for metric in metrics:
        means, stds = [], []
        for m in methods:
            vals = [d[metric] * 100 for k, d in seen.items() if k[0] == m and isinstance(d.get(metric), (int, float))]
            mean, std, _ = summarize(vals)
            means.append(mean if mean is not None else math.nan)
            stds.append(std or 0.0)
        series[metric] = (means, stds)
    fig = Figure(figsize=(max(4.0, 0.9 * len(methods) * len(metrics)), 3.5))
    ax = fig.add_subplot()
    _grouped_bars(ax, [labels.get(m, m) for m in methods], series)
    ax.set_ylabel("% target tokens aligned to gold source")
    ax.set_title("gold alignment" + (f" ({language})" if language else ""))
    return _save(fig, path)


# --------------------------------------------------------------------------------------------
# Every figure of one leaderboard
# --------------------------------------------------------------------------------------------

LAPT_STAGE = "lapt"
"""Registered name of the LAPT stage; the runner stores its curve as ``<stage id>.loss``."""


@dataclass(frozen=True)
class SpecPlot:
    """One figure of a leaderboard, written or not.

    Attributes:
        name: file stem, unique within the spec (``bars-<task>-<metric>``, ``lapt-<curve>``,
            ``gold-alignment-<language>``).
        caption: what the figure shows, for the HTML page.
        path: the written image, ``None`` when it could not be made.
        error: why it could not be made (``None`` when written).
    """

    name: str
    caption: str
    path: Path | None = None
    error: str | None = None


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.") or "x"


def lapt_curves(records: Iterable[TrialRecord]) -> list[str]:
    """Names of the LAPT loss curves in the records, sorted.

    ``<id>.loss`` for every stage named ``lapt`` in a record's ``config.stages`` (how the runner
    names a stage's curves), and the schema's example name ``lapt_loss`` where a record carries it.
    A curve named by a stage counts even when no record carries it, so a LAPT run that lost its
    curve shows up as a failed figure instead of a silently missing one.
    """
    names = set()
    for r in records:
        for st in r.stage_specs:
            if st.get("name") == LAPT_STAGE:
                names.add(f"{st.get('id') or LAPT_STAGE}.loss")
        if "lapt_loss" in (r.curves or {}):
            names.add("lapt_loss")
    return sorted(names)


def _one_per_stage_run(records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """One record per configuration apart from the task (the first in the given order).

    A trial grid runs every task after the same (cached) LAPT run of a (method, language, seed),
    so every task's record repeats that curve; counting it once per task would inflate n.
    """
    out, seen = [], set()
    for r in records:
        cfg = {k: v for k, v in (r.config or {}).items() if k != "task"}
        key = json.dumps(cfg, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def _spec_records(table: Table, records: Iterable[TrialRecord]) -> list[TrialRecord]:
    """The records behind the table: the spec's filter, tasks, row methods and required seeds."""
    spec = table.spec
    tasks = {c.task for c in table.columns}
    methods = {row.method for row in table.rows}
    seeds = set(spec.required_seeds)
    return [
        r
        for r in records
        if matches_where(r, spec.where)
        and r.task_name in tasks
        and r.method_id in methods
        and (not seeds or r.seed in seeds)
    ]


def _planned(table: Table, records: list[TrialRecord]) -> list[tuple[str, str, Callable[[Path], Path]]]:
    """``(name, caption, draw(path))`` of every figure the table and records call for."""
    spec = table.spec
    methods = [row.method for row in table.rows]
    labels = {row.method: row.label for row in table.rows}
    seeds = f"seeds {list(spec.required_seeds)}" if spec.required_seeds else "all seeds"
    plans = []

    pairs = list(dict.fromkeys((c.task, c.metric.name) for c in table.columns if not c.is_average))
    for task, metric in pairs:
        cols = [c for c in table.columns if c.task == task and c.metric.name == metric and not c.is_average]

        def bars(path, task=task, metric=metric, cols=cols):
            if not any(row.cells[c.key].mean is not None for row in table.rows for c in cols):
                raise ValueError(f"no measured value of {metric!r} on {task!r}")
            return plot_language_bars(table, metric, path, task=task, include_average=False)

        m = cols[0].metric
        plans.append((
            f"bars-{_safe(task)}-{_safe(metric)}",
            f"{task}: {m.label} {m.arrow} per language, mean ± sample std over {seeds} (error bars; none when n < 2).",
            bars,
        ))

    runs = _one_per_stage_run(records)
    for curve in lapt_curves(records):
        plans.append((
            f"lapt-{_safe(curve)}",
            f"LAPT loss ({curve}) per method and step: mean over {seeds} at the steps all seeds logged, "
            "band ± sample std (n ≥ 2); one curve per trial configuration, whatever the task.",
            lambda path, curve=curve: plot_curves(runs, path, curve=curve, methods=methods, labels=labels),
        ))

    gold_langs = list(dict.fromkeys(
        c.language for c in table.columns
        if not c.is_average and c.metric.source == "init.diagnostics" and c.metric.record_key == "gold_top1"
    ))
    for lang in gold_langs:
        present = {k for r in records if r.target_language == lang for k in r.init_diagnostics}
        metrics = [k for k in ("gold_top1", "gold_top5") if k in present] or ["gold_top1"]
        plans.append((
            f"gold-alignment-{_safe(lang)}",
            f"Gold alignment on {lang}: {' / '.join(metrics)} in %, mean ± sample std over {seeds} "
            "(one initialization per method and seed, whatever the task).",
            lambda path, lang=lang, metrics=metrics: plot_gold_alignment(
                records, path, metrics=metrics, language=lang, methods=methods, labels=labels),
        ))
    return plans


def write_spec_plots(table: Table, records: Iterable[TrialRecord | Mapping], out_dir: str | os.PathLike) -> list[SpecPlot]:
    """Write every figure of one leaderboard as ``<out_dir>/<name>.png``; never raises for one figure.

    * per (task, metric) of the table's language columns (averages skipped): :func:`plot_language_bars`;
    * per LAPT loss curve in the records (:func:`lapt_curves`): :func:`plot_curves`, one curve per
      method (and language, when several), mean over seeds with a ± std band;
    * per language of a ``gold_top1`` column read from ``init.diagnostics``: :func:`plot_gold_alignment`
      (top-1 and, where recorded, top-5).

    Only the records behind the table are used (the spec's filter, tasks, row methods and required
    seeds), and methods appear in row order under their row labels. The figures of an earlier
    render are removed first: only the files its manifest (:data:`PLOTS_MANIFEST` in ``out_dir``)
    lists, never any other file, and never through a symbolic link.

    Args:
        table: the aggregated table.
        records: the records it was aggregated from.
        out_dir: the spec's figure folder.

    Returns:
        One :class:`SpecPlot` per figure, in a fixed order (empty when the table has no measured
        row); a figure that could not be made has ``path=None`` and the reason in ``error``.

    Example:
        >>> [p.name for p in write_spec_plots(table, records, "tables/plots/qs") if p.path]  # doctest: +SKIP
        ['bars-mlm-at-init-loss', 'bars-mlm-at-init-accuracy', 'gold-alignment-near']
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in _manifest(out):
        (out / old).unlink(missing_ok=True)  # a link is removed itself, never what it points to
    results = []
    if table.rows:  # no measured method: nothing to draw (the caller says so once)
        for name, caption, draw in _planned(table, _spec_records(table, as_trial_records(records))):
            path = out / f"{name}.png"
            try:
                results.append(SpecPlot(name, caption, draw(path)))
            except Exception as e:  # one figure never stops the others, nor the tables
                results.append(SpecPlot(name, caption, None, f"{type(e).__name__}: {e}"))
    written = sorted(p.path.name for p in results if p.path is not None)
    write_text_atomic(out / PLOTS_MANIFEST, json.dumps({"written": written}, indent=1) + "\n", within=out)
    return results


PLOTS_MANIFEST = ".tokxfer-plots.json"
"""The file in a spec's figure folder that lists the figures :func:`write_spec_plots` wrote there
(``{"written": [file names]}``): the only files the next render deletes."""


def _manifest(out: Path) -> list[str]:
    """The figure file names an earlier render listed in ``out``'s manifest (``[]``: none, or not a manifest)."""
    path = out / PLOTS_MANIFEST
    if path.is_symlink() or not path.is_file():
        return []
    try:
        names = json.loads(path.read_text(encoding="utf-8")).get("written")
    except (ValueError, AttributeError, OSError):
        return []
    if not isinstance(names, list):
        return []
    return [n for n in names if isinstance(n, str) and name_problem(n) is None and n.endswith(".png")]
