"""HTML rendering of leaderboards: one table's page and the index of all tables with their figures.

Pure functions of their arguments (no date, no absolute path): the same records render to the same
bytes. The cell texts, legends and verdicts come from :mod:`leaderboards.cells`, as in the other
formats."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping, Sequence

from leaderboards.aggregate import FLAGS, Cell, Row, Table
from leaderboards.cells import (
    CLAIMS_NOTE,
    COMPARISON_HEADER,
    RANK_NOTE,
    _cell_parts,
    _comparison_cells,
    _comparison_notes,
    _legend_lines,
    _multi_task,
    _rank_text,
    _summary_lines,
    bold_rows,
    claim_lines,
    column_header,
)
from leaderboards.spec import Column

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
    if spec.claims:
        parts.append("<h3>The paper's claims</h3>")
        parts.append(_html_notes([*claim_lines(table), CLAIMS_NOTE]))
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
