"""Golden values with tolerances and provenance, and the regression check used by CI.

A golden file (``leaderboards/golden/<spec>.json``) is written by :func:`update_golden` — never
by hand — and records, per cell, the mean the records gave, the direction of the metric and the
tolerances, plus the provenance of the records (command, git sha, date, device, library
versions). :func:`check_regression` recomputes those cells from fresh records with the same
aggregation code as the leaderboards and fails when a value moved the wrong way by more than its
tolerance, when a cell is missing or incomplete, or when a value is not finite.

Format (``format_version`` 1)::

    {"format": "tokxfer-golden", "format_version": 1,
     "spec": {"name": "quickstart", "version": 1, "where": {}, "required_seeds": [1, 2, 3]},
     "provenance": {"command": "...", "date": "ISO-8601 UTC", "git": {"sha": "...", "dirty": false},
                    "device": "cpu", "tokxfer_version": "0.1.0", "libraries": {"torch": "2.13.0", ...},
                    "n_records": 24},
     "cells": [{"method": "focus", "task": "mlm-at-init", "language": "near", "metric": "loss",
                "source": "metrics", "components": [], "direction": "lower",
                "value": 6.1, "std": 0.05, "n": 3, "abs_tol": 0.1, "rel_tol": 0.01}, ...]}

Two modes (``tokxfer check-regression --mode``):

* ``exact`` (default, CI's determinism check): a value passes when it is not worse than ``value`` by
  more than ``max(abs_tol, rel_tol * |value|)``.
* ``statistical`` (for runs that are not bit-identical to the golden's, e.g. on a GPU or another
  library build): a cell regresses only when its fresh seeds are significantly worse than the
  golden's seeds — a one-sided Welch t-test from the golden's stored mean, std and n
  (:func:`leaderboards.stats.regression_test`), Holm-adjusted over all the golden's cells at
  ``alpha``. Unpaired, because a seed on another device shares the seed number but not the noise;
  a test, not "below the golden's lower CI bound", because that rule ignores the fresh runs' own
  noise and has no known false-alarm rate. A cell whose test is undefined (fewer than two seeds, or
  no spread on either side) falls back to the exact rule, and its line says so. Each line states
  the drop the test would detect with 80 % power (MDE), so a pass reads "no drop larger than X".
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.run.records import as_trial_records
from leaderboards.aggregate import FLAGS, aggregate, matches_where
from leaderboards.render import write_text_atomic
from leaderboards.spec import Column, LeaderboardSpec, MetricSpec, RowSpec
from leaderboards.stats import ALPHA, holm, regression_test

__all__ = [
    "GOLDEN_DIR",
    "GOLDEN_FORMAT",
    "default_golden_path",
    "GOLDEN_FORMAT_VERSION",
    "CellCheck",
    "Report",
    "check_regression",
    "update_golden",
    "load_golden",
    "golden_spec",
    "provenance_of",
    "MODES",
]

MODES = ("exact", "statistical")
"""Regression-check modes (see the module docstring)."""

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
"""Where the committed golden files live (``<spec name>.json``)."""
GOLDEN_FORMAT = "tokxfer-golden"
GOLDEN_FORMAT_VERSION = 1

DEFAULT_REL_TOL = 0.01
"""1 % of the value: covers float/library noise between CPU builds for metrics of any scale."""
DEFAULT_STD_FACTOR = 2.0
"""Default ``abs_tol`` = this × the cell's sample std over seeds: a change within seed noise passes."""


def default_golden_path(spec: LeaderboardSpec) -> Path:
    """``leaderboards/golden/<spec name>.json``."""
    return GOLDEN_DIR / f"{spec.name}.json"


def load_golden(path: str | os.PathLike) -> dict:
    """Read and check a golden file.

    Raises:
        ValueError: wrong format or version (named with the file).
    """
    path = Path(path)
    data = json.loads(path.read_text(encoding="utf-8"))
    if data.get("format") != GOLDEN_FORMAT:
        raise ValueError(f"{path}: not a tokxfer golden file (format={data.get('format')!r})")
    if data.get("format_version") != GOLDEN_FORMAT_VERSION:
        raise ValueError(
            f"{path}: golden format_version {data.get('format_version')!r}, this tokxfer reads {GOLDEN_FORMAT_VERSION}"
        )
    return data


def golden_spec(golden: Mapping) -> LeaderboardSpec:
    """The minimal spec that recomputes exactly the golden's cells (same seeds and filter)."""
    cols: dict[str, Column] = {}
    methods: list[str] = []
    for c in golden["cells"]:
        metric = MetricSpec(name=c["metric"], direction=c["direction"], source=c.get("source", "metrics"))
        col = Column(task=c["task"], language=c["language"], metric=metric, components=tuple(c.get("components") or ()),
                     task_id=c.get("task_id"))
        prev = cols.setdefault(col.key, col)
        if prev != col:
            raise ValueError(f"golden: inconsistent definitions of column {col.key}")
        if c["method"] not in methods:
            methods.append(c["method"])
    spec = golden.get("spec") or {}
    return LeaderboardSpec(
        name=str(spec.get("name", "golden")),
        version=int(spec.get("version", 1)),
        columns=tuple(cols.values()),
        experiments=(),
        rows=tuple(RowSpec(m) for m in methods),
        required_seeds=tuple(spec.get("required_seeds") or ()),
        where=tuple((spec.get("where") or {}).items()),
    )


@dataclass(frozen=True)
class CellCheck:
    """The check of one golden cell.

    Attributes:
        method / column: which cell (column key ``task/language/metric``).
        direction: ``higher`` or ``lower`` is better.
        golden: the golden mean.
        current: the recomputed mean (``None`` if missing).
        allowed: the tolerance applied, ``max(abs_tol, rel_tol * |golden|)``.
        status: ``ok``, ``improved``, ``regressed``, ``missing``, ``incomplete`` or ``nonfinite``.
        detail: human-readable reason.
        warnings: non-failing remarks (mixed versions, duplicate seeds).
        p: statistical mode: the Holm-adjusted one-sided p of "worse than the golden" (``None``:
            exact mode, or the test was undefined and the exact rule decided).
        mde: statistical mode: the drop detectable with 80 % power (record units).
    """

    method: str
    column: str
    direction: str
    golden: float
    current: float | None
    allowed: float
    status: str
    detail: str = ""
    warnings: tuple[str, ...] = ()
    p: float | None = None
    mde: float | None = None

    @property
    def failed(self) -> bool:
        """Whether this cell fails the check."""
        return self.status in FAILING

    @property
    def delta(self) -> float | None:
        """``current - golden``."""
        return None if self.current is None else self.current - self.golden


FAILING = frozenset({"regressed", "missing", "incomplete", "nonfinite"})


@dataclass(frozen=True)
class Report:
    """Result of :func:`check_regression`.

    Attributes:
        checks: one entry per golden cell.
        golden_provenance: the golden file's provenance.
        mode: one of :data:`MODES`.
        alpha: statistical mode: the family-wise level.
    """

    checks: tuple[CellCheck, ...]
    golden_provenance: Mapping[str, Any] = field(default_factory=dict)
    mode: str = "exact"
    alpha: float = ALPHA

    @property
    def ok(self) -> bool:
        """No cell failed."""
        return not any(c.failed for c in self.checks)

    @property
    def exit_code(self) -> int:
        """0 when ok, 1 otherwise (the CLI's exit status)."""
        return 0 if self.ok else 1

    @property
    def failures(self) -> list[CellCheck]:
        """Failing cells."""
        return [c for c in self.checks if c.failed]

    def format(self, verbose: bool = False) -> str:
        """A readable diff: failures first, then improvements, then (verbose) passing cells."""
        lines = []
        n_fail = len(self.failures)
        n_imp = sum(c.status == "improved" for c in self.checks)
        head = "REGRESSION CHECK FAILED" if n_fail else "regression check passed"
        beyond = "tolerance" if self.mode == "exact" else "the golden's seed noise"
        lines.append(f"{head}: {len(self.checks)} cells, {n_fail} failing, {n_imp} improved beyond {beyond}")
        if self.mode == "statistical":
            lines.append(f"mode statistical: one-sided Welch t-test of the fresh seeds vs the golden's, Holm over "
                         f"the cells, alpha = {self.alpha:g}")
        prov = self.golden_provenance
        if prov:
            sha = (prov.get("git") or {}).get("sha")
            lines.append(f"golden from: {prov.get('command', '?')} @ {sha} on {prov.get('date', '?')} ({prov.get('device', '?')})")
        order = {"regressed": 0, "nonfinite": 1, "missing": 2, "incomplete": 3, "improved": 4, "ok": 5}
        for c in sorted(self.checks, key=lambda c: (order[c.status], c.method, c.column)):
            if c.status == "ok" and not verbose:
                continue
            mark = "FAIL" if c.failed else ("IMPROVED" if c.status == "improved" else "ok")
            cur = "—" if c.current is None else f"{c.current:.6g}"
            if c.delta is None:
                delta = ""
            elif c.p is not None:
                mde = "" if c.mde is None else f", MDE {c.mde:.4g}"
                delta = f" (Δ {c.delta:+.4g}, p(Holm) {c.p:.3g}{mde}, {c.direction} is better)"
            else:
                delta = f" (Δ {c.delta:+.4g}, allowed ±{c.allowed:.4g}, {c.direction} is better)"
            lines.append(f"  [{mark:8}] {c.method:<16} {c.column:<32} golden {c.golden:.6g} → {cur}{delta}")
            if c.detail:
                lines.append(f"             {c.detail}")
            for w in c.warnings:
                lines.append(f"             warning: {w}")
        if n_imp and not n_fail:
            lines.append("Some values improved beyond tolerance: regenerate the goldens with `tokxfer update-golden` if intended.")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """JSON-serializable form."""
        return {"ok": self.ok, "mode": self.mode, "checks": [asdict(c) for c in self.checks],
                "golden_provenance": dict(self.golden_provenance)}


def _allowed(cell: Mapping) -> float:
    return max(float(cell.get("abs_tol") or 0.0), float(cell.get("rel_tol") or 0.0) * abs(float(cell["value"])))


def _exact_status(worse: float, allowed: float) -> tuple[str, str]:
    if worse > allowed:
        return "regressed", f"worse by {worse:.4g} > allowed {allowed:.4g}"
    if -worse > allowed:
        return "improved", f"better by {-worse:.4g} > tolerance {allowed:.4g}"
    return "ok", ""


def check_regression(
    records: Iterable[Mapping], golden: Mapping | str | os.PathLike, mode: str = "exact", alpha: float = ALPHA
) -> Report:
    """Recompute the golden cells from ``records`` and compare.

    Args:
        records: fresh trial records.
        golden: a golden dict or the path of a golden file.
        mode: ``exact`` (tolerances) or ``statistical`` (beyond the golden's seed noise); see the
            module docstring.
        alpha: statistical mode: family-wise level over the cells.

    Returns:
        The :class:`Report` (``report.exit_code`` is the CLI's exit status; ``report.format()``
        the readable diff).

    Raises:
        ValueError: an unknown mode or an alpha outside (0, 0.5).

    Example:
        >>> report = check_regression(load_records("runs/quickstart"), "leaderboards/golden/quickstart.json")  # doctest: +SKIP
        >>> print(report.format()); raise SystemExit(report.exit_code)  # doctest: +SKIP
    """
    # Stays whole: exact and statistical mode share the loop over golden cells; the statistical tests are
    # Holm-adjusted over all cells after it.
    if mode not in MODES:
        raise ValueError(f"check_regression: mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not 0 < alpha < 0.5:
        raise ValueError(f"check_regression: alpha must be in (0, 0.5), got {alpha!r}")
    if not isinstance(golden, Mapping):
        golden = load_golden(golden)
    spec = golden_spec(golden)
    table = aggregate(records, spec)
    rows = {r.method: r for r in table.rows}
    checks: list[CellCheck] = []
    tests: dict[int, tuple] = {}  # index in checks -> regression_test arguments (statistical mode)
    for g in golden["cells"]:
        task = g["task"] if g.get("task_id") is None else f"{g['task']}[{g['task_id']}]"
        key = f"{task}/{g['language']}/{g['metric']}"
        value = float(g["value"])
        allowed = _allowed(g)
        direction = g["direction"]
        cell = rows[g["method"]].cells[key]
        warnings = tuple(FLAGS[f][1] for f in ("mixed_versions", "duplicate_seeds") if f in cell.flags)
        common = {"method": g["method"], "column": key, "direction": direction, "golden": value, "allowed": allowed}
        if cell.mean is None:
            failed = f"; {cell.failed} failed trial(s)" if cell.failed else ""
            checks.append(CellCheck(**common, current=None, status="missing", detail=f"no value in the records{failed}"))
            continue
        if "missing_seeds" in cell.flags:
            detail = f"only seeds {list(cell.seeds)} of required {list(spec.required_seeds)}"
            if cell.failed:
                detail += f"; {cell.failed} failed trial(s)"
            checks.append(CellCheck(**common, current=cell.mean, status="incomplete", detail=detail, warnings=warnings))
            continue
        if not math.isfinite(cell.mean):
            checks.append(CellCheck(**common, current=cell.mean, status="nonfinite", detail="value is not finite"))
            continue
        worse = (value - cell.mean) if direction == "higher" else (cell.mean - value)
        status, detail = _exact_status(worse, allowed)
        if mode == "statistical":
            std = g.get("std")
            args = ((cell.mean, cell.std, cell.n), (value, None if std is None else float(std), int(g.get("n") or 0)),
                    direction == "higher")
            if regression_test(*args)["p_worse"] is None:
                detail = (detail + "; " if detail else "") + "statistical test undefined (fewer than two seeds or no spread): tolerance rule"
            else:
                tests[len(checks)] = args
        checks.append(CellCheck(**common, current=cell.mean, status=status, detail=detail, warnings=warnings))
    if tests:
        # the MDE at the Bonferroni level: the strictest Holm step, so "no drop larger than X" holds for every cell
        results = {i: regression_test(*args, mde_alpha=alpha / len(tests)) for i, args in tests.items()}
        q_worse = holm([r["p_worse"] for r in results.values()], alpha)
        q_better = holm([r["p_better"] for r in results.values()], alpha)
        for (i, res), qw, qb in zip(results.items(), q_worse, q_better):
            c = checks[i]
            worse = (c.golden - c.current) if c.direction == "higher" else (c.current - c.golden)
            if qw < alpha:
                status, detail = "regressed", f"worse by {worse:.4g}, beyond the golden's seed noise (Holm p {qw:.3g} < {alpha:g})"
            elif qb < alpha:
                status, detail = "improved", f"better by {-worse:.4g}, beyond the golden's seed noise (Holm p {qb:.3g})"
            else:
                status, detail = "ok", ""
            checks[i] = replace(c, status=status, detail=detail, p=qw, mde=res["mde"])
    return Report(checks=tuple(checks), golden_provenance=golden.get("provenance") or {}, mode=mode, alpha=alpha)


def _merge(values: Iterable[Any]) -> Any:
    distinct = sorted({json.dumps(v, sort_keys=True) for v in values if v is not None})
    if not distinct:
        return None
    parsed = [json.loads(v) for v in distinct]
    return parsed[0] if len(parsed) == 1 else parsed


def provenance_of(records: Iterable[Mapping], command: str) -> dict:
    """Provenance of golden values: the command and what the records say about their origin.

    Git sha, device, tokxfer and library versions are taken from the records (they produced the
    values); a value that differs between records is kept as the list of its values.
    """
    recs = as_trial_records(records)
    env_keys = sorted({k for r in recs for k in (r.environment or {})})
    env = {k: _merge((r.environment or {}).get(k) for r in recs) for k in env_keys}
    device = env.pop("device", None)
    env.pop("hostname", None)
    return {
        "command": command,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git": {
            "sha": _merge((r.git or {}).get("sha") for r in recs),
            "dirty": _merge((r.git or {}).get("dirty") for r in recs),
        },
        "device": device,
        "tokxfer_version": _merge(r.tokxfer_version for r in recs),
        "schema_version": _merge(r.schema_version for r in recs),
        "libraries": env,
        "n_records": len(recs),
    }


def update_golden(
    records: Iterable[Mapping],
    spec: LeaderboardSpec,
    path: str | os.PathLike,
    command: str,
    rel_tol: float = DEFAULT_REL_TOL,
    std_factor: float = DEFAULT_STD_FACTOR,
    abs_tol: float | None = None,
    allow_flagged: bool = False,
) -> dict:
    """Write golden values for every measured cell of ``spec`` from ``records``.

    Args:
        records: the trial records the goldens come from.
        spec: the leaderboard spec (its columns, seeds and filter define the cells).
        path: output JSON path (written atomically).
        command: the command that produced the records (stored as provenance).
        rel_tol: relative tolerance per cell.
        std_factor: per-cell ``abs_tol = std_factor × sample std`` (0 when n < 2).
        abs_tol: a fixed absolute tolerance for every cell instead of the std rule.
        allow_flagged: write even if some cells are empty or flagged (missing seeds, mixed
            versions, duplicate seeds); otherwise that is an error.

    Returns:
        The golden dict written.

    Raises:
        ValueError: empty/flagged cells (without ``allow_flagged``), naming them.
    """
    # Stays whole: one pass over the table's cells, each written with its tolerance, then the provenance.
    recs = [r for r in records if matches_where(r, spec.where)]
    table = aggregate(recs, spec)
    cells, bad = [], []
    not_applicable = []
    for row in table.rows:
        row_has_values = any(c.mean is not None for c in row.cells.values())
        for col in table.columns:
            cell = row.cells[col.key]
            if cell.mean is None and cell.failed == 0 and not cell.seeds and row_has_values:
                # the method's records simply do not carry this metric (e.g. gold diagnostics for
                # ``original``, which keeps the source tokenizer): nothing to guard, recorded as such
                not_applicable.append(f"{row.method} {col.key}")
                continue
            problems = [f for f in ("missing_seeds", "mixed_versions", "duplicate_seeds") if f in cell.flags]
            if cell.mean is None or problems or not math.isfinite(cell.mean):
                bad.append(f"{row.method} {col.key}: {'empty' if cell.mean is None else ', '.join(problems) or 'not finite'}")
                if cell.mean is None or not math.isfinite(cell.mean):
                    continue
                if not allow_flagged:
                    continue
            tol = abs_tol if abs_tol is not None else std_factor * (cell.std or 0.0)
            cells.append(
                {
                    "method": row.method,
                    "task": col.task,
                    **({"task_id": col.task_id} if col.task_id is not None else {}),
                    "language": col.language,
                    "metric": col.metric.name,
                    "source": col.metric.source,
                    "components": list(col.components),
                    "direction": col.metric.direction,
                    "value": cell.mean,
                    "std": cell.std,
                    "n": cell.n,
                    "abs_tol": tol,
                    "rel_tol": rel_tol,
                }
            )
    if bad and not allow_flagged:
        raise ValueError("cannot write goldens from incomplete cells (pass allow_flagged=True to override):\n  " + "\n  ".join(bad))
    if not cells:
        raise ValueError(f"no cells with values for spec {spec.name!r}")
    golden = {
        "format": GOLDEN_FORMAT,
        "format_version": GOLDEN_FORMAT_VERSION,
        "spec": {
            "name": spec.name,
            "version": spec.version,
            "where": dict(spec.where),
            "required_seeds": list(spec.required_seeds),
        },
        "provenance": provenance_of(recs, command),
        "not_applicable": not_applicable,
        "cells": cells,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(golden, indent=2, sort_keys=False) + "\n")
    return golden

