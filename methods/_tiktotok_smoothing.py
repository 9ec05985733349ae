"""Tik-to-Tok's step 4: unmapped target tokens inherit the distributions of mapped tokens that contain them.

See :mod:`methods.tiktotok` (step 4). ``containing`` (default): a token with no mapping yet gets the
average of the ``p(s | ·)`` of the mapped tokens whose marked form contains its own (a word-start
``▁gir`` is contained in ``▁giraffe``, a continuation ``affe`` in any token whose text contains
``affe``); donors are never other smoothed tokens, so the result does not depend on vocabulary
order, and at most ``max_donors`` donors are used, the shortest first. ``reference``: the public
code's ``extend_mapping`` (donors that *start with* the token plus the maximal mapped strings
*inside* it, weighted 1000, twice that for word-start translations).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harness import vocab as _canon

__all__ = ["find_containers", "smooth"]


def _marked(c: _canon.Canon) -> bytes:
    """The token's form for containment tests: a NUL byte stands for the word-start marker."""
    return (b"\x00" + c.text) if c.word_start else c.text


def find_containers(
    wanted: Mapping[bytes, Any], donors: Sequence[tuple[int, bytes]], *, prefix_only: bool = False
) -> dict[bytes, list[int]]:
    """For every string in ``wanted``, the donor ids whose string contains it (or starts with it).

    Linear in the donors' total length times the longest wanted string, with pruning: a donor's
    substring is extended only while it is a prefix of some wanted string.

    Args:
        wanted: strings to look for (keys are used).
        donors: ``(donor_id, string)`` pairs, scanned in order.
        prefix_only: only count occurrences at position 0 (donors that *start with* the string).

    Returns:
        ``wanted string → donor ids`` (each donor at most once, in scan order); strings found in no
        donor are absent.

    Example:
        >>> find_containers({b"ab": 0, b"b": 0}, [(1, b"xab"), (2, b"bb"), (3, b"ab")])
        {b'ab': [1, 3], b'b': [1, 2, 3]}
    """
    prefixes: set[bytes] = set()
    for w in wanted:
        for k in range(1, len(w) + 1):
            prefixes.add(w[:k])
    out: dict[bytes, list[int]] = {}
    for did, s in donors:
        seen: set[bytes] = set()
        starts = range(1) if prefix_only else range(len(s))
        for a in starts:
            for b in range(a + 1, len(s) + 1):
                sub = s[a:b]
                if sub not in prefixes:
                    break
                if sub in wanted and sub not in seen:
                    seen.add(sub)
                    out.setdefault(sub, []).append(did)
    return out


def _contained_maximal(u: bytes, donor_by_string: Mapping[bytes, list[int]]) -> list[int]:
    """Reference smoothing, second half: the longest mapped strings inside ``u`` not inside a longer one."""
    found = {
        u[a:b] for a in range(len(u)) for b in range(a + 1, len(u) + 1) if u[a:b] != u and u[a:b] in donor_by_string
    }
    kept: list[bytes] = []
    for s in sorted(found, key=lambda x: (-len(x), x)):
        if not any(s in k for k in kept):
            kept.append(s)
    kept.sort(key=lambda x: (u.index(x), x))
    return [d for s in kept for d in donor_by_string[s][:1]]


def smooth(
    target: Sequence[_canon.Canon | None],
    source: Sequence[_canon.Canon | None],
    origin: np.ndarray,
    weights: Mapping[int, Mapping[int, float]],
    *,
    mode: str,
    max_donors: int,
) -> tuple[dict[int, dict[int, float]], dict]:
    """Distributions for the unmapped target tokens (``origin < 0``) from the mapped ones that contain them.

    Args:
        target: canonical target vocabulary (``None`` for specials).
        source: canonical source vocabulary (word-start flags weigh ``reference`` smoothing).
        origin: per target token, its origin code (``< 0``: unmapped; ``0``: special, never a donor).
        weights: the distributions of the mapped target tokens.
        mode: ``"containing"`` or ``"reference"``.
        max_donors: donors used per token at most.

    Returns:
        ``(rows, info)``: target id → distribution for every token that found a donor, and
        ``{"donors", "candidates", "capped_tokens"}``.
    """
    n_target = len(target)
    donors = [(t, _marked(target[t])) for t in range(n_target) if origin[t] > 0 and target[t] is not None]
    donors.sort(key=lambda d: (len(d[1]), d[0]))  # shortest first: the cap keeps the closest
    wanted: dict[bytes, list[int]] = defaultdict(list)
    for t, c in enumerate(target):
        if origin[t] < 0 and c is not None and c.text:
            wanted[_marked(c)].append(t)
    found = find_containers(wanted, donors, prefix_only=mode == "reference")
    by_string: dict[bytes, list[int]] = defaultdict(list)
    if mode == "reference":
        for t, m in donors:
            by_string[m].append(t)
    capped = 0
    smoothed: dict[int, dict[int, float]] = {}
    for u in sorted(wanted):
        ds = [d for d in found.get(u, [])]
        if mode == "reference":
            ds = ds + [d for d in _contained_maximal(u, by_string) if d not in ds]
        if len(ds) > max_donors:
            capped += 1
            ds = ds[:max_donors]
        if not ds:
            continue
        acc: dict[int, float] = defaultdict(float)
        for d in ds:
            for s, w in weights[d].items():
                if mode == "reference":
                    acc[s] += w * (2000.0 if source[s] is not None and source[s].word_start else 1000.0)
                else:
                    acc[s] += w / len(ds)
        total = sum(acc.values())
        dist = {s: w / total for s, w in sorted(acc.items()) if w > 0}
        for t in wanted[u]:
            smoothed[t] = dist
    return smoothed, {"donors": len(donors), "candidates": len(wanted), "capped_tokens": capped}
