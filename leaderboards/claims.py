"""A paper's claims as verdicts: which declared comparison tests each claim, and what it found.

A spec may restrict a declared comparison to the columns a claim is about, and list the paper's claims::

    comparisons:
      - {a: xlp, b: additive, columns: [xnli/avg/accuracy, xnli/all/transfer_gap]}
    claims:
      - {claim: "XLP beats the additive language embedding in zero-shot XNLI, average", a: xlp, b: additive,
         column: xnli/avg/accuracy, paper: "+1.2 (Table 1)"}
      - {claim: "XLP gains most on the low-resource pair", untestable: "every world pair has the same data"}

``columns`` (column keys, ``task/language/metric``) keeps a comparison out of the other columns, so the
Holm family holds only the tests the hypotheses are about (fewer tests, more power); without it a
comparison is tested in every column. A claim always reads "A is better than B in this column" (the
column's metric says whether better is higher or lower) and names a declared comparison (A vs B, in
that order) that is tested in that column; its verdict is that comparison's:

* ``reproduced``: A significantly better after Holm;
* ``not reproduced``: B significantly better (the claim's opposite holds on our data);
* ``no detectable difference`` at this n, with the minimum detectable effect;
* ``untestable``: too few seeds, a side without records, or a claim the spec marks ``untestable``
  (with the reason: the setting has no counterpart here).

The effect size the paper printed (``paper``) is shown beside ours; sizes are not compared (the world's
languages and models are not the paper's), only directions.

Parsing raises ``ValueError`` with the entry's position; :mod:`leaderboards.spec` names the file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from leaderboards.stats import BETTER, NO_DIFFERENCE, UNTESTABLE, WORSE

__all__ = ["Claim", "REPRODUCED", "NOT_REPRODUCED", "parse_comparison_columns", "parse_claims", "claim_verdict"]

REPRODUCED, NOT_REPRODUCED = "reproduced", "not reproduced"
"""Verdicts of a claim beyond the comparison's ``no detectable difference`` and ``untestable``."""

_CLAIM_KEYS = {"claim", "a", "b", "column", "paper", "untestable"}


@dataclass(frozen=True)
class Claim:
    """One claim of a paper, tested by a declared comparison in one column.

    Attributes:
        text: the claim in words (what the paper says A does better than B).
        a / b: the compared rows (A claimed better); ``None`` for an untestable claim.
        column: the column key the claim is about; ``None`` for an untestable claim.
        paper: the paper's own effect as printed (e.g. ``"+1.2 (Table 1)"``), shown, never compared.
        untestable: why the setting cannot test the claim here (then ``a``, ``b``, ``column`` are None).
    """

    text: str
    a: str | None = None
    b: str | None = None
    column: str | None = None
    paper: str = ""
    untestable: str = ""


def parse_comparison_columns(value: Any, ctx: str, column_keys: Sequence[str]) -> tuple[str, ...] | None:
    """The ``columns`` of one declared comparison: ``None`` (absent: every column) or the listed keys, checked.

    Raises:
        ValueError: not a non-empty list of strings, a key twice, or a key that is no column of the spec
            (the message lists the spec's column keys).
    """
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(k, str) for k in value):
        raise ValueError(f"{ctx}.columns must be a non-empty list of column keys (task/language/metric)")
    if len(set(value)) != len(value):
        raise ValueError(f"{ctx}.columns lists a column twice")
    unknown = [k for k in value if k not in column_keys]
    if unknown:
        raise ValueError(f"{ctx}.columns has {', '.join(map(repr, unknown))}, not a column of this spec "
                         f"(columns: {', '.join(column_keys)})")
    return tuple(value)


def parse_claims(value: Any, compared: Mapping[tuple[str, str], tuple[str, ...] | None],
                 column_keys: Sequence[str]) -> tuple[Claim, ...]:
    """The spec's ``claims``, each checked against the declared comparisons.

    Args:
        value: the raw ``claims`` list (``None``: no claims).
        compared: every declared pair ``(a, b)`` → the columns it is tested in (``None``: all).
        column_keys: the spec's column keys.

    Raises:
        ValueError: naming ``claims[i]`` and what is wrong: an unknown or missing key, a claim with both
            a comparison and ``untestable``, a pair that is not declared (in that order), a column that is
            not the spec's or not tested for that pair, or the same claim (pair and column) twice.
    """
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError("claims must be a list of {claim, a, b, column, paper} or {claim, untestable}")
    out: list[Claim] = []
    for i, c in enumerate(value):
        ctx = f"claims[{i}]"
        if not isinstance(c, Mapping):
            raise ValueError(f"{ctx}: expected a mapping, got {type(c).__name__}")
        extra = sorted(set(map(str, c)) - _CLAIM_KEYS)
        if extra:
            raise ValueError(f"{ctx}: unknown key {extra[0]!r}; allowed: {', '.join(sorted(_CLAIM_KEYS))}")
        text, paper, why = c.get("claim"), c.get("paper", ""), c.get("untestable", "")
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{ctx}: 'claim' must be the claim in words (a non-empty string)")
        if not isinstance(paper, str) or not isinstance(why, str):
            raise ValueError(f"{ctx}: 'paper' and 'untestable' must be strings")
        tested = [k for k in ("a", "b", "column") if k in c]
        if why:
            if tested:
                raise ValueError(f"{ctx}: an untestable claim names no comparison (drop {', '.join(tested)})")
            out.append(Claim(text.strip(), paper=paper, untestable=why))
            continue
        if len(tested) != 3:
            missing = [k for k in ("a", "b", "column") if k not in c]
            raise ValueError(f"{ctx}: missing {', '.join(map(repr, missing))} (or give 'untestable': why)")
        a, b, column = c["a"], c["b"], c["column"]
        if (a, b) not in compared:
            hint = " (declared the other way round: a claim reads 'a better than b')" if (b, a) in compared else ""
            raise ValueError(f"{ctx}: {a} vs {b} is not a declared comparison{hint}; declare it under comparisons")
        if column not in column_keys:
            raise ValueError(f"{ctx}: column {column!r} is not a column of this spec (columns: {', '.join(column_keys)})")
        only = compared[(a, b)]
        if only is not None and column not in only:
            raise ValueError(f"{ctx}: {a} vs {b} is not tested in {column!r} (its columns: {', '.join(only)})")
        if any((x.a, x.b, x.column) == (a, b, column) for x in out):
            raise ValueError(f"{ctx}: {a} vs {b} in {column!r} is claimed twice")
        out.append(Claim(text.strip(), a, b, column, paper))
    return tuple(out)


def claim_verdict(claim: Claim, verdicts: Sequence[Any]) -> tuple[str, Any]:
    """A claim's verdict from the table's comparison verdicts (:class:`leaderboards.stats.Verdict`).

    Returns:
        ``(verdict, comparison)``: :data:`REPRODUCED`, :data:`NOT_REPRODUCED`, ``"no detectable
        difference"`` or ``"untestable"``, and the comparison's verdict behind it (``None`` when the
        claim is untestable by the spec or a side of the column has no records).
    """
    if claim.untestable:
        return UNTESTABLE, None
    for v in verdicts:
        if (v.a, v.b, v.column) == (claim.a, claim.b, claim.column):
            return {BETTER: REPRODUCED, WORSE: NOT_REPRODUCED, NO_DIFFERENCE: NO_DIFFERENCE}.get(v.verdict, UNTESTABLE), v
    return UNTESTABLE, None
