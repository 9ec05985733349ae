"""Do the methods separate? Best row vs a baseline row, in units of their pooled seed std.

A downstream table answers "which initialization wins" only where the gap between the best row and
the baseline (``random`` by default) is large against the seed-to-seed spread. For each measured
column this module compares the best row (by the column's direction) with the baseline row:

* ``gap`` = best mean − baseline mean, signed so that positive means "better than the baseline";
* ``pooled std`` = sqrt((s_best² + s_base²) / 2), the two cells' sample stds (ddof=1) pooled with
  equal weights (both cells have the spec's required seeds);
* the column *separates* when ``gap >= threshold × pooled std`` (threshold 3 by default).

A metric may declare its chance level (``chance`` in the spec's metric, in record units), which is
printed beside the best value so a reader sees how far from chance the task is.

Spec form::

    separation: {baseline: random, threshold: 3}
    metrics:
      accuracy: {direction: higher, scale: 100, chance: 0.3333}

Example:
    >>> import math
    >>> pooled_std(1.0, 1.0), round(pooled_std(3.0, 4.0), 4)
    (1.0, 3.5355)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from leaderboards.aggregate import Table
from leaderboards.spec import Column

__all__ = ["Separation", "pooled_std", "separations", "separation_lines"]


def pooled_std(a: float, b: float) -> float:
    """Equal-weight pooled standard deviation of two cells' sample stds."""
    return math.sqrt((a * a + b * b) / 2.0)


@dataclass(frozen=True)
class Separation:
    """The comparison of one column's best row with its baseline row."""

    column: Column
    best: str
    baseline: str
    best_mean: float
    baseline_mean: float
    gap: float
    pooled: float | None
    threshold: float

    @property
    def ratio(self) -> float | None:
        """gap / pooled std (``None`` when the pooled std is undefined or zero)."""
        if self.pooled is None or self.pooled == 0:
            return None
        return self.gap / self.pooled

    @property
    def separates(self) -> bool | None:
        """Whether the gap is at least ``threshold`` pooled stds (``None``: undefined std)."""
        if self.best == self.baseline:
            return False
        if self.pooled is None:
            return None
        return self.gap >= self.threshold * self.pooled if self.pooled > 0 else self.gap > 0


def separations(table: Table) -> list[Separation]:
    """One :class:`Separation` per measured column that has both a best row and the baseline row."""
    spec = table.spec
    if spec.separation is None:
        return []
    baseline, threshold = spec.separation
    out = []
    for column in table.columns:
        rows = {r.method: r.cells[column.key] for r in table.rows}
        base = rows.get(baseline)
        if base is None or base.mean is None or not math.isfinite(base.mean):
            continue
        cands = {m: c for m, c in rows.items() if c.mean is not None and math.isfinite(c.mean)}
        sign = 1.0 if column.metric.direction == "higher" else -1.0
        best = max(sorted(cands), key=lambda m: sign * cands[m].mean)
        cell = cands[best]
        pooled = None if cell.std is None or base.std is None else pooled_std(cell.std, base.std)
        out.append(Separation(column, best, baseline, cell.mean, base.mean, sign * (cell.mean - base.mean),
                              pooled, threshold))
    return out


def _fmt(value: float, column: Column) -> str:
    m = column.metric
    return f"{value * m.scale:.{m.decimals}f}"


def separation_lines(table: Table) -> list[str]:
    """One summary line per column: best vs baseline, gap in pooled stds, chance level."""
    lines = []
    for s in separations(table):
        c = s.column
        where = f"{c.metric.label} {c.language}" + (f" ({c.task})" if len({x.task for x in table.columns}) > 1 else "")
        chance = c.metric.chance
        chance_text = f"; chance {_fmt(chance, c)}" if chance is not None else ""
        if s.best == s.baseline:
            verdict = f"the baseline {table.spec.label(s.baseline)} is best ({_fmt(s.best_mean, c)}){chance_text}"
        else:
            ratio = s.ratio
            spread = (f"{ratio:.1f} pooled std (pooled std {_fmt(s.pooled, c)})" if ratio is not None
                      else "pooled std undefined (fewer than two seeds)")
            answer = {True: "separates", False: "does not separate", None: "cannot tell"}[s.separates]
            verdict = (f"best {table.spec.label(s.best)} {_fmt(s.best_mean, c)} vs "
                       f"{table.spec.label(s.baseline)} {_fmt(s.baseline_mean, c)}: gap "
                       f"{_fmt(s.gap, c)} = {spread} → {answer} (threshold {s.threshold:g}×){chance_text}")
        lines.append(f"separation, {where}: {verdict}")
    return lines
