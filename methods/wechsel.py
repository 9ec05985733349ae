"""WECHSEL (Minixhofer, Paischer & Rekabsaz, NAACL 2022): subword embeddings from aligned word vectors.

The method (papers/wechsel.txt, Sec. 3; METHODS.md, "WECHSEL"):

1. Static word vectors for the source and the target language — fastText with character
   n-grams, from ``inputs.source_word_vectors`` / ``inputs.target_word_vectors`` (``.bin``) or
   trained here on ``inputs.source_corpus`` / ``inputs.target_corpus`` — aligned into one space
   with orthogonal Procrustes over the bilingual dictionary ``inputs.dictionary``
   (``target<TAB>source``, each pair expanded with lower/title-case variants present in both
   vocabularies; :mod:`methods._wordvectors`). The target space is rotated onto the source space;
   cosines are the same either way because the map is orthogonal.
2. Subword embeddings ``u_x`` for every token of both tokenizers: fastText's out-of-vocabulary
   vector of the token's string with the word-start marker removed, i.e. the (mean ≙ sum, up to
   scale) of its character n-gram vectors. ``u_x = 0`` for a token whose string is empty, not valid
   UTF-8 on its own (lone byte pieces), shorter than ``minn - 2`` characters (no n-gram: e.g.
   punctuation and digits with ``minn=5``), or made of n-grams the vectors never trained; the info's
   fallback entry counts each cause (:data:`~methods._wechsel_subwords.ZERO_VECTOR_CAUSES`).
   Vectors trained here are cached compactly: the vocabulary's vectors and the n-gram vectors of
   exactly these token strings (:class:`methods._fasttext.CompactVectors`), not the model's input
   matrix — the same numbers, megabytes instead of gigabytes.
   Variant ``"tfr"`` (paper App. D, no subword information): ``u_x`` is the frequency-weighted
   mean of the vectors of all vocabulary words whose tokenization contains ``x`` (each word is
   tokenized as ``word`` and ``" " + word``, as in the reference code); frequencies are the word
   counts of the corpus the vectors were trained on (fastText stores them in the ``.bin``).
3. For each target token the ``k`` most cosine-similar source tokens ``J_x``; the target row is
   ``sum_{y in J_x} softmax(s_xy / tau)_y · Es[y]`` (provenance COMBINED, also for ``k=1``, where
   the single weight is 1: the row is a similarity match, not an overlap copy). Paper default
   ``k=10, tau=0.1``; its Table 7 grid is :data:`TABLE7_GRID`.
4. Target tokens with ``u_x = 0`` are FALLBACK: the harness draws them from N(mean(Es), std(Es))
   with the trial's generator.

Variant from the FOCUS paper, ``source_tokens="english-only"``: before step 3 the source
vocabulary is restricted to its *English tokens* (FOCUS restricts XLM-R's multilingual
vocabulary). Two definitions, chosen by ``english_tokens`` and recorded in the info
(``source_tokens``, ``source_candidates``):

* ``"tokenizer-overlap"`` (default; the FOCUS paper, Sec. 5, after Wang et al. 2019): the source
  tokens that are in the vocabulary of a language-specific English tokenizer
  (``english_tokenizer``), compared in canonical form (:func:`english_vocabulary_tokens`);
* ``"source-corpus"``: the tokens that occur when ``inputs.source_corpus`` is tokenized with the
  source tokenizer (:func:`source_language_tokens`) — a much larger set, since English text uses
  many pieces an English vocabulary does not have.

Ties and near ties. Source tokens with identical subword vectors (``▁abc`` and ``abc`` share a
string) tie exactly; every exact tie, also at the k-th place, goes to the lower source id. Rows
whose k-th and (k+1)-th exact cosines differ by less than :data:`NEAR_TIE` (1e-6) are *near
ties*: any implementation computing cosines differently (another precision, summation order or
rotation side, as the reference does) may pick another k-th neighbour there. Each run counts them
(``info["near_ties"]``; ``info["wechsel"]["near_ties"]`` also lists their target ids), so a parity
check can compare the other rows exactly.

Special tokens are matched by *role* (``<s>``/``[CLS]``, ``</s>``/``[SEP]``, ``<pad>``, ``<unk>``,
``<mask>``; :func:`harness.vocab.match_specials`) and copied (SPECIAL). They are never
similarity candidates on the source side.

Traps of the public reference code (``wechsel`` 0.0.4), avoided here:

* Fallback rows come from ``np.random.RandomState(1234)`` — a fixed seed, identical for every
  trial seed. Here FALLBACK rows are drawn by the harness from the trial's generator, and the
  only randomness of this method (the fastText training seed, when ``fasttext_seed`` is None)
  is drawn from the trial's ``rng``.
* Special tokens are copied only when the *same string* exists in both vocabularies, so
  RoBERTa's ``<s>`` never reaches a BERT-style ``[CLS]`` (and a target special that happens to
  share a string with an unrelated source token is "copied"). Here: by role. It also embeds the
  specials' strings (``<s>`` → n-grams of ``<s>``) and lets source specials be among a token's
  k neighbours; here they are not, unless ``special_candidates=True``.
* When the two word-vector models differ in dimension it calls ``reduce_model`` on the *source*
  model in both branches, so a larger target model is never reduced (and the source is reduced
  below the target's dimension); ``fasttext.util.reduce_model`` also takes unsorted
  eigenvectors. Here a mismatch is an error naming both files and dimensions, or with
  ``dim_mismatch="reduce"`` a sorted-eigenvector PCA of the larger model.
* Its dictionary expansion pairs all case variants and keeps duplicates (some pairs weigh 2 or 4
  times in Procrustes); here each distinct pair counts once, unless
  ``case_expansion="all-combinations"``. Its dictionary files are ``english<TAB>target``;
  tokxfer's are ``target<TAB>source``.

:meth:`WechselConfig.reference` turns on the reference's behaviour (``case_expansion=
"all-combinations"``, ``procrustes_precision="float32"``, ``special_candidates=True``); the
paper's is the default. The info records
which (``preset``: ``paper``/``reference``/``custom``).
* Zero source vectors take part in its top-k with cosine 0; here source tokens without a vector
  (and specials) are not candidates.

Speed and memory (the similarity is ``|Vt| x |Vs|``, 50k x 250k for XLM-R): target rows are
scored in chunks against the source vectors, never materializing the full matrix
(:func:`methods._exact_topk.topk_cosine`). Each chunk is first *screened* by a matrix product in
bfloat16 (default where the CPU has native bfloat16 matrix instructions: ~2.2x the float32 GEMM
throughput on AVX512-BF16), float32 or float64, and every source token whose screen score is
within a *proven* error bound of the k-th best is rescored exactly (float64 from the float32
vectors); the top-k is then taken on the exact scores (source tokens with identical vectors, e.g.
``▁the``/``the``, are searched once, tie exactly and are ordered by id). The result equals an
exact float64 top-k, whatever the screen, chunk size or thread count. ``screen="auto"`` moves to
a finer screen as soon as a chunk keeps more candidates than the finer product would cost:
with concentrated cosines (word fastText vectors trained on a few MB) the bf16 and even the fp32
margin can keep most of a row, the fp64 one about k (on the 250k x 50k scale benchmark's vectors
the bf16 margin keeps ~160 candidates per row, so auto leaves it after one chunk, and the fp32
margin ~10). Each chunk's candidates are found through the maxima of blocks of 64 scores (one pass
over the score block; only blocks that can hold a candidate are looked at again). Peak memory beyond
the inputs is one ``|Vs| x d`` copy of the source vectors in the screen's type (plus one per finer
screen when single hard rows are screened again in it) and one reused ``chunk_rows x |Vs|`` score
block (at most 512 MB).

The numeric core is pure: :func:`wechsel_weights` (neighbours and softmax weights from subword
vectors given as arrays) and :func:`wechsel_mapping` (a :class:`~harness.protocols.TokenMapping`);
:class:`Wechsel` only gathers their inputs. Code layout, one module per step: word vectors and
their alignment in :mod:`methods._wordvectors`, subword vectors and the English source tokens in
:mod:`methods._wechsel_subwords`, the similarity search in :mod:`methods._exact_topk`, the softmax
mixture and the mapping in :mod:`methods._wechsel_mixture`; this module holds the configuration
and the registered method, and re-exports the public names.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from harness import vocab as _canon
from harness.protocols import FALLBACK, InitResult, Need, TransferInputs
from harness.registry import register_method
from methods import _fasttext
from methods import _wordvectors as wv_mod
from methods._exact_topk import TopK, topk_cosine
from methods._wechsel_mixture import (
    DEFAULT_CHUNK_ROWS,
    NEAR_TIE,
    WechselCore,
    WechselNeighbours,
    wechsel_mapping,
    wechsel_weights,
)
from methods._wechsel_subwords import (
    describe_zero_vectors,
    english_vocabulary_tokens,
    source_language_tokens,
    subword_embeddings,
    tfr_embeddings,
    token_strings,
    zero_vector_causes,
)

logger = logging.getLogger(__name__)

__all__ = [
    "TABLE7_GRID",
    "WechselConfig",
    "Wechsel",
    "TopK",
    "topk_cosine",
    "WechselNeighbours",
    "wechsel_weights",
    "WechselCore",
    "wechsel_mapping",
    "token_strings",
    "subword_embeddings",
    "tfr_embeddings",
    "source_language_tokens",
    "english_vocabulary_tokens",
    "preset_name",
    "NEAR_TIE",
]

TABLE7_GRID: tuple[tuple[int, float], ...] = ((1, 1.0), (10, 0.1), (10, 1.0), (50, 0.1), (50, 1.0))
"""The ``(k, temperature)`` grid of the paper's Table 7 (its choice: ``(10, 0.1)``)."""


@dataclass(frozen=True)
class WechselConfig:
    """Configuration of :class:`Wechsel`. Defaults follow the paper (``k=10``, ``tau=0.1``)."""

    k: int = 10
    """Number of nearest source tokens combined per target token (paper: 10; Table 7: 1, 10, 50)."""

    temperature: float = 0.1
    """Softmax temperature over the k cosine similarities (paper: 0.1; Table 7: 0.1, 1)."""

    variant: Literal["subword", "tfr"] = "subword"
    """``subword``: u_x from character n-grams (paper); ``tfr``: frequency-weighted mean of the
    vectors of the words containing x (paper App. D, WECHSEL_TFR)."""

    source_tokens: Literal["all", "english-only"] = "all"
    """``english-only`` (FOCUS paper variant): only the English tokens of a multilingual source vocabulary are
    candidates. Which tokens are English is ``english_tokens``: by default the source tokens in the vocabulary of
    ``english_tokenizer``; with ``english_tokens="source-corpus"`` those seen when ``inputs.source_corpus`` is
    tokenized with the source tokenizer."""

    alignment: Literal["procrustes", "none"] = "procrustes"
    """``procrustes`` over ``inputs.dictionary`` (paper); ``none`` when the vectors are already aligned."""

    dim_mismatch: Literal["error", "reduce"] = "error"
    """Source/target vectors of different dimension: raise (default), or PCA-reduce the larger one."""

    dim: int = 100
    """fastText dimension when vectors are trained here (the reference's ``train_embeddings``: 100;
    the paper used pretrained 300-d Common Crawl vectors)."""

    epochs: int = 5
    """fastText epochs when training here (fastText's default; the reference's ``train_embeddings`` uses 20)."""

    min_count: int = 5
    """fastText minCount when training here (fastText's default): rarer words get no word vector."""

    fasttext_model: Literal["cbow", "skipgram"] = "cbow"
    """fastText model when training here (CBOW, like the Common Crawl vectors and the reference)."""

    minn: int = 3
    """Shortest character n-gram (fastText default). The Common Crawl vectors use 5-grams only, with
    which every token string shorter than 4 characters has no n-gram and falls back to random."""

    maxn: int = 6
    """Longest character n-gram (fastText default); must be > 0 for the ``subword`` variant."""

    neg: int = 10
    """Negative samples (the Common Crawl vectors and the reference's ``train_embeddings`` use 10)."""

    bucket: int = 2_000_000
    """fastText n-gram hash buckets (default 2M: ~0.8 GB of mostly untouched address space per model at
    dim 100). Must be >= ``methods._fasttext.min_bucket(dim)`` (fastText leaves part of a smaller
    input matrix uninitialized; see :mod:`methods._fasttext`)."""

    threads: int = 1
    """fastText training threads: 1 is reproducible; more is faster but not bit-reproducible (the result's
    info then lists ``"fasttext"`` under ``nondeterministic``, which the trial record flags). Part of the
    fastText cache key."""

    fasttext_seed: int | None = None
    """fastText seed; ``None`` draws it from the trial's generator (so trained vectors vary with the seed)."""

    tfr_max_words: int | None = None
    """``tfr``: use only the most frequent N words of each vocabulary (reference: ``max_n_word_vectors``)."""

    source_corpus_max_lines: int | None = None
    """``english-only``: tokenize at most this many lines of the source corpus (``None``: all)."""

    chunk_rows: int = DEFAULT_CHUNK_ROWS
    """Target rows scored at once (memory ~ chunk_rows x |Vs| x 2 bytes in bf16); results do not depend on it."""

    screen: Literal["auto", "bf16", "fp32", "fp64"] = "auto"
    """Precision of the screening pass; the result is exact and identical for all four.
    ``auto``: bf16 on CPUs with native bfloat16 matmul (AVX512-BF16/AMX), else fp32, moving to
    fp32 and then fp64 when a chunk keeps too many candidates (concentrated cosines); an explicit
    precision screens every chunk as given (for measurements)."""

    english_tokens: Literal["tokenizer-overlap", "source-corpus"] = "tokenizer-overlap"
    """What ``source_tokens="english-only"`` keeps. ``tokenizer-overlap`` (the FOCUS paper, after
    Wang et al. 2019): the source tokens that are also in the vocabulary of an English tokenizer
    (``english_tokenizer``), compared in canonical form (``▁the`` = ``Ġthe`` = BERT ``the``).
    ``source-corpus``: the tokens seen when ``inputs.source_corpus`` is tokenized with the source
    tokenizer — a much larger set (every piece English text happens to use)."""

    english_tokenizer: str | None = None
    """``english_tokens="tokenizer-overlap"``: a tokenizer directory or hub id of an English
    (language-specific) tokenizer. The paper does not name the one it used."""

    case_expansion: Literal["unique", "all-combinations"] = "unique"
    """Dictionary case expansion for Procrustes: ``unique`` keeps each distinct (target, source) word
    pair once (the paper aligns pairs of words); ``all-combinations`` keeps every case-variant
    combination the reference code appends, duplicates included (lower-case pairs count 4 times;
    see :func:`methods._wordvectors.match_dictionary`)."""

    procrustes_precision: Literal["float64", "float32"] = "float64"
    """Precision of the Procrustes fit: ``float64``, or ``float32`` as the reference code computes it
    (scipy on the float32 fastText vectors); the rotations differ by ~1e-5, enough to change k-th
    neighbours where cosines are concentrated (see :func:`methods._wordvectors.procrustes`)."""

    special_candidates: bool = False
    """Source special tokens as neighbour candidates, with the n-gram vector of their string
    (``<s>``, ``</s>`` …), as the reference code does. Default off: a special token's row is not a
    subword of the source language (specials are still copied by role)."""

    @classmethod
    def reference(cls, **overrides: Any) -> WechselConfig:
        """The public reference implementation's behaviour (``wechsel`` 0.0.4), where it differs from the paper.

        ``case_expansion="all-combinations"`` (its Procrustes correspondences, duplicates included),
        ``procrustes_precision="float32"`` (its Procrustes fit, in float32) and
        ``special_candidates=True`` (source specials can be among the k neighbours). With the
        same word vectors, tokenizers and dictionary, the rows then equal the reference's on every
        non-random row without a near tie (see :data:`NEAR_TIE`). Differences that remain by
        design: FALLBACK rows come from the trial's generator (the reference: ``RandomState(1234)``),
        specials are copied by role (the reference: by string), and exact ties at the k-th place go
        to the lower source id (the reference: whatever ``np.argpartition`` returns).

        Example:
            >>> ref = WechselConfig.reference()
            >>> ref.case_expansion, ref.procrustes_precision, ref.special_candidates, ref.k
            ('all-combinations', 'float32', True, 10)
        """
        values: dict[str, Any] = {"case_expansion": "all-combinations", "procrustes_precision": "float32",
                                  "special_candidates": True}
        values.update(overrides)
        return cls(**values)

    def __post_init__(self) -> None:
        choices = {
            "variant": ("subword", "tfr"), "source_tokens": ("all", "english-only"), "alignment": ("procrustes", "none"),
            "dim_mismatch": ("error", "reduce"), "fasttext_model": ("cbow", "skipgram"), "screen": ("auto", "bf16", "fp32", "fp64"),
            "english_tokens": ("tokenizer-overlap", "source-corpus"), "case_expansion": ("unique", "all-combinations"),
            "procrustes_precision": ("float64", "float32"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(repr(a) for a in allowed)}, got {getattr(self, name)!r}")
        for name in ("k", "dim", "epochs", "min_count", "neg", "bucket", "threads", "chunk_rows"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not (self.temperature > 0 and np.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a positive number, got {self.temperature}")
        if self.minn < 0 or self.maxn < 0 or (self.maxn and self.minn > self.maxn):
            raise ValueError(f"minn/maxn must satisfy 0 <= minn <= maxn (or maxn=0), got {self.minn}/{self.maxn}")
        if self.bucket < _fasttext.min_bucket(self.dim):
            raise ValueError(
                f"bucket={self.bucket} is too small for dim={self.dim}: use >= {_fasttext.min_bucket(self.dim)} "
                "(fastText leaves part of a smaller input matrix uninitialized; see methods._fasttext)"
            )
        if self.variant == "subword" and self.maxn == 0:
            raise ValueError("maxn=0 disables character n-grams, which variant='subword' needs; use variant='tfr'")
        for name in ("tfr_max_words", "source_corpus_max_lines"):
            v = getattr(self, name)
            if v is not None and int(v) < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {v}")
        if not isinstance(self.special_candidates, bool):
            raise ValueError(f"special_candidates must be true or false, got {self.special_candidates!r}")
        if self.source_tokens == "english-only" and self.english_tokens == "tokenizer-overlap" and not self.english_tokenizer:
            raise ValueError(
                "english_tokenizer: source_tokens='english-only' with english_tokens='tokenizer-overlap' (the FOCUS "
                "paper's definition) needs an English tokenizer (a directory or hub id); or set "
                "english_tokens='source-corpus' to keep the tokens seen in inputs.source_corpus"
            )


_PRESET_FIELDS = ("case_expansion", "procrustes_precision", "special_candidates")


def preset_name(cfg: WechselConfig) -> str:
    """``"paper"`` or ``"reference"`` when the fields that tell them apart match one, else ``"custom"``."""
    for name, preset in (("paper", WechselConfig()), ("reference", WechselConfig.reference())):
        if all(getattr(cfg, f) == getattr(preset, f) for f in _PRESET_FIELDS):
            return name
    return "custom"


# ------------------------------------------------------------------------------------------------
# The registered method
# ------------------------------------------------------------------------------------------------


@dataclass
class _AlignedVectors:
    """Step 1's result: both word-vector models and the rotation of the target space onto the source space."""

    source: wv_mod.WordVectors
    target: wv_mod.WordVectors
    rotation: np.ndarray | None
    """``d x d`` orthogonal map applied to target vectors (``None``: ``alignment="none"``)."""
    infos: dict
    """``{"source": …, "target": …, "dimensions": …}``: origin, size and training report of each model."""
    alignment_info: dict


@dataclass
class _Specials:
    """Special tokens matched by role: the ``[target, source]`` pairs and a mask per side."""

    pairs: np.ndarray
    unmatched: list
    target: np.ndarray
    source: np.ndarray

    @classmethod
    def of(cls, src_tok: Any, tgt_tok: Any, n_source: int, n_target: int) -> _Specials:
        pairs, unmatched = _canon.match_specials(src_tok, tgt_tok)
        pairs = pairs[(pairs[:, 0] < n_target) & (pairs[:, 1] < n_source)] if len(pairs) else pairs.reshape(0, 2)
        target = np.zeros(n_target, dtype=bool)
        target[[i for i in _canon.special_ids(tgt_tok) if i < n_target]] = True
        source = np.zeros(n_source, dtype=bool)
        source[[i for i in _canon.special_ids(src_tok) if i < n_source]] = True
        return cls(pairs, unmatched, target, source)


@register_method(
    "wechsel",
    config=WechselConfig,
    description="WECHSEL: softmax over the k most similar source tokens in aligned fastText subword space",
)
class Wechsel:
    """WECHSEL embedding initialization (see the module docstring).

    Example:
        >>> method = Wechsel(WechselConfig(dim=16, epochs=1, min_count=1, bucket=_fasttext.min_bucket(16)))
        >>> # result = method.initialize(inputs, np.random.default_rng(0))
    """

    combines = True
    """Rows are top-k mixtures of source rows: an all-fallback result is flagged (harness.run.sanity)."""
    needs = (
        Need(("source_word_vectors", "source_corpus"), "source-language word vectors (trained on the corpus if no vectors)"),
        Need(("target_word_vectors", "target_corpus"), "target-language word vectors (trained on the corpus if no vectors)"),
        Need(("dictionary",), "word pairs for the Procrustes alignment of the two vector spaces",
             (("alignment", "procrustes"),)),
        Need(("source_corpus",), "the source tokens seen in source-language text are the 'English' ones",
             (("source_tokens", "english-only"), ("english_tokens", "source-corpus"))),
        Need(("english_tokenizer",), "an English tokenizer (directory or hub id) whose vocabulary defines which source "
             "tokens are English (the FOCUS paper's definition); or keep the source tokens seen in --source-corpus "
             "instead: --config english_tokens=source-corpus",
             (("source_tokens", "english-only"), ("english_tokens", "tokenizer-overlap"))),
    )
    """What WECHSEL reads besides the tokenizers and source embeddings (``tokxfer init`` and the runner read it)."""

    def __init__(self, config: WechselConfig) -> None:
        self.config = config

    def preflight(self, paths: dict, source_tokenizer: Any, target_tokenizer: Any, *, n_source: int, mode: str,
                  notes: Any) -> dict[str, Any]:
        """Before the long work: the n-gram coverage of the source tokens (see :mod:`methods._wechsel_checks`)."""
        from methods._wechsel_checks import check_wechsel_source

        return {"wechsel_source_ngrams": check_wechsel_source(self.config, paths, source_tokenizer, notes)}

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Build the WECHSEL mapping for ``inputs.target_tokenizer``.

        Args:
            inputs: tokenizers, source embeddings, word vectors or corpora, the bilingual
                dictionary (``alignment="procrustes"``), cache dir.
            rng: the trial's generator; only the fastText seeds are drawn from it (when
                ``fasttext_seed`` is None). FALLBACK rows are drawn by the harness.

        Returns:
            :class:`~harness.protocols.InitResult` whose ``info`` has ``word_vectors`` (origin,
            dimension, training reports), ``alignment`` (dictionary counts, pairs used,
            residual), ``subword_embeddings`` (vectors and zero vectors per side),
            ``source_candidates``, ``wechsel`` (counts, similarity search stats), ``specials``,
            ``fallbacks`` (each group of random rows with its reason) and ``timings``.

        Raises:
            ValueError: missing inputs (word vectors or corpora, dictionary, source corpus for
                ``english-only``), :class:`~methods._wordvectors.DictionaryError` and
                :class:`~methods._wordvectors.DimensionMismatchError`.
        """
        cfg = self.config
        t_start = time.perf_counter()
        timings: dict[str, float] = {}
        src_tok, tgt_tok = inputs.source_tokenizer, inputs.target_tokenizer
        n_source = int(inputs.source_embeddings.shape[0])
        n_target = _canon.vocab_size(tgt_tok)
        seeds = rng.integers(0, 2**31 - 1, size=2) if cfg.fasttext_seed is None else (cfg.fasttext_seed, cfg.fasttext_seed)
        self._check_inputs(inputs)

        # 1. word vectors, dimensions, alignment
        vec = self._aligned_vectors(inputs, seeds, timings)

        # 2. subword embeddings
        t0 = time.perf_counter()
        sub_info: dict[str, Any] = {"variant": cfg.variant}
        if cfg.variant == "subword":
            u_s, has_s = subword_embeddings(src_tok, vec.source, n_source)
            u_t, has_t = subword_embeddings(tgt_tok, vec.target, n_target)
        else:
            u_s, has_s, sub_info["source_tfr"] = tfr_embeddings(
                src_tok, vec.source, n_source, counts=self._counts(vec.source, inputs.source_corpus), max_words=cfg.tfr_max_words)
            u_t, has_t, sub_info["target_tfr"] = tfr_embeddings(
                tgt_tok, vec.target, n_target, counts=self._counts(vec.target, inputs.target_corpus), max_words=cfg.tfr_max_words)
        if vec.rotation is not None:
            u_t = (u_t.astype(np.float64) @ vec.rotation).astype(np.float32)
        timings["subword_embeddings_s"] = time.perf_counter() - t0

        # specials by role; source candidates
        sides = _Specials.of(src_tok, tgt_tok, n_source, n_target)
        smask, cand_info = self._source_candidates(inputs, vec.source, u_s, has_s, sides.source, timings)

        # 3. similarity, weights, mapping
        t0 = time.perf_counter()
        core = wechsel_mapping(
            u_t, u_s, k=cfg.k, tau=cfg.temperature, specials=sides.pairs, target_mask=~sides.target, source_mask=smask,
            chunk_rows=cfg.chunk_rows, screen=cfg.screen, special_candidates=cfg.special_candidates,
        )
        timings["similarity_s"] = time.perf_counter() - t0
        sub_info.update({
            "source_with_vector": int(has_s.sum()), "source_zero_vectors": int((~has_s & ~sides.source).sum()),
            "target_with_vector": int((has_t & ~sides.target).sum()),
            "target_zero_vectors": int((~has_t & ~sides.target).sum()),
        })
        if cfg.variant == "subword" and core.stats["fallback_zero_vector"]:
            zero = np.flatnonzero((core.mapping.provenance == FALLBACK) & ~sides.target)
            sub_info["target_zero_vector_causes"] = {
                **zero_vector_causes(tgt_tok, zero, _fasttext.subword_lengths(vec.target.model)[0]),
                "minn": _fasttext.subword_lengths(vec.target.model)[0],
            }
        timings["total_s"] = time.perf_counter() - t_start
        info = self._info(core.stats, vec, sub_info, cand_info, sides, timings)
        fb = core.mapping.fallback_ids()
        groups = {"zero-vector": fb[~sides.target[fb]], "special": fb[sides.target[fb]]}
        reasons = {f["reason"]: groups[f["group"]].tolist() for f in info["fallbacks"]}
        return InitResult(mapping=core.mapping, tokenizer=tgt_tok, info=info, random_reasons=reasons)

    # ------------------------------------------------------------------------------------------

    def _check_inputs(self, inputs: TransferInputs) -> None:
        """Clear errors for the inputs the configuration needs."""
        cfg = self.config
        if cfg.alignment == "procrustes" and inputs.dictionary is None:
            raise ValueError("WECHSEL with alignment='procrustes' needs inputs.dictionary (TSV target_word<TAB>source_word)")
        if cfg.source_tokens == "english-only" and cfg.english_tokens == "source-corpus" and inputs.source_corpus is None:
            raise ValueError("WECHSEL with source_tokens='english-only' and english_tokens='source-corpus' needs "
                             "inputs.source_corpus (source-language text)")

    def _aligned_vectors(self, inputs: TransferInputs, seeds: Any, timings: dict[str, float]) -> _AlignedVectors:
        """Step 1: both word-vector models (loaded or trained), dimensions checked, the target rotated onto the source."""
        cfg = self.config
        cache = Path(inputs.cache_dir) if inputs.cache_dir is not None else None
        t0 = time.perf_counter()
        # vectors trained here are cached compactly, holding exactly the strings step 2 embeds; only a PCA
        # reduction against a given file of another dimension needs a trained model's full input matrix
        full = cfg.dim_mismatch == "reduce" and (inputs.source_word_vectors is not None or inputs.target_word_vectors is not None)
        src_strings = None if full or inputs.source_word_vectors is not None else self._embedded_strings(
            inputs.source_tokenizer, int(inputs.source_embeddings.shape[0]), specials=cfg.special_candidates)
        tgt_strings = None if full or inputs.target_word_vectors is not None else self._embedded_strings(
            inputs.target_tokenizer, _canon.vocab_size(inputs.target_tokenizer))
        src_wv, src_info = self._word_vectors("source", inputs.source_word_vectors, inputs.source_corpus, int(seeds[0]), cache,
                                              src_strings)
        if cfg.alignment == "procrustes" and inputs.target_word_vectors is None and inputs.target_corpus is not None:
            # a dictionary no target vector could align fails now, not after training them
            from methods._wechsel_checks import check_dictionary_reachable

            check_dictionary_reachable(Path(inputs.dictionary), src_wv, Path(inputs.target_corpus), min_count=cfg.min_count,
                                       case_expansion=cfg.case_expansion)
        tgt_wv, tgt_info = self._word_vectors("target", inputs.target_word_vectors, inputs.target_corpus, int(seeds[1]), cache,
                                              tgt_strings)
        timings["word_vectors_s"] = time.perf_counter() - t0
        src_wv, tgt_wv, dim_info = wv_mod.check_dimensions(src_wv, tgt_wv, mode=cfg.dim_mismatch)
        t0 = time.perf_counter()
        if cfg.alignment == "procrustes":
            alignment = wv_mod.align_word_vectors(tgt_wv, src_wv, Path(inputs.dictionary), case_expansion=cfg.case_expansion,
                                                 precision=cfg.procrustes_precision)
            w_align, align_info = alignment.matrix, {"method": "procrustes", **alignment.info}
        else:
            w_align, align_info = None, {"method": "none"}
        timings["alignment_s"] = time.perf_counter() - t0
        infos = {"source": src_info, "target": tgt_info, "dimensions": dim_info}
        return _AlignedVectors(src_wv, tgt_wv, w_align, infos, align_info)

    def _source_candidates(
        self, inputs: TransferInputs, src_wv: wv_mod.WordVectors, u_s: np.ndarray, has_s: np.ndarray,
        source_special: np.ndarray, timings: dict[str, float],
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """The source tokens that may be neighbours (a vector; no special unless ``special_candidates``;
        English tokens for ``english-only``). Fills the specials' rows of ``u_s``/``has_s`` when they are candidates."""
        cfg = self.config
        src_tok = inputs.source_tokenizer
        n_source = len(has_s)
        if cfg.special_candidates and cfg.variant == "subword" and source_special.any():
            # the reference embeds every token's decoded string, specials included ("<s>" -> its n-grams)
            sp_ids = np.flatnonzero(source_special)
            sp_u, sp_has = src_wv.string_vectors([str(src_tok.convert_ids_to_tokens(int(i))) for i in sp_ids])
            u_s[sp_ids], has_s[sp_ids] = sp_u, sp_has
        smask = has_s.copy() if cfg.special_candidates else has_s & ~source_special
        cand_info: dict[str, Any] = {
            "source_rows": n_source, "with_vector": int(has_s.sum()),
            "specials_excluded": 0 if cfg.special_candidates else int((has_s & source_special).sum()),
            "specials_as_candidates": int((smask & source_special).sum()),
        }
        if cfg.source_tokens == "english-only":
            t0 = time.perf_counter()
            if cfg.english_tokens == "source-corpus":
                english, corpus_info = source_language_tokens(src_tok, inputs.source_corpus, n_source,
                                                              max_lines=cfg.source_corpus_max_lines)
                cand_info["source_corpus"] = {"path": str(inputs.source_corpus), **corpus_info}
            else:
                from harness.tokenizers import load_tokenizer

                english, en_info = english_vocabulary_tokens(src_tok, load_tokenizer(cfg.english_tokenizer), n_source)
                cand_info["english_tokenizer"] = {"name": str(cfg.english_tokenizer), **en_info}
            cand_info["english_tokens"] = cfg.english_tokens
            cand_info["not_english"] = int((smask & ~english).sum())
            smask &= english
            timings["source_tokens_s"] = time.perf_counter() - t0
        cand_info["used"] = int(smask.sum())
        if not smask.any():
            raise ValueError(
                f"WECHSEL: no source token can be a neighbour ({cand_info}); the source word vectors give no token a "
                "nonzero subword vector" + (" or no source token is an English token" if cfg.source_tokens == "english-only" else "")
            )
        return smask, cand_info

    def _info(
        self, st: dict, vec: _AlignedVectors, sub_info: dict, cand_info: dict, sides: _Specials, timings: dict[str, float],
    ) -> dict[str, Any]:
        """The method's info: options, word vectors, alignment, subword vectors, candidates, search facts, fallbacks."""
        cfg = self.config
        fallbacks: list[dict] = []
        if st["fallback_zero_vector"]:
            causes = sub_info.get("target_zero_vector_causes")
            if causes is not None:
                why = describe_zero_vectors({k: v for k, v in causes.items() if k != "minn"}, minn=causes["minn"])
            else:
                why = "zero subword vector (the token occurs in no vocabulary word)"
            fallbacks.append({"group": "zero-vector", "reason": why, "count": st["fallback_zero_vector"],
                              "fallback": "random N(mean, std) of the source rows",
                              **({"causes": causes} if causes is not None else {})})
        unmatched_ids = sides.target.copy()
        unmatched_ids[sides.pairs[:, 0]] = False
        if unmatched_ids.any():
            fallbacks.append({
                "group": "special", "reason": "target special token with no source special of the same role",
                "count": int(unmatched_ids.sum()),
                "tokens": list(sides.unmatched), "fallback": "random N(mean, std) of the source rows",
            })
        nondeterministic = ["fasttext"] if any(
            (vec.infos[side].get("trained") or {}).get("deterministic") is False for side in ("source", "target")) else []
        return {
            **({"nondeterministic": nondeterministic} if nondeterministic else {}),
            "preset": preset_name(cfg),
            "variant": cfg.variant,
            "source_tokens": cfg.source_tokens if cfg.source_tokens == "all" else f"english-only ({cfg.english_tokens})",
            "case_expansion": cfg.case_expansion,
            "procrustes_precision": cfg.procrustes_precision,
            "special_candidates": cfg.special_candidates,
            "near_ties": {k: v for k, v in st["near_ties"].items() if k != "ids"},
            "word_vectors": vec.infos,
            "alignment": vec.alignment_info,
            "subword_embeddings": sub_info,
            "source_candidates": cand_info,
            "wechsel": st,
            "specials": {"matched": int(len(sides.pairs)), "unmatched": list(sides.unmatched)},
            "fallbacks": fallbacks,
            "timings": {k: round(v, 3) for k, v in timings.items()},
        }

    # ------------------------------------------------------------------------------------------

    def _embedded_strings(self, tok: Any, n_rows: int, *, specials: bool = False) -> list[str]:
        """The strings step 2 asks these word vectors for (``subword``: every token string, plus the specials'
        own strings when they are candidates; ``tfr`` reads vocabulary words only)."""
        if self.config.variant != "subword":
            return []
        out = token_strings(tok, n_rows)
        if specials:
            out += [str(tok.convert_ids_to_tokens(i)) for i in sorted(_canon.special_ids(tok)) if i < n_rows]
        return out

    def _word_vectors(self, side: str, path: Any, corpus: Any, seed: int, cache: Path | None,
                      strings: list[str] | None) -> tuple[wv_mod.WordVectors, dict]:
        """Load ``path`` (the full model, never rewritten) or train on ``corpus`` (kept compactly with ``strings``;
        ``None``: the full model); a clear error when neither is given."""
        cfg = self.config
        if path is not None:
            vectors = wv_mod.load_word_vectors(path)
            info: dict[str, Any] = {"path": str(path)}
        elif corpus is not None:
            report: dict = {}
            vectors = wv_mod.train_word_vectors(
                corpus, dim=cfg.dim, epoch=cfg.epochs, min_count=cfg.min_count, model=cfg.fasttext_model,
                minn=cfg.minn, maxn=cfg.maxn, neg=cfg.neg, bucket=cfg.bucket, seed=seed, threads=cfg.threads,
                cache_dir=cache, report=report, compact=strings is not None, strings=strings or (),
            )
            info = {"trained": report}
        else:
            raise ValueError(
                f"WECHSEL needs inputs.{side}_word_vectors (a fastText .bin) or inputs.{side}_corpus to train word vectors on"
            )
        info.update(origin=vectors.origin, words=len(vectors), dim=vectors.dim, subwords=vectors.has_subwords)
        return vectors, info

    @staticmethod
    def _counts(vectors: wv_mod.WordVectors, corpus: Any) -> dict[str, int] | None:
        """Corpus word counts for vectors without frequencies (``.vec``); ``None`` otherwise."""
        if vectors.counts is not None or corpus is None:
            return None
        return dict(wv_mod.word_counts(corpus))
