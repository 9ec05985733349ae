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
import io
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from harness.files import write_atomic
from harness.inputs import check_name, require_inside
from leaderboards.aggregate import FLAGS, Cell, Row, Table, best_methods
from leaderboards.cells import (
    CLAIMS_NOTE,
    COMPARISON_HEADER,
    RANK_NOTE,
    _cell_parts,
    _columns,
    _comparison_cells,
    _comparison_notes,
    _legend_lines,
    _legend_text,
    _multi_task,
    _rank_text,
    _summary_lines,
    bold_rows,
    claim_lines,
    column_header,
    findings_lines,
    format_number,
)
from leaderboards.spec import Column
from leaderboards.web import render_html

__all__ = [
    "TABLES_DIR",
    "format_number",
    "column_header",
    "render_markdown",
    "render_csv",
    "render_comparisons_csv",
    "render_comparisons_markdown",
    "claim_lines",
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


def markdown_header(table: Table, show_failed: bool = False) -> list[str]:
    """The two header lines of a table's Markdown rows (:func:`render_markdown`)."""
    header = ["Method"] + [_md_escape(column_header(c, _multi_task(table))) for c in table.columns]
    if show_failed:
        header.append("failed")
    return [_md_row(header), "|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|"]


def markdown_row(table: Table, row: Row, bold: dict[str, set[str]] | None = None, show_failed: bool = False) -> str:
    """One measured row of a table as a Markdown line (:func:`render_markdown`).

    ``bold``: column key → rows set in bold (:func:`bold_rows`); ``None`` for none, e.g. for a row
    shown before the other rows exist (bold compares rows).
    """
    cells = [_md_escape(row.label)]
    cells += [_md_cell(row.cells[c.key], c, table, bold is not None and row.method in bold[c.key]) for c in table.columns]
    if show_failed:
        cells.append(str(row.failed))
    return _md_row(cells)


def render_markdown(table: Table) -> str:
    """GitHub Markdown: a title, the table, its declared comparisons, ranks, and a legend/notes list.

    Example:
        >>> print(render_markdown(table))  # doctest: +SKIP
    """
    spec = table.spec
    with_task = _multi_task(table)
    show_failed = any(r.failed for r in table.rows)
    bold = {c.key: bold_rows(table, c) for c in table.columns}
    lines = [f"### {spec.name} (v{spec.version})", ""]
    if spec.description:
        lines += [spec.description, ""]
    lines += markdown_header(table, show_failed)
    lines += [markdown_row(table, row, bold, show_failed) for row in table.rows]
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
    if spec.claims:
        lines += ["", "#### The paper's claims", ""] + [f"- {line}" for line in claim_lines(table)]
        lines += ["", f"- {CLAIMS_NOTE}"]
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
    "→": r"$\rightarrow$",
    "—": "---",
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
    if table.spec.claims:  # the paper's claims, each the verdict of a comparison above
        out += [r"\begin{itemize}", *(rf"\item {latex_escape(line)}" for line in claim_lines(table)), r"\end{itemize}"]
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
    write_atomic(path, text)


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
