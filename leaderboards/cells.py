"""What every rendering of a leaderboard shares: numbers in display units, a cell's parts, bold rows,
legends, the summary and provenance lines, the declared comparisons' verdicts and the rank intervals
(the Markdown, CSV, LaTeX and HTML writers in :mod:`leaderboards.render` and :mod:`leaderboards.web`
all read them from here, so the four formats say the same thing)."""

from __future__ import annotations

import math

from leaderboards.aggregate import FLAGS, NONDETERMINISTIC_PREFIX, Cell, Table, best_methods
from leaderboards.claims import claim_verdict
from leaderboards.spec import Column, MetricSpec
from leaderboards.stats import BETTER, NO_DIFFERENCE, WORSE, Verdict


def format_number(value: float, metric: MetricSpec) -> str:
    """A value in the metric's display units.

    Example:
        >>> format_number(0.1234, MetricSpec("accuracy", scale=100, decimals=1))
        '12.3'
    """
    if not math.isfinite(value):
        return str(value)
    return f"{value * metric.scale:.{metric.decimals}f}"


def _signed(value: float, metric: MetricSpec) -> str:
    text = format_number(value, metric)
    return text if text.startswith("-") else f"+{text}"


def _interval_text(low: float | None, high: float | None, metric: MetricSpec) -> str | None:
    if low is None or high is None:
        return None
    return f"[{format_number(low, metric)}, {format_number(high, metric)}]"


def _p_text(p: float | None) -> str:
    if p is None:
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _show_n(cell: Cell, table: Table) -> bool:
    required = len(table.spec.required_seeds)
    return cell.n == 1 or not required or cell.n != required


def _multi_task(table: Table) -> bool:
    return len({c.task for c in table.columns}) > 1


def column_header(column: Column, with_task: bool = False) -> str:
    """Plain-text header of a column, e.g. ``"loss ↓ near"``."""
    head = f"{column.metric.label} {column.metric.arrow} {column.language}"
    if column.task_id is not None:
        head = f"{head} [{column.task_id}]"
    if column.stage_set is not None:
        head = f"{head} @{column.stage_set}"
    return f"{column.task} {head}" if with_task else head


def _cell_parts(cell: Cell, column: Column, table: Table) -> tuple[str, str | None, str | None, list[str]]:
    """``(mean, "[low, high]" or None, "n=…" or None, flag names)`` of a cell in display units."""
    m = column.metric
    ci = None if cell.reference or cell.ci is None else _interval_text(cell.ci.low, cell.ci.high, m)
    n = f"n={cell.n}" if not cell.reference and _show_n(cell, table) else None
    return format_number(cell.mean, m), ci, n, [f for f in FLAGS if f in cell.flags]


def bold_rows(table: Table, column: Column) -> set[str]:
    """Rows shown in bold in ``column``: not significantly worse than the best mean
    (:func:`leaderboards.stats.not_worse_than_best`), plus ties of the best at display precision."""
    best = best_methods(table, column)
    if table.stats is None or column.key not in table.stats.bold:
        return best
    return set(table.stats.bold[column.key]) | best


def _legend_text(table: Table, flag: str) -> str:
    """The legend of one flag; for sanity flags, with the codes found behind the table's cells."""
    text = FLAGS[flag][1]
    if flag in ("sanity", "nondeterministic"):
        codes = [g for g in table.guards_used() if g.startswith(NONDETERMINISTIC_PREFIX) == (flag == "nondeterministic")]
        if codes:
            text += f" ({', '.join(codes)})"
    return text


def _legend_lines(table: Table) -> list[str]:
    return [f"{FLAGS[f][0]} {_legend_text(table, f)}" for f in table.flags_used()]


def _provenance_line(table: Table) -> str | None:
    prov = table.provenance
    if not prov.records:
        return None
    parts = []
    if prov.dirty:
        parts.append(f"{prov.dirty} of {prov.records} records were written from a git tree with uncommitted "
                     f"changes ({FLAGS['dirty'][0]})")
    else:
        parts.append(f"all {prov.records} records were written from clean git trees")
    if prov.world is None and prov.other_world:
        parts.append(f"no record carries a world fingerprint (revisions.world.fingerprint), so no cell's world "
                     f"build can be checked ({FLAGS['world'][0]} on every cell)")
    elif prov.other_world:
        parts.append(f"{prov.other_world} of {prov.records} records lack the table's world build {prov.world} "
                     f"(no fingerprint or another one; {FLAGS['world'][0]})")
    elif prov.world is not None:
        parts.append(f"every record is of world build {prov.world}")
    return "Provenance: " + "; ".join(parts) + "."


def _summary_lines(table: Table) -> list[str]:
    spec = table.spec
    seeds = f"seeds {list(spec.required_seeds)}" if spec.required_seeds else "all seeds found"
    lines = [
        f"Spec `{spec.name}` v{spec.version}; {table.n_records} records. Each cell: mean [95 % CI] over {seeds} "
        f"(t-interval on n−1 df; with per-example results, a t-interval on the seeds' spread plus the test set's shared share, Welch–Satterthwaite df); n shown "
        f"where it differs{'' if spec.required_seeds else ' (always)'}, and a single value has no interval (n=1). "
        f"Bold: not significantly worse than the column's best mean (paired tests over seeds against it, Holm, "
        f"α = {spec.alpha:g}) (↑ higher / ↓ lower is better).",
    ]
    if table.provenance.sources:
        lines.append(table.provenance.sources)
    prov = _provenance_line(table)
    if prov:
        lines.append(prov)
    if any(c.is_average for c in table.columns):
        lines.append("avg: mean over the languages per seed, then mean and CI over seeds with every language.")
    if any(r.failed for r in table.rows):
        lines.append("failed: failed trials of the method (counted separately, never averaged).")
    for pn in spec.paper:
        lines.append(
            f"paper rows: numbers reported in {pn.citation}{' — ' + pn.note if pn.note else ''}; not measured here."
        )
    return lines + list(table.notes)


# --------------------------------------------------------------------------------------------
# Declared comparisons and ranks (shared by the renderers)
# --------------------------------------------------------------------------------------------


def _columns(table: Table) -> dict[str, Column]:
    return {c.key: c for c in table.columns}


def _verdict_text(v: Verdict, table: Table) -> str:
    if v.verdict in (BETTER, WORSE):
        return f"{table.spec.label(v.a)} {v.verdict}"
    if v.verdict == NO_DIFFERENCE:
        return NO_DIFFERENCE
    return f"untestable: {v.difference.note}" if v.difference.note else "untestable"


def _comparison_cells(v: Verdict, table: Table, with_task: bool) -> list[str]:
    """Display strings: A vs B, column, Δ [CI], Holm p, P(A>B) [CI], MDE, verdict."""
    col = _columns(table)[v.column]
    m = col.metric
    d = v.difference
    diff = "–" if d.diff is None else _signed(d.diff, m)
    ci = _interval_text(d.low, d.high, m)
    imp = d.improvement
    imp_text = "–" if imp is None else f"{imp.estimate:.2f}" + (
        f" [{imp.low:.2f}, {imp.high:.2f}]" if imp.defined else "")
    mde = "–" if v.mde is None else format_number(v.mde, m)
    return [f"{table.spec.label(v.a)} vs {table.spec.label(v.b)}", column_header(col, with_task),
            diff + (f" {ci}" if ci else ""), _p_text(v.p_holm), imp_text, mde, _verdict_text(v, table)]


COMPARISON_HEADER = ["Comparison", "Column", "Δ (A − B) [95 % CI]", "p (Holm)", "P(A > B) [95 % CI]", "MDE", "Verdict"]


_TEST_TEXT = {
    "paired t": "two-sided paired t-test over seeds (df = n − 1)",
    "sign-flip permutation": "two-sided exact sign-flip permutation test over seeds",
    "Multi-Bootstrap t": "two-sided t on the seeds' spread plus the test set's share (the examples' resampling "
                         "variance every seed shares), Welch–Satterthwaite df between the two",
}


def _test_text(tests: set[str]) -> str:
    """The footnote's words for the tests behind a table's p values: the Multi-Bootstrap t where both cells
    carry per-example results, the seed-level test otherwise."""
    seed_level = [_TEST_TEXT[t] for t in ("paired t", "sign-flip permutation") if t in tests]
    if "Multi-Bootstrap t" not in tests:
        return " / ".join(seed_level) or "no test (too few paired seeds)"
    mb = _TEST_TEXT["Multi-Bootstrap t"]
    return mb if not seed_level else f"{mb} where both cells carry per-example results, else {' / '.join(seed_level)}"


def _comparison_notes(table: Table) -> list[str]:
    st = table.stats
    if st is None:
        return []
    spec = table.spec
    if not st.verdicts:
        return ["No comparisons are declared in the spec (`against:` / `comparisons:`), so no row gets a verdict."]
    n = sorted({v.difference.n for v in st.verdicts if v.difference.p is not None})
    n_text = "/".join(map(str, n)) if n else "–"
    test = _test_text({v.difference.test for v in st.verdicts if v.difference.p is not None})
    family = st.verdicts[0].family
    lines = [
        f"Declared comparisons, paired by seed (n = {n_text}): Δ = A − B in "
        f"display units with its unadjusted 95 % CI; p: {test}, Holm-adjusted over the table's {family} testable "
        f"comparisons (α = {spec.alpha:g}); P(A > B): the share of seed pairs where A beats B (ties ½), with a "
        f"percentile bootstrap CI (descriptive); MDE: the difference the same test detects with 80 % power at "
        f"α/{family or 1} for this n, its df and the observed spread — no detectable difference means none larger "
        f"than about the MDE was found, not that there is none.",
    ]
    chance = [f"{column_header(c, _multi_task(table))} {format_number(c.metric.chance, c.metric)}"
              for c in table.columns if c.metric.chance is not None]
    if chance:
        lines.append("Chance level: " + "; ".join(chance) + ".")
    return lines


def _rank_text(table: Table, column: Column, method: str) -> str:
    st = table.stats
    r = None if st is None else st.ranks.get(column.key, {}).get(method)
    return "–" if r is None else f"{r.rank} [{r.low}, {r.high}]"


RANK_NOTE = ("Ranks: 1 = best mean (ties share the better rank); 95 % rank interval = [1 + rows significantly better, "
             "k − rows significantly worse] from paired tests between all rows of the column, Holm-adjusted over them.")


def findings_lines(table: Table, with_spec: bool = True) -> list[str]:
    """One line per declared comparison and column — what a README's findings can be built from.

    ``with_spec=False`` leaves out the leading ``"<spec name>: "`` (for lines grouped under the
    spec's own heading).

    Example:
        >>> findings_lines(table)[0]  # doctest: +SKIP
        'tasks-encoder: FOCUS vs Random, XNLI acc. ↑ near [xnli]: Δ +7.1 [-1.9, 16.1], p (Holm) 0.406, P(A > B) 1.00 → no detectable difference (MDE 36.9)'
    """
    if table.stats is None:
        return []
    with_task = _multi_task(table)
    out = []
    for v in table.stats.verdicts:
        pair, col, diff, p, imp, mde, verdict = _comparison_cells(v, table, with_task)
        tail = f" (MDE {mde})" if v.verdict == NO_DIFFERENCE else ""
        imp_point = imp.split(" ")[0]
        head = f"{table.spec.name}: " if with_spec else ""
        out.append(f"{head}{pair}, {col}: Δ {diff}, p (Holm) {p}, P(A > B) {imp_point} → {verdict}{tail}")
    return out


CLAIMS_NOTE = ("A claim reads: A better than B in its column. Its verdict is that declared comparison's (above): "
               "reproduced (A significantly better after Holm), not reproduced (B significantly better), no "
               "detectable difference at this n (with its MDE), or untestable. The paper's effect is shown, not "
               "compared: the world's languages and models are not the paper's, so only the direction is tested.")


def claim_lines(table: Table) -> list[str]:
    """One line per claim of the spec (:mod:`leaderboards.claims`): the claim, the paper's effect, and the
    declared comparison behind its verdict, worded as in :func:`findings_lines`.

    Example:
        >>> claim_lines(table)[0]  # doctest: +SKIP
        'Claim: XLP beats ... (paper: +1.2) — XLP vs additive, XNLI acc. ↑ avg: Δ +0.8 [-0.5, 2.1], p (Holm) 0.406 → no detectable difference at n = 5 (MDE 2.3)'
    """
    verdicts = table.stats.verdicts if table.stats is not None else ()
    with_task = _multi_task(table)
    out = []
    for claim in table.spec.claims:
        head = f"Claim: {claim.text}" + (f" (paper: {claim.paper})" if claim.paper else "")
        verdict, v = claim_verdict(claim, verdicts)
        if claim.untestable:
            out.append(f"{head} → untestable here: {claim.untestable}")
            continue
        if v is None:
            a, b = table.spec.label(claim.a), table.spec.label(claim.b)
            out.append(f"{head} — {a} vs {b}, {claim.column} → untestable: a side has no measurement")
            continue
        pair, col, diff, p, _imp, mde, _ = _comparison_cells(v, table, with_task)
        if verdict == NO_DIFFERENCE:
            verdict = f"{verdict} at n = {v.difference.n} (MDE {mde})"
        elif v.difference.p is None:
            verdict = _verdict_text(v, table)
        out.append(f"{head} — {pair}, {col}: Δ {diff}, p (Holm) {p} → {verdict}")
    return out

