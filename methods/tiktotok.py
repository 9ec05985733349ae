"""Tik-to-Tok / trans-tokenization (Remy et al. 2023, 2024; METHODS.md, "Tik-to-Tok").

A target token's row is a weighted average of the source rows it translates to, the weights coming
from a word-aligned parallel corpus:

1. **Align.** Both sides of ``inputs.parallel_corpus`` (JSON lines ``{"source": …, "target": …}``)
   are split into words (runs of word characters, single punctuation marks) and each word is
   tokenized *in context* with its own tokenizer (the tokens whose character offsets fall in the
   word). The words are aligned with eflomal (or a deterministic IBM Model 1), in both directions,
   symmetrized (``grow-diag-final`` by default); see :mod:`methods._align`. A word is identified
   by its token sequence, so counting aligned word pairs is counting pairs of token sequences.
   Pairs seen fewer than ``min_count`` times are dropped (reference: 10 — the public code uses 20).
2. **Spread** each kept word pair over token pairs. The rule is the reference code's
   (``transtokenizers.map_tokens``/``add_word_pair``, alignment unit ``WORDS``), with real-valued
   instead of floored integer counts: a pair of a target word with tokens ``t_1..t_m`` and a source
   word with tokens ``s_1..s_n`` seen ``c`` times gives

   * ``c/2`` *all-to-all*: each ``(t_i, s_j)`` gets ``c / (2n)`` (each target token spreads
     ``c/2`` evenly over the source word's tokens), and
   * ``c/2`` along the *proportional diagonal*: both words are cut into equal-length slots,
     ``I_i = [i/m, (i+1)/m)`` and ``J_j = [j/n, (j+1)/n)``, and ``(t_i, s_j)`` gets
     ``c/2 · m · |I_i ∩ J_j|`` (the reference's lcm expansion + zip);

   so every target-token occurrence receives ``c`` in total, and a single-token ↔ single-token
   pair gives ``c`` to that one token pair. ``p(s | t)`` is ``t``'s row of counts, normalized.
   Special source tokens (UNK included) never receive weight: a word containing an unknown
   character contributes its other tokens only.
3. **Identity.** Special tokens are matched by role (``SPECIAL``); target tokens identical in both
   vocabularies after canonicalization map to themselves (``COPIED``), as do symbolic tokens
   (digits, punctuation) under fuzzy matching (``fuzzy_identity``); a number token missing from
   the source maps to the source tokenizer's pieces of that number. By default (``identity:
   "copy"``, METHODS.md) identity overrides the alignment. ``identity: "prior"`` is the reference
   code's behaviour: identity only adds a count of 1 to the aligned counts, so a shared token with
   alignment evidence follows its translations.
4. **Smoothing.** A target token with no mapping yet inherits the mappings of the mapped target
   tokens that *contain* it (``smoothing: "containing"``, default): the average of their
   ``p(s | ·)``. Containment is on the marked form (a word-start token ``▁gir`` is contained in
   ``▁giraffe``, a continuation token ``affe`` in any token whose text contains ``affe``). Donors
   are the tokens mapped in steps 2–3, never other smoothed tokens, so the result does not depend on
   vocabulary order (the reference code updates its table in place while iterating). Candidates
   are found with an index of the substrings of the donors that are prefixes of some unmapped
   token's form (linear in the donors' total length), and at most ``smoothing_max_donors`` donors
   are used per token (the shortest first). ``smoothing: "reference"`` reproduces the reference
   code's ``extend_mapping``: donors are mapped tokens that *start with* the token plus the maximal
   mapped tokens *contained in* it, each donor's distribution weighted 1000, twice that for
   word-start translations, then normalized.
5. **Fallback.** Whatever is left gets a random row, drawn by the harness from N(mean, std) of the
   source with the trial's generator (``FALLBACK``). **Trap of the reference code:** it maps
   unmapped tokens to the source *UNK row* (``get_coefficients_for_token`` returns
   ``[(unk_token, 1.0)]`` and ``remap_model`` copies ``old_embeddings[unk_token_id]``); we never do.
   The blog's alternative fallback (a bilingual fastText space built from the word mapping, and the
   average of the 3 nearest source tokens) is **not implemented**: ``fallback`` accepts only
   ``"random"`` for now.

Provenance: rows from the alignment or from smoothing are ``COMBINED`` (``COPIED`` when they
reduce to one source row, the convention of :func:`methods._canon.assemble_mapping`); the info
breaks the counts down by origin (identity, number, aligned, smoothed, fallback).

Randomness: eflomal cannot be seeded (no seed option in eflomal 2.0; it reads ``/dev/urandom``).
One 63-bit number is drawn from the trial's generator and becomes part of the alignment cache key
under ``inputs.cache_dir``, so a re-run reads the same links; see :mod:`methods._align`.
``aligner: "ibm1"`` is fully deterministic.

The core, :func:`tiktotok_mapping`, works on canonical vocabulary lists and counted word pairs, so it
can be tested and benchmarked without tokenizers or an aligner.

Example:
    >>> from methods._canon import Canon
    >>> src = [None, Canon(b"house", True), Canon(b"the", True)]
    >>> tgt = [None, Canon(b"haus", True), Canon(b"hau", True), Canon(b"zzz", True)]
    >>> m, info = tiktotok_mapping(tgt, src, n_source=3, word_pairs={((1,), (1,)): 12},
    ...     exact=np.zeros((0, 2)), fuzzy=np.zeros((0, 2)), specials=np.array([[0, 0]]),
    ...     config=TikToTokConfig(min_count=10))
    >>> m.row(1), m.row(2)   # aligned; smoothed from "▁haus", which contains "▁hau"
    ((array([1]), array([1.], dtype=float32)), (array([1]), array([1.], dtype=float32)))
    >>> info["sources"]
    {'special': 1, 'identity': 0, 'fuzzy_identity': 0, 'number': 0, 'aligned': 1, 'smoothed': 1, 'fallback': 1}
"""

from __future__ import annotations

import bisect
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL, InitResult, TokenMapping, TransferInputs
from harness.registry import register_method
from methods import _align, _canon

SPREADINGS = ("reference", "all-to-all", "positional")
IDENTITIES = ("copy", "prior")
SMOOTHINGS = ("containing", "reference", "none")
FALLBACKS = ("random",)
ORIGINS = ("special", "identity", "fuzzy_identity", "number", "aligned", "smoothed")
"""Where a mapped row came from (``info["sources"]`` counts them, plus ``fallback``)."""


@dataclass(frozen=True)
class TikToTokConfig:
    """Configuration of :class:`TikToTok`."""

    aligner: str = "eflomal"
    """``"eflomal"`` (default; not seedable, reproducible through the cache) or ``"ibm1"``
    (deterministic IBM Model 1 in numpy); see :mod:`methods._align`."""

    symmetrization: str = "grow-diag-final"
    """How the two alignment directions are combined: ``intersection``, ``union``, ``grow-diag``,
    ``grow-diag-final`` (default) or ``grow-diag-final-and``. (The reference code uses one
    fast_align direction.)"""

    min_count: int = 10
    """Aligned word pairs seen fewer times are dropped as noise (reference: 10 in the paper's
    description; the public code uses 20)."""

    spreading: str = "reference"
    """How a word pair is spread over token pairs: ``"reference"`` (half all-to-all, half along the
    proportional diagonal; module docstring), ``"all-to-all"`` or ``"positional"`` (one half only,
    given the full count)."""

    identity: str = "copy"
    """``"copy"`` (default, METHODS.md): tokens identical in both vocabularies, numbers and
    specials map to themselves, overriding the alignment. ``"prior"``: the reference code —
    identity adds a count of 1 to the aligned counts."""

    fuzzy_identity: bool = True
    """Also treat symbolic tokens (digits, punctuation, whitespace) matched ignoring case and the
    word-start flag as identical (``Overlap.fuzzy``)."""

    numbers: bool = True
    """Map digit-only target tokens that have no source counterpart to the average of the source
    tokenizer's pieces of the same number."""

    smoothing: str = "containing"
    """``"containing"`` (default), ``"reference"`` or ``"none"``; see the module docstring."""

    smoothing_max_donors: int = 50
    """At most this many donor tokens per smoothed token (the shortest first, ties by id) —
    bounds the cost for very short tokens contained in thousands of others."""

    fallback: str = "random"
    """Only ``"random"`` (a row drawn by the harness). The blog's bilingual-fastText 3-NN fallback
    is not implemented yet."""

    max_sentence_pairs: int | None = None
    """Use only the first N sentence pairs of the corpus (``None``: all)."""

    max_words: int = 200
    """Sentence pairs with more words than this on either side are skipped (they slow the
    aligner down and are usually misaligned)."""

    eflomal_n_samplers: int = 3
    """eflomal's number of independent samplers (its default; one thread each)."""

    eflomal_rel_iterations: float = 1.0
    """eflomal's number of iterations relative to its default schedule."""

    ibm1_iterations: int = 5
    """EM iterations of the ``ibm1`` aligner."""

    def __post_init__(self) -> None:
        choices = {
            "aligner": _align.ALIGNERS,
            "symmetrization": _align.SYMMETRIZATIONS,
            "spreading": SPREADINGS,
            "identity": IDENTITIES,
            "smoothing": SMOOTHINGS,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"TikToTokConfig.{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.fallback not in FALLBACKS:
            raise ValueError(
                f"TikToTokConfig.fallback must be one of {FALLBACKS}, got {self.fallback!r} "
                "(the blog's bilingual-fastText 3-NN fallback, 'fasttext-knn', is not implemented yet)"
            )
        for name in ("min_count", "smoothing_max_donors", "max_words", "eflomal_n_samplers", "ibm1_iterations"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"TikToTokConfig.{name} must be an integer >= 1, got {v!r}")
        if self.max_sentence_pairs is not None and (
            isinstance(self.max_sentence_pairs, bool) or self.max_sentence_pairs < 1
        ):
            raise ValueError(f"TikToTokConfig.max_sentence_pairs must be None or >= 1, got {self.max_sentence_pairs!r}")
        if not self.eflomal_rel_iterations > 0:
            raise ValueError(f"TikToTokConfig.eflomal_rel_iterations must be > 0, got {self.eflomal_rel_iterations!r}")


# ------------------------------------------------------------------------------------------------
# Spreading word pairs over token pairs
# ------------------------------------------------------------------------------------------------


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


# ------------------------------------------------------------------------------------------------
# Smoothing
# ------------------------------------------------------------------------------------------------


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


# ------------------------------------------------------------------------------------------------
# The core on canonical vocabularies
# ------------------------------------------------------------------------------------------------


def tiktotok_mapping(
    target: Sequence[_canon.Canon | None],
    source: Sequence[_canon.Canon | None],
    *,
    n_source: int,
    word_pairs: Mapping[tuple[tuple[int, ...], tuple[int, ...]], float],
    exact: np.ndarray,
    fuzzy: np.ndarray,
    specials: np.ndarray,
    config: TikToTokConfig,
    number_pieces: Callable[[int], list[int]] | None = None,
) -> tuple[TokenMapping, dict]:
    """Tik-to-Tok on canonical vocabularies and counted aligned word pairs.

    Args:
        target: canonical target vocabulary (index = token id, ``None`` for specials).
        source: canonical source vocabulary.
        n_source: rows of the source embedding matrix.
        word_pairs: ``(target word token ids, source word token ids) → count`` of aligned pairs.
        exact: ``(n, 2)`` ``[target_id, source_id]`` exact canonical matches.
        fuzzy: ``(m, 2)`` extra symbolic matches (used when ``config.fuzzy_identity``).
        specials: ``(k, 2)`` ``[target_id, source_id]`` specials matched by role.
        config: the method's configuration.
        number_pieces: target id → source ids of the same number, for digit-only target tokens
            with no source counterpart (``None``: such tokens are not special-cased).

    Returns:
        The mapping and an info dict.
    """
    t0 = time.perf_counter()
    n_target = len(target)
    valid_source = np.zeros(n_source, dtype=bool)
    for s in range(min(n_source, len(source))):
        valid_source[s] = source[s] is not None

    # 1-2. aligned counts, spread over token pairs
    counts: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    kept = dropped = kept_total = 0
    for (tt, ss), c in word_pairs.items():
        if c < config.min_count:
            dropped += 1
            continue
        tt = tuple(t for t in tt if 0 <= t < n_target and target[t] is not None)
        ss = tuple(s for s in ss if 0 <= s < n_source and valid_source[s])
        if not tt or not ss:
            dropped += 1
            continue
        kept += 1
        kept_total += c
        for t, s, w in spread_pair(tt, ss, float(c), config.spreading):
            counts[t][s] += w
    t1 = time.perf_counter()

    # 3. specials and identities
    origin = np.full(n_target, -1, dtype=np.int8)  # index into ORIGINS
    weights: dict[int, dict[int, float]] = {}

    def fixed(t: int, w: dict[int, float], code: int) -> None:
        weights[t] = w
        origin[t] = code

    for t, s in np.asarray(specials, dtype=np.int64).reshape(-1, 2):
        if 0 <= s < n_source:
            fixed(int(t), {int(s): 1.0}, 0)
    identity_pairs: list[tuple[int, int, int]] = [
        (int(t), int(s), 1) for t, s in np.asarray(exact, dtype=np.int64).reshape(-1, 2)
    ]
    if config.fuzzy_identity:
        identity_pairs += [(int(t), int(s), 2) for t, s in np.asarray(fuzzy, dtype=np.int64).reshape(-1, 2)]
    numbers: list[tuple[int, list[int]]] = []
    if config.numbers and number_pieces is not None:
        have = {t for t, _, _ in identity_pairs}
        for t, c in enumerate(target):
            if c is not None and t not in have and origin[t] < 0 and _is_number(c):
                pieces = [s for s in number_pieces(t) if 0 <= s < n_source and valid_source[s]]
                if pieces:
                    numbers.append((t, pieces))
    prior_only: dict[int, int] = {}  # "prior" mode: tokens whose only evidence is an identity → its code
    if config.identity == "copy":
        for t, s, code in identity_pairs:
            if origin[t] < 0 and 0 <= s < n_source:
                fixed(t, {s: 1.0}, code)
        for t, pieces in numbers:
            if origin[t] < 0:
                fixed(t, _mean_of(pieces), 3)
    else:  # "prior": identity adds a count of 1 to the aligned counts (reference code)
        for t, s, code in identity_pairs:
            if origin[t] < 0 and 0 <= s < n_source:
                if t not in counts:
                    prior_only[t] = code
                counts[t][s] += 1.0
        for t, pieces in numbers:
            if origin[t] < 0:
                if t not in counts:
                    prior_only[t] = 3
                for s, w in _mean_of(pieces).items():
                    counts[t][s] += w

    # aligned distributions
    for t in sorted(counts):
        if origin[t] >= 0:
            continue
        row = counts[t]
        total = sum(row.values())
        if total > 0:
            fixed(t, {s: w / total for s, w in sorted(row.items())}, prior_only.get(t, 4))
    t2 = time.perf_counter()

    # 4. smoothing
    smooth_info: dict = {"mode": config.smoothing}
    if config.smoothing != "none":
        donors = [(t, _marked(target[t])) for t in range(n_target) if origin[t] > 0 and target[t] is not None]
        donors.sort(key=lambda d: (len(d[1]), d[0]))  # shortest first: the cap keeps the closest
        wanted: dict[bytes, list[int]] = defaultdict(list)
        for t, c in enumerate(target):
            if origin[t] < 0 and c is not None and c.text:
                wanted[_marked(c)].append(t)
        found = find_containers(wanted, donors, prefix_only=config.smoothing == "reference")
        by_string: dict[bytes, list[int]] = defaultdict(list)
        if config.smoothing == "reference":
            for t, m in donors:
                by_string[m].append(t)
        capped = 0
        smoothed: dict[int, dict[int, float]] = {}
        for u in sorted(wanted):
            ds = [d for d in found.get(u, [])]
            if config.smoothing == "reference":
                ds = ds + [d for d in _contained_maximal(u, by_string) if d not in ds]
            if len(ds) > config.smoothing_max_donors:
                capped += 1
                ds = ds[: config.smoothing_max_donors]
            if not ds:
                continue
            acc: dict[int, float] = defaultdict(float)
            for d in ds:
                for s, w in weights[d].items():
                    if config.smoothing == "reference":
                        acc[s] += w * (2000.0 if source[s] is not None and source[s].word_start else 1000.0)
                    else:
                        acc[s] += w / len(ds)
            total = sum(acc.values())
            dist = {s: w / total for s, w in sorted(acc.items()) if w > 0}
            for t in wanted[u]:
                smoothed[t] = dist
        for t, dist in smoothed.items():
            fixed(t, dist, 5)
        smooth_info.update({"donors": len(donors), "candidates": len(wanted), "capped_tokens": capped})
    t3 = time.perf_counter()

    # 5. assemble
    provenance = np.full(n_target, FALLBACK, dtype=np.int8)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for t in sorted(weights):
        w = weights[t]
        provenance[t] = SPECIAL if origin[t] == 0 else (COPIED if len(w) == 1 else COMBINED)
        rows.extend([t] * len(w))
        cols.extend(w.keys())
        vals.extend(w.values())
    mapping = TokenMapping.from_coo(n_target, n_source, rows, cols, vals, provenance)
    reasons: Counter[str] = Counter()
    for t in np.flatnonzero(provenance == FALLBACK).tolist():
        c = target[t]
        reasons["special-without-source-role" if c is None else ("empty-token" if not c.text else "no-evidence")] += 1
    sources = {name: int(np.sum(origin == k)) for k, name in enumerate(ORIGINS)}
    sources["fallback"] = int(np.sum(provenance == FALLBACK))
    info = {
        "counts": mapping.counts(),
        "sources": sources,
        "fallback_reasons": dict(sorted(reasons.items())),
        "word_pairs": {
            "distinct": len(word_pairs),
            "kept": kept,
            "dropped": dropped,
            "kept_occurrences": float(kept_total),
            "min_count": config.min_count,
        },
        "smoothing": smooth_info,
        "timings": {"spread_s": round(t1 - t0, 4), "identity_s": round(t2 - t1, 4), "smoothing_s": round(t3 - t2, 4)},
    }
    return mapping, info


def _is_number(c: _canon.Canon) -> bool:
    s = _canon.decode_canon(c)
    return bool(s) and s.isdigit()


def _mean_of(ids: Sequence[int]) -> dict[int, float]:
    acc: dict[int, float] = defaultdict(float)
    for s in ids:
        acc[s] += 1.0 / len(ids)
    return dict(sorted(acc.items()))


# ------------------------------------------------------------------------------------------------
# Reading the corpus and tokenizing words in context
# ------------------------------------------------------------------------------------------------


def read_parallel_corpus(path: Path | None, *, limit: int | None = None) -> list[tuple[str, str]]:
    """Read JSON lines ``{"source": …, "target": …}``; blank lines are skipped.

    Raises:
        ValueError: when ``path`` is ``None`` (naming ``parallel_corpus``), when a line is not such
            an object, or when the file holds no sentence pair.
        FileNotFoundError: when the file does not exist.

    Example:
        >>> read_parallel_corpus(None)
        Traceback (most recent call last):
        ValueError: tiktotok needs inputs.parallel_corpus (JSON lines {"source": ..., "target": ...}), but it is None
    """
    if path is None:
        raise ValueError(
            'tiktotok needs inputs.parallel_corpus (JSON lines {"source": ..., "target": ...}), but it is None'
        )
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"inputs.parallel_corpus: file not found: {path}")
    pairs: list[tuple[str, str]] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"inputs.parallel_corpus {path}:{lineno}: not valid JSON ({e.msg})") from None
            if (
                not isinstance(obj, dict)
                or not isinstance(obj.get("source"), str)
                or not isinstance(obj.get("target"), str)
            ):
                raise ValueError(
                    f'inputs.parallel_corpus {path}:{lineno}: expected an object with string fields "source" and "target"'
                )
            pairs.append((obj["source"], obj["target"]))
            if limit is not None and len(pairs) >= limit:
                break
    if not pairs:
        raise ValueError(f"inputs.parallel_corpus {path}: contains no sentence pairs")
    return pairs


def words_with_tokens(
    tok: Any, texts: Sequence[str], *, batch_size: int = 1000
) -> list[list[tuple[str, tuple[int, ...]]]]:
    """Split each text into words and give each word the token ids the tokenizer produced for it.

    Each text is tokenized once, in context, with character offsets; a token belongs to the first
    word that ends after the token starts (so a bare marker token joins the following word). Words
    that received no token are dropped.

    Args:
        tok: a fast tokenizer (offsets are required).
        texts: the sentences.
        batch_size: sentences per tokenizer call.

    Returns:
        Per text, ``(word, token ids)`` pairs in order.
    """
    out: list[list[tuple[str, tuple[int, ...]]]] = []
    for a in range(0, len(texts), batch_size):
        chunk = list(texts[a : a + batch_size])
        try:
            enc = tok(chunk, add_special_tokens=False, return_offsets_mapping=True)
        except NotImplementedError as e:  # slow tokenizers have no offsets
            raise ValueError(
                f"tiktotok needs a fast tokenizer (character offsets); {type(tok).__name__} has none: {e}"
            ) from None
        for text, ids, offsets in zip(chunk, enc["input_ids"], enc["offset_mapping"]):
            spans = _align.word_spans(text)
            ends = [b for _, b in spans]
            groups: list[list[int]] = [[] for _ in spans]
            for tid, (s, _e) in zip(ids, offsets):
                w = bisect.bisect_right(ends, s)
                if w < len(spans):
                    groups[w].append(int(tid))
            out.append([(text[sa:sb], tuple(g)) for (sa, sb), g in zip(spans, groups) if g])
    return out


# ------------------------------------------------------------------------------------------------
# The registered method
# ------------------------------------------------------------------------------------------------


@register_method(
    "tiktotok",
    config=TikToTokConfig,
    description="Tik-to-Tok / trans-tokenization: rows from word-aligned parallel data, identity for shared tokens",
)
class TikToTok:
    """Tik-to-Tok (Remy et al.): each target token averages the source tokens it is aligned to.

    Needs ``inputs.parallel_corpus``. See the module docstring for every step, the spreading rule,
    the options that reproduce the reference code, and the UNK-row trap it avoids.

    Example:
        >>> from harness.registry import get
        >>> get("method", "tiktotok").make({"min_count": 2, "aligner": "ibm1"}).config.min_count
        2
    """

    def __init__(self, config: TikToTokConfig) -> None:
        self.config = config

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Align the parallel corpus, count, spread, add identities, smooth; see the module docstring."""
        cfg = self.config
        t0 = time.perf_counter()
        pairs = read_parallel_corpus(inputs.parallel_corpus, limit=cfg.max_sentence_pairs)
        align_seed = int(rng.integers(0, 2**63 - 1))  # drawn always, so the stream does not depend on the aligner
        src_words = words_with_tokens(inputs.source_tokenizer, [s for s, _ in pairs])
        tgt_words = words_with_tokens(inputs.target_tokenizer, [t for _, t in pairs])
        keep = [
            k
            for k in range(len(pairs))
            if src_words[k] and tgt_words[k] and max(len(src_words[k]), len(tgt_words[k])) <= cfg.max_words
        ]
        skipped_empty = sum(1 for k in range(len(pairs)) if not src_words[k] or not tgt_words[k])
        if not keep:
            raise ValueError(
                f"inputs.parallel_corpus {inputs.parallel_corpus}: no sentence pair has words on both sides within max_words={cfg.max_words}"
            )
        src_words = [src_words[k] for k in keep]
        tgt_words = [tgt_words[k] for k in keep]
        t1 = time.perf_counter()
        alignment = _align.align_corpus(
            [[w for w, _ in s] for s in src_words],
            [[w for w, _ in t] for t in tgt_words],
            aligner=cfg.aligner,
            symmetrization=cfg.symmetrization,
            seed=align_seed,
            cache_dir=Path(inputs.cache_dir) if inputs.cache_dir is not None else None,
            eflomal_options={"n_samplers": cfg.eflomal_n_samplers, "rel_iterations": cfg.eflomal_rel_iterations},
            ibm1_iterations=cfg.ibm1_iterations,
        )
        word_pairs = _align.count_pairs(
            [[ids for _, ids in s] for s in src_words], [[ids for _, ids in t] for t in tgt_words], alignment.links
        )
        t2 = time.perf_counter()

        source = _canon.canonical_vocab(inputs.source_tokenizer)
        target = _canon.canonical_vocab(inputs.target_tokenizer)
        n_source = int(inputs.source_embeddings.shape[0])
        overlap = _canon.compute_overlap(
            inputs.source_tokenizer, inputs.target_tokenizer, fuzzy=True, n_source=n_source
        )
        spec = _canon.family_spec(inputs.source_tokenizer)

        def number_pieces(t: int) -> list[int]:
            return _canon.encode_canon(inputs.source_tokenizer, target[t], spec=spec)

        mapping, info = tiktotok_mapping(
            target,
            source,
            n_source=n_source,
            word_pairs=word_pairs,
            exact=overlap.exact,
            fuzzy=overlap.fuzzy,
            specials=overlap.specials,
            config=cfg,
            number_pieces=number_pieces,
        )
        info["overlap"] = overlap.report()
        info["corpus"] = {
            "sentence_pairs_read": len(pairs),
            "sentence_pairs_aligned": len(keep),
            "skipped_empty": skipped_empty,
            "skipped_too_long": len(pairs) - len(keep) - skipped_empty,
        }
        info["alignment"] = alignment.info
        info["examples"] = _examples(mapping, word_pairs, inputs, k=10)
        info["timings"].update(
            {
                "read_tokenize_s": round(t1 - t0, 4),
                "align_count_s": round(t2 - t1, 4),
                "total_s": round(time.perf_counter() - t0, 4),
            }
        )
        return InitResult(mapping=mapping, tokenizer=inputs.target_tokenizer, info=info)


def _examples(mapping: TokenMapping, word_pairs: Mapping, inputs: TransferInputs, k: int) -> list[dict]:
    """The most frequently aligned single-token target words and their top-3 source tokens (for reading records)."""
    freq: Counter[int] = Counter()
    for (tt, _ss), c in word_pairs.items():
        if len(tt) == 1:
            freq[tt[0]] += c
    out = []
    for t, c in freq.most_common(k):
        if not (0 <= t < mapping.n_target):
            continue
        ids, ws = mapping.row(t)
        top = np.argsort(-ws, kind="stable")[:3]
        out.append(
            {
                "target": str(inputs.target_tokenizer.convert_ids_to_tokens(int(t))),
                "aligned": int(c),
                "sources": [
                    [str(inputs.source_tokenizer.convert_ids_to_tokens(int(ids[i]))), round(float(ws[i]), 4)]
                    for i in top
                ],
            }
        )
    return out
