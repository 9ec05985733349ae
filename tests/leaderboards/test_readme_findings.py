"""The README's results claim only what the declared comparisons of the committed tables support.

Every finding quoted between ``<!-- findings:begin -->`` and ``<!-- findings:end -->`` is a line of
``leaderboards/tables/FINDINGS.md`` under its table (which ``test_leaderboard_all`` keeps equal to
what the committed records give): a number, interval, p-value or verdict edited by hand, or left
behind when the records changed, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUOTE = re.compile(r"^- `(?P<spec>[\w.-]+)`: (?P<finding>.+)$")


def findings_by_table(text: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            out[current] = set()
        elif current and line.startswith("- "):
            out[current].add(line[2:])
    return out


def readme_quotes(text: str) -> list[tuple[str, str]]:
    block = re.search(r"<!-- findings:begin -->\n(.*?)<!-- findings:end -->", text, re.S)
    assert block, "README.md has no <!-- findings:begin --> ... <!-- findings:end --> block"
    quotes = []
    for line in block.group(1).splitlines():
        m = QUOTE.match(line)
        assert m, f"README findings block: {line!r} is not of the form - `spec`: finding"
        quotes.append((m["spec"], m["finding"]))
    return quotes


def test_every_quoted_finding_is_a_finding_of_its_table():
    findings = findings_by_table((ROOT / "leaderboards" / "tables" / "FINDINGS.md").read_text())
    quotes = readme_quotes((ROOT / "README.md").read_text())
    assert len(quotes) >= 10
    wrong = [f"{spec}: {finding}" for spec, finding in quotes if finding not in findings.get(spec, set())]
    assert not wrong, "README findings that FINDINGS.md does not state (re-quote them from it):\n" + "\n".join(wrong)


def test_a_changed_number_is_caught():
    findings = {"t": {"A vs B, x: Δ +1.0 [0.5, 1.5], p (Holm) 0.010, P(A > B) 1.00 → A better"}}
    quote = ("t", "A vs B, x: Δ +1.1 [0.5, 1.5], p (Holm) 0.010, P(A > B) 1.00 → A better")
    assert quote[1] not in findings[quote[0]]
    text = "x\n<!-- findings:begin -->\n- `t`: " + quote[1] + "\n<!-- findings:end -->\n"
    assert readme_quotes(text) == [quote]

