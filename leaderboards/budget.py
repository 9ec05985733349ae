"""Warm-up budget curves: score against LAPT steps per method, and the steps an initialization saves.

Input: the records of an experiment whose stage chain is a grid axis (``stage_sets``, e.g.
harness/configs/warmup-budget.yaml: LAPT at 0 / 30 / 100 / 300 / 1000 steps), and its leaderboard spec
(leaderboards/specs/warmup-budget.yaml). The spec says which records count (``experiments``,
``where``, ``required_seeds``), the rows (methods and labels), the baseline (``against``, e.g.
``random``) and the metrics: every (task, metric) pair of its ``stage_set`` columns whose metric is
compared (``compare: true``) gets a curve. A pure function of records + spec, like the tables.

Definitions (per metric; "better" follows the metric's direction):

* **budget** of a record: the optimizer steps its stages ran (``stages.<id>.info.steps`` summed; 0
  for the empty stage set), read from the records, so an embeddings-only phase counts too.
* **curve** of a method: the mean over seeds at each budget, on the axis ``x = ln(1 + steps)`` (the
  log axis, with 0 steps at x = 0); between budgets it is linear in x.
* **target**: the baseline's mean at the largest budget ("random's final score").
* **steps to reach** for a curve: the first x at which the curve is at least as good as the target
  (0 if the curve starts there), ``exp(x) - 1``; ``None`` if it never gets there within the grid.
* **steps saved** = baseline's steps to reach − the method's (the baseline's is the largest budget
  unless its curve touched the target earlier). Positive: the method gets to random's final score
  that many LAPT steps earlier.
* **CI**: a paired percentile bootstrap over seeds (the same resampled seeds for the method and the
  baseline, target recomputed in each resample), :data:`BOOTSTRAP` resamples from a fixed seed. A
  resample in which the method never reaches the target counts as −∞ (the share of resamples that
  reach it is reported); with n seeds there are only C(2n−1, n) distinct resamples, so with 3 seeds
  the interval is coarse.

Run: ``python -m leaderboards.budget leaderboards/specs/warmup-budget.yaml --runs-dir leaderboards/records
--out leaderboards/tables`` writes ``<name>.budget.md``, ``<name>.budget.csv`` and
``plots/<name>/budget-curves.png``; ``tokxfer leaderboard`` (one spec or ``--all``) writes them too for every spec
with ``stage_set`` columns and a baseline.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from harness.run.records import TrialRecord, as_trial_records
from leaderboards.aggregate import load_records, matches_where, record_row, stage_value
from leaderboards.spec import Column, LeaderboardSpec, MetricSpec, load_spec

__all__ = ["Curve", "Saved", "budget_steps", "budget_curves", "steps_to_reach", "steps_saved", "render_budget_markdown",
           "render_budget_csv", "plot_budget_curves", "main"]  # fmt: skip

BOOTSTRAP = 2000
"""Bootstrap resamples of the steps-saved interval."""
SEED = 20261127
"""Seed of the bootstrap generator (fixed: the interval is a function of the records)."""
LEVEL = 0.95


@dataclass(frozen=True)
class Curve:
    """One method's scores on one metric at every budget.

    Attributes:
        method: the row key (method id).
        steps: the budgets, ascending.
        by_seed: seed → scores aligned with ``steps`` (only seeds with a value at every budget).
    """

    method: str
    steps: tuple[int, ...]
    by_seed: Mapping[int, tuple[float, ...]]

    def mean(self, seeds: Sequence[int] | None = None) -> np.ndarray:
        """Mean over ``seeds`` (default: all; repeats count, as a bootstrap resample needs)."""
        seeds = sorted(self.by_seed) if seeds is None else seeds
        return np.mean([self.by_seed[s] for s in seeds], axis=0)


@dataclass(frozen=True)
class Saved:
    """Steps saved by one method against the baseline on one metric."""

    method: str
    target: float
    reach: float | None
    baseline_reach: float | None
    saved: float | None
    low: float | None
    high: float | None
    reached_share: float
    n: int


def budget_steps(record: TrialRecord) -> int:
    """Optimizer steps the record's stages ran (0 without stages).

    Raises:
        ValueError: a stage of the record lacks ``info.steps`` (naming the trial).
    """
    total = 0
    for sid, st in (record.stages or {}).items():
        steps = ((st or {}).get("info") or {}).get("steps")
        if not isinstance(steps, int):
            raise ValueError(f"budget: record {record.trial_id}: stage {sid!r} has no info.steps")
        total += steps
    return total


def _value(record: TrialRecord, metric: MetricSpec, language: str) -> float | None:
    if metric.source == "stages":
        v = stage_value(record, language, metric.record_key)
    else:
        v = ((record.metrics or {}).get(language) or {}).get(metric.record_key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def curve_metrics(spec: LeaderboardSpec) -> list[tuple[str, str, MetricSpec]]:
    """``(task, language, metric)`` of every compared metric of the spec's ``stage_set`` columns, in order."""
    out: dict[tuple[str, str, str], tuple[str, str, MetricSpec]] = {}
    for c in spec.columns:
        if c.stage_set is not None and c.metric.compare and not c.is_average:
            out.setdefault((c.task, c.language, c.metric.name), (c.task, c.language, c.metric))
    return list(out.values())


def budget_curves(records: Iterable[TrialRecord | Mapping], spec: LeaderboardSpec) -> dict[str, dict[str, Curve]]:
    """Per metric name, per method: the :class:`Curve` (pure: no I/O).

    Raises:
        ValueError: records of one stage set ran different numbers of steps, or two stage sets the same.
    """
    recs = [r for r in as_trial_records(records) if r.ok and matches_where(r, spec.where)
            and r.config_value("stage_set") is not None
            and (not spec.required_seeds or r.trial_seed in spec.required_seeds)]  # fmt: skip
    set_steps: dict[str, set[int]] = defaultdict(set)
    for r in recs:
        set_steps[r.config_value("stage_set")].add(budget_steps(r))
    mixed = {k: sorted(v) for k, v in set_steps.items() if len(v) > 1}
    if mixed:
        raise ValueError(f"budget: records of one stage set ran different step counts: {mixed}")
    steps_of = {k: next(iter(v)) for k, v in set_steps.items()}
    if len(set(steps_of.values())) != len(steps_of):
        raise ValueError(f"budget: two stage sets ran the same number of steps: {steps_of}")
    budgets = tuple(sorted(steps_of.values()))
    methods = [r.method for r in spec.rows] if spec.rows is not None else sorted({record_row(r) for r in recs} - {None})
    out: dict[str, dict[str, Curve]] = {}
    for task, lang, metric in curve_metrics(spec):
        values: dict[str, dict[int, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
        for r in recs:
            col = Column(task, lang, metric)
            if r.task_name != col.task or (v := _value(r, metric, lang)) is None:
                continue
            values[record_row(r, spec.row_by)][r.trial_seed][steps_of[r.config_value("stage_set")]] = v
        out[metric.name] = {
            m: Curve(m, budgets, {s: tuple(vals[b] for b in budgets) for s, vals in sorted(values[m].items())
                                  if all(b in vals for b in budgets)})  # fmt: skip
            for m in methods
            if m in values
        }
    return out


def steps_to_reach(steps: Sequence[int], scores: Sequence[float], target: float, higher: bool) -> float | None:
    """First step count at which the curve (linear in ``ln(1 + steps)``) is at least as good as ``target``.

    Example:
        >>> steps_to_reach([0, 30, 100], [6.0, 5.0, 4.0], 4.5, higher=False)  # halfway in ln(1 + steps): sqrt(31 * 101) - 1
        54.955339
        >>> steps_to_reach([0, 30], [6.0, 5.0], 4.0, higher=False) is None
        True
    """
    sign = 1.0 if higher else -1.0
    gap = [sign * (s - target) for s in scores]  # >= 0: at least as good as the target
    if gap[0] >= 0:
        return float(steps[0])
    for i in range(1, len(steps)):
        if gap[i] >= 0:
            x0, x1 = math.log1p(steps[i - 1]), math.log1p(steps[i])
            x = x0 + (x1 - x0) * (-gap[i - 1]) / (gap[i] - gap[i - 1])
            return round(math.expm1(x), 6)
    return None


def _saved_point(base: np.ndarray, other: np.ndarray, steps: Sequence[int], higher: bool) -> tuple[float, float | None, float | None]:
    target = float(base[-1])
    b = steps_to_reach(steps, base, target, higher)
    m = steps_to_reach(steps, other, target, higher)
    return target, b, m


def steps_saved(base: Curve, curve: Curve, higher: bool, *, resamples: int = BOOTSTRAP, seed: int = SEED) -> Saved:
    """Steps ``curve`` saves against ``base`` to reach ``base``'s final mean, with a paired bootstrap CI.

    Only seeds both curves have are used (paired by seed).
    """
    seeds = sorted(set(base.by_seed) & set(curve.by_seed))
    if not seeds:
        return Saved(curve.method, math.nan, None, None, None, None, None, 0.0, 0)
    target, b, m = _saved_point(base.mean(seeds), curve.mean(seeds), base.steps, higher)
    saved = None if b is None or m is None else b - m
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples):
        pick = [seeds[i] for i in rng.integers(len(seeds), size=len(seeds))]
        _, bb, mm = _saved_point(base.mean(pick), curve.mean(pick), base.steps, higher)
        draws.append(-math.inf if mm is None or bb is None else bb - mm)
    arr = np.array(draws)
    tail = (1 - LEVEL) / 2
    low, high = (float(np.quantile(arr, q, method="lower" if q < 0.5 else "higher")) for q in (tail, 1 - tail))
    return Saved(curve.method, target, m, b, saved, None if math.isinf(low) else low, None if math.isinf(high) else high,
                 float(np.mean(np.isfinite(arr))), len(seeds))  # fmt: skip


def _fmt(x: float | None, digits: int = 0) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def _bound(x: float | None) -> str:
    return "not reached" if x is None else f"{x:.0f}"


def summaries(curves: Mapping[str, Mapping[str, Curve]], spec: LeaderboardSpec) -> list[tuple[MetricSpec, list[Saved]]]:
    """Per curve metric: the :class:`Saved` of every method but the baseline."""
    base_id = spec.against
    if base_id is None:
        raise ValueError(f"{spec.origin}: budget curves need a baseline ('against: random')")
    out = []
    for _, _, metric in curve_metrics(spec):
        by_method = curves.get(metric.name, {})
        if base_id not in by_method:
            continue
        higher = metric.direction == "higher"
        out.append((metric, [steps_saved(by_method[base_id], c, higher) for m, c in by_method.items() if m != base_id]))
    return out


def render_budget_markdown(curves: Mapping[str, Mapping[str, Curve]], spec: LeaderboardSpec) -> str:
    """The steps-saved table (Markdown) with the curves' means per budget."""
    lines = [f"### {spec.name}: steps saved vs {spec.label(spec.against)} (v{spec.version})", ""]
    for metric, rows in summaries(curves, spec):
        by_method = curves[metric.name]
        steps = next(iter(by_method.values())).steps
        scale = metric.scale
        lines += [f"#### {metric.label} {metric.arrow}", "",
                  "| Method | " + " | ".join(f"{s} steps" for s in steps) + " | steps to reach target | steps saved [95 % CI] | reached |",
                  "|:---|" + "---:|" * (len(steps) + 3)]  # fmt: skip
        base = by_method[spec.against]
        lines.append(f"| {spec.label(spec.against)} (baseline) | "
                     + " | ".join(f"{v * scale:.{metric.decimals}f}" for v in base.mean()) + " | — | — | — |")  # fmt: skip
        for s in rows:
            c = by_method[s.method]
            ci = f" [{_bound(s.low)}, {_bound(s.high)}]"
            lines.append(f"| {spec.label(s.method)} | " + " | ".join(f"{v * scale:.{metric.decimals}f}" for v in c.mean())
                         + f" | {_fmt(s.reach)} | {_fmt(s.saved)}{ci} (n={s.n}) | {s.reached_share:.0%} |")  # fmt: skip
        target = rows[0].target * scale if rows else math.nan
        lines += ["", f"- Target: {spec.label(spec.against)}'s mean at {steps[-1]} steps, {target:.{metric.decimals}f}.", ""]
    lines += [
        "- Budget = LAPT optimizer steps of the trial's stage set (0: no LAPT). Curve: mean over seeds, linear in ln(1 + steps) "
        "between budgets. Steps to reach: where a method's curve first gets at least as good as the target; steps saved = "
        "the baseline's steps to reach − the method's (— : not reached within the grid).",
        f"- 95 % CI: paired percentile bootstrap over seeds ({BOOTSTRAP} resamples, seed {SEED}); 'reached': share of resamples "
        "in which the method reaches the target; 'not reached' as a bound: the method misses it in more than 2.5 % of them. "
        "With 3 seeds there are only 10 distinct resamples: the interval is coarse.",
        "- Definitions: leaderboards/budget.py; records: the experiments of the spec.",
    ]
    return "\n".join(lines) + "\n"


def render_budget_csv(curves: Mapping[str, Mapping[str, Curve]], spec: LeaderboardSpec) -> str:
    """One row per (metric, method): target, steps to reach, steps saved and its CI (record units)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["table", "spec_version", "metric", "direction", "method", "baseline", "target", "steps_to_reach",
                "baseline_steps_to_reach", "steps_saved", "ci_low", "ci_high", "reached_share", "n"])  # fmt: skip
    for metric, rows in summaries(curves, spec):
        for s in rows:
            w.writerow([spec.name, spec.version, metric.name, metric.direction, s.method, spec.against, repr(s.target),
                        *("" if v is None else repr(v) for v in (s.reach, s.baseline_reach, s.saved, s.low, s.high)),
                        repr(s.reached_share), s.n])  # fmt: skip
    return buf.getvalue()


def plot_budget_curves(curves: Mapping[str, Mapping[str, Curve]], spec: LeaderboardSpec, path: str | Path) -> Path:
    """One panel per metric: mean ± sample std over seeds against 1 + steps on a log axis; the target dashed."""
    from leaderboards.plots import _save  # the one PNG writer (fixed dpi, no version tag, atomic)

    metrics = [m for _, _, m in curve_metrics(spec) if curves.get(m.name)]
    if not metrics:
        raise ValueError(f"{spec.origin}: no budget curve to draw (no stage_set column with records)")
    fig = Figure(figsize=(5.2 * len(metrics), 3.8))
    for k, metric in enumerate(metrics, start=1):
        ax = fig.add_subplot(1, len(metrics), k)
        for m, c in curves[metric.name].items():
            if not c.by_seed:
                continue
            vals = np.array(list(c.by_seed.values())) * metric.scale
            x = np.array(c.steps) + 1
            mean = vals.mean(axis=0)
            ax.plot(x, mean, marker="o", label=spec.label(m), linewidth=2.2 if m == spec.against else 1.4)
            if len(vals) > 1:
                sd = vals.std(axis=0, ddof=1)
                ax.fill_between(x, mean - sd, mean + sd, alpha=0.12)
        base = curves[metric.name].get(spec.against)
        if base is not None and base.by_seed:
            ax.axhline(base.mean()[-1] * metric.scale, color="grey", linestyle="--", linewidth=1,
                       label=f"{spec.label(spec.against)} final")  # fmt: skip
        steps = next(iter(curves[metric.name].values())).steps
        ax.set_xscale("log")
        ax.set_xticks([s + 1 for s in steps], [str(s) for s in steps])
        ax.set_xlabel("LAPT steps (log axis of 1 + steps)")
        ax.set_ylabel(f"{metric.label} {metric.arrow}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{spec.name}: score vs LAPT budget, mean ± sample std over seeds", fontsize=9)
    return _save(fig, path)


PLOT_CAPTION = ("Score against LAPT steps (log axis of 1 + steps), mean ± sample std over seeds; dashed: the "
                "baseline's final score, the target of the steps-saved table (<spec>.budget.md).")


def has_budget_curves(spec: LeaderboardSpec) -> bool:
    """Whether a spec calls for budget curves: ``stage_set`` columns of compared metrics and a baseline."""
    return spec.against is not None and bool(curve_metrics(spec))


def write_budget(spec_path: str | Path, runs_dir: str | Path, out_dir: str | Path) -> list[Path]:
    """Read the spec's records under ``runs_dir``, write the table (md, csv) and the plot into ``out_dir``."""
    spec = load_spec(spec_path)
    records = load_records([d for d in spec.records_dirs(runs_dir) if d.is_dir()])
    if not records:
        raise FileNotFoundError(f"budget: no records of {list(spec.experiments)} under {runs_dir}")
    return write_budget_files(spec, records, out_dir)


def write_budget_files(spec: LeaderboardSpec, records: Iterable[TrialRecord | Mapping], out_dir: str | Path) -> list[Path]:
    """``<name>.budget.md``, ``<name>.budget.csv`` and ``plots/<name>/budget-curves.png`` in ``out_dir``
    (also written by ``tokxfer leaderboard`` for a spec with :func:`has_budget_curves`)."""
    from leaderboards.render import write_text_atomic

    curves = budget_curves(records, spec)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    md, table_csv = out / f"{spec.name}.budget.md", out / f"{spec.name}.budget.csv"
    write_text_atomic(md, render_budget_markdown(curves, spec))
    write_text_atomic(table_csv, render_budget_csv(curves, spec))
    return [md, table_csv, plot_budget_curves(curves, spec, out / "plots" / spec.name / "budget-curves.png")]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m leaderboards.budget SPEC --runs-dir DIR --out DIR``; exit 2 on bad input."""
    p = argparse.ArgumentParser(prog="python -m leaderboards.budget", description=__doc__.splitlines()[0])
    p.add_argument("spec")
    p.add_argument("--runs-dir", default="runs")
    p.add_argument("--out", default="leaderboards/tables")
    args = p.parse_args(argv)
    try:
        for path in write_budget(args.spec, args.runs_dir, args.out):
            print(f"→ {path}")
    except (OSError, ValueError) as e:
        print(f"budget: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
