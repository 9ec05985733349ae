"""Per-cell comparison of methods against a baseline, with significance tests.

For every (method, column) of a table: the difference of means (method − baseline), Welch's
t-test (unequal variances, ``scipy.stats.ttest_ind(equal_var=False)``) and, when the two cells
share at least two seeds (each seed once), the paired t-test on those seeds
(``scipy.stats.ttest_rel``). The verdict uses the paired test when there is one, else Welch's:
``win`` / ``loss`` when ``p < alpha`` in the metric's better / worse direction, ``tie`` otherwise,
``n/a`` when no test is defined (fewer than two values, or zero variance). Paired differences
that are all equal (a constant offset) leave the paired test undefined; Welch's decides then. No correction for
multiple comparisons is applied; pass a smaller ``alpha`` for that.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from leaderboards.aggregate import Cell, Table, aggregate
from leaderboards.spec import Column, LeaderboardSpec

__all__ = ["CellComparison", "Comparison", "compare_cells", "compare", "compare_table", "render_comparison_markdown"]


@dataclass(frozen=True)
class CellComparison:
    """Comparison of one method with the baseline in one column.

    Attributes:
        method: the compared method id.
        column: column key.
        diff: mean(method) − mean(baseline), record units (``None`` if a side is empty).
        welch_t / welch_p: Welch's t statistic and two-sided p (``None`` if undefined).
        paired_t / paired_p: paired t statistic and two-sided p on shared seeds (``None`` if
            fewer than two shared seeds or undefined).
        n_paired: number of shared seeds.
        test: ``"paired"``, ``"welch"`` or ``None`` — which p decides the verdict.
        verdict: ``"win"``, ``"loss"``, ``"tie"`` or ``"n/a"``.
    """

    method: str
    column: str
    diff: float | None
    welch_t: float | None
    welch_p: float | None
    paired_t: float | None
    paired_p: float | None
    n_paired: int
    test: str | None
    verdict: str

    @property
    def p(self) -> float | None:
        """The p-value behind the verdict."""
        return self.paired_p if self.test == "paired" else self.welch_p if self.test == "welch" else None


@dataclass(frozen=True)
class Comparison:
    """All comparisons of a table against one baseline."""

    baseline: str
    alpha: float
    columns: tuple[Column, ...]
    cells: tuple[CellComparison, ...]
    labels: Mapping[str, str]

    def get(self, method: str, column_key: str) -> CellComparison:
        """The comparison for one method and column."""
        for c in self.cells:
            if c.method == method and c.column == column_key:
                return c
        raise KeyError((method, column_key))


def _finite(x: float) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def compare_cells(cell: Cell, base: Cell, column: Column, method: str = "", alpha: float = 0.05) -> CellComparison:
    """Compare two aggregated cells (their per-seed ``values`` and ``seeds``).

    Example:
        >>> from leaderboards.spec import MetricSpec
        >>> col = Column("t", "near", MetricSpec("acc"))
        >>> a = Cell(mean=0.6, n=3, seeds=(1, 2, 3), values=(0.60, 0.61, 0.59))
        >>> b = Cell(mean=0.5, n=3, seeds=(1, 2, 3), values=(0.50, 0.52, 0.48))
        >>> compare_cells(a, b, col).verdict
        'win'
    """
    key = column.key
    if cell.mean is None or base.mean is None:
        return CellComparison(method, key, None, None, None, None, None, 0, None, "n/a")
    diff = cell.mean - base.mean
    welch_t = welch_p = paired_t = paired_p = None
    if len(cell.values) >= 2 and len(base.values) >= 2:
        res = stats.ttest_ind(cell.values, base.values, equal_var=False)
        welch_t, welch_p = _finite(res.statistic), _finite(res.pvalue)
    a = dict(zip(cell.seeds, cell.values))
    b = dict(zip(base.seeds, base.values))
    unique = len(a) == len(cell.seeds) and len(b) == len(base.seeds)  # each seed once on both sides
    shared = sorted((s for s in a if s in b), key=str) if unique else []
    if len(shared) >= 2:
        x = np.array([a[s] for s in shared]) - np.array([b[s] for s in shared])
        # Constant differences (a deterministic offset) make the paired statistic infinite or,
        # after float cancellation, arbitrarily large: the paired test is undefined there.
        if np.ptp(x) > 1e-12 * max(1.0, float(np.max(np.abs(x)))):
            res = stats.ttest_rel([a[s] for s in shared], [b[s] for s in shared])
            paired_t, paired_p = _finite(res.statistic), _finite(res.pvalue)
    if paired_p is not None:
        test, p = "paired", paired_p
    elif welch_p is not None:
        test, p = "welch", welch_p
    else:
        test, p = None, None
    if p is None:
        verdict = "n/a"
    elif p < alpha and diff != 0:
        better = diff > 0 if column.metric.direction == "higher" else diff < 0
        verdict = "win" if better else "loss"
    else:
        verdict = "tie"
    return CellComparison(method, key, diff, welch_t, welch_p, paired_t, paired_p, len(shared), test, verdict)


def compare_table(table: Table, baseline: str, methods: Sequence[str] | None = None, alpha: float = 0.05) -> Comparison:
    """Compare rows of an aggregated table with the baseline row.

    Raises:
        KeyError: the baseline is not a row of the table.
    """
    rows = {r.method: r for r in table.rows}
    if baseline not in rows:
        raise KeyError(f"baseline {baseline!r} is not a row of table {table.spec.name!r}; rows: {sorted(rows)}")
    names = [m for m in (methods or [r.method for r in table.rows]) if m != baseline]
    missing = [m for m in names if m not in rows]
    if missing:
        raise KeyError(f"methods {missing} are not rows of table {table.spec.name!r}")
    base = rows[baseline]
    cells = tuple(
        compare_cells(rows[m].cells[c.key], base.cells[c.key], c, method=m, alpha=alpha)
        for m in names
        for c in table.columns
    )
    labels = {r.method: r.label for r in table.rows}
    return Comparison(baseline=baseline, alpha=alpha, columns=table.columns, cells=cells, labels=labels)


def compare(
    records: Iterable[Mapping],
    spec: LeaderboardSpec,
    baseline: str,
    methods: Sequence[str] | None = None,
    alpha: float = 0.05,
) -> Comparison:
    """Aggregate ``records`` by ``spec`` and compare every method (or ``methods``) with ``baseline``.

    Example:
        >>> cmp = compare(load_records("runs/quickstart"), load_spec("leaderboards/specs/quickstart.yaml"), "random")  # doctest: +SKIP
        >>> print(render_comparison_markdown(cmp))  # doctest: +SKIP
    """
    return compare_table(aggregate(records, spec), baseline, methods, alpha)


def render_comparison_markdown(cmp: Comparison) -> str:
    """Markdown table of differences to the baseline: ``+0.12 ▲ (p=0.010)``; ▲ significant win,
    ▼ significant loss, no mark: not significant or untestable."""
    from leaderboards.render import column_header, format_number

    with_task = len({c.task for c in cmp.columns}) > 1
    header = ["Method"] + [column_header(c, with_task) for c in cmp.columns]
    lines = [
        f"### Δ vs {cmp.labels.get(cmp.baseline, cmp.baseline)} (α = {cmp.alpha:g})",
        "",
        "| " + " | ".join(h.replace("|", "\\|") for h in header) + " |",
        "|" + "|".join([":---"] + ["---:"] * len(cmp.columns)) + "|",
    ]
    methods = list(dict.fromkeys(c.method for c in cmp.cells))
    for m in methods:
        cells = [cmp.labels.get(m, m)]
        for col in cmp.columns:
            c = cmp.get(m, col.key)
            if c.diff is None:
                cells.append("–")
                continue
            diff = format_number(c.diff, col.metric)
            text = diff if diff.startswith("-") else f"+{diff}"
            mark = {"win": " ▲", "loss": " ▼"}.get(c.verdict, "")
            if c.p is None:
                p = " (n/a)"
            else:
                pv = "p<0.001" if c.p < 0.001 else f"p={c.p:.3f}"
                p = f" ({pv}{', paired' if c.test == 'paired' else ''})"
            cells.append(f"{text}{mark}{p}")
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "- Δ = method − baseline in display units; ▲/▼ significant win/loss by the metric's direction; "
        "paired t-test on shared seeds when there are ≥ 2, else Welch's t-test; no multiple-comparison correction.",
    ]
    return "\n".join(lines) + "\n"
