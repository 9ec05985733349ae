"""FOCUS (Dobler & de Melo, EMNLP 2023): Fast Overlapping Token Combinations Using Sparsemax.

1. Auxiliary static embeddings ``X`` for all target tokens: fastText trained on target-language
   text pre-tokenized with the target tokenizer (``aux="token-fasttext"``), or a given fastText
   model (``aux_model_path``).
2. Overlap tokens ``O`` (exact canonical matches, plus fuzzy matches for symbolic tokens) are
   copied: ``Et[o] = Es[o]`` (provenance COPIED).
3. Every additional token ``a`` with an auxiliary vector gets
   ``Et[a] = sum_o sparsemax(cos(X[a], X[o]) for o in O')_o * Es[o]`` where ``O'`` is the overlap
   tokens that have an auxiliary vector ("anchors"). Provenance COMBINED, also when sparsemax puts
   all mass on one anchor (weight 1): the row *is* a FOCUS combination, and keeping COPIED for
   overlap tokens only makes ``counts["copied"]`` equal the overlap used. ``info["combined"]
   ["single_support"]`` says how many such rows there are.
4. Tokens without an auxiliary vector (rarer than ``aux_min_count``) are FALLBACK: the harness
   draws them from N(mean(Es), std(Es)) with the trial's generator.

Special tokens are matched by role and copied (SPECIAL). By default (the paper) they are never
anchors: fastText's ``</s>`` is its line-end symbol, not the model's special token. The reference
code (``deepfocus``) matches the target's ``</s>`` exactly to the source's and looks it up in the
fastText model, where ``</s>`` always exists (every line end), so ``</s>`` becomes an anchor and
receives sparsemax weight in a few percent of the rows; ``special_anchors=True`` (set by
:meth:`FocusConfig.reference`) reproduces that: specials with an auxiliary vector join the anchors,
a special's vector being that of its token string as written in the vocabulary (``</s>`` -> fastText's
own ``</s>``). Their rows stay SPECIAL copies.

Paper vs. reference code (METHODS.md): the paper (App. B) trains fastText with "mostly default
hyper-parameters" — fastText's defaults are skipgram, ``neg=5`` — at ``dim=300``, 3 epochs,
``minCount=10``; the defaults of :class:`FocusConfig` follow the paper. The public code
(``deepfocus``) uses CBOW, ``dim=100``, ``neg=10``, by default no fuzzy matching, and ``</s>`` as an
anchor (above); :meth:`FocusConfig.reference` returns that configuration.

Ablations (paper Table 4): ``overlap="symbolic"`` restricts ``O`` to tokens made only of digits,
punctuation and whitespace (the other overlapping tokens then become additional tokens);
``aux="word-fasttext"`` takes ``X`` WECHSEL-style as fastText out-of-vocabulary vectors of the token
strings from a *word-level* fastText model (``inputs.target_word_vectors``, ``aux_model_path``, or
one trained here on the raw target corpus with the ``aux_*`` hyper-parameters).

Extension mode (``inputs.extension_tokenizer`` set: ``inputs.target_tokenizer`` is the source
tokenizer extended with tokens of the language-specific ``extension_tokenizer``): every original row
is kept (copied from its own id, specials by role, whatever ``overlap`` says) and only the new tokens
are initialized. Following the paper and the reference code (``deepfocus``'s ``extend_tokenizer``),
with ``extension_aux="language"`` (default) the auxiliary fastText is trained on the target corpus
tokenized with the *language-specific* tokenizer (an ``aux_model_path`` must have been trained that
way), and only original tokens that are also in the language-specific vocabulary (and have a vector)
are anchors. Extended-tokenizer ids are matched to language-specific ids by canonical form (the
reference compares vocabulary strings, which is the same for tokenizers of one family).
``extension_aux="extended"`` is the simpler variant: fastText on text tokenized with the extended
tokenizer, every original token with a vector an anchor.

The numeric core is the pure function :func:`focus_mapping` (and :func:`focus_weights` below it),
which takes auxiliary vectors as arrays; :class:`Focus` only gathers its inputs.
"""

from __future__ import annotations

import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from harness import vocab as _canon
from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL, InitResult, Need, TokenMapping, TransferInputs
from harness.registry import register_method
from methods import _fasttext
from methods._similarity import DEFAULT_CHUNK_ROWS, SparseRows, chunked_sparsemax_cosine

logger = logging.getLogger(__name__)

__all__ = ["FocusConfig", "Focus", "FocusCore", "focus_weights", "focus_mapping"]


@dataclass(frozen=True)
class FocusConfig:
    """Configuration of :class:`Focus`. Defaults follow the paper; see :meth:`reference`."""

    aux: Literal["token-fasttext", "word-fasttext"] = "token-fasttext"
    """Auxiliary embeddings: fastText on target text pre-tokenized with the target tokenizer
    (paper), or WECHSEL-style OOV vectors of token strings from a word-level fastText model (ablation)."""

    aux_model_path: str | None = None
    """A precomputed fastText ``.bin`` to use instead of training one. For ``token-fasttext`` it must
    have been trained on text written by :func:`methods._fasttext.pretokenize` (same ``aux_token_format``;
    ``"raw"`` for a model the reference code trained) with the target tokenizer, or in extension mode with
    ``extension_aux="language"`` with the language-specific ``inputs.extension_tokenizer``."""

    aux_dim: int = 300
    """fastText dimension (paper 300; reference code 100)."""

    aux_epochs: int = 3
    """fastText epochs (paper 3, 1 for very large corpora)."""

    aux_min_count: int = 10
    """Tokens seen fewer times get no auxiliary vector and become FALLBACK rows (paper 10)."""

    aux_model: Literal["skipgram", "cbow"] = "skipgram"
    """fastText model: skipgram is fastText's default, which the paper kept; the reference code uses cbow."""

    aux_neg: int = 5
    """Negative samples (fastText default 5; reference code 10)."""

    aux_minn: int = 3
    """Shortest character n-gram (fastText default)."""

    aux_maxn: int = 6
    """Longest character n-gram (fastText default; 0 disables subwords)."""

    aux_bucket: int = 2_000_000
    """fastText n-gram hash buckets (fastText's default 2M: ~2.4 GB of address space at dim 300, mostly
    untouched on small corpora). Must be >= ``methods._fasttext.min_bucket(aux_dim)`` (fastText leaves part
    of a smaller input matrix uninitialized) and should be >= 9 x the vocabulary with one thread."""

    aux_threads: int = 1
    """fastText training threads. 1 is reproducible; more is faster but nondeterministic: the result's info then
    lists ``"fasttext"`` under ``nondeterministic``, which the trial record flags. Part of the fastText cache key."""

    aux_seed: int | None = None
    """fastText seed; ``None`` draws it from the trial's generator (so aux training varies with the seed)."""

    aux_token_format: Literal["string", "id", "raw"] = "string"
    """How tokens are written for token-level fastText: escaped vocabulary strings (keeps n-grams
    meaningful, like the reference, and every token one distinct word), token ids, or the unescaped
    vocabulary strings the reference writes (``"raw"``, needed to look up tokens containing a backslash
    in a model the reference trained; see :mod:`methods._fasttext`)."""

    overlap: Literal["full", "symbolic"] = "full"
    """Which overlap tokens are copied and used as anchors: all, or only symbolic ones (ablation)."""

    fuzzy: bool = True
    """Also match symbolic tokens ignoring case and word start (paper App. B; reference default: off)."""

    symbolic_rule: Literal["reference", "wide"] = "reference"
    """Which tokens count as symbolic for ``overlap: symbolic`` and fuzzy matching: the reference
    code's all-numeric / all-ASCII-punctuation / all-whitespace rule (default), or ``"wide"``, which
    also takes currency signs, emoji and mixed number–punctuation tokens (see ``_canon.is_symbolic``)."""

    special_anchors: bool = False
    """Let special tokens with an auxiliary vector be anchors (reference code: the target's ``</s>`` gets
    fastText's line-end vector ``</s>``). Default off (paper): specials are copied, never combined from."""

    extension_aux: Literal["language", "extended"] = "language"
    """Extension mode only (``inputs.extension_tokenizer`` set): ``"language"`` (paper and reference) trains
    the auxiliary fastText on text tokenized with the language-specific tokenizer and keeps only anchors in
    its vocabulary; ``"extended"`` trains on text tokenized with the extended tokenizer and lets every
    original token with a vector be an anchor."""

    sparsemax_k: int = 32
    """Initial top-k slice for the exact sparsemax (performance only; results do not depend on it)."""

    chunk_rows: int = DEFAULT_CHUNK_ROWS
    """Additional tokens scored at once (memory ~ chunk_rows x n_anchors x 4 bytes)."""

    min_aux_coverage: float = 0.5
    """Below this share of additional tokens with an aux vector, ``info["fallbacks"]`` marks the no-vector group
    ``low_coverage`` and the ``tokxfer init`` forecast suggests a lower ``aux_min_count`` or more text."""

    def __post_init__(self) -> None:
        if self.aux not in ("token-fasttext", "word-fasttext"):
            raise ValueError(f"aux must be 'token-fasttext' or 'word-fasttext', got {self.aux!r}")
        if self.aux_model not in ("skipgram", "cbow"):
            raise ValueError(f"aux_model must be 'skipgram' or 'cbow', got {self.aux_model!r}")
        if self.overlap not in ("full", "symbolic"):
            raise ValueError(f"overlap must be 'full' or 'symbolic', got {self.overlap!r}")
        if self.extension_aux not in ("language", "extended"):
            raise ValueError(f"extension_aux must be 'language' or 'extended', got {self.extension_aux!r}")
        if not isinstance(self.special_anchors, bool):
            raise ValueError(f"special_anchors must be a bool, got {self.special_anchors!r}")
        if self.symbolic_rule not in _canon.SYMBOLIC_RULES:
            raise ValueError(f"symbolic_rule must be one of {_canon.SYMBOLIC_RULES}, got {self.symbolic_rule!r}")
        if self.aux_token_format not in ("string", "id", "raw"):
            raise ValueError(f"aux_token_format must be 'string', 'id' or 'raw', got {self.aux_token_format!r}")
        for name in ("aux_dim", "aux_epochs", "aux_min_count", "aux_neg", "aux_bucket", "aux_threads", "sparsemax_k", "chunk_rows"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.aux_minn < 0 or self.aux_maxn < 0 or (self.aux_maxn and self.aux_minn > self.aux_maxn):
            raise ValueError(f"aux_minn/aux_maxn must satisfy 0 <= minn <= maxn (or maxn=0), got {self.aux_minn}/{self.aux_maxn}")
        if self.aux_model_path is None and self.aux_bucket < _fasttext.min_bucket(self.aux_dim):
            raise ValueError(
                f"aux_bucket={self.aux_bucket} is too small for aux_dim={self.aux_dim}: use >= {_fasttext.min_bucket(self.aux_dim)} "
                "(fastText-numpy2 leaves part of a smaller input matrix uninitialized; see methods/_fasttext.py)"
            )
        if not 0.0 <= self.min_aux_coverage <= 1.0:
            raise ValueError(f"min_aux_coverage must be in [0, 1], got {self.min_aux_coverage}")

    @classmethod
    def reference(cls, **overrides: Any) -> FocusConfig:
        """The public reference implementation's settings (``deepfocus``).

        CBOW, dim 100, neg 10, no fuzzy matching, ``</s>`` (any special token with an auxiliary
        vector) usable as an anchor, and tokens written unescaped for fastText (``aux_token_format="raw"``,
        so a fastText model trained by the reference code can be given as ``aux_model_path``). Its
        fastText epochs (3) and ``minCount`` (10) are the paper's.

        Example:
            >>> ref = FocusConfig.reference()
            >>> ref.aux_model, ref.special_anchors
            ('cbow', True)
        """
        values = {"aux_model": "cbow", "aux_dim": 100, "aux_neg": 10, "fuzzy": False, "special_anchors": True,
                  "aux_token_format": "raw"}
        values.update(overrides)
        return cls(**values)


# ----------------------------------------------------------------------------------------------
# Pure core
# ----------------------------------------------------------------------------------------------


def focus_weights(
    aux_additional: np.ndarray,
    aux_anchors: np.ndarray,
    *,
    k: int = 32,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> SparseRows:
    """Sparsemax of cosine similarities from each additional token to the anchors (exact, chunked).

    Args:
        aux_additional: ``n x d`` auxiliary vectors of the additional tokens to initialize.
        aux_anchors: ``m x d`` auxiliary vectors of the anchors (``m >= 1``).
        k: initial top-k slice of the exact sparsemax.
        chunk_rows: rows scored at once.

    Returns:
        :class:`~methods._similarity.SparseRows` over anchor indices; each row is a probability
        vector (weights > 0 summing to 1), entries in decreasing similarity.

    Example:
        >>> r = focus_weights(np.array([[1.0, 0.1]]), np.array([[1.0, 0.0], [0.0, 1.0]]))
        >>> r.indices.tolist(), [round(float(x), 3) for x in r.weights]
        ([0, 1], [0.948, 0.052])
    """
    if len(aux_anchors) == 0:
        raise ValueError("focus_weights needs at least one anchor")
    return chunked_sparsemax_cosine(aux_additional, aux_anchors, k=k, chunk_rows=chunk_rows)


@dataclass
class FocusCore:
    """Result of :func:`focus_mapping`.

    Attributes:
        mapping: the target -> source map.
        stats: JSON-serializable counts (anchors, combined, fallback, support sizes …).
    """

    mapping: TokenMapping
    stats: dict


def focus_mapping(
    n_target: int,
    n_source: int,
    *,
    specials: np.ndarray,
    overlap: np.ndarray,
    aux: np.ndarray,
    has_aux: np.ndarray,
    anchors: np.ndarray | None = None,
    special_anchors: bool = False,
    k: int = 32,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> FocusCore:
    """The FOCUS mapping from auxiliary vectors: copy overlap, sparsemax-combine the rest.

    Args:
        n_target: target vocabulary size (rows).
        n_source: source vocabulary size (rows).
        specials: ``(k, 2)`` ``[target, source]`` special-token pairs (SPECIAL; anchors only with
            ``special_anchors``).
        overlap: ``(n, 2)`` ``[target, source]`` overlap pairs (COPIED; anchors where they have aux).
        aux: ``n_target x d`` auxiliary vectors (rows without a vector are ignored).
        has_aux: boolean ``n_target`` mask of tokens that have an auxiliary vector.
        anchors: ``(m, 2)`` ``[target, source]`` pairs that may serve as anchors (where they have aux);
            default: the overlap pairs. Extension mode copies every original row but restricts the
            anchors (symbolic overlap, tokens of the language-specific vocabulary).
        special_anchors: specials with an auxiliary vector are anchors too (reference code's ``</s>``).
        k: initial sparsemax top-k slice.
        chunk_rows: rows scored at once.

    Returns:
        :class:`FocusCore`. Additional tokens (neither special nor overlap) with an aux vector are
        COMBINED over the anchors' source rows; without one, or when there is no anchor at all,
        they are FALLBACK.

    Example:
        >>> aux = np.array([[1, 0], [0, 1], [1, .1], [0, 0]], dtype=np.float32)
        >>> core = focus_mapping(4, 3, specials=np.zeros((0, 2), int), overlap=np.array([[0, 2], [1, 0]]),
        ...                      aux=aux, has_aux=np.array([True, True, True, False]))
        >>> core.mapping.counts()
        {'special': 0, 'copied': 2, 'combined': 1, 'fallback': 1}
    """
    has_aux = np.asarray(has_aux, dtype=bool)
    if has_aux.shape != (n_target,) or len(aux) != n_target:
        raise ValueError(f"aux/has_aux must have {n_target} rows, got {len(aux)}/{has_aux.shape}")
    specials, overlap = _copied_pairs(specials, overlap)
    prov = np.full(n_target, FALLBACK, dtype=np.int8)
    prov[specials[:, 0]] = SPECIAL
    prov[overlap[:, 0]] = COPIED
    candidates = overlap if anchors is None else np.asarray(anchors, dtype=np.int64).reshape(-1, 2)
    if len(candidates) and np.any(prov[candidates[:, 0]] != COPIED):
        raise ValueError("focus_mapping: every anchor must be an overlap pair (a COPIED target row)")
    n_special_anchors = 0
    if special_anchors and len(specials):
        with_aux = specials[has_aux[specials[:, 0]]]
        n_special_anchors = len(with_aux)
        candidates = np.concatenate([with_aux, candidates])
    anchor_mask = has_aux[candidates[:, 0]]
    anchor_t, anchor_s = candidates[anchor_mask, 0], candidates[anchor_mask, 1]
    additional = np.flatnonzero(prov == FALLBACK)
    additional_aux = additional[has_aux[additional]]

    weights = SparseRows(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))
    if len(anchor_t) and len(additional_aux):
        weights = focus_weights(np.asarray(aux)[additional_aux], np.asarray(aux)[anchor_t], k=k, chunk_rows=chunk_rows)
        prov[additional_aux] = COMBINED
    combined = additional_aux if len(anchor_t) else additional_aux[:0]
    mapping = _csr_mapping(n_target, n_source, prov, specials, overlap, combined, weights, anchor_s)
    sizes = weights.support_sizes()
    stats = {
        "anchors": int(len(anchor_t)), "special_anchors": int(n_special_anchors),
        "overlap_without_aux": int(np.sum(~has_aux[overlap[:, 0]])),
        "additional": int(len(additional)), "additional_with_aux": int(len(additional_aux)), "combined": int(len(combined)),
        "fallback_no_aux": int(len(additional) - len(additional_aux)), "fallback_no_anchor": int(len(additional_aux) - len(combined)),
        **_support_stats(sizes),
    }
    return FocusCore(mapping, stats)


def _copied_pairs(specials: np.ndarray, overlap: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(specials, overlap)`` as ``(n, 2)`` int64 pairs; overlap pairs of special targets dropped and one
    source row per target token (the first pair wins), as the contract promises."""
    specials = np.asarray(specials, dtype=np.int64).reshape(-1, 2)
    overlap = np.asarray(overlap, dtype=np.int64).reshape(-1, 2)
    if len(specials):
        overlap = overlap[~np.isin(overlap[:, 0], specials[:, 0])]
    _, first = np.unique(overlap[:, 0], return_index=True)
    return specials, overlap[np.sort(first)]


def _support_stats(sizes: np.ndarray) -> dict:
    """Sizes of the sparsemax supports of the combined rows: mean, median, max, and rows with one anchor."""
    return {
        "support_mean": round(float(sizes.mean()), 4) if len(sizes) else None,
        "support_median": float(np.median(sizes)) if len(sizes) else None,
        "support_max": int(sizes.max()) if len(sizes) else None,
        "single_support": int(np.sum(sizes == 1)),
    }


def _csr_mapping(n_target: int, n_source: int, prov: np.ndarray, specials: np.ndarray, overlap: np.ndarray,
                 combined: np.ndarray, weights: SparseRows, anchor_s: np.ndarray) -> TokenMapping:
    """The mapping's CSR rows: specials and overlap copied (one entry, weight 1), ``combined`` rows from ``weights``
    (rows over the anchors, whose source ids are ``anchor_s``)."""
    counts = np.zeros(n_target, dtype=np.int64)
    counts[specials[:, 0]] = 1
    counts[overlap[:, 0]] = 1
    sizes = weights.support_sizes()
    counts[combined] = sizes
    indptr = np.zeros(n_target + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.zeros(int(indptr[-1]), dtype=np.int64)
    w = np.ones(int(indptr[-1]), dtype=np.float32)
    indices[indptr[specials[:, 0]]] = specials[:, 1]
    indices[indptr[overlap[:, 0]]] = overlap[:, 1]
    if len(combined):
        pos = np.repeat(indptr[combined] - weights.indptr[:-1], sizes) + np.arange(len(weights.indices))
        indices[pos] = anchor_s[weights.indices]
        w[pos] = weights.weights
    return TokenMapping(n_target, n_source, indptr, indices, w, prov)


# ----------------------------------------------------------------------------------------------
# The registered method
# ----------------------------------------------------------------------------------------------


def _fallback_report(cfg: FocusConfig, st: dict, n_pairs: int) -> tuple[list[dict], float]:
    """The groups of random rows of a FOCUS mapping, disjoint, each with its reason, and the share of
    additional tokens that have an auxiliary vector.

    A coverage below ``min_aux_coverage`` is a fact of the no-vector group (``low_coverage``), not a
    group of its own: the rows are the same. Nothing is logged above INFO: ``tokxfer init`` reports
    random rows once, from the mapping (its provenance summary and ``--max-random-rows`` warning).
    """
    fallbacks: list[dict] = []
    coverage = st["additional_with_aux"] / st["additional"] if st["additional"] else 1.0
    if st["fallback_no_aux"]:
        entry = {"reason": _no_aux_reason(cfg), "count": st["fallback_no_aux"], "fallback": "random N(mean, std) of the source rows",
                 "with_vector": st["additional_with_aux"], "additional": st["additional"], "coverage": round(coverage, 4),
                 "low_coverage": coverage < cfg.min_aux_coverage}
        if entry["low_coverage"]:
            entry["message"] = (
                f"FOCUS: only {st['additional_with_aux']} of {st['additional']} additional tokens ({coverage:.1%}) have an "
                f"auxiliary vector; the corpus is likely too small for aux_min_count={cfg.aux_min_count}")
            logger.info(entry["message"])
        fallbacks.append(entry)
    if st["anchors"] == 0:
        why = _no_anchor_reason(n_pairs)
        msg = (
            f"FOCUS: {why} ({n_pairs} overlap pairs, overlap={cfg.overlap!r}); no anchors to combine, "
            f"so all {st['additional']} additional tokens get random N(mean, std) rows"
        )
        logger.info(msg)
        fallbacks.append({"reason": why, "count": st["fallback_no_anchor"], "fallback": "all-random rows (N(mean, std))", "message": msg})
    return fallbacks, coverage


def _no_aux_reason(cfg: FocusConfig) -> str:
    if cfg.aux == "token-fasttext":
        return f"no auxiliary vector (seen fewer than aux_min_count={cfg.aux_min_count} times in the target corpus)"
    return "no auxiliary vector (no known fastText n-gram)"


def _no_anchor_reason(n_pairs: int) -> str:
    return "empty overlap" if n_pairs == 0 else "no overlap token has an auxiliary vector"


def _random_reasons(cfg: FocusConfig, mapping: TokenMapping, has_aux: np.ndarray, specials: set[int], n_pairs: int) -> dict:
    """``{reason: target ids}`` of the random rows (specials without a source role are left to the harness)."""
    fb = np.array([t for t in mapping.fallback_ids().tolist() if t not in specials], dtype=np.int64)
    groups = {_no_aux_reason(cfg): fb[~has_aux[fb]], _no_anchor_reason(n_pairs): fb[has_aux[fb]]}
    return {why: ids.tolist() for why, ids in groups.items() if len(ids)}


@register_method(
    "focus",
    config=FocusConfig,
    description="FOCUS: copy overlap; sparsemax over token-fastText similarities to overlap tokens for the rest",
)
class Focus:
    """FOCUS embedding initialization (see the module docstring).

    Example:
        >>> method = Focus(FocusConfig(aux_dim=16, aux_epochs=1, aux_min_count=1))
        >>> # result = method.initialize(inputs, np.random.default_rng(0))
    """

    combines = True
    """Additional tokens are combinations of anchors: an all-fallback result is flagged (harness.run.sanity)."""
    needs = (
        Need(("target_corpus", "aux_model_path"), "text to train the auxiliary token-level fastText on (or a trained one)",
             (("aux", "token-fasttext"),)),
        Need(("target_word_vectors", "aux_model_path", "target_corpus"),
             "word-level fastText vectors of the target language (or text to train them on)", (("aux", "word-fasttext"),)),
    )
    """What FOCUS reads besides the tokenizers and source embeddings (``tokxfer init`` and the runner read it)."""

    def __init__(self, config: FocusConfig) -> None:
        self.config = config

    def preflight(self, paths: dict, source_tokenizer: Any, target_tokenizer: Any, *, n_source: int, mode: str,
                  notes: Any) -> dict[str, Any]:
        """Before the long work: forecast how many new tokens get random rows (see :mod:`methods._focus_checks`)."""
        from methods._focus_checks import focus_forecast

        if mode != "replace":
            return {}
        return {"focus_forecast": focus_forecast(self.config, paths, source_tokenizer, target_tokenizer, n_source, notes)}

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Build the FOCUS mapping for ``inputs.target_tokenizer``.

        Args:
            inputs: tokenizers, source embeddings, target corpus (for training aux vectors) and cache dir.
            rng: the trial's generator; only the fastText seed is drawn from it (when ``aux_seed`` is None).

        Returns:
            :class:`~harness.protocols.InitResult` with the mapping and an ``info`` dict: ``overlap``
            (exact/fuzzy report, used pairs), ``aux`` (how vectors were obtained, coverage, timing),
            ``focus`` (anchors, combined/fallback counts, sparsemax support sizes), ``fallbacks``
            (each group of random rows with its reason) and ``timings``.
        """
        cfg = self.config
        t_start = time.perf_counter()
        src_tok, tgt_tok = inputs.source_tokenizer, inputs.target_tokenizer
        n_source = int(inputs.source_embeddings.shape[0])
        n_target = _canon.vocab_size(tgt_tok)
        aux_seed = int(rng.integers(0, 2**31 - 1)) if cfg.aux_seed is None else int(cfg.aux_seed)

        extension = inputs.extension_tokenizer is not None
        t0 = time.perf_counter()
        ov = _canon.compute_overlap(src_tok, tgt_tok, fuzzy=cfg.fuzzy, n_source=n_source, symbolic_rule=cfg.symbolic_rule)
        overlap_info = {**ov.report(), "mode": cfg.overlap, "fuzzy_matching": cfg.fuzzy}
        if extension:
            # every original row is kept; the overlap options only choose the anchors among them
            originals = _original_ids(src_tok, tgt_tok, n_source, ov.specials)
            pairs = np.stack([originals, originals], axis=1)
        else:
            pairs = ov.pairs(fuzzy=cfg.fuzzy)
        candidates = pairs
        if cfg.overlap == "symbolic" and len(pairs):
            canon = _canon.canonical_vocab(tgt_tok)
            keep = np.array([canon[t] is not None and _canon.is_symbolic(canon[t], cfg.symbolic_rule) for t in pairs[:, 0]], dtype=bool)
            overlap_info["symbolic_dropped"] = int((~keep).sum())
            candidates = pairs[keep]
            if not extension:  # replacement: the other overlapping tokens become additional tokens (paper Table 4)
                pairs = candidates
        overlap_info["used"] = int(len(pairs))
        overlap_info["anchor_candidates"] = int(len(candidates))
        t_overlap = time.perf_counter() - t0

        t0 = time.perf_counter()
        aux, has_aux, aux_info = self._aux_vectors(inputs, n_target, aux_seed)
        t_aux = time.perf_counter() - t0
        if len(ov.specials) and not cfg.special_anchors:
            has_aux[ov.specials[:, 0]] = False

        t0 = time.perf_counter()
        core = focus_mapping(
            n_target, n_source, specials=ov.specials, overlap=pairs, aux=aux, has_aux=has_aux,
            anchors=candidates, special_anchors=cfg.special_anchors, k=cfg.sparsemax_k, chunk_rows=cfg.chunk_rows,
        )
        t_core = time.perf_counter() - t0
        st = core.stats

        fallbacks, coverage = _fallback_report(cfg, st, len(pairs))
        reasons = _random_reasons(cfg, core.mapping, has_aux, _canon.special_ids(tgt_tok), len(pairs))
        aux_info["coverage_additional"] = round(coverage, 4)

        info = {
            **({"nondeterministic": aux_info["nondeterministic"]} if "nondeterministic" in aux_info else {}),
            "overlap": overlap_info,
            "aux": aux_info,
            "focus": st,
            "fallbacks": fallbacks,
            "aux_preset": _preset_name(cfg),
            "special_anchors": cfg.special_anchors,
            "extension": None if not extension else {
                "aux": cfg.extension_aux, "original_rows": int(len(pairs)), "new_rows": st["additional"],
            },
            "timings": {
                "overlap_s": round(t_overlap, 3), "aux_s": round(t_aux, 3), "combine_s": round(t_core, 3),
                "total_s": round(time.perf_counter() - t_start, 3),
            },
        }
        return InitResult(mapping=core.mapping, tokenizer=tgt_tok, info=info, random_reasons=reasons)

    # ------------------------------------------------------------------------------------------

    def _fasttext_kwargs(self, seed: int) -> dict:
        cfg = self.config
        return {
            "dim": cfg.aux_dim, "epoch": cfg.aux_epochs, "min_count": cfg.aux_min_count, "model": cfg.aux_model,
            "minn": cfg.aux_minn, "maxn": cfg.aux_maxn, "neg": cfg.aux_neg, "bucket": cfg.aux_bucket,
            "seed": seed, "threads": cfg.aux_threads,
        }

    def _aux_vectors(self, inputs: TransferInputs, n_target: int, seed: int) -> tuple[np.ndarray, np.ndarray, dict]:
        """Auxiliary vectors for every target id (``n_target x dim``), the has-vector mask, and info.

        In extension mode with ``extension_aux="language"`` the vectors are those of the
        language-specific tokenizer's tokens, carried over to the extended tokenizer's ids with the same
        canonical form (ids without a counterpart have none).
        """
        cfg = self.config
        tgt = inputs.target_tokenizer
        language = inputs.extension_tokenizer is not None and cfg.extension_aux == "language"
        tok = inputs.extension_tokenizer if language else tgt
        vecs, has, info = self._tokenizer_vectors(inputs, tok, seed)
        info["tokenizer"] = "extension_tokenizer (language-specific)" if language else "target_tokenizer"
        if language:
            vecs, has, matched = _carry_over(vecs, has, tok, tgt, n_target)
            info["matched_language_tokens"] = matched
        if len(vecs) < n_target:  # ids beyond len(tok) (unused rows) have no vector
            vecs = np.concatenate([vecs, np.zeros((n_target - len(vecs), vecs.shape[1]), np.float32)])
            has = np.concatenate([has, np.zeros(n_target - len(has), bool)])
        if cfg.special_anchors and cfg.aux == "token-fasttext" and info.get("model") is not None:
            _special_vectors(info["model"], tgt, vecs, has)
        info.pop("model", None)
        info.update(dim=int(vecs.shape[1]), with_vector=int(has.sum()), n_target=int(n_target))
        if (info.get("source") or {}).get("deterministic") is False:  # trained with aux_threads > 1
            info["nondeterministic"] = ["fasttext"]
        return vecs, has, info

    def _tokenizer_vectors(self, inputs: TransferInputs, tok: Any, seed: int) -> tuple[np.ndarray, np.ndarray, dict]:
        """Vectors of ``tok``'s ids (``len(tok) x dim``), the mask, and info (``info["model"]``: the fastText model)."""
        cfg = self.config
        info: dict[str, Any] = {"kind": cfg.aux}
        cache = Path(inputs.cache_dir) if inputs.cache_dir is not None else None
        with tempfile.TemporaryDirectory(prefix="tokxfer-focus-") as tmp:
            if cfg.aux == "token-fasttext":
                if cfg.aux_model_path:
                    model = _fasttext.load_fasttext_vectors(Path(cfg.aux_model_path))
                    info["source"] = {"path": str(cfg.aux_model_path)}
                else:
                    corpus = self._corpus(inputs)
                    t0 = time.perf_counter()
                    pretok = _fasttext.pretokenize_cached(corpus, tok, cache, Path(tmp), token_format=cfg.aux_token_format)
                    info["pretokenize_s"] = round(time.perf_counter() - t0, 3)
                    report: dict = {}
                    model = self._train(pretok, cache, report, seed)  # token vectors: vocabulary words only
                    info["source"] = {"trained_on": str(corpus), **report}
                if model is None:
                    vecs, has = np.zeros((len(tok), cfg.aux_dim), np.float32), np.zeros(len(tok), bool)
                else:
                    vecs, has = _fasttext.token_vectors(model, tok, token_format=cfg.aux_token_format)
            else:
                path = cfg.aux_model_path or inputs.target_word_vectors
                strings = _canon.token_strings(tok)
                if path:
                    model = _fasttext.load_fasttext_vectors(Path(path))
                    info["source"] = {"path": str(path)}
                else:
                    corpus = self._corpus(inputs)
                    report = {}
                    model = self._train(corpus, cache, report, seed, strings=strings)
                    info["source"] = {"trained_on": str(corpus), "word_level": True, **report}
                if model is None:
                    vecs, has = np.zeros((len(tok), cfg.aux_dim), np.float32), np.zeros(len(tok), bool)
                else:
                    vecs, has = _fasttext.string_vectors(model, strings)
        info["model"] = model
        return vecs, has, info

    def _train(self, text: Path, cache: Path | None, report: dict, seed: int, strings: list[str] = ()) -> Any:
        """Train fastText; ``None`` (recorded in ``report``) when no token reaches ``aux_min_count``.

        Kept and cached compactly (:class:`methods._fasttext.CompactVectors`): the vocabulary's vectors, which
        are all that token-level vectors read, and the n-gram vectors of ``strings`` (``word-fasttext``).
        """
        return _fasttext.train_fasttext_or_none(
            text, cache_dir=cache, report=report, who="FOCUS", consequence="no auxiliary vectors", compact=True,
            strings=strings, **self._fasttext_kwargs(seed),
        )

    @staticmethod
    def _corpus(inputs: TransferInputs) -> Path:
        if inputs.target_corpus is None:
            raise ValueError(
                "FOCUS needs inputs.target_corpus to train auxiliary fastText embeddings "
                "(or set aux_model_path to a trained fastText model)"
            )
        return Path(inputs.target_corpus)


def _original_ids(src_tok: Any, tgt_tok: Any, n_source: int, specials: np.ndarray) -> np.ndarray:
    """Ids of the extended tokenizer's original (source) tokens to copy, specials matched by role left out.

    Raises:
        ValueError: ``tgt_tok`` does not keep every source token at its source id.
    """
    src_vocab, tgt_vocab = src_tok.get_vocab(), tgt_tok.get_vocab()
    moved = [p for p, i in src_vocab.items() if tgt_vocab.get(p) != i]
    if moved:
        raise ValueError(
            f"FOCUS extension mode (inputs.extension_tokenizer set): inputs.target_tokenizer must be the source tokenizer "
            f"extended with new tokens, keeping every source token at its id; {len(moved)} are not, e.g. {moved[:3]!r}"
        )
    ids = np.array(sorted(i for i in src_vocab.values() if i < n_source), dtype=np.int64)
    return ids[~np.isin(ids, np.asarray(specials, dtype=np.int64).reshape(-1, 2)[:, 0])]


def _carry_over(vecs: np.ndarray, has: np.ndarray, language_tok: Any, tgt_tok: Any, n_target: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Vectors of the language-specific tokenizer's ids moved to the target ids with the same canonical form."""
    index: dict = {}
    for i, c in enumerate(_canon.canonical_vocab(language_tok)[: len(vecs)]):
        if c is not None:
            index.setdefault(c, i)
    t_canon = _canon.canonical_vocab(tgt_tok)
    pairs = np.array([(t, index[c]) for t, c in enumerate(t_canon[:n_target]) if c is not None and c in index], dtype=np.int64)
    out = np.zeros((n_target, vecs.shape[1]), dtype=np.float32)
    out_has = np.zeros(n_target, dtype=bool)
    if len(pairs):
        out[pairs[:, 0]] = vecs[pairs[:, 1]]
        out_has[pairs[:, 0]] = has[pairs[:, 1]]
    return out, out_has, int(len(pairs))


def _special_vectors(model: Any, tok: Any, vecs: np.ndarray, has: np.ndarray) -> None:
    """Give special tokens the fastText vector of their vocabulary string as written (``</s>``: fastText's line end)."""
    for i in sorted(_canon.special_ids(tok)):
        if i >= len(vecs):
            continue
        word = str(tok.convert_ids_to_tokens(i))
        if word and model.get_word_id(word) >= 0:
            vecs[i] = model.get_word_vector(word)
            has[i] = True


_PRESET_FIELDS = ("aux_model", "aux_dim", "aux_neg", "fuzzy", "special_anchors")


def _preset_name(cfg: FocusConfig) -> str:
    """``"paper"`` or ``"reference"`` when the fields that distinguish them match one, else ``"custom"``."""
    for name, preset in (("paper", FocusConfig()), ("reference", FocusConfig.reference())):
        if all(getattr(cfg, f) == getattr(preset, f) for f in _PRESET_FIELDS):
            return name
    return "custom"
