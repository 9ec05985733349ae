"""Provenance of an initialization, counted from the mapping alone, the same way for every method.

A method labels each target row special / copied / combined / fallback
(:data:`harness.protocols.PROVENANCE_NAMES`), but the labels do not mean the same across methods:
Tik-to-Tok, VIPI and mean-of-pieces call a row built from *one* source row "copied" even when that
row belongs to a different token (a one-word alignment), while FOCUS and WECHSEL call such a row
"combined". :func:`categorize` counts rows by what the mapping *is* (:data:`PROVENANCE_CATEGORIES`);
:func:`provenance_summary` adds the random rows by reason (the method's ``InitResult.random_reasons``,
never its ``info``) and whether they exceed ``--max-random-rows``; :func:`random_rows_warning` is the
one warning about them. ``tokxfer init`` prints this summary and every trial's ``init_info.json`` holds it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PROVENANCE_CATEGORIES", "MAX_RANDOM_ROWS", "SPECIAL_WITHOUT_ROLE", "NO_REASON", "categorize",
           "provenance_summary", "random_rows_warning"]


PROVENANCE_CATEGORIES: dict[str, str] = {
    "special": "special token, copied: the row of the source special token of the same role (<s>/[CLS], </s>/[SEP], "
               "<pad>, <unk>, <mask>)",
    "copied": "same token, copied: the source row of the same token (equal after removing the word-start marker and "
              "ignoring case): the overlap of the two vocabularies",
    "single-source": "another token's row: the row of one different source token, i.e. a combination with a single "
                     "member (a one-word Tik-to-Tok alignment or a one-piece VIPI/mean-of-pieces partition, which those "
                     "methods count as 'copied'; a FOCUS/WECHSEL combination with all weight on one token, which those "
                     "count as 'combined')",
    "combined": "combination of source rows: a weighted sum of two or more source rows",
    "fallback": "random: drawn from N(mean, std) of the source embeddings with --seed (multivariate: from their full "
                "covariance); why, row by row, is in random_rows.reasons (from the method, else inferred: a special "
                "token without a source role)",
}
"""The provenance categories of ``tokxfer init``'s summary and ``init_info.json`` (``categories``),
computed from the mapping alone, the same way for every method (:func:`categorize`)."""


def categorize(mapping: Any, source_tok: Any, target_tok: Any) -> dict[str, int]:
    """Count a mapping's target rows by :data:`PROVENANCE_CATEGORIES`.

    Example:
        >>> from harness.protocols import COMBINED, COPIED, FALLBACK, TokenMapping
        >>> from tokenizers import Tokenizer, models
        >>> from transformers import PreTrainedTokenizerFast
        >>> tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordPiece({"a": 0, "b": 1, "c": 2}, unk_token="a")))
        >>> m = TokenMapping.from_coo(3, 3, [0, 1, 1], [0, 2, 1], [1, .5, .5], [COPIED, COMBINED, FALLBACK])
        >>> categorize(m, tok, tok)
        {'special': 0, 'copied': 1, 'single-source': 0, 'combined': 1, 'fallback': 1}
    """
    import numpy as np

    from harness import vocab as _canon
    from harness.protocols import FALLBACK, SPECIAL

    out = dict.fromkeys(PROVENANCE_CATEGORIES, 0)
    prov = np.asarray(mapping.provenance)
    nnz = np.diff(mapping.indptr)
    out["special"] = int((prov == SPECIAL).sum())
    out["fallback"] = int((prov == FALLBACK).sum())
    rest = (prov != SPECIAL) & (prov != FALLBACK)
    out["combined"] = int((rest & (nnz > 1)).sum())
    single = np.flatnonzero(rest & (nnz == 1))
    if len(single):
        src_ids = mapping.indices[mapping.indptr[single]]
        # only the rows compared are canonicalized (all of them if a method already did)
        tc, sc = _canon.canonical_forms(target_tok, single.tolist()), _canon.canonical_forms(source_tok, src_ids.tolist())
        same = sum(1 for t, s in zip(tc, sc) if t is not None and s is not None and t.text.lower() == s.text.lower())
        out["copied"] = int(same)
        out["single-source"] = int(len(single) - same)
    return out


# --------------------------------------------------------------------------------------------
# the provenance summary: categories and the reasons of random rows, from the mapping

MAX_RANDOM_ROWS = 0.1
"""Default of ``tokxfer init --max-random-rows``: warn when more than this share of the target rows is random."""

SPECIAL_WITHOUT_ROLE = "special token with no source special of the same role"
"""Reason of a random special-token row the method gave no reason for."""

NO_REASON = "no reason given by the method"
"""Reason of any other random row the method gave no reason for (a plugin without ``random_reasons``)."""


def provenance_summary(result: Any, source_tok: Any, target_tok: Any, *, max_random_rows: float = MAX_RANDOM_ROWS,
                       examples: int = 8) -> dict:
    """What ``tokxfer init`` says about an init: rows by category, and the random rows with their reasons.

    Everything is counted from the mapping (``result.mapping``), never from a method's ``info``: each
    target row is in exactly one category, so the counts add up to the vocabulary. The random
    (``FALLBACK``) rows are split by the reasons the method gave (``result.random_reasons``; each row
    under its first reason, ids that are not random rows ignored — e.g. original rows kept in
    extension mode), the rest as :data:`SPECIAL_WITHOUT_ROLE` or :data:`NO_REASON`; so the reasons'
    counts add up to the random rows. Tokens are shown readably (:func:`harness.vocab.show_token`).

    Returns:
        ``{"n_target", "categories", "random_rows": {"count", "share", "max_random_rows",
        "above_threshold", "reasons": [{"reason", "count", "examples", "ids"}, …] (largest first)}}``.

    Example:
        >>> from harness.protocols import COPIED, FALLBACK, InitResult, TokenMapping
        >>> from tokenizers import Tokenizer, models
        >>> from transformers import PreTrainedTokenizerFast
        >>> tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordPiece({"a": 0, "b": 1, "c": 2}, unk_token="a")))
        >>> m = TokenMapping.from_coo(3, 3, [0], [0], [1.0], [COPIED, FALLBACK, FALLBACK])
        >>> s = provenance_summary(InitResult(m, tok, random_reasons={"rare": [2]}), tok, tok, max_random_rows=0.5)
        >>> s["random_rows"]["count"], s["random_rows"]["above_threshold"], [(r["reason"], r["examples"]) for r in s["random_rows"]["reasons"]]
        (2, True, [('rare', ['▁c']), ('no reason given by the method', ['▁b'])])
    """
    import numpy as np

    from harness import vocab as _canon

    mapping = result.mapping
    n = int(mapping.n_target)
    fallback = mapping.fallback_ids()
    unexplained = np.zeros(n, dtype=bool)
    unexplained[fallback] = True
    groups: list[tuple[str, np.ndarray]] = []
    for why, ids in (result.random_reasons or {}).items():
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        ids = np.unique(ids[(ids >= 0) & (ids < n)])
        ids = ids[unexplained[ids]]
        unexplained[ids] = False
        groups.append((str(why), ids))
    rest = np.flatnonzero(unexplained)
    specials = np.array(sorted(_canon.special_ids(target_tok)), dtype=np.int64)
    is_special = np.isin(rest, specials)
    groups += [(SPECIAL_WITHOUT_ROLE, rest[is_special]), (NO_REASON, rest[~is_special])]
    merged: dict[str, np.ndarray] = {}
    for why, ids in groups:
        merged[why] = np.concatenate([merged[why], ids]) if why in merged else ids
    reasons = [{"reason": why, "count": int(len(ids)), "examples": [_canon.show_token(target_tok, int(i)) for i in ids[:examples]],
                "ids": sorted(ids.tolist())} for why, ids in merged.items() if len(ids)]
    reasons.sort(key=lambda r: -r["count"])
    share = len(fallback) / max(n, 1)
    return {
        "n_target": n,
        "categories": categorize(mapping, source_tok, target_tok),
        "random_rows": {"count": int(len(fallback)), "share": round(share, 6), "max_random_rows": float(max_random_rows),
                        "above_threshold": bool(share > max_random_rows), "reasons": reasons},
    }


def random_rows_warning(summary: dict) -> str | None:
    """The one warning about random rows (``None`` when their share is within ``--max-random-rows``)."""
    rr = summary["random_rows"]
    if not rr["above_threshold"]:
        return None
    top = rr["reasons"][0]
    return (f"{rr['count']:,} of the {summary['n_target']:,} target rows ({rr['share']:.1%}) are random, more than "
            f"--max-random-rows {rr['max_random_rows']:g} allows; the largest group ({top['count']:,}): {top['reason']} "
            "(every reason is in the summary and in init_info.json under random_rows)")
