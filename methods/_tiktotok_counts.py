"""Tik-to-Tok's steps 2–3: token distributions from aligned word pairs, then specials and identities.

See :mod:`methods.tiktotok`. Each kept word pair is spread over token pairs (:func:`spread_pair`);
specials are matched by role, identical tokens (and, optionally, symbolic ones under fuzzy matching,
and numbers missing from the source) either override the alignment (``identity="copy"``) or add a
count of 1 to it (``"prior"``, the reference code); the counts of every other target token are
normalized into ``p(s | t)``. The result is a :class:`Rows`: a distribution and an origin code
(:data:`ORIGINS`) per decided target token.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from harness import vocab as _canon

__all__ = ["ORIGINS", "Rows", "spread_pair", "count_token_pairs", "token_distributions"]

ORIGINS = ("special", "identity", "fuzzy_identity", "number", "aligned", "smoothed", "knn")
"""Where a mapped row came from (``info["sources"]`` counts them, plus ``fallback``)."""
FROM_SPECIAL, FROM_IDENTITY, FROM_FUZZY, FROM_NUMBER, FROM_ALIGNMENT, FROM_SMOOTHING, FROM_KNN = range(len(ORIGINS))
"""The codes of :data:`ORIGINS` (``Rows.origin``; ``-1``: not decided)."""


@dataclass
class Rows:
    """The target rows decided so far.

    Attributes:
        origin: int8 ``n_target``: an :data:`ORIGINS` code per target token, ``-1`` while undecided.
        weights: target id → ``{source id: weight}`` (weights sum to 1).
    """

    origin: np.ndarray
    weights: dict[int, dict[int, float]]

    def fix(self, t: int, w: dict[int, float], code: int) -> None:
        """Decide target token ``t``: distribution ``w``, origin ``code``."""
        self.weights[t] = w
        self.origin[t] = code


def spread_pair(
    target_tokens: Sequence[int], source_tokens: Sequence[int], count: float, rule: str = "reference"
) -> list[tuple[int, int, float]]:
    """Token-pair counts ``(target_token, source_token, count)`` from one aligned word pair.

    Args:
        target_tokens: the target word's token ids ``t_1..t_m``.
        source_tokens: the source word's token ids ``s_1..s_n``.
        count: how often the pair was aligned.
        rule: ``"reference"`` (half all-to-all, half proportional diagonal), ``"all-to-all"`` or
            ``"positional"``.

    Returns:
        Triples in a fixed order; every target-token occurrence receives ``count`` in total.

    Example:
        >>> spread_pair([7], [3, 4], 10.0)
        [(7, 3, 2.5), (7, 4, 2.5), (7, 3, 2.5), (7, 4, 2.5)]
        >>> spread_pair([7, 8], [3], 4.0, "positional")
        [(7, 3, 4.0), (8, 3, 4.0)]
    """
    m, n = len(target_tokens), len(source_tokens)
    if not m or not n:
        return []
    out: list[tuple[int, int, float]] = []
    share = {"reference": 0.5, "all-to-all": 1.0, "positional": 0.0}[rule]
    if share:
        w = count * share / n
        out.extend((t, s, w) for t in target_tokens for s in source_tokens)
    if share < 1.0:
        c = count * (1.0 - share)
        for i, t in enumerate(target_tokens):
            lo, hi = i / m, (i + 1) / m
            for j in range(int(lo * n), min(n, int(np.ceil(hi * n)))):
                ov = min(hi, (j + 1) / n) - max(lo, j / n)
                if ov > 1e-12:
                    out.append((t, source_tokens[j], c * m * ov))
    return out


def count_token_pairs(
    word_pairs: Mapping[tuple[tuple[int, ...], tuple[int, ...]], float],
    target: Sequence[_canon.Canon | None],
    valid_source: np.ndarray,
    *,
    min_count: float,
    rule: str,
) -> tuple[dict[int, dict[int, float]], dict]:
    """Token-pair counts from the word pairs seen at least ``min_count`` times (specials dropped).

    Returns:
        ``(counts, stats)``: target id → source id → count, and ``{"kept", "dropped", "kept_occurrences"}``.
    """
    n_target, n_source = len(target), len(valid_source)
    counts: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    kept = dropped = kept_total = 0
    for (tt, ss), c in word_pairs.items():
        if c < min_count:
            dropped += 1
            continue
        tt = tuple(t for t in tt if 0 <= t < n_target and target[t] is not None)
        ss = tuple(s for s in ss if 0 <= s < n_source and valid_source[s])
        if not tt or not ss:
            dropped += 1
            continue
        kept += 1
        kept_total += c
        for t, s, w in spread_pair(tt, ss, float(c), rule):
            counts[t][s] += w
    return counts, {"kept": kept, "dropped": dropped, "kept_occurrences": float(kept_total)}


def token_distributions(
    target: Sequence[_canon.Canon | None],
    valid_source: np.ndarray,
    counts: dict[int, dict[int, float]],
    *,
    exact: np.ndarray,
    fuzzy: np.ndarray | None,
    specials: np.ndarray,
    identity: str,
    number_pieces: Callable[[int], list[int]] | None,
) -> Rows:
    """Specials, identities and aligned distributions (steps 2–3 after counting).

    Args:
        target: canonical target vocabulary.
        valid_source: boolean per source row: a non-special token.
        counts: :func:`count_token_pairs`'s counts (``identity="prior"`` adds to them).
        exact: ``(n, 2)`` ``[target_id, source_id]`` exact canonical matches.
        fuzzy: ``(m, 2)`` symbolic matches, or ``None`` when fuzzy identity is off.
        specials: ``(k, 2)`` ``[target_id, source_id]`` specials matched by role.
        identity: ``"copy"`` (identity overrides the alignment) or ``"prior"`` (adds a count of 1).
        number_pieces: target id → source ids of the same number, or ``None`` (numbers off).
    """
    n_target, n_source = len(target), len(valid_source)
    rows = Rows(np.full(n_target, -1, dtype=np.int8), {})
    for t, s in np.asarray(specials, dtype=np.int64).reshape(-1, 2):
        if 0 <= s < n_source:
            rows.fix(int(t), {int(s): 1.0}, FROM_SPECIAL)
    pairs = [(int(t), int(s), FROM_IDENTITY) for t, s in np.asarray(exact, dtype=np.int64).reshape(-1, 2)]
    if fuzzy is not None:
        pairs += [(int(t), int(s), FROM_FUZZY) for t, s in np.asarray(fuzzy, dtype=np.int64).reshape(-1, 2)]
    numbers = _numbers(target, rows.origin, {t for t, _, _ in pairs}, valid_source, number_pieces)
    prior_only = _add_identities(rows, counts, pairs, numbers, identity, n_source)
    for t in sorted(counts):  # aligned distributions
        if rows.origin[t] >= 0:
            continue
        row = counts[t]
        total = sum(row.values())
        if total > 0:
            rows.fix(t, {s: w / total for s, w in sorted(row.items())}, prior_only.get(t, FROM_ALIGNMENT))
    return rows


def _numbers(
    target: Sequence[_canon.Canon | None], origin: np.ndarray, have: set[int], valid_source: np.ndarray,
    number_pieces: Callable[[int], list[int]] | None,
) -> list[tuple[int, list[int]]]:
    """Digit-only target tokens with no identity, and the source pieces of the same number."""
    if number_pieces is None:
        return []
    numbers: list[tuple[int, list[int]]] = []
    n_source = len(valid_source)
    for t, c in enumerate(target):
        if c is not None and t not in have and origin[t] < 0 and _is_number(c):
            pieces = [s for s in number_pieces(t) if 0 <= s < n_source and valid_source[s]]
            if pieces:
                numbers.append((t, pieces))
    return numbers


def _add_identities(
    rows: Rows, counts: dict[int, dict[int, float]], pairs: list[tuple[int, int, int]],
    numbers: list[tuple[int, list[int]]], identity: str, n_source: int,
) -> dict[int, int]:
    """Identity and number rows: fixed (``copy``) or a count added (``prior``); returns, for ``prior``,
    the tokens whose only evidence is an identity, with its origin code."""
    prior_only: dict[int, int] = {}
    if identity == "copy":
        for t, s, code in pairs:
            if rows.origin[t] < 0 and 0 <= s < n_source:
                rows.fix(t, {s: 1.0}, code)
        for t, pieces in numbers:
            if rows.origin[t] < 0:
                rows.fix(t, _mean_of(pieces), FROM_NUMBER)
        return prior_only
    for t, s, code in pairs:  # "prior": identity adds a count of 1 to the aligned counts (reference code)
        if rows.origin[t] < 0 and 0 <= s < n_source:
            if t not in counts:
                prior_only[t] = code
            counts[t][s] += 1.0
    for t, pieces in numbers:
        if rows.origin[t] < 0:
            if t not in counts:
                prior_only[t] = FROM_NUMBER
            for s, w in _mean_of(pieces).items():
                counts[t][s] += w
    return prior_only


def _is_number(c: _canon.Canon) -> bool:
    s = _canon.decode_canon(c)
    return bool(s) and s.isdigit()


def _mean_of(ids: Sequence[int]) -> dict[int, float]:
    acc: dict[int, float] = defaultdict(float)
    for s in ids:
        acc[s] += 1.0 / len(ids)
    return dict(sorted(acc.items()))
