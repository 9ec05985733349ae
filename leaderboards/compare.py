"""``tokxfer compare``: one method against baselines, with the leaderboards' statistics.

The comparisons (method vs each baseline, in every column of the spec) are tested exactly as a
table's declared comparisons are (:func:`leaderboards.stats.analyze`): paired by seed, the paired
t-test over seeds (or the spec's test), Holm-adjusted over *all* of them together, with the
difference's 95 % CI, the probability of improvement P(A > B) and the minimum detectable effect.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from leaderboards.aggregate import Table, aggregate
from leaderboards.render import render_comparisons_markdown
from leaderboards.spec import LeaderboardSpec, SpecError
from leaderboards.stats import TableStats, analyze

__all__ = ["compare", "compare_table", "render_comparison_markdown"]


def compare_table(
    table: Table, method: str, against: Sequence[str], alpha: float | None = None, test: str | None = None
) -> TableStats:
    """Test ``method`` against every baseline in ``against``, in every column of ``table``.

    Args:
        table: an aggregated table holding the rows.
        method: row key of the method.
        against: row keys of the baselines.
        alpha / test: default: the table's spec's.

    Returns:
        The :class:`~leaderboards.stats.TableStats` whose ``verdicts`` are these comparisons.

    Raises:
        SpecError: a name is not a row of the table (naming the rows it has).
    """
    rows = [r.method for r in table.rows]
    unknown = [m for m in [method, *against] if m not in rows]
    if unknown:
        raise SpecError(f"method(s) {', '.join(map(repr, unknown))} are not rows of table {table.spec.name!r} "
                        f"(rows: {', '.join(rows)})")
    return analyze(table, pairs=[(method, b) for b in against if b != method], alpha=alpha, test=test)


def compare(
    records: Iterable[Mapping],
    spec: LeaderboardSpec,
    method: str,
    against: Sequence[str],
    alpha: float | None = None,
) -> tuple[Table, TableStats]:
    """Aggregate ``records`` by ``spec`` and compare ``method`` with each of ``against``.

    Example:
        >>> table, st = compare(load_records("runs/quickstart"), load_spec("leaderboards/specs/quickstart.yaml"),
        ...                     "focus", ["random"])  # doctest: +SKIP
        >>> print(render_comparison_markdown(table, st))  # doctest: +SKIP
    """
    table = aggregate(records, spec)
    return table, compare_table(table, method, against, alpha)


def render_comparison_markdown(table: Table, comparison: TableStats) -> str:
    """The comparisons as the leaderboards show them: difference [CI], Holm p, P(A > B), MDE, verdict."""
    view = replace(table, stats=comparison)
    return "\n".join([f"### {table.spec.name}: comparisons (α = {comparison.alpha:g})", "",
                      *render_comparisons_markdown(view)]) + "\n"
