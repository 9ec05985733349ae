"""Figures from tables and records (matplotlib, Agg canvas; no pyplot, no global backend switch).

* :func:`plot_language_bars` — per-language grouped bars of one metric, error bars = sample std.
* :func:`plot_curves` — a curve from the records (default ``lapt_loss``) per method, mean over
  seeds with a ±std band.
* :func:`plot_gold_alignment` — gold-alignment diagnostics (top-1/top-5) per method.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from leaderboards.aggregate import Table, record_method, summarize

__all__ = ["plot_language_bars", "plot_curves", "plot_gold_alignment"]


def _save(fig: Figure, path: str | os.PathLike) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(path, bbox_inches="tight", dpi=150)
    return path


def _grouped_bars(ax, groups: Sequence[str], series: Mapping[str, tuple[list[float], list[float]]]) -> None:
    x = np.arange(len(groups))
    k = max(len(series), 1)
    width = 0.8 / k
    for i, (name, (means, stds)) in enumerate(series.items()):
        ax.bar(x + (i - (k - 1) / 2) * width, means, width, yerr=stds, capsize=3, label=name)
    ax.set_xticks(x, groups)
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
    _grouped_bars(ax, [c.language for c in cols], series)
    ax.set_ylabel(f"{m.label} {m.arrow}" + (f" (×{m.scale:g})" if m.scale != 1 else ""))
    ax.set_title(f"{table.spec.name}: {task}")
    return _save(fig, path)


def plot_curves(
    records: Iterable[Mapping],
    path: str | os.PathLike,
    curve: str = "lapt_loss",
    methods: Sequence[str] | None = None,
    language: str | None = None,
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

    Raises:
        ValueError: no record has the curve.
    """
    groups: dict[tuple[str, str], list[dict[int, float]]] = defaultdict(list)
    for r in records:
        pts = (r.get("curves") or {}).get(curve)
        lang = str(((r.get("config") or {}).get("target") or {}).get("language"))
        if r.get("status") != "ok" or not pts or (language is not None and lang != language):
            continue
        groups[(str(record_method(r)), lang)].append({int(s): float(v) for s, v in pts})
    if not groups:
        raise ValueError(f"no record has a {curve!r} curve")
    order = list(methods) if methods else sorted({m for m, _ in groups})
    keys = sorted((k for k in groups if k[0] in order), key=lambda k: (order.index(k[0]), k[1]))
    several_langs = len({lang for _, lang in keys}) > 1
    fig = Figure(figsize=(6, 3.5))
    ax = fig.add_subplot()
    for key in keys:
        runs = groups[key]
        name = f"{key[0]} · {key[1]}" if several_langs else key[0]
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
    records: Iterable[Mapping],
    path: str | os.PathLike,
    metrics: Sequence[str] = ("gold_top1", "gold_top5"),
    language: str | None = None,
) -> Path:
    """Bars of gold-alignment diagnostics per method (mean ± std over seeds, in %).

    One initialization can serve several tasks; each (method, target language, seed) counts once.

    Args:
        records: trial records.
        path: output image path.
        metrics: keys of ``record["init"]["diagnostics"]`` (fractions).
        language: restrict to one target language (default: all).

    Raises:
        ValueError: no record has the diagnostics.
    """
    seen: dict[tuple, dict[str, float]] = {}
    for r in records:
        diag = (r.get("init") or {}).get("diagnostics") or {}
        lang = ((r.get("config") or {}).get("target") or {}).get("language")
        if r.get("status") != "ok" or not diag or (language is not None and lang != language):
            continue
        seen.setdefault((str(record_method(r)), lang, r.get("seed")), diag)
    if not seen:
        raise ValueError("no record has init diagnostics")
    methods = sorted({k[0] for k in seen})
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
    _grouped_bars(ax, methods, series)
    ax.set_ylabel("% target tokens aligned to gold source")
    ax.set_title("gold alignment" + (f" ({language})" if language else ""))
    return _save(fig, path)
