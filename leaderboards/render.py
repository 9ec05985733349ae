"""Renderers of an aggregated :class:`~leaderboards.aggregate.Table`: Markdown, CSV, LaTeX, HTML.

All renderers show the same thing (the statistics come from :mod:`leaderboards.stats` via
:attr:`Table.stats <leaderboards.aggregate.Table.stats>`):

* every cell as ``mean [low, high]``, its 95 % CI, with ``n`` where it differs from the required
  seed count (``n=1``: no interval);
* in bold, every row not significantly worse than the column's best mean (not only the best);
* footnote markers for flagged cells with a legend, provenance included (◊ dirty tree, ≠ another or
  no world build), and a footnote naming the random sources the intervals cover;
* the declared comparisons (difference, 95 % CI, Holm-adjusted p, P(A > B), MDE, verdict) and
  (Markdown, HTML) each row's rank with its 95 % rank interval per column;
* the papers' numbers as separate rows marked "paper" that never compete for bold.

CSV is the machine form: one line per cell, raw (unscaled) values, and a second file
``<name>.comparisons.csv`` with one line per declared comparison and column.
"""

from __future__ import annotations

import csv
import html
import io
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from harness.inputs import check_name, require_inside
from leaderboards.aggregate import FLAGS, NONDETERMINISTIC_PREFIX, Cell, Row, Table, best_methods
from leaderboards.spec import Column, MetricSpec
from leaderboards.stats import BETTER, NO_DIFFERENCE, WORSE, Verdict

__all__ = [
    "TABLES_DIR",
    "format_number",
    "column_header",
    "render_markdown",
    "render_csv",
    "render_comparisons_csv",
    "render_comparisons_markdown",
    "findings_lines",
    "render_latex",
    "render_html",
    "write_all",
    "write_index",
    "write_text_atomic",
]

TABLES_DIR = Path(__file__).resolve().parent / "tables"
"""Where the committed rendered tables live."""
LATEX_FLAGS = {
    "missing_seeds": r"\dag{}",
    "mixed_versions": r"\ddag{}",
    "duplicate_seeds": r"\S{}",
    "failed": r"\P{}",
    "sanity": "!",
    "nondeterministic": "?",
    "dirty": r"$\diamond$",
    "world": r"$\neq$",
}


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
        f"(t-interval on n−1 df; with per-example results, a t-interval on the Multi-Bootstrap SE over seeds × examples); n shown "
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


def _comparison_notes(table: Table) -> list[str]:
    st = table.stats
    if st is None:
        return []
    spec = table.spec
    if not st.verdicts:
        return ["No comparisons are declared in the spec (`against:` / `comparisons:`), so no row gets a verdict."]
    n = sorted({v.difference.n for v in st.verdicts if v.difference.p is not None})
    n_text = "/".join(map(str, n)) if n else "–"
    test = {"t": "two-sided paired t-test over seeds (df = n − 1)",
            "permutation": "two-sided exact sign-flip permutation test over seeds"}[st.test]
    family = st.verdicts[0].family
    lines = [
        f"Declared comparisons, paired by seed (n = {n_text}): Δ = A − B in "
        f"display units with its unadjusted 95 % CI; p: {test}, Holm-adjusted over the table's {family} testable "
        f"comparisons (α = {spec.alpha:g}); P(A > B): the share of seed pairs where A beats B (ties ½), with a "
        f"percentile bootstrap CI (descriptive); MDE: the difference detected with 80 % power at α/{family or 1} "
        f"for this n and the observed spread of the differences — no detectable difference means none larger "
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


def findings_lines(table: Table) -> list[str]:
    """One line per declared comparison and column — what a README's findings can be built from.

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
        out.append(f"{table.spec.name}: {pair}, {col}: Δ {diff}, p (Holm) {p}, P(A > B) {imp_point} → {verdict}{tail}")
    return out


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _md_cell(cell: Cell, column: Column, table: Table, bold: bool) -> str:
    if cell.mean is None:
        return "–"
    mean, ci, n, flags = _cell_parts(cell, column, table)
    text = f"**{mean}**" if bold else mean
    if ci:
        text += f" {ci}"
    if n:
        text += f" ({n})"
    return text + "".join(FLAGS[f][0] for f in flags)


def _md_row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def render_comparisons_markdown(table: Table) -> list[str]:
    """The declared comparisons of a table as Markdown lines (a table and its notes)."""
    st = table.stats
    if st is None or not st.verdicts:
        return [f"- {line}" for line in _comparison_notes(table)]
    with_task = _multi_task(table)
    lines = [_md_row(COMPARISON_HEADER), "|" + "|".join([":---", ":---"] + ["---:"] * 4 + [":---"]) + "|"]
    lines += [_md_row(_md_escape(x) for x in _comparison_cells(v, table, with_task)) for v in st.verdicts]
    return lines + [""] + [f"- {line}" for line in _comparison_notes(table)]


def render_markdown(table: Table) -> str:
    """GitHub Markdown: a title, the table, its declared comparisons, ranks, and a legend/notes list.

    Example:
        >>> print(render_markdown(table))  # doctest: +SKIP
    """
    spec = table.spec
    with_task = _multi_task(table)
    show_failed = any(r.failed for r in table.rows)
    header = ["Method"] + [_md_escape(column_header(c, with_task)) for c in table.columns]
    if show_failed:
        header.append("failed")
    bold = {c.key: bold_rows(table, c) for c in table.columns}
    lines = [f"### {spec.name} (v{spec.version})", ""]
    if spec.description:
        lines += [spec.description, ""]
    lines.append(_md_row(header))
    lines.append("|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|")
    for row in table.rows:
        cells = [_md_escape(row.label)]
        cells += [_md_cell(row.cells[c.key], c, table, row.method in bold[c.key]) for c in table.columns]
        if show_failed:
            cells.append(str(row.failed))
        lines.append(_md_row(cells))
    for row in table.paper_rows:
        cells = [f"*{_md_escape(row.label)} (paper)*"]
        cells += [_md_cell(row.cells[c.key], c, table, False) for c in table.columns]
        if show_failed:
            cells.append("")
        lines.append(_md_row(cells))
    lines.append("")
    for line in _legend_lines(table) + _summary_lines(table):
        lines.append(f"- {line}")
    lines += ["", "#### Declared comparisons", ""] + render_comparisons_markdown(table)
    if table.stats is not None and table.stats.ranks:
        ranked = [c for c in table.columns if c.key in table.stats.ranks]
        lines += ["", "#### Ranks (95 % rank intervals)", "",
                  _md_row(["Method"] + [_md_escape(column_header(c, with_task)) for c in ranked]),
                  "|" + "|".join([":---"] + ["---:"] * len(ranked)) + "|"]
        lines += [_md_row([_md_escape(r.label)] + [_rank_text(table, c, r.method) for c in ranked]) for r in table.rows]
        lines += ["", f"- {RANK_NOTE}"]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# CSV
# --------------------------------------------------------------------------------------------

CSV_FIELDS = [
    "table",
    "spec_version",
    "kind",
    "method",
    "label",
    "task",
    "language",
    "metric",
    "direction",
    "mean",
    "std",
    "n",
    "seeds",
    "ci_low",
    "ci_high",
    "ci_method",
    "flags",
    "failed",
    "best",
    "bold",
    "rank",
    "rank_low",
    "rank_high",
    "dirty_records",
    "other_world_records",
    "source",
]
COMPARISON_FIELDS = [
    "table",
    "spec_version",
    "a",
    "b",
    "task",
    "language",
    "metric",
    "direction",
    "diff",
    "ci_low",
    "ci_high",
    "p",
    "p_holm",
    "family",
    "alpha",
    "test",
    "n",
    "sd_diff",
    "mde",
    "p_improve",
    "p_improve_low",
    "p_improve_high",
    "verdict",
    "note",
]


def _csv_num(x: float | None) -> str:
    return "" if x is None else repr(float(x))


CSV_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""First characters that make a spreadsheet read a CSV cell as a formula (OWASP "CSV injection")."""
CSV_NUMBER_FIELDS = frozenset({
    "spec_version", "mean", "std", "n", "failed", "best", "bold", "ci_low", "ci_high", "rank", "rank_low", "rank_high",
    "dirty_records", "other_world_records", "diff", "p", "p_holm", "alpha", "sd_diff", "mde", "p_improve",
    "p_improve_low", "p_improve_high",
})
"""Fields that hold numbers tokxfer formats itself (``-0.35`` stays a number); every other field is text."""


def csv_safe_row(row: dict) -> dict:
    """Every text field of a CSV row made safe (:func:`csv_safe`); numbers (:data:`CSV_NUMBER_FIELDS`) as they are."""
    return {k: v if k in CSV_NUMBER_FIELDS else csv_safe(str(v)) for k, v in row.items()}


def csv_safe(text: str) -> str:
    """A text cell a spreadsheet shows as text: one that starts like a formula gets a leading ``'``.

    Example:
        >>> csv_safe("=SUM(A1:A9)"), csv_safe("focus"), csv_safe("-x")
        ("'=SUM(A1:A9)", 'focus', "'-x")
    """
    return "'" + text if text.startswith(CSV_FORMULA_START) else text


def _task_text(c: Column) -> str:
    return c.task if c.task_id is None else f"{c.task}[{c.task_id}]"


def render_csv(table: Table) -> str:
    """Long-format CSV, one line per (row, column), raw record units (no scaling/rounding).

    Text cells are made safe to open in a spreadsheet (:func:`csv_safe`), and a cell holding a
    line break of either kind is quoted (lines end in ``\\n``; the csv module quotes only the
    characters of the line terminator, so a lone ``\\r`` would otherwise split a row).
    """
    buf = io.StringIO()
    row_buf = io.StringIO()
    w = csv.DictWriter(row_buf, fieldnames=CSV_FIELDS, lineterminator="\r\n")

    def flush() -> None:
        buf.write(row_buf.getvalue()[:-2] + "\n")
        row_buf.seek(0)
        row_buf.truncate()

    w.writeheader()
    flush()
    best = {c.key: best_methods(table, c) for c in table.columns}
    bold = {c.key: bold_rows(table, c) for c in table.columns}
    ranks = table.stats.ranks if table.stats is not None else {}
    for row in list(table.rows) + list(table.paper_rows):
        for c in table.columns:
            cell = row.cells[c.key]
            measured = row.kind == "measured"
            rank = ranks.get(c.key, {}).get(row.method) if measured else None
            ci = cell.ci
            line = (
                {
                    "table": table.spec.name,
                    "spec_version": table.spec.version,
                    "kind": row.kind,
                    "method": row.method,
                    "label": row.label,
                    "task": _task_text(c),
                    "language": c.language,
                    "metric": c.metric.name,
                    "direction": c.metric.direction,
                    "mean": _csv_num(cell.mean),
                    "std": _csv_num(cell.std),
                    "n": "" if cell.reference else cell.n,
                    "seeds": " ".join(str(s) for s in cell.seeds),
                    "ci_low": _csv_num(ci.low if ci else None),
                    "ci_high": _csv_num(ci.high if ci else None),
                    "ci_method": ci.method if ci else "",
                    "flags": ";".join(f for f in FLAGS if f in cell.flags),
                    "failed": "" if cell.reference else cell.failed,
                    "best": int(measured and row.method in best[c.key]),
                    "bold": int(measured and cell.mean is not None and row.method in bold[c.key]),
                    "rank": "" if rank is None else rank.rank,
                    "rank_low": "" if rank is None else rank.low,
                    "rank_high": "" if rank is None else rank.high,
                    "dirty_records": "" if cell.reference else cell.dirty,
                    "other_world_records": "" if cell.reference else cell.other_world,
                    "source": row.source,
                }
            )
            w.writerow(csv_safe_row(line))
            flush()
    return buf.getvalue()


def render_comparisons_csv(table: Table) -> str:
    """One line per declared comparison and column, raw record units (``<name>.comparisons.csv``)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COMPARISON_FIELDS, lineterminator="\n")
    w.writeheader()
    cols = _columns(table)
    for v in table.stats.verdicts if table.stats is not None else ():
        c, d = cols[v.column], v.difference
        imp = d.improvement
        w.writerow(csv_safe_row(
            {
                "table": table.spec.name,
                "spec_version": table.spec.version,
                "a": v.a,
                "b": v.b,
                "task": _task_text(c),
                "language": c.language,
                "metric": c.metric.name,
                "direction": c.metric.direction,
                "diff": _csv_num(d.diff),
                "ci_low": _csv_num(d.low),
                "ci_high": _csv_num(d.high),
                "p": _csv_num(d.p),
                "p_holm": _csv_num(v.p_holm),
                "family": v.family,
                "alpha": v.alpha,
                "test": d.test,
                "n": d.n,
                "sd_diff": _csv_num(d.sd),
                "mde": _csv_num(v.mde),
                "p_improve": _csv_num(imp.estimate if imp else None),
                "p_improve_low": _csv_num(imp.low if imp else None),
                "p_improve_high": _csv_num(imp.high if imp else None),
                "verdict": v.verdict,
                "note": d.note,
            }
        ))
    return buf.getvalue()


# --------------------------------------------------------------------------------------------
# LaTeX
# --------------------------------------------------------------------------------------------

_TEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "↑": r"$\uparrow$",
    "↓": r"$\downarrow$",
    "±": r"$\pm$",
    "–": "--",
    "−": r"$-$",
    "Δ": r"$\Delta$",
    "α": r"$\alpha$",
    "×": r"$\times$",
    "≠": r"$\neq$",
    "◊": r"$\diamond$",
    "½": r"$\frac{1}{2}$",
    ">": r"$>$",
    "<": r"$<$",
}


def latex_escape(text: str) -> str:
    r"""Escape LaTeX special characters.

    Example:
        >>> latex_escape("mlm_at_init 50%") == r"mlm\_at\_init 50\%"
        True
    """
    return "".join(_TEX_SPECIAL.get(ch, ch) for ch in text)


def _tex_cell(cell: Cell, column: Column, table: Table, bold: bool) -> str:
    if cell.mean is None:
        return "--"
    mean, ci, n, flags = _cell_parts(cell, column, table)
    text = rf"\textbf{{{mean}}}" if bold else mean
    if ci:
        text += rf"{{\small~{ci}}}"
    if n:
        text += rf"{{\small~({n})}}"
    marks = "".join(LATEX_FLAGS[f] for f in flags)
    if marks:
        text += rf"\textsuperscript{{{marks}}}"
    return text


def _tex_comparisons(table: Table) -> list[str]:
    st = table.stats
    if st is None or not st.verdicts:
        return []
    with_task = _multi_task(table)
    out = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        r"\begin{tabular}{llrrrrl}",
        r"\toprule",
        " & ".join(latex_escape(h) for h in COMPARISON_HEADER) + r" \\",
        r"\midrule",
    ]
    out += [" & ".join(latex_escape(x) for x in _comparison_cells(v, table, with_task)) + r" \\" for v in st.verdicts]
    out += [r"\bottomrule", r"\end{tabular}"]
    caption = " ".join(latex_escape(line.replace("`", "")) for line in _comparison_notes(table))
    name = latex_escape(table.spec.name).replace(chr(92), "")
    out += [rf"\caption{{{caption}}}", rf"\label{{tab:{name}-comparisons}}", r"\end{table}"]
    return out


def render_latex(table: Table) -> str:
    """A booktabs ``table`` (needs ``\\usepackage{booktabs}``): bold rows in ``\\textbf``, the CI in
    ``\\small``, paper rows in italics below a rule, legend and notes in the caption; then a second
    ``table`` with the declared comparisons."""
    spec = table.spec
    with_task = _multi_task(table)
    show_failed = any(r.failed for r in table.rows)
    ncols = len(table.columns) + 1 + int(show_failed)
    bold = {c.key: bold_rows(table, c) for c in table.columns}
    header = ["Method"] + [latex_escape(column_header(c, with_task)) for c in table.columns]
    if show_failed:
        header.append("failed")
    out = [
        f"% tokxfer leaderboard {spec.name} v{spec.version} (generated; do not edit). Needs \\usepackage{{booktabs}}.",
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        r"\begin{tabular}{l" + "r" * (ncols - 1) + "}",
        r"\toprule",
        " & ".join(header) + r" \\",
        r"\midrule",
    ]
    for row in table.rows:
        cells = [latex_escape(row.label)]
        cells += [_tex_cell(row.cells[c.key], c, table, row.method in bold[c.key]) for c in table.columns]
        if show_failed:
            cells.append(str(row.failed))
        out.append(" & ".join(cells) + r" \\")
    if table.paper_rows:
        out.append(r"\midrule")
        for row in table.paper_rows:
            cells = [rf"\textit{{{latex_escape(row.label)} (paper)}}"]
            cells += [_tex_cell(row.cells[c.key], c, table, False) for c in table.columns]
            if show_failed:
                cells.append("")
            out.append(" & ".join(cells) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}"]
    legend = [
        f"{LATEX_FLAGS[f]} {latex_escape(_legend_text(table, f))}" for f in table.flags_used()
    ]
    caption = " ".join(latex_escape(line.replace("`", "")) for line in _summary_lines(table))
    if legend:
        caption += " " + "; ".join(legend) + "."
    out += [rf"\caption{{{caption}}}", rf"\label{{tab:{latex_escape(spec.name).replace(chr(92), '')}}}", r"\end{table}"]
    out += _tex_comparisons(table)
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem; color: #222; }
table { border-collapse: collapse; margin: 1rem 0; }
th, td { padding: .3rem .7rem; text-align: right; border-bottom: 1px solid #ddd; }
th:first-child, td:first-child { text-align: left; }
thead th { border-bottom: 2px solid #444; }
tr.paper td { font-style: italic; color: #555; background: #f7f7f7; }
.ci, .n { font-size: .8em; color: #555; }
sup { color: #a33; }
ul.notes { font-size: .9em; color: #444; }
table.comparisons td:nth-child(2), table.comparisons td:last-child { text-align: left; }
"""
_INDEX_CSS = """nav ul { columns: 2; font-size: .9em; }
section.board { margin-bottom: 3rem; }
.plots { display: flex; flex-wrap: wrap; gap: 1.5rem; align-items: flex-start; }
figure.plot { margin: 0; max-width: 48rem; }
figure.plot img { max-width: 100%; height: auto; border: 1px solid #eee; }
figure.plot figcaption { font-size: .85em; color: #444; margin-top: .3rem; }
"""


def _html_cell(cell: Cell, column: Column, table: Table, bold: bool) -> str:
    if cell.mean is None:
        return "–"
    mean, ci, n, flags = _cell_parts(cell, column, table)
    text = html.escape(mean)
    if bold:
        text = f"<strong>{text}</strong>"
    if ci:
        text += f' <span class="ci">{html.escape(ci)}</span>'
    if n:
        text += f' <span class="n">({n})</span>'
    marks = "".join(FLAGS[f][0] for f in flags)
    if marks:
        text += f"<sup>{marks}</sup>"
    return text


def _html_grid(head: list[str], rows: Iterable[list[str]], cls: str = "") -> list[str]:
    """A plain table of already-escaped cell HTML."""
    out = [f'<table class="{cls}">' if cls else "<table>",
           "<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr></thead>", "<tbody>"]
    out += ["<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows]
    return out + ["</tbody></table>"]


def _html_notes(lines: Iterable[str]) -> str:
    return '<ul class="notes">' + "".join(f"<li>{html.escape(n.replace('`', ''))}</li>" for n in lines) + "</ul>"


def _html_table(table: Table) -> str:
    spec = table.spec
    with_task = _multi_task(table)
    show_failed = any(r.failed for r in table.rows)
    bold = {c.key: bold_rows(table, c) for c in table.columns}
    head = ["Method"] + [column_header(c, with_task) for c in table.columns] + (["failed"] if show_failed else [])
    parts = [f"<h2>{html.escape(spec.name)} <small>v{spec.version}</small></h2>"]
    if spec.description:
        parts.append(f"<p>{html.escape(spec.description)}</p>")
    parts.append("<table>")
    parts.append("<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr></thead>")
    parts.append("<tbody>")

    def tr(row: Row, paper: bool) -> str:
        label = html.escape(row.label) + (" (paper)" if paper else "")
        cells = [f"<td>{label}</td>"]
        cells += [
            f"<td>{_html_cell(row.cells[c.key], c, table, not paper and row.method in bold[c.key])}</td>"
            for c in table.columns
        ]
        if show_failed:
            cells.append(f"<td>{'' if paper else row.failed}</td>")
        return f'<tr class="{"paper" if paper else "measured"}">' + "".join(cells) + "</tr>"

    parts += [tr(r, False) for r in table.rows]
    parts += [tr(r, True) for r in table.paper_rows]
    parts.append("</tbody></table>")
    parts.append(_html_notes(_legend_lines(table) + _summary_lines(table)))
    st = table.stats
    parts.append("<h3>Declared comparisons</h3>")
    if st is not None and st.verdicts:
        parts += _html_grid(COMPARISON_HEADER,
                            ([html.escape(x) for x in _comparison_cells(v, table, with_task)] for v in st.verdicts),
                            "comparisons")
    parts.append(_html_notes(_comparison_notes(table)))
    if st is not None and st.ranks:
        ranked = [c for c in table.columns if c.key in st.ranks]
        parts.append("<h3>Ranks (95 % rank intervals)</h3>")
        parts += _html_grid(["Method"] + [column_header(c, with_task) for c in ranked],
                            ([html.escape(r.label)] + [_rank_text(table, c, r.method) for c in ranked] for r in table.rows),
                            "ranks")
        parts.append(_html_notes([RANK_NOTE]))
    return "\n".join(parts)


def _html_figures(figures: Iterable[tuple[str, str]]) -> str:
    items = [
        f'<figure class="plot"><img src="{html.escape(src, quote=True)}" alt="{html.escape(caption, quote=True)}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        for src, caption in figures
    ]
    return '<div class="plots">\n' + "\n".join(items) + "\n</div>" if items else ""


def _anchor(name: str) -> str:
    return "board-" + "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in name)


def render_html(
    tables: Table | Iterable[Table],
    title: str = "tokxfer leaderboards",
    figures: Mapping[str, Sequence[tuple[str, str]]] | None = None,
    skipped: Sequence[str] = (),
) -> str:
    """A self-contained HTML page (inline CSS, no scripts, no external resources) holding one or
    more tables.

    Args:
        tables: one table or several.
        title: page title.
        figures: spec name → ``[(image path relative to the page, caption), …]``, shown below that
            spec's table. With figures the page also gets a table of contents and one section per
            table (the index page of ``tokxfer leaderboard``).
        skipped: names of specs that were not rendered (listed at the top).

    Example:
        >>> page = render_html(table, figures={table.spec.name: [("plots/qs/bars.png", "bars")]})  # doctest: +SKIP
    """
    if isinstance(tables, Table):
        tables = [tables]
    tables = list(tables)
    css = _CSS
    if figures is None and not skipped:
        body = "\n".join(_html_table(t) for t in tables)
    else:
        css += _INDEX_CSS
        figures = figures or {}
        parts = []
        if len(tables) > 1:
            parts.append(
                "<nav><ul>"
                + "".join(f'<li><a href="#{_anchor(t.spec.name)}">{html.escape(t.spec.name)}</a></li>' for t in tables)
                + "</ul></nav>"
            )
        if skipped:
            parts.append(
                '<p class="skipped">Not rendered (no records): ' + html.escape(", ".join(skipped)) + ".</p>"
            )
        for t in tables:
            figs = _html_figures(figures.get(t.spec.name, ()))
            parts.append(
                f'<section class="board" id="{_anchor(t.spec.name)}">\n{_html_table(t)}'
                + (f"\n{figs}" if figs else "")
                + "\n</section>"
            )
        body = "\n".join(parts)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{html.escape(title)}</title>\n<style>{css}</style>\n</head>\n<body>\n"
        f"<h1>{html.escape(title)}</h1>\n{body}\n</body>\n</html>\n"
    )


def write_all(table: Table, out_dir: str | os.PathLike) -> dict[str, Path]:
    """Write ``<name>.md``, ``.csv``, ``.comparisons.csv``, ``.tex`` and ``.html`` into ``out_dir``.

    Returns:
        ``{"md": path, "csv": path, "comparisons.csv": path, "tex": path, "html": path}``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    check_name(table.spec.name, "leaderboard spec name")
    paths = {}
    for ext, text in (
        ("md", render_markdown(table)),
        ("csv", render_csv(table)),
        ("comparisons.csv", render_comparisons_csv(table)),
        ("tex", render_latex(table)),
        ("html", render_html(table, title=f"tokxfer leaderboard: {table.spec.name}")),
    ):
        p = out / f"{table.spec.name}.{ext}"
        write_text_atomic(p, text, within=out)
        paths[ext] = p
    return paths


def write_text_atomic(path: Path, text: str, *, within: str | os.PathLike | None = None) -> None:
    """Write UTF-8 text beside ``path`` and rename it into place (a crash never leaves half a file).

    The temporary file is created afresh (``O_EXCL``: never written through a link planted in its
    place), and the rename replaces a link at ``path`` instead of writing where it points.

    Args:
        path: the file to write.
        text: its content.
        within: the folder ``path`` must lie in once links are resolved (``--out``); checked first.

    Raises:
        harness.inputs.UnsafePathError: ``path`` lies outside ``within``.
    """
    path = Path(path)
    if within is not None:
        require_inside(path.parent, within, "--out")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_index(
    tables: Iterable[Table],
    out_dir: str | os.PathLike,
    figures: Mapping[str, Sequence[tuple[str, str]]] | None = None,
    skipped: Sequence[str] = (),
    title: str = "tokxfer leaderboards",
) -> Path:
    """Write ``<out_dir>/index.html``: every table, each followed by its figures (see :func:`render_html`).

    The page is a pure function of its arguments (no date, no absolute path), so rendering the
    same records twice gives the same bytes.

    Returns:
        The written path.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "index.html"
    write_text_atomic(path, within=out, text=render_html(list(tables), title=title, figures=figures or {}, skipped=skipped))
    return path
