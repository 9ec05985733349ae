"""Tik-to-Tok / trans-tokenization (Remy et al. 2023, 2024; METHODS.md, "Tik-to-Tok").

A target token's row is a weighted average of the source rows it translates to, the weights coming
from a word-aligned parallel corpus:

1. **Align.** Both sides of ``inputs.parallel_corpus`` (JSON lines ``{"source": …, "target": …}``)
   are split into words (runs of word characters, single punctuation marks) and each word is
   tokenized *in context* with its own tokenizer (the tokens whose character offsets fall in the
   word). The words are aligned in both directions with fast_align's model (IBM Model 2 with a
   diagonal prior, the aligner of the reference code; default ``aligner: "fast-align"``, run as
   deterministic EM in numpy), or with eflomal or IBM Model 1 (options), and symmetrized
   (``grow-diag-final`` by default); see :mod:`methods._align`. A word is identified
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
5. **Fallback.** Whatever is left gets one of two fallbacks (``fallback``):

   * ``"fasttext-knn"`` (default): the method as the 2023 blog describes it and METHODS.md restates
     it (step 4, after smoothing): a bilingual fastText space built from the word mapping, and the
     ``fallback_k`` (3) nearest source tokens, averaged. Token-level fastText models (skipgram by
     default, seeded from the trial's generator, one thread) are trained on the target side and on the source side of the parallel
     corpus, each pre-tokenized with its own tokenizer (:func:`methods._fasttext.pretokenize`,
     cached under ``inputs.cache_dir`` like FOCUS's). An orthogonal Procrustes map (rows
     L2-normalized) takes target-token vectors onto source-token vectors; it is fitted on the
     tokens mapped in steps 2–3 (aligned, identity, fuzzy identity, numbers — not smoothed tokens,
     whose distributions are inherited, and not specials) paired with their most probable source
     token, where both have an *in-vocabulary* vector. Each unmapped target token with a vector
     then maps to the uniform average (weights ``1/k``) of the ``k`` source tokens nearest by
     cosine in the aligned space; candidates are the non-special source tokens with an
     in-vocabulary vector. Each space is centered first (``fasttext_center``; VecMap's
     normalization). A target token's vector is its in-vocabulary fastText vector when it
     occurred at least ``fasttext_min_count`` times, otherwise (``fasttext_ngram_vectors``) the
     mean of the rows of its character n-grams that were *trained* (that occur in some
     in-vocabulary token; fastText's own out-of-vocabulary vector would also average untrained,
     randomly initialized buckets). This is how the blog's ``affe`` — never seen alone — gets a
     vector. Tokens with neither still get the random fallback (``fallback_reasons``:
     ``no-fasttext-vector``; ``no-bilingual-space`` when no Procrustes map could be fitted or no
     source token has a vector). ``info["fallback"]`` says how many went each way and how well the
     Procrustes map fits (residual, pair cosines before/after, how often a fitted pair's source
     token is its nearest / among its ``k`` nearest source tokens).
   * ``"random"``: every token left gets a random row, drawn by the harness from N(mean, std) of
     the source with the trial's generator (``FALLBACK``). This is the path of the public reference
     code (smoothing, then a fallback row), with its trap removed: it maps unmapped tokens to the
     source *UNK row* (``get_coefficients_for_token`` returns ``[(unk_token, 1.0)]`` and
     ``remap_model`` copies ``old_embeddings[unk_token_id]``); we never do.

Provenance: rows from the alignment, from smoothing or from the kNN fallback are ``COMBINED``
(``COPIED`` when they reduce to one source row, the convention of
:func:`harness.vocab.assemble_mapping`; for the kNN fallback only with ``fallback_k=1``); the
info breaks the counts down by origin (identity, number, aligned, smoothed, knn, fallback).

Randomness: the default aligner (``fast-align``) and ``ibm1`` have none: their links depend on
the corpus only, and a cold run gives the same links as a cached one. eflomal cannot be seeded (no
seed option in eflomal 2.0; it reads ``/dev/urandom``): one 63-bit number drawn from the trial's
generator becomes part of its alignment cache key under ``inputs.cache_dir``, so a re-run reads
the same links, but two cold runs differ; a result built on it carries
``info["nondeterministic"] = ["eflomal"]``, which the harness turns into a record flag and a
leaderboard marker (:mod:`harness.run.sanity`). A second number, drawn after it whatever the aligner
and the fallback, seeds the fallback's fastText models (one thread: reproducible; with
``fasttext_threads > 1`` the info lists ``"fasttext"`` as nondeterministic too). Deterministic
runs carry no ``nondeterministic`` key.

The core, :func:`tiktotok_mapping`, works on canonical vocabulary lists and counted word pairs, so it
can be tested and benchmarked without tokenizers or an aligner. The steps live in one module each:
:mod:`methods._tiktotok_corpus` (reading the corpus, words tokenized in context; the aligner is
:mod:`methods._align`), :mod:`methods._tiktotok_counts` (spreading, identities, token distributions),
:mod:`methods._tiktotok_smoothing` and :mod:`methods._tiktotok_knn` (the fastText kNN fallback);
this module holds the configuration, the core that runs them in order, and the registered method.

Example:
    >>> from harness.vocab import Canon
    >>> src = [None, Canon(b"house", True), Canon(b"the", True)]
    >>> tgt = [None, Canon(b"haus", True), Canon(b"hau", True), Canon(b"zzz", True)]
    >>> m, info = tiktotok_mapping(tgt, src, n_source=3, word_pairs={((1,), (1,)): 12},
    ...     exact=np.zeros((0, 2)), fuzzy=np.zeros((0, 2)), specials=np.array([[0, 0]]),
    ...     config=TikToTokConfig(min_count=10, fallback="random"))
    >>> m.row(1), m.row(2)   # aligned; smoothed from "▁haus", which contains "▁hau"
    ((array([1]), array([1.], dtype=float32)), (array([1]), array([1.], dtype=float32)))
    >>> info["sources"]
    {'special': 1, 'identity': 0, 'fuzzy_identity': 0, 'number': 0, 'aligned': 1, 'smoothed': 1, 'knn': 0, 'fallback': 1}
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness import vocab as _canon
from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL, InitResult, Need, TokenMapping, TransferInputs
from harness.registry import register_method
from methods import _align, _fasttext
from methods._tiktotok_corpus import read_parallel_corpus, words_with_tokens
from methods._tiktotok_counts import (
    FROM_KNN,
    FROM_SMOOTHING,
    FROM_SPECIAL,
    ORIGINS,
    count_token_pairs,
    spread_pair,
    token_distributions,
)
from methods._tiktotok_knn import (
    IN_VOCABULARY,
    NGRAMS,
    NO_VECTOR,
    FallbackSpace,
    fasttext_token_space,
    knn_fallback,
    procrustes_knn,
    train_fallback_space,
)
from methods._tiktotok_smoothing import find_containers, smooth

logger = logging.getLogger(__name__)

__all__ = [
    "SPREADINGS", "IDENTITIES", "SMOOTHINGS", "FALLBACKS", "FASTTEXT_MODELS", "ORIGINS", "NO_VECTOR", "IN_VOCABULARY",
    "NGRAMS", "TikToTokConfig", "TikToTok", "tiktotok_mapping", "spread_pair", "find_containers", "FallbackSpace",
    "procrustes_knn", "fasttext_token_space", "read_parallel_corpus", "words_with_tokens",
]

SPREADINGS = ("reference", "all-to-all", "positional")
IDENTITIES = ("copy", "prior")
SMOOTHINGS = ("containing", "reference", "none")
FALLBACKS = ("random", "fasttext-knn")
FASTTEXT_MODELS = ("skipgram", "cbow")
RANDOM_REASONS = {
    "special-without-source-role": "special token with no source special of the same role",
    "empty-token": "empty once the word-start marker is removed",
    "no-evidence": "no alignment, identity or containing token to inherit from (fallback=random)",
    "no-fasttext-vector": "no alignment, identity or containing token, and no fastText vector for the kNN fallback "
                          "(too rare in the parallel corpus; with fasttext_ngram_vectors=false no n-gram vector either)",
    "no-bilingual-space": "no alignment, identity or containing token, and no bilingual fastText space for the kNN "
                          "fallback (no Procrustes map could be fitted, or no source token has a vector)",
}
"""Why a Tik-to-Tok row is random, by the code counted in ``info["fallback_reasons"]`` (``info["random_ids"]`` of
:func:`tiktotok_mapping` lists the ids; the registered method hands them over as ``random_reasons``)."""


@dataclass(frozen=True)
class TikToTokConfig:
    """Configuration of :class:`TikToTok`."""

    aligner: str = "fast-align"
    """``"fast-align"`` (default: fast_align's IBM Model 2 with a diagonal prior, the aligner of the
    reference code, as deterministic EM in numpy), ``"eflomal"`` (stronger on real text, but not
    seedable: a result built on it is marked ``info["nondeterministic"] = ["eflomal"]``; reproducible
    only through the alignment cache) or ``"ibm1"`` (deterministic IBM Model 1, no distortion
    model); see :mod:`methods._align`."""

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

    fallback: str = "fasttext-knn"
    """What target tokens still unmapped after smoothing get: ``"fasttext-knn"`` (default; the 2023
    blog's method and METHODS.md's step 4: the average of the ``fallback_k`` nearest source tokens
    in a bilingual token-level fastText space built from the word mapping; tokens without a
    fastText vector still get a random row) or ``"random"`` (the public reference code's path,
    minus its UNK-row trap: a row drawn by the harness from the trial's generator). See the module
    docstring."""

    fallback_k: int = 3
    """``fasttext-knn``: source tokens averaged per token (the blog: 3), weights ``1/k`` each."""

    fasttext_dim: int = 100
    """``fasttext-knn``: fastText vector size (small: the models are trained here, on the parallel
    corpus only, and a token-level vocabulary is a few ten thousand words at most)."""

    fasttext_epochs: int = 5
    """``fasttext-knn``: fastText epochs (fastText's default)."""

    fasttext_min_count: int = 3
    """``fasttext-knn``: tokens seen fewer times on their side of the corpus get no vector of their
    own (a target token may still get one from its character n-grams; a source token is then no
    candidate neighbour)."""

    fasttext_model: str = "skipgram"
    """``fasttext-knn``: ``"skipgram"`` (fastText's default) or ``"cbow"``."""

    fasttext_minn: int = 3
    """``fasttext-knn``: shortest character n-gram (fastText's default)."""

    fasttext_maxn: int = 6
    """``fasttext-knn``: longest character n-gram (fastText's default; 0 disables n-grams, and with
    them the vectors of target tokens too rare to have their own)."""

    fasttext_bucket: int = 500_000
    """``fasttext-knn``: n-gram hash buckets. Must be >= ``methods._fasttext.min_bucket(fasttext_dim)``
    (fastText leaves part of a smaller input matrix uninitialized); 500k keeps every word row of a
    vocabulary up to ~55k tokens randomly initialized with one thread, and a model at dim 100 to
    ~200 MB in memory (the cache keeps only the token vectors, see :mod:`methods._tiktotok_knn`)."""

    fasttext_threads: int = 1
    """``fasttext-knn``: fastText training threads. 1 is reproducible; more is faster but
    nondeterministic (recorded in ``info["fallback"]["fasttext"]``)."""

    fasttext_center: bool = True
    """``fasttext-knn``: before the Procrustes fit, normalize each space as VecMap does (Artetxe et al.
    2018): unit-length rows, minus the mean of the space's in-vocabulary rows, unit-length again.
    fastText spaces are anisotropic (all vectors share a common direction), which otherwise makes
    nearly every cosine high and the nearest neighbours hubs. ``False``: unit-length rows only."""

    fasttext_ngram_vectors: bool = True
    """``fasttext-knn``: give target tokens seen fewer than ``fasttext_min_count`` times (or never) a
    vector from their trained character n-grams; ``False``: in-vocabulary vectors only."""

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

    fast_align_iterations: int = 5
    """``fast-align``: passes over the corpus, the last one only aligns (fast_align's ``-I``, default 5)."""

    fast_align_p0: float = 0.08
    """``fast-align``: probability of aligning a word to NULL (fast_align's ``-p``, default 0.08)."""

    fast_align_tension: float = 4.0
    """``fast-align``: starting diagonal tension λ of ``p(a_i = j) ∝ exp(-λ |i/m - j/n|)`` (``-T``, default 4)."""

    fast_align_optimize_tension: bool = True
    """``fast-align``: re-estimate λ in every EM iteration after the first (``-o``, recommended); ``False``: keep it fixed."""

    fast_align_alpha: float = 0.01
    """``fast-align``: Dirichlet prior on the translation tables (``-v -a``, recommended, 0.01); 0: plain EM."""

    fast_align_ibm1_warmup: int = 5
    """``fast-align``: IBM Model 1 EM iterations that train the translation table before fast_align's
    passes (0: fast_align's uniform start, whose first E-step is the diagonal prior alone; see
    :func:`methods._align.fast_align_directional` for why the warm start is the default)."""

    fasttext_seed: int | None = None
    """``fasttext-knn``: the fallback fastText models' seed, held fixed for every trial seed (e.g. 0, as
    the quickstart does: one training per language instead of one per seed); ``None`` (default) draws it
    from the trial's generator, so the fallback varies with the seed. The draw happens either way, so
    holding it changes no other random choice."""

    align_seed: int | None = None
    """The aligner's seed (eflomal; fast_align and ibm1 are deterministic), held like ``fasttext_seed``;
    ``None`` (default): drawn from the trial's generator."""

    NEW_FIELDS_OMITTED_WHEN_NONE = ("fasttext_seed", "align_seed")
    """Added after trials were recorded: unset, they stay out of the resolved config (trial ids keep)."""

    def fast_align_options(self) -> dict:
        """The ``fast-align`` aligner's options (:data:`methods._align.FAST_ALIGN_DEFAULTS` names)."""
        return {
            "iterations": self.fast_align_iterations,
            "p0": self.fast_align_p0,
            "tension": self.fast_align_tension,
            "optimize_tension": self.fast_align_optimize_tension,
            "alpha": self.fast_align_alpha,
            "ibm1_warmup": self.fast_align_ibm1_warmup,
        }

    def __post_init__(self) -> None:
        choices = {
            "aligner": _align.ALIGNERS,
            "symmetrization": _align.SYMMETRIZATIONS,
            "spreading": SPREADINGS,
            "identity": IDENTITIES,
            "smoothing": SMOOTHINGS,
            "fallback": FALLBACKS,
            "fasttext_model": FASTTEXT_MODELS,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"TikToTokConfig.{name} must be one of {allowed}, got {getattr(self, name)!r}")
        for name in (
            "min_count", "smoothing_max_donors", "max_words", "eflomal_n_samplers", "ibm1_iterations", "fast_align_iterations",
            "fallback_k", "fasttext_dim", "fasttext_epochs", "fasttext_min_count", "fasttext_bucket", "fasttext_threads",
        ):  # fmt: skip
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"TikToTokConfig.{name} must be an integer >= 1, got {v!r}")
        for name in ("fasttext_minn", "fasttext_maxn"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"TikToTokConfig.{name} must be an integer >= 0, got {v!r}")
        if self.fasttext_maxn and self.fasttext_minn > self.fasttext_maxn:
            raise ValueError(
                f"TikToTokConfig.fasttext_minn must be <= fasttext_maxn (or fasttext_maxn=0), "
                f"got {self.fasttext_minn}/{self.fasttext_maxn}"
            )
        if self.fasttext_bucket < _fasttext.min_bucket(self.fasttext_dim):
            raise ValueError(
                f"TikToTokConfig.fasttext_bucket={self.fasttext_bucket} is too small for fasttext_dim={self.fasttext_dim}: "
                f"use >= {_fasttext.min_bucket(self.fasttext_dim)} (fastText-numpy2 leaves part of a smaller input "
                "matrix uninitialized; see methods/_fasttext.py)"
            )
        for name, most in (("fasttext_seed", 2**31 - 1), ("align_seed", 2**63 - 1)):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= most):
                raise ValueError(f"TikToTokConfig.{name} must be None or an integer in [0, {most}], got {v!r}")
        if self.max_sentence_pairs is not None and (
            isinstance(self.max_sentence_pairs, bool) or self.max_sentence_pairs < 1
        ):
            raise ValueError(f"TikToTokConfig.max_sentence_pairs must be None or >= 1, got {self.max_sentence_pairs!r}")
        for name, ok, bound in (
            ("fast_align_p0", lambda v: 0.0 < v < 1.0, "strictly between 0 and 1"),
            ("fast_align_tension", lambda v: v > 0.0, "> 0"),
            ("fast_align_alpha", lambda v: v >= 0.0, ">= 0"),
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or not ok(v):
                raise ValueError(f"TikToTokConfig.{name} must be a number {bound}, got {v!r}")
        v = self.fast_align_ibm1_warmup
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"TikToTokConfig.fast_align_ibm1_warmup must be an integer >= 0, got {v!r}")
        if not isinstance(self.fast_align_optimize_tension, bool):
            raise ValueError(
                f"TikToTokConfig.fast_align_optimize_tension must be true or false, got {self.fast_align_optimize_tension!r}"
            )
        if not self.eflomal_rel_iterations > 0:
            raise ValueError(f"TikToTokConfig.eflomal_rel_iterations must be > 0, got {self.eflomal_rel_iterations!r}")


# ------------------------------------------------------------------------------------------------
# The core on canonical vocabularies (the steps live in methods._tiktotok_*)
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
    fallback_space: FallbackSpace | None = None,
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
        fallback_space: fastText token vectors of both languages; required when
            ``config.fallback == "fasttext-knn"``, ignored otherwise.

    Returns:
        The mapping and an info dict (``sources``: tokens per origin, summing to ``len(target)``;
        ``fallback``: the fallback's mode and, for ``fasttext-knn``, its counts and fit; ``fallback_reasons``:
        random rows per reason code of :data:`RANDOM_REASONS`, ``random_ids`` their ids).

    Raises:
        ValueError: ``config.fallback == "fasttext-knn"`` without a ``fallback_space``.
    """
    if config.fallback == "fasttext-knn" and fallback_space is None:
        raise ValueError('tiktotok_mapping: fallback="fasttext-knn" needs a fallback_space (fastText token vectors)')
    t0 = time.perf_counter()
    valid_source = np.zeros(n_source, dtype=bool)
    for s in range(min(n_source, len(source))):
        valid_source[s] = source[s] is not None

    # 1-2. aligned counts, spread over token pairs
    counts, pair_stats = count_token_pairs(word_pairs, target, valid_source, min_count=config.min_count, rule=config.spreading)
    t1 = time.perf_counter()

    # 3. specials, identities, aligned distributions
    rows = token_distributions(
        target, valid_source, counts, exact=exact, fuzzy=fuzzy if config.fuzzy_identity else None, specials=specials,
        identity=config.identity, number_pieces=number_pieces if config.numbers else None,
    )
    t2 = time.perf_counter()

    # 4. smoothing
    smooth_info = _smooth_rows(target, source, rows, config)
    t3 = time.perf_counter()

    # 5. fallback: fastText kNN for what is left (random rows are the harness's, below)
    fallback_info, vector_kind = _knn_rows(target, rows, valid_source, fallback_space, config)
    t4 = time.perf_counter()

    # 6. assemble
    mapping, random_ids = _assemble(target, n_source, rows.origin, rows.weights, vector_kind)
    sources = {name: int(np.sum(rows.origin == k)) for k, name in enumerate(ORIGINS)}
    sources["fallback"] = int(np.sum(mapping.provenance == FALLBACK))
    if config.fallback == "fasttext-knn":
        fallback_info["knn"] = sources["knn"]
        fallback_info["random"] = sources["fallback"]
    info = {
        "counts": mapping.counts(), "sources": sources,
        "fallback_reasons": {k: len(v) for k, v in random_ids.items()}, "random_ids": random_ids,
        "word_pairs": {"distinct": len(word_pairs), **pair_stats, "min_count": config.min_count},
        "smoothing": smooth_info, "fallback": fallback_info,
        "timings": {"spread_s": round(t1 - t0, 4), "identity_s": round(t2 - t1, 4), "smoothing_s": round(t3 - t2, 4),
                    "fallback_s": round(t4 - t3, 4)},
    }
    return mapping, info


def _smooth_rows(target: Sequence[_canon.Canon | None], source: Sequence[_canon.Canon | None], rows: Any,
                 config: TikToTokConfig) -> dict:
    """Step 4: smoothing fixes the rows it fills (origin ``FROM_SMOOTHING``); its facts."""
    info: dict = {"mode": config.smoothing}
    if config.smoothing != "none":
        smoothed, facts = smooth(target, source, rows.origin, rows.weights, mode=config.smoothing,
                                 max_donors=config.smoothing_max_donors)
        for t, dist in smoothed.items():
            rows.fix(t, dist, FROM_SMOOTHING)
        info.update(facts)
    return info


def _knn_rows(target: Sequence[_canon.Canon | None], rows: Any, valid_source: np.ndarray, fallback_space: FallbackSpace | None,
              config: TikToTokConfig) -> tuple[dict[str, Any], np.ndarray | None]:
    """Step 5: the fastText kNN fallback fixes the rows still empty (origin ``FROM_KNN``); its info and vector kinds."""
    if config.fallback != "fasttext-knn":
        return {"mode": config.fallback}, None
    assert fallback_space is not None
    knn_rows, info, vector_kind = knn_fallback(
        target, rows.origin, rows.weights, valid_source, fallback_space, config.fallback_k, config.fasttext_center
    )
    for t, row in knn_rows.items():
        rows.fix(t, row, FROM_KNN)
    return info, vector_kind


def _assemble(
    target: Sequence[_canon.Canon | None], n_source: int, origin: np.ndarray, weights: Mapping[int, Mapping[int, float]],
    vector_kind: np.ndarray | None,
) -> tuple[TokenMapping, dict[str, list[int]]]:
    """The mapping from the decided rows (SPECIAL, COPIED when one source row, COMBINED), and why the rest fell
    back: ``{reason code: target ids}`` (codes of :data:`RANDOM_REASONS`)."""
    n_target = len(target)
    provenance = np.full(n_target, FALLBACK, dtype=np.int8)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for t in sorted(weights):
        w = weights[t]
        provenance[t] = SPECIAL if origin[t] == FROM_SPECIAL else (COPIED if len(w) == 1 else COMBINED)
        rows.extend([t] * len(w))
        cols.extend(w.keys())
        vals.extend(w.values())
    mapping = TokenMapping.from_coo(n_target, n_source, rows, cols, vals, provenance)
    reasons: dict[str, list[int]] = {}
    for t in np.flatnonzero(provenance == FALLBACK).tolist():
        c = target[t]
        if c is None:
            why = "special-without-source-role"
        elif not c.text:
            why = "empty-token"
        else:
            why = ("no-evidence" if vector_kind is None
                   else "no-fasttext-vector" if vector_kind[t] == NO_VECTOR else "no-bilingual-space")
        reasons.setdefault(why, []).append(t)
    return mapping, dict(sorted(reasons.items()))


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

    combines = True
    """Rows are alignment-weighted mixtures of source rows: an all-fallback result is flagged (harness.run.sanity)."""
    needs = (Need(("parallel_corpus",), "sentence pairs to word-align"),)
    """What Tik-to-Tok reads besides the tokenizers and source embeddings (``tokxfer init`` and the runner read it)."""

    def __init__(self, config: TikToTokConfig) -> None:
        self.config = config

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Align the parallel corpus, count, spread, add identities, smooth; see the module docstring."""
        cfg = self.config
        t0 = time.perf_counter()
        pairs = read_parallel_corpus(inputs.parallel_corpus, limit=cfg.max_sentence_pairs)
        align_seed = int(rng.integers(0, 2**63 - 1))  # drawn always, so the stream does not depend on the aligner
        fasttext_seed = int(rng.integers(0, 2**31 - 1))  # drawn always, so the stream does not depend on the fallback
        align_seed = align_seed if cfg.align_seed is None else int(cfg.align_seed)  # held (quickstart)
        fasttext_seed = fasttext_seed if cfg.fasttext_seed is None else int(cfg.fasttext_seed)
        aligned = _align_words(cfg, inputs, pairs, align_seed)
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

        space = None
        t3 = time.perf_counter()
        if cfg.fallback == "fasttext-knn":
            space = train_fallback_space(cfg, inputs, pairs, fasttext_seed, source, target, n_source)
        t4 = time.perf_counter()

        mapping, info = tiktotok_mapping(
            target,
            source,
            n_source=n_source,
            word_pairs=aligned.word_pairs,
            exact=overlap.exact,
            fuzzy=overlap.fuzzy,
            specials=overlap.specials,
            config=cfg,
            number_pieces=number_pieces,
            fallback_space=space,
        )
        nondeterministic: list[str] = []
        if not aligned.alignment.info["deterministic"]:
            nondeterministic.append(cfg.aligner)
        if space is not None:
            info["fallback"]["fasttext"] = space.info
            if any(space.info.get(side, {}).get("deterministic") is False for side in ("target", "source")):
                nondeterministic.append("fasttext")
        if nondeterministic:  # components whose output the trial seed does not fix (harness.run.sanity flags them)
            info["nondeterministic"] = nondeterministic
        info["overlap"] = overlap.report()
        info["corpus"] = aligned.corpus
        info["alignment"] = aligned.alignment.info
        info["examples"] = _examples(mapping, aligned.word_pairs, inputs, k=10)
        reasons = {RANDOM_REASONS[k]: ids for k, ids in info.pop("random_ids").items()}
        info["timings"].update(
            {
                "read_tokenize_s": round(aligned.tokenized_at - t0, 4),
                "align_count_s": round(t2 - aligned.tokenized_at, 4),
                "fasttext_s": round(t4 - t3, 4),
                "total_s": round(time.perf_counter() - t0, 4),
            }
        )
        return InitResult(mapping=mapping, tokenizer=inputs.target_tokenizer, info=info, random_reasons=reasons)


@dataclass
class _AlignedWords:
    """Counted aligned word pairs of the parallel corpus (step 1), with its facts."""

    word_pairs: dict
    """``(target word token ids, source word token ids) → count``."""
    alignment: Any
    """The :func:`methods._align.align_corpus` result (links and info)."""
    corpus: dict
    """Sentence pairs read, aligned, skipped empty and skipped too long."""
    tokenized_at: float
    """``time.perf_counter()`` when the words were tokenized (before the aligner ran)."""


def _align_words(cfg: TikToTokConfig, inputs: TransferInputs, pairs: list[tuple[str, str]], seed: int) -> _AlignedWords:
    """Tokenize every word in context, drop pairs without words or too long, align, count word pairs."""
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
        seed=seed,
        cache_dir=Path(inputs.cache_dir) if inputs.cache_dir is not None else None,
        eflomal_options={"n_samplers": cfg.eflomal_n_samplers, "rel_iterations": cfg.eflomal_rel_iterations},
        ibm1_iterations=cfg.ibm1_iterations,
        fast_align_options=cfg.fast_align_options(),
    )
    word_pairs = _align.count_pairs(
        [[ids for _, ids in s] for s in src_words], [[ids for _, ids in t] for t in tgt_words], alignment.links
    )
    corpus = {
        "sentence_pairs_read": len(pairs),
        "sentence_pairs_aligned": len(keep),
        "skipped_empty": skipped_empty,
        "skipped_too_long": len(pairs) - len(keep) - skipped_empty,
    }
    return _AlignedWords(word_pairs, alignment, corpus, t1)


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
                "target": _canon.show_token(inputs.target_tokenizer, int(t)),
                "aligned": int(c),
                "sources": [
                    [_canon.show_token(inputs.source_tokenizer, int(ids[i])), round(float(ws[i]), 4)]
                    for i in top
                ],
            }
        )
    return out
