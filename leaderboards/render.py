"""Renderers of an aggregated :class:`~leaderboards.aggregate.Table`: Markdown, CSV, LaTeX, HTML.

All renderers show the same thing: mean ± sample std over seeds, ``n`` where it differs from the
required seed count (and ``n=1`` instead of a std, which is undefined for one value), the best
measured value per column in bold (by the metric's direction; ties at display precision are all
bold), footnote markers for flagged cells with a legend, and the papers' numbers as separate rows
marked "paper" that never compete for bold. CSV is the machine form: one line per cell, raw
(unscaled) values.
"""

from __future__ import annotations

import csv
import html
import io
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from harness.safepaths import check_name, require_inside
from leaderboards.aggregate import FLAGS, NONDETERMINISTIC_PREFIX, Cell, Row, Table, best_methods
from leaderboards.separation import separation_lines
from leaderboards.spec import Column, MetricSpec

__all__ = [
    "TABLES_DIR",
    "format_number",
    "column_header",
    "render_markdown",
    "render_csv",
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


def _std_text(cell: Cell, metric: MetricSpec) -> str | None:
    if cell.std is None:
        return None
    return f"{abs(cell.std * metric.scale):.{metric.decimals}f}" if math.isfinite(cell.std) else str(cell.std)


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


def _summary_lines(table: Table) -> list[str]:
    spec = table.spec
    seeds = f"seeds {list(spec.required_seeds)}" if spec.required_seeds else "all seeds found"
    lines = [
        f"Spec `{spec.name}` v{spec.version}; {table.n_records} records. Mean ± sample std (ddof=1) over "
        f"{seeds}; n shown where it differs{'' if spec.required_seeds else ' (always)'}, and a single value "
        f"is shown as n=1 (std undefined). Best measured value per column in bold (↑ higher / ↓ lower is better).",
    ]
    if any(c.is_average for c in table.columns):
        lines.append("avg: mean over the languages per seed, then mean ± std over seeds with every language.")
    if any(r.failed for r in table.rows):
        lines.append("failed: failed trials of the method (counted separately, never averaged).")
    for pn in spec.paper:
        lines.append(
            f"paper rows: numbers reported in {pn.citation}{' — ' + pn.note if pn.note else ''}; not measured here."
        )
    return lines + separation_lines(table) + list(table.notes)


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _md_cell(cell: Cell, column: Column, table: Table, bold: bool) -> str:
    if cell.mean is None:
        return "–"
    m = column.metric
    text = format_number(cell.mean, m)
    if bold:
        text = f"**{text}**"
    std = _std_text(cell, m)
    if std is not None:
        text += f" ± {std}"
    if not cell.reference and _show_n(cell, table):
        text += f" (n={cell.n})"
    marks = "".join(FLAGS[f][0] for f in FLAGS if f in cell.flags)
    return text + marks


def render_markdown(table: Table) -> str:
    """GitHub Markdown: a title, the table, and a legend/notes list.

    Example:
        >>> print(render_markdown(table))  # doctest: +SKIP
    """
    spec = table.spec
    with_task = _multi_task(table)
    show_failed = any(r.failed for r in table.rows)
    header = ["Method"] + [_md_escape(column_header(c, with_task)) for c in table.columns]
    if show_failed:
        header.append("failed")
    best = {c.key: best_methods(table, c) for c in table.columns}
    lines = [f"### {spec.name} (v{spec.version})", ""]
    if spec.description:
        lines += [spec.description, ""]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "|".join([":---"] + ["---:"] * (len(header) - 1)) + "|")
    for row in table.rows:
        cells = [_md_escape(row.label)]
        cells += [_md_cell(row.cells[c.key], c, table, row.method in best[c.key]) for c in table.columns]
        if show_failed:
            cells.append(str(row.failed))
        lines.append("| " + " | ".join(cells) + " |")
    for row in table.paper_rows:
        cells = [f"*{_md_escape(row.label)} (paper)*"]
        cells += [_md_cell(row.cells[c.key], c, table, False) for c in table.columns]
        if show_failed:
            cells.append("")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for line in _legend_lines(table) + _summary_lines(table):
        lines.append(f"- {line}")
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
    "flags",
    "failed",
    "best",
    "source",
]


def _csv_num(x: float | None) -> str:
    return "" if x is None else repr(float(x))


CSV_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
"""First characters that make a spreadsheet read a CSV cell as a formula (OWASP "CSV injection")."""
CSV_NUMBER_FIELDS = frozenset({"spec_version", "mean", "std", "n", "failed", "best"})
"""Fields that hold numbers tokxfer formats itself (``-0.35`` stays a number); every other field is text."""


def csv_safe(text: str) -> str:
    """A text cell a spreadsheet shows as text: one that starts like a formula gets a leading ``'``.

    Example:
        >>> csv_safe("=SUM(A1:A9)"), csv_safe("focus"), csv_safe("-x")
        ("'=SUM(A1:A9)", 'focus', "'-x")
    """
    return "'" + text if text.startswith(CSV_FORMULA_START) else text


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
    for row in list(table.rows) + list(table.paper_rows):
        for c in table.columns:
            cell = row.cells[c.key]
            line = (
                {
                    "table": table.spec.name,
                    "spec_version": table.spec.version,
                    "kind": row.kind,
                    "method": row.method,
                    "label": row.label,
                    "task": c.task if c.task_id is None else f"{c.task}[{c.task_id}]",
                    "language": c.language,
                    "metric": c.metric.name,
                    "direction": c.metric.direction,
                    "mean": _csv_num(cell.mean),
                    "std": _csv_num(cell.std),
                    "n": "" if cell.reference else cell.n,
                    "seeds": " ".join(str(s) for s in cell.seeds),
                    "flags": ";".join(f for f in FLAGS if f in cell.flags),
                    "failed": "" if cell.reference else cell.failed,
                    "best": int(row.kind == "measured" and row.method in best[c.key]),
                    "source": row.source,
                }
            )
            w.writerow({k: v if k in CSV_NUMBER_FIELDS else csv_safe(str(v)) for k, v in line.items()})
            flush()
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
    m = column.metric
    text = format_number(cell.mean, m)
    text = rf"\textbf{{{text}}}" if bold else text
    std = _std_text(cell, m)
    if std is not None:
        text += rf"{{\small${{}}\pm{{}}${std}}}"
    if not cell.reference and _show_n(cell, table):
        text += rf"{{\small~(n={cell.n})}}"
    marks = "".join(LATEX_FLAGS[f] for f in FLAGS if f in cell.flags)
    if marks:
        text += rf"\textsuperscript{{{marks}}}"
    return text


def render_latex(table: Table) -> str:
    """A booktabs ``table`` (needs ``\\usepackage{booktabs}``); best per column in ``\\textbf``,
    ``± std`` in ``\\small``, paper rows in italics below a rule, legend and notes in the caption."""
    spec = table.spec
    with_task = _multi_task(table)
    show_failed = any(r.failed for r in table.rows)
    ncols = len(table.columns) + 1 + int(show_failed)
    best = {c.key: best_methods(table, c) for c in table.columns}
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
        cells += [_tex_cell(row.cells[c.key], c, table, row.method in best[c.key]) for c in table.columns]
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
.std, .n { font-size: .8em; color: #555; }
sup { color: #a33; }
ul.notes { font-size: .9em; color: #444; }
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
    m = column.metric
    text = html.escape(format_number(cell.mean, m))
    if bold:
        text = f"<strong>{text}</strong>"
    std = _std_text(cell, m)
    if std is not None:
        text += f' <span class="std">± {html.escape(std)}</span>'
    if not cell.reference and _show_n(cell, table):
        text += f' <span class="n">(n={cell.n})</span>'
    marks = "".join(FLAGS[f][0] for f in FLAGS if f in cell.flags)
    if marks:
        text += f"<sup>{marks}</sup>"
    return text


def _html_table(table: Table) -> str:
    spec = table.spec
    with_task = _multi_task(table)
    show_failed = any(r.failed for r in table.rows)
    best = {c.key: best_methods(table, c) for c in table.columns}
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
            f"<td>{_html_cell(row.cells[c.key], c, table, not paper and row.method in best[c.key])}</td>"
            for c in table.columns
        ]
        if show_failed:
            cells.append(f"<td>{'' if paper else row.failed}</td>")
        return f'<tr class="{"paper" if paper else "measured"}">' + "".join(cells) + "</tr>"

    parts += [tr(r, False) for r in table.rows]
    parts += [tr(r, True) for r in table.paper_rows]
    parts.append("</tbody></table>")
    notes = _legend_lines(table) + [line.replace("`", "") for line in _summary_lines(table)]
    parts.append('<ul class="notes">' + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
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
    """Write ``<name>.md``, ``.csv``, ``.tex`` and ``.html`` into ``out_dir``.

    Returns:
        ``{"md": path, "csv": path, "tex": path, "html": path}``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    check_name(table.spec.name, "leaderboard spec name")
    paths = {}
    for ext, text in (
        ("md", render_markdown(table)),
        ("csv", render_csv(table)),
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
        harness.safepaths.UnsafePathError: ``path`` lies outside ``within``.
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
