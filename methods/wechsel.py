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
   scale) of its character n-gram vectors. Tokens whose string is empty or not valid UTF-8 on its
   own (lone byte pieces) have no n-gram: ``u_x = 0``.
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
``<mask>``; :func:`methods._canon.match_specials`) and copied (SPECIAL). They are never
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
scored in chunks against the source vectors, never materializing the full matrix. With
``screen="bf16"`` (default where the CPU has native bfloat16 matrix instructions) each chunk is
scored in bfloat16, and every source token whose bfloat16 score is within a *proven* error bound
of the k-th best is rescored exactly (float64 from the float32 vectors); the top-k is then taken
on the exact scores (source tokens with identical vectors, e.g. ``▁the``/``the``, tie exactly and
are ordered by id). The result equals an exact float64 top-k, whatever the screen or chunk size
(:func:`topk_cosine`; the bound is checked on every rescored pair and a chunk falls back to a
float32 screen if it were ever violated), at about half the cost of a float32 matrix multiply
(measured: ~2.2x the float32 GEMM throughput on AVX512-BF16). Peak memory beyond the inputs is
a ``d x |Vs|`` bfloat16 copy of the source vectors plus one ``chunk_rows x |Vs|`` score block.

The numeric core is pure: :func:`wechsel_weights` (neighbours and softmax weights from subword
vectors given as arrays) and :func:`wechsel_mapping` (a :class:`~harness.protocols.TokenMapping`);
:class:`Wechsel` only gathers their inputs.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from harness import vocab as _canon
from harness.protocols import COMBINED, FALLBACK, SPECIAL, InitResult, TokenMapping, TransferInputs
from harness.registry import register_method
from methods import _fasttext
from methods import _wordvectors as wv_mod

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

DEFAULT_CHUNK_ROWS = 512
"""Target rows scored at once: 512 x 250k source tokens is 256 MB in bfloat16 (512 MB in float32)."""

_BLOCK_BYTES = 512 * 2**20
"""Upper bound on one score block; ``chunk_rows`` is lowered to respect it for huge source vocabularies."""

_GATHER_BYTES = 8 * 2**20
"""Gathered candidate key vectors (float64) rescored at once (small: reused heap memory, no page faults)."""

_MAX_LISTED = 50_000
"""At most this many near-tie target ids are listed in the method's info (the count is always exact)."""

_U_BF16 = 2.0**-8
"""Unit roundoff of bfloat16 (8 significant bits, round to nearest)."""


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
    """``english-only`` (FOCUS paper variant): only source tokens that occur in the tokenized
    ``inputs.source_corpus`` are candidates (the source-language tokens of a multilingual vocabulary)."""

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
    """fastText training threads: 1 is reproducible; more is faster but not bit-reproducible."""

    fasttext_seed: int | None = None
    """fastText seed; ``None`` draws it from the trial's generator (so trained vectors vary with the seed)."""

    tfr_max_words: int | None = None
    """``tfr``: use only the most frequent N words of each vocabulary (reference: ``max_n_word_vectors``)."""

    source_corpus_max_lines: int | None = None
    """``english-only``: tokenize at most this many lines of the source corpus (``None``: all)."""

    chunk_rows: int = DEFAULT_CHUNK_ROWS
    """Target rows scored at once (memory ~ chunk_rows x |Vs| x 2 bytes in bf16); results do not depend on it."""

    screen: Literal["auto", "bf16", "fp32"] = "auto"
    """Precision of the first scoring pass; the result is exact and identical for all three.
    ``auto``: bf16 on CPUs with native bfloat16 matmul (AVX512-BF16/AMX), else fp32; switches to
    fp32 after the first chunk when bf16 keeps too many candidates (concentrated cosines)."""

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
            "dim_mismatch": ("error", "reduce"), "fasttext_model": ("cbow", "skipgram"), "screen": ("auto", "bf16", "fp32"),
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
# Exact top-k cosine with a bfloat16 screen
# ------------------------------------------------------------------------------------------------


def resolve_screen(screen: str) -> str:
    """``"bf16"`` or ``"fp32"`` for a :attr:`WechselConfig.screen` value (``auto`` asks the CPU)."""
    if screen not in ("auto", "bf16", "fp32"):
        raise ValueError(f"screen must be 'auto', 'bf16' or 'fp32', got {screen!r}")
    if screen != "auto":
        return screen
    try:
        native = bool(torch.cpu._is_avx512_bf16_supported()) or bool(torch.cpu._is_amx_tile_supported())
    except AttributeError:  # older torch
        native = False
    return "bf16" if native else "fp32"


def _gamma(d: int) -> float:
    """Higham's ``gamma_d`` for float32: bound on the relative error of a d-term sum."""
    t = d * 2.0**-24
    return t / (1.0 - t)


def _screen_err(screen: str, d: int, magnitude: torch.Tensor) -> torch.Tensor:
    """Bound on ``|screen score - exact cosine|`` for screen scores of absolute value ``<= magnitude``.

    Exact: ``sum_i qn_i k_i * inv_norm`` in float64 from the float32 unit query ``qn`` and the
    float32 key. bf16 screen: both unit vectors rounded to bfloat16 (relative error
    ``u = 2^-8`` per component, so ``|â·b̂ - a·b| <= (2u + u²) ||a|| ||b||``), products exact in
    float32 and summed in float32 (``gamma_d`` relative to ``sum |â_i b̂_i| <= (1 + u)²``), the
    result rounded to bfloat16 (``u |s| / (1 - u)`` in terms of the rounded score ``s``). fp32
    screen: a float32 GEMM of the unit vectors (``gamma_d``) against float64 (few ulps). Both
    carry slack (``1e-4`` / ``5e-5``) for the float32 normalization and DAZ/FTZ.
    """
    g = _gamma(d)
    if screen == "fp32":
        return torch.full_like(magnitude, 4.0 * g + 5e-5)
    u = _U_BF16
    return (2 * u + u * u) * (1 + 1e-6) + 2 * g * (1 + u) ** 2 + u * magnitude / (1 - u) + 1e-4


def _screen_eps(screen: str, d: int, v_top: torch.Tensor, v_k: torch.Tensor) -> torch.Tensor:
    """Per-row bound ``eps`` on ``|screen score - exact cosine|`` for every score in ``[v_k - 2 eps, v_top]``.

    ``v_top`` is the row's best screen score and ``v_k`` its ``k``-th best. Every score in that
    interval has ``|s| <= M = max(|v_top|, |v_k| + 0.05)`` because ``2 eps < 0.05``, so
    ``eps = _screen_err(M)`` (see :func:`_screen_err`).
    """
    # 2*eps < 0.05, so every score between the threshold v_k - 2 eps and v_top has |s| <= m
    return _screen_err(screen, d, torch.maximum(v_top.abs(), v_k.abs() + 0.05))


@dataclass
class TopK:
    """Result of :func:`topk_cosine`.

    Attributes:
        indices: ``n x k`` int64 key indices, by decreasing cosine (identical keys: lower index first);
            ``-1`` in rows that have no vector.
        similarities: ``n x k`` float32 cosines (0 in rows without a vector).
        has_vector: ``n`` bool, the query rows with a nonzero vector.
        stats: JSON-serializable facts (screen used, candidates rescored, timings).
        kth_gap: ``n`` float64: exact cosine of the k-th neighbour minus that of the (k+1)-th
            (``>= 0``; 0 for an exact tie straddling the cut; ``inf`` where there is no (k+1)-th
            key or no vector). A row with a small gap is a *near tie*: another implementation
            whose cosines differ in the last float bits may choose a different k-th neighbour.
    """

    indices: np.ndarray
    similarities: np.ndarray
    has_vector: np.ndarray
    stats: dict
    kth_gap: np.ndarray | None = None


def _explosion_threshold(k: int, m: int) -> float:
    """Candidates per row above which ``screen="auto"`` leaves a bf16 screen for fp32 (see :func:`topk_cosine`).

    A rescored candidate costs a gather of its ``d`` floats and ``d`` float64 products, several times
    the cost of one entry of the screen's matrix product, and bf16 saves about half of that product:
    beyond ``max(16 x the base width, m / 32)`` candidates the bf16 screen no longer pays.
    """
    return max(16.0 * _base_width(k), m / 32.0)


def _as_f32(x: Any, name: str) -> torch.Tensor:
    t = torch.as_tensor(x)
    if t.dtype != torch.float32:
        t = t.to(torch.float32)
    if t.dim() != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {tuple(t.shape)}")
    return t


def _scores(qn: torch.Tensor, keys_t: torch.Tensor, screen: str) -> torch.Tensor:
    """Screen scores of a chunk of unit queries against the prepared ``d x m`` key matrix."""
    if screen == "bf16":
        return qn.to(torch.bfloat16) @ keys_t
    return qn @ keys_t


def _scores_fp32_blocked(qn: torch.Tensor, keys: torch.Tensor, cand: torch.Tensor, inv: torch.Tensor, block: int = 65536) -> torch.Tensor:
    """float32 scores without a full normalized key copy (the rare fallback of a bf16 chunk)."""
    out = torch.empty((qn.shape[0], len(cand)), dtype=torch.float32)
    for a in range(0, len(cand), block):
        b = min(a + block, len(cand))
        out[:, a:b] = qn @ (keys[cand[a:b]] * inv[a:b, None]).T
    return out


def _exact_cosines(qn: torch.Tensor, keys: torch.Tensor, cand: torch.Tensor, inv: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Exact cosines ``r x w`` of unit queries ``qn`` (``r x d``) with the keys at ``cand[pos]``.

    float64 arithmetic on the float32 inputs, in row batches of at most ~8 MB of gathered keys.
    """
    r, w = pos.shape
    d = qn.shape[1]
    out = torch.empty((r, w), dtype=torch.float64)
    step = max(1, _GATHER_BYTES // max(1, w * d * 8))
    for a in range(0, r, step):
        b = min(a + step, r)
        g = keys[cand[pos[a:b]].reshape(-1)].to(torch.float64).view(b - a, w, d)
        out[a:b] = torch.bmm(g, qn[a:b].to(torch.float64).unsqueeze(2)).squeeze(2) * inv[pos[a:b]].to(torch.float64)
    return out


def _topk_desc(a: torch.Tensor, w: int, block: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``w`` largest entries of every row, in decreasing order (values, column indices).

    For wide rows, two-stage: the row is cut into blocks of ``block`` columns, the ``w`` blocks
    with the largest maxima are kept (the ``w`` largest entries lie in them: each of those
    entries is at least the ``w``-th largest block maximum), and the top-``w`` is taken among
    their ``w * block`` entries. The values equal ``torch.topk``'s; among equal values the
    indices may differ, which the callers do not depend on (they re-rank by exact scores).
    """
    c, m = a.shape
    nb = m // block
    if nb < 8 * w:
        return torch.topk(a, w, dim=1, sorted=True)
    main = nb * block
    bmax = a[:, :main].reshape(c, nb, block).amax(2)
    if main < m:
        bmax = torch.cat([bmax, a[:, main:].amax(1, keepdim=True)], 1)
    blocks = torch.topk(bmax, w, dim=1, sorted=False).indices
    idx = (blocks[:, :, None] * block + torch.arange(block)).reshape(c, -1)
    outside = idx >= m  # the short last block
    idx.clamp_(max=m - 1)
    vals = torch.gather(a, 1, idx)
    vals.masked_fill_(outside, float("-inf"))
    v, p = torch.topk(vals, w, dim=1, sorted=True)
    return v, torch.gather(idx, 1, p)


def _duplicate_representatives(keys: torch.Tensor, cand: torch.Tensor) -> torch.Tensor | None:
    """For each usable key (position in ``cand``), the first position with a bitwise-identical vector.

    Tokens that share a string (``▁the`` / ``the``, ``Ġthe`` / ``the`` …) have identical subword
    vectors, hence identical cosines; computed in float64 at different places of a batched
    product they might still differ in the last bit. :func:`_select_chunk` gives every group of
    identical keys one value, so such ties are always broken by index. Rows are grouped by a
    64-bit hash of their bits and verified, so a hash collision never merges different vectors.

    Returns:
        int64 tensor ``rep`` (``rep[p] <= p``), or ``None`` when all usable keys are distinct.
    """
    k = keys.contiguous().numpy()
    c = cand.numpy()
    bits = k.view(np.uint32)
    w = (np.arange(1, k.shape[1] + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) | np.uint64(1)
    h = np.empty(len(c), dtype=np.uint64)
    for a in range(0, len(c), 16384):
        h[a : a + 16384] = (bits[c[a : a + 16384]].astype(np.uint64) * w).sum(axis=1)  # wraps mod 2^64
    order = np.argsort(h, kind="stable")
    hs = h[order]
    start = np.ones(len(c), dtype=bool)
    start[1:] = hs[1:] != hs[:-1]
    if start.all():
        return None
    rep = np.empty(len(c), dtype=np.int64)
    rep[order] = order[np.maximum.accumulate(np.where(start, np.arange(len(c)), 0))]
    dup = np.flatnonzero(rep != np.arange(len(c)))
    differs = ~np.all(k[c[dup]] == k[c[rep[dup]]], axis=1)
    rep[dup[differs]] = dup[differs]  # hash collisions stay apart
    return torch.from_numpy(rep) if bool((rep != np.arange(len(c))).any()) else None


def _tie_duplicates(exact: torch.Tensor, reps: torch.Tensor) -> torch.Tensor:
    """Within each row, give entries with the same representative the group's largest value."""
    srt, perm = torch.sort(reps, dim=1)
    ex = torch.gather(exact, 1, perm)
    start = torch.ones_like(srt, dtype=torch.bool)
    start[:, 1:] = srt[:, 1:] != srt[:, :-1]
    seg = torch.cumsum(start.to(torch.int64), dim=1) - 1
    top = torch.full_like(ex, float("-inf")).scatter_reduce(1, seg, ex, reduce="amax", include_self=True)
    return torch.empty_like(exact).scatter_(1, perm, torch.gather(top, 1, seg))


def _base_width(kk: int) -> int:
    """The smallest candidate-set width :func:`_select_chunk` starts from."""
    return max(32, 2 * kk + 12)


def _select_chunk(
    qn: torch.Tensor, a: torch.Tensor, mode: str, keys: torch.Tensor, cand: torch.Tensor, inv: torch.Tensor, kk: int,
    width: int, rep: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, int, int, int] | None:
    """Exact top-``kk`` of every row of a screened chunk, or ``None`` if the screen's bound failed.

    For each row the ``width`` best screen scores are taken (widened 4x for the rows that need
    it). The set is *complete* when its last score is below the threshold ``v_k - 2 eps``
    (``v_k``: the ``kk``-th best screen score): then it holds every key whose exact cosine can
    reach the exact ``kk``-th best (a key scoring below the threshold has an exact cosine below
    ``v_k - eps``, and at least ``kk`` keys have exact cosines of at least ``v_k - eps``; see
    :func:`_screen_eps`), so the exact top-``kk`` among the candidates is the exact top-``kk``
    overall. Candidates are rescored exactly (float64), the bound is verified on every one of
    them, identical keys (``rep``) get one value, and the top-``kk`` is taken by decreasing
    float64 cosine, ties to the lower key index.

    Returns ``(positions into cand (c x kk), float32 cosines (c x kk), float64 gap between the
    exact kk-th and (kk-1)-th cosines of each row (c; the caller asks for one neighbour more than
    it keeps to measure the gap after the k-th), candidates rescored, widest width used, a width
    for the next chunk)`` — the next width is 1.25x the 95th percentile of the candidate counts
    this chunk needed, so that few rows need a second pass. Widths only change the work done,
    never the result.
    """
    c, m = a.shape
    d = qn.shape[1]
    out_pos = torch.empty((c, kk), dtype=torch.int64)
    out_sim = torch.empty((c, kk), dtype=torch.float32)
    out_gap = torch.full((c,), float("inf"), dtype=torch.float64)
    left = torch.arange(c)
    width = min(m, max(width, kk))
    widest, n_cand = width, 0
    needed: list[torch.Tensor] = []
    while True:
        sub = a if len(left) == c else a[left]
        vals, pos = _topk_desc(sub, width)
        vals = vals.to(torch.float32)
        eps = _screen_eps(mode, d, vals[:, 0], vals[:, kk - 1])
        thr = vals[:, kk - 1] - 2 * eps
        done = torch.ones(len(left), dtype=torch.bool) if width >= m else vals[:, -1] < thr
        if bool(done.any()):
            rows, pos_d, vals_d, eps_d = left[done], pos[done], vals[done], eps[done]
            exact = _exact_cosines(qn[rows], keys, cand, inv, pos_d)
            tol = torch.maximum(eps_d[:, None], _screen_err(mode, d, vals_d.abs()))  # candidates below thr may be larger
            if bool(((vals_d.to(torch.float64) - exact).abs() > tol.to(torch.float64)).any()):
                return None
            n_cand += int(pos_d.numel())
            needed.append((vals_d >= thr[done][:, None]).sum(1))
            if rep is not None:
                exact = _tie_duplicates(exact, rep[pos_d])
            pos_sorted, perm = torch.sort(pos_d, dim=1)  # key order first, so that the stable sort breaks ties by index
            exact = torch.gather(exact, 1, perm)
            order = torch.sort(-exact, dim=1, stable=True).indices[:, :kk]
            out_pos[rows] = torch.gather(pos_sorted, 1, order)
            top = torch.gather(exact, 1, order)
            out_sim[rows] = top.to(torch.float32)
            if kk > 1:
                out_gap[rows] = top[:, kk - 2] - top[:, kk - 1]
        left = left[~done]
        if not len(left):
            q95 = float(torch.quantile(torch.cat(needed).to(torch.float32), 0.95))
            next_width = max(_base_width(kk), int(np.ceil(1.25 * q95 / 8.0)) * 8)
            return out_pos, out_sim, out_gap, n_cand, widest, min(m, next_width)
        width = min(m, width * 4)
        widest = width


def topk_cosine(
    queries: np.ndarray | torch.Tensor,
    keys: np.ndarray | torch.Tensor,
    k: int,
    *,
    key_mask: np.ndarray | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    screen: str = "auto",
) -> TopK:
    """Exact top-``k`` cosine neighbours among ``keys`` for every query row, in row chunks.

    Query rows with a zero vector get no neighbours (``has_vector=False``); keys with a zero
    vector, or ``False`` in ``key_mask``, are never neighbours. The inputs are not copied in
    full (only a ``d x m`` screening copy of the usable keys: bfloat16 or float32).

    The result does not depend on ``screen`` or ``chunk_rows``: cosines are computed exactly
    (float64 from the float32 inputs, reported as float32) for every candidate a screen keeps,
    a screen provably keeps every key that can be in the top-k (see :func:`_screen_eps` and
    :func:`_select_chunk`), neighbours are ordered by float64 cosine, and keys with identical
    vectors (tokens that share a string) tie exactly and are ordered by index: on an exact tie the
    lower key index (source id) wins, also at the k-th place.

    ``screen="auto"`` picks bf16 where the CPU multiplies bfloat16 natively and is adaptive: if
    the first chunk keeps more than :func:`_explosion_threshold` candidates per row (concentrated
    cosines, e.g. word fastText vectors trained on a few MB, where the bf16 error margin swallows
    most of the row), the remaining chunks are screened in fp32 (``stats["screen_switched"]``
    says why). Explicit ``"bf16"``/``"fp32"`` are kept as given.

    One neighbour more than ``k`` is found exactly, to report :attr:`TopK.kth_gap`.

    Args:
        queries: ``n x d`` query vectors (target subword embeddings).
        keys: ``m x d`` key vectors (source subword embeddings).
        k: neighbours per query (clipped to the number of usable keys).
        key_mask: optional boolean ``m`` mask of keys allowed as neighbours.
        chunk_rows: query rows scored at once (lowered so one score block stays <= 512 MB).
        screen: ``"auto"``, ``"bf16"`` or ``"fp32"`` (see :func:`resolve_screen`).

    Returns:
        :class:`TopK`.

    Raises:
        ValueError: shapes disagree, non-finite values, or no usable key.

    Example:
        >>> t = topk_cosine(np.array([[1.0, 0.1], [0.0, 0.0]]), np.array([[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]]), 2)
        >>> t.indices.tolist(), t.has_vector.tolist()
        ([[1, 2], [-1, -1]], [True, False])
    """
    t0 = time.perf_counter()
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    mode = resolve_screen(screen)
    q = _as_f32(queries, "queries")
    keys_f = _as_f32(keys, "keys")
    n, d = q.shape
    if keys_f.shape[1] != d:
        raise ValueError(f"queries and keys differ in dimension: {d} vs {keys_f.shape[1]}")
    with torch.no_grad():
        # a float64 sum is finite iff every float32 entry is (one pass, no n x d boolean temporary)
        if not bool(torch.isfinite(q.sum(dtype=torch.float64))):
            raise ValueError("queries contain non-finite values")
        if not bool(torch.isfinite(keys_f.sum(dtype=torch.float64))):
            raise ValueError("keys contain non-finite values")
        q_norm = torch.linalg.vector_norm(q, dim=1)
        k_norm = torch.linalg.vector_norm(keys_f, dim=1)
        usable = k_norm > 0
        if key_mask is not None:
            km = torch.as_tensor(np.asarray(key_mask, dtype=bool))
            if km.shape != usable.shape:
                raise ValueError(f"key_mask must have {len(usable)} entries, got {tuple(km.shape)}")
            usable &= km
        cand = torch.nonzero(usable).squeeze(1)
        m = int(cand.numel())
        if m == 0:
            raise ValueError(f"no usable key: all {len(usable)} keys have a zero vector or are masked out")
        kk = min(int(k), m)
        ks = min(kk + 1, m)  # one neighbour more than kept: the gap after the k-th (near ties)
        inv = (1.0 / k_norm[cand]).to(torch.float32)
        rows = torch.nonzero(q_norm > 0).squeeze(1)
        rep = _duplicate_representatives(keys_f, cand)
        adaptive = screen == "auto" and mode == "bf16"
        switched: str | None = None

        def screening_copy(dtype: torch.dtype) -> torch.Tensor:
            """The d x m copy of the unit keys a screen multiplies with (bf16: 2 bytes per entry)."""
            kt = torch.empty((d, m), dtype=dtype)
            for a0 in range(0, m, 65536):
                b0 = min(a0 + 65536, m)
                kt[:, a0:b0] = (keys_f[cand[a0:b0]] * inv[a0:b0, None]).to(dtype).T
            return kt

        keys_t = screening_copy(torch.bfloat16 if mode == "bf16" else torch.float32)
        t_prep = time.perf_counter() - t0

        step = max(1, min(int(chunk_rows), _BLOCK_BYTES // max(1, m * 4)))
        out_idx = np.full((n, kk), -1, dtype=np.int64)
        out_sim = np.zeros((n, kk), dtype=np.float32)
        out_gap = np.full(n, np.inf, dtype=np.float64)
        n_cand = n_fallback_chunks = widest = 0
        width = _base_width(ks)
        t_score = t_select = 0.0
        for s in range(0, len(rows), step):
            rr = rows[s : s + step]
            ts = time.perf_counter()
            qn = q[rr] * (1.0 / q_norm[rr]).to(torch.float32)[:, None]
            a = _scores(qn, keys_t, mode)
            t1 = time.perf_counter()
            t_score += t1 - ts
            res = _select_chunk(qn, a, mode, keys_f, cand, inv, ks, width, rep)
            if res is None:  # the screen's error bound failed: redo this chunk with a float32 screen
                if mode == "fp32":
                    raise RuntimeError("topk_cosine: float32 scores exceed their error bound (is TF32 or a non-IEEE BLAS in use?)")
                n_fallback_chunks += 1
                logger.warning("topk_cosine: bf16 screen exceeded its error bound in one chunk; rescreening it in float32")
                a = _scores_fp32_blocked(qn, keys_f, cand, inv)
                res = _select_chunk(qn, a, "fp32", keys_f, cand, inv, ks, width, rep)
                if res is None:
                    raise RuntimeError("topk_cosine: float32 scores exceed their error bound (is TF32 or a non-IEEE BLAS in use?)")
            pos, sims, gap, nc, used, width = res
            n_cand += nc
            widest = max(widest, used)
            out_idx[rr.numpy()] = cand[pos[:, :kk]].numpy()
            out_sim[rr.numpy()] = sims[:, :kk].numpy()
            if ks > kk:
                out_gap[rr.numpy()] = gap.numpy()
            t_select += time.perf_counter() - t1
            del a
            if adaptive and s == 0 and nc / max(len(rr), 1) > _explosion_threshold(ks, m):
                # Concentrated cosines: the bf16 error margin keeps most keys as candidates, and their
                # exact rescoring costs far more than the bf16 product saves; screen the rest in fp32.
                switched = (f"bf16 screen kept {nc / max(len(rr), 1):.0f} candidates per row of {m} keys in the first "
                            f"chunk (> {_explosion_threshold(ks, m):.0f}); fp32 screen for the remaining chunks")
                logger.info("topk_cosine: %s", switched)
                mode, adaptive = "fp32", False
                keys_t = screening_copy(torch.float32)
    has = np.zeros(n, dtype=bool)
    has[rows.numpy()] = True
    stats = {
        "screen": mode, "screen_requested": screen, "screen_switched": switched, "queries": int(n),
        "queries_with_vector": int(len(rows)), "keys": int(len(usable)),
        "keys_usable": m, "duplicate_keys": 0 if rep is None else int((rep != torch.arange(m)).sum()),
        "k": kk, "dim": int(d), "chunk_rows": step,
        "candidates_per_row": round(n_cand / max(len(rows), 1), 2), "widest_candidate_set": widest,
        "fallback_chunks": n_fallback_chunks,
        "prepare_s": round(t_prep, 3), "score_s": round(t_score, 3), "rescore_s": round(t_select, 3),
        "total_s": round(time.perf_counter() - t0, 3),
    }
    return TopK(out_idx, out_sim, has, stats, out_gap)


# ------------------------------------------------------------------------------------------------
# Pure WECHSEL core
# ------------------------------------------------------------------------------------------------


@dataclass
class WechselNeighbours:
    """The k nearest source tokens of every target token and their softmax weights.

    Attributes:
        indices: ``n_target x k`` int64 source ids, most similar first (``-1`` where no vector).
        similarities: ``n_target x k`` float32 cosines.
        weights: ``n_target x k`` float32 ``softmax(similarities / tau)`` (rows sum to 1; 0 where no vector).
        has_vector: ``n_target`` bool: the target tokens with a nonzero subword vector.
        stats: the similarity search's facts (see :class:`TopK`).
        kth_gap: ``n_target`` float64 gap between the k-th and (k+1)-th exact cosines (see :class:`TopK`).
    """

    indices: np.ndarray
    similarities: np.ndarray
    weights: np.ndarray
    has_vector: np.ndarray
    stats: dict
    kth_gap: np.ndarray | None = None


NEAR_TIE = 1e-6
"""A row is a *near tie* when its k-th and (k+1)-th neighbours' exact cosines differ by less than this:
cosines computed by another implementation (another precision, summation order, or rotation side)
differ by about this much, so its k-th neighbour may legitimately differ there."""


def wechsel_weights(
    u_target: np.ndarray | torch.Tensor,
    u_source: np.ndarray | torch.Tensor,
    k: int = 10,
    tau: float = 0.1,
    *,
    source_mask: np.ndarray | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    screen: str = "auto",
) -> WechselNeighbours:
    """WECHSEL's step 3 on subword embeddings given as arrays (pure; no tokenizers, no files).

    For each target row ``x`` with ``u_x != 0``: the ``k`` source rows with the highest cosine
    ``s_xy`` (exact; ties to the lower id) and weights ``softmax(s_xy / tau)`` over exactly those
    ``k``. Source rows with a zero vector or ``False`` in ``source_mask`` are never chosen.

    Args:
        u_target: ``n_target x d`` target subword embeddings, already aligned to the source space.
        u_source: ``n_source x d`` source subword embeddings.
        k: neighbours per target token (paper: 10).
        tau: softmax temperature (paper: 0.1).
        source_mask: boolean ``n_source`` mask of allowed source tokens (e.g. no specials).
        chunk_rows: target rows scored at once.
        screen: first-pass precision (``auto``/``bf16``/``fp32``); does not change the result.

    Returns:
        :class:`WechselNeighbours`.

    Example:
        >>> nb = wechsel_weights(np.array([[1.0, 0.0]]), np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]]), k=2, tau=0.1)
        >>> nb.indices.tolist(), [round(float(w), 4) for w in nb.weights[0]]
        ([[0, 1]], [0.8808, 0.1192])
    """
    if not (tau > 0):
        raise ValueError(f"tau must be > 0, got {tau}")
    top = topk_cosine(u_target, u_source, k, key_mask=source_mask, chunk_rows=chunk_rows, screen=screen)
    logits = top.similarities.astype(np.float64) / float(tau)
    logits -= logits.max(axis=1, keepdims=True)
    w = np.exp(logits)
    w /= w.sum(axis=1, keepdims=True)
    w = w.astype(np.float32)
    w[~top.has_vector] = 0.0
    return WechselNeighbours(top.indices, top.similarities, w, top.has_vector, top.stats, top.kth_gap)


@dataclass
class WechselCore:
    """Result of :func:`wechsel_mapping`.

    Attributes:
        mapping: the target -> source map.
        neighbours: the neighbours/weights of the rows that were scored (``rows``).
        rows: target ids of ``neighbours``' rows.
        stats: JSON-serializable counts.
    """

    mapping: TokenMapping
    neighbours: WechselNeighbours
    rows: np.ndarray
    stats: dict


def wechsel_mapping(
    u_target: np.ndarray,
    u_source: np.ndarray,
    *,
    k: int = 10,
    tau: float = 0.1,
    specials: np.ndarray | None = None,
    target_mask: np.ndarray | None = None,
    source_mask: np.ndarray | None = None,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    screen: str = "auto",
    special_candidates: bool = False,
    near_tie: float = NEAR_TIE,
) -> WechselCore:
    """The WECHSEL mapping from subword embeddings: specials copied, the rest combined or FALLBACK.

    Args:
        u_target: ``n_target x d`` aligned target subword embeddings (one row per target id).
        u_source: ``n_source x d`` source subword embeddings (one row per source embedding row).
        k: neighbours per target token.
        tau: softmax temperature.
        specials: ``(m, 2)`` ``[target, source]`` special-token pairs (SPECIAL; candidates only
            with ``special_candidates``).
        target_mask: target ids that may be combined (others, e.g. unmatched specials, are FALLBACK).
        source_mask: source ids allowed as neighbours (the specials' sources are removed from it
            here unless ``special_candidates``).
        chunk_rows: target rows scored at once.
        screen: first-pass precision; does not change the result.
        special_candidates: let the source rows of ``specials`` be neighbours (reference code).
        near_tie: threshold of :data:`NEAR_TIE`; ``stats["near_ties"]`` counts the combined rows
            whose k-th and (k+1)-th cosines differ by less (``exact``: by nothing) and lists them.

    Returns:
        :class:`WechselCore`: COMBINED rows have exactly ``min(k, usable sources)`` entries whose
        weights sum to 1; target rows with a zero vector are FALLBACK.

    Example:
        >>> u_s = np.array([[0, 0], [1, 0], [0, 1]], dtype=np.float32)
        >>> u_t = np.array([[0, 0], [1, .1], [0, 0]], dtype=np.float32)
        >>> core = wechsel_mapping(u_t, u_s, k=1, specials=np.array([[0, 0]]))
        >>> core.mapping.counts(), core.mapping.row(1)[0].tolist()
        ({'special': 1, 'copied': 0, 'combined': 1, 'fallback': 1}, [1])
    """
    n_target, n_source = int(len(u_target)), int(len(u_source))
    specials = np.zeros((0, 2), dtype=np.int64) if specials is None else np.asarray(specials, dtype=np.int64).reshape(-1, 2)
    tmask = np.ones(n_target, dtype=bool) if target_mask is None else np.asarray(target_mask, dtype=bool).copy()
    smask = np.ones(n_source, dtype=bool) if source_mask is None else np.asarray(source_mask, dtype=bool).copy()
    if tmask.shape != (n_target,) or smask.shape != (n_source,):
        raise ValueError(f"target_mask/source_mask must have {n_target}/{n_source} entries, got {tmask.shape}/{smask.shape}")
    if len(specials) and (specials[:, 0].max() >= n_target or specials[:, 1].max() >= n_source or specials.min() < 0):
        raise ValueError("specials contain ids outside the target/source vocabularies")
    tmask[specials[:, 0]] = False
    if not special_candidates:
        smask[specials[:, 1]] = False

    rows = np.flatnonzero(tmask)
    nb = wechsel_weights(
        np.asarray(u_target)[rows] if len(rows) < n_target else u_target, u_source, k, tau,
        source_mask=smask, chunk_rows=chunk_rows, screen=screen,
    )
    kk = nb.indices.shape[1]
    combined = rows[nb.has_vector]

    prov = np.full(n_target, FALLBACK, dtype=np.int8)
    prov[combined] = COMBINED
    prov[specials[:, 0]] = SPECIAL
    counts = np.zeros(n_target, dtype=np.int64)
    counts[combined] = kk
    counts[specials[:, 0]] = 1
    indptr = np.zeros(n_target + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=np.int64)
    weights = np.empty(int(indptr[-1]), dtype=np.float32)
    pos = (indptr[combined][:, None] + np.arange(kk)[None, :]).ravel()
    indices[pos] = nb.indices[nb.has_vector].ravel()
    weights[pos] = nb.weights[nb.has_vector].ravel()
    indices[indptr[specials[:, 0]]] = specials[:, 1]
    weights[indptr[specials[:, 0]]] = 1.0
    mapping = TokenMapping(n_target, n_source, indptr, indices, weights, prov)

    top1 = nb.similarities[nb.has_vector, 0] if len(combined) else np.zeros(0, np.float32)
    gaps = nb.kth_gap[nb.has_vector] if nb.kth_gap is not None else np.full(len(combined), np.inf)
    near = combined[gaps < near_tie]
    stats = {
        "k": int(kk),
        "temperature": float(tau),
        "combined": int(len(combined)),
        "fallback_zero_vector": int(len(rows) - len(combined)),
        "fallback_excluded": int(n_target - len(rows) - len(specials)),
        "specials": int(len(specials)),
        "top1_cosine_mean": round(float(top1.mean()), 4) if len(top1) else None,
        "top1_weight_mean": round(float(nb.weights[nb.has_vector, 0].mean()), 4) if len(combined) else None,
        "near_ties": {
            "threshold": float(near_tie), "rows": int(len(near)), "exact": int(np.sum(gaps == 0)),
            "ids": near[:_MAX_LISTED].tolist(), "ids_truncated": bool(len(near) > _MAX_LISTED),
        },
        "similarity": nb.stats,
    }
    return WechselCore(mapping, nb, rows, stats)


# ------------------------------------------------------------------------------------------------
# Subword embeddings from word vectors
# ------------------------------------------------------------------------------------------------


def token_strings(tokenizer: Any, n_rows: int) -> list[str]:
    """The string of every token id below ``n_rows``: marker removed, bytes decoded.

    Specials, ids without a token, and tokens whose bytes are not valid UTF-8 on their own
    (e.g. a lone byte-fallback piece) give ``""``.

    Example:
        >>> # token_strings(xlmr_tokenizer, 5) -> ['', '', '', '', ',']  (4 specials, then '▁,' without its marker)
    """
    canon = _canon.canonical_vocab(tokenizer)
    out = [_canon.decode_canon(c) if c is not None else "" for c in canon[:n_rows]]
    return out + [""] * (n_rows - len(out))


def subword_embeddings(tokenizer: Any, vectors: wv_mod.WordVectors, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """WECHSEL's ``u_x``: fastText's n-gram (out-of-vocabulary) vector of each token's string.

    Args:
        tokenizer: the tokenizer whose tokens are embedded.
        vectors: word vectors of the tokenizer's language (with n-grams).
        n_rows: number of rows (the embedding matrix's rows for the source; the vocabulary size
            for the target).

    Returns:
        ``(u, has_vector)``: float32 ``n_rows x dim`` and a boolean mask.
    """
    return vectors.string_vectors(token_strings(tokenizer, n_rows))


def _encode_words(tokenizer: Any, words: list[str]) -> list[list[int]]:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return [e.ids for e in backend.encode_batch(words, add_special_tokens=False)]
    return tokenizer(words, add_special_tokens=False)["input_ids"]


def tfr_embeddings(
    tokenizer: Any,
    vectors: wv_mod.WordVectors,
    n_rows: int,
    *,
    counts: dict[str, int] | None = None,
    max_words: int | None = None,
) -> tuple[np.ndarray, np.ndarray, dict]:
    """WECHSEL_TFR's ``u_x``: frequency-weighted mean of the vectors of the words containing ``x``.

    ``u_x = sum_{v in V(x)} f_v w_v / sum_{v in V(x)} f_v`` (paper App. D), where ``V(x)`` is the
    set of vocabulary words whose tokenization (as ``word`` or as ``" " + word``, like the
    reference code) contains token ``x``; each word counts once per token.

    Args:
        tokenizer: the tokenizer whose tokens are embedded.
        vectors: word vectors (fastText ``.bin`` frequencies are its corpus counts).
        n_rows: number of rows.
        counts: word frequencies to use instead of ``vectors.counts`` (needed for ``.vec`` files).
        max_words: use only the first (most frequent) N words.

    Returns:
        ``(u, has_vector, info)``.

    Raises:
        ValueError: no frequencies are known.
    """
    import scipy.sparse as sp

    words = [w for w in vectors.words if w != "</s>"]
    if counts is not None:
        freqs = np.array([counts.get(w, 0) for w in words], dtype=np.float64)
    elif vectors.counts is not None:
        keep = np.array([w != "</s>" for w in vectors.words], dtype=bool)
        freqs = vectors.counts[keep].astype(np.float64)
    else:
        raise ValueError(
            f"WECHSEL_TFR needs word frequencies, which {vectors.origin} does not have (a .vec file); "
            "give the corpus it was trained on, or a fastText .bin"
        )
    if max_words is not None:
        words, freqs = words[:max_words], freqs[:max_words]
    keep = freqs > 0
    words = [w for w, ok in zip(words, keep) if ok]
    freqs = freqs[keep]
    n_words = len(words)
    dim = vectors.dim
    if n_words == 0:
        return np.zeros((n_rows, dim), np.float32), np.zeros(n_rows, bool), {"words": 0, "tokens_with_words": 0}
    ids_a = _encode_words(tokenizer, words)
    ids_b = _encode_words(tokenizer, [" " + w for w in words])
    tok_ids = np.fromiter((t for ids in ids_a + ids_b for t in ids), dtype=np.int64)
    lengths = np.fromiter((len(ids) for ids in ids_a + ids_b), dtype=np.int64)
    word_idx = np.repeat(np.concatenate([np.arange(n_words), np.arange(n_words)]), lengths)
    ok = tok_ids < n_rows
    key = np.unique(tok_ids[ok] * n_words + word_idx[ok])
    rows, cols = key // n_words, key % n_words
    m = sp.csr_matrix((freqs[cols], (rows, cols)), shape=(n_rows, n_words))
    w = vectors.word_vectors(words)  # float32: n_words x dim (2.4 GB for 2M words at dim 300; see tfr_max_words)
    num = np.asarray(m @ w)  # float64 (the frequencies are float64)
    den = np.asarray(m.sum(axis=1)).ravel()
    has = den > 0
    u = np.zeros((n_rows, dim), dtype=np.float32)
    u[has] = (num[has] / den[has, None]).astype(np.float32)
    has &= np.any(u != 0, axis=1)
    info = {"words": n_words, "tokens_with_words": int(has.sum()), "word_token_pairs": int(len(key))}
    return u, has, info


def source_language_tokens(tokenizer: Any, corpus: str | Path, n_rows: int, *, max_lines: int | None = None) -> tuple[np.ndarray, dict]:
    """Token ids that occur when ``corpus`` is tokenized with ``tokenizer`` (the "English" tokens).

    Args:
        tokenizer: the source tokenizer.
        corpus: source-language text, one sentence/document per line.
        n_rows: size of the returned mask.
        max_lines: read at most this many lines.

    Returns:
        ``(mask, info)``: boolean ``n_rows`` mask and ``{"lines": …, "tokens": …}``.
    """
    seen = np.zeros(n_rows, dtype=bool)
    lines_read = 0
    batch: list[str] = []

    def flush() -> None:
        for ids in _encode_words(tokenizer, batch):
            a = np.asarray(ids, dtype=np.int64)
            seen[a[a < n_rows]] = True
        batch.clear()

    with open(corpus, encoding="utf-8", newline="\n") as f:
        for line in f:
            if max_lines is not None and lines_read >= max_lines:
                break
            lines_read += 1
            if line.strip():
                batch.append(line.rstrip("\n"))
            if len(batch) >= 4096:
                flush()
    flush()
    return seen, {"lines": lines_read, "tokens": int(seen.sum())}


def english_vocabulary_tokens(tokenizer: Any, english_tokenizer: Any, n_rows: int) -> tuple[np.ndarray, dict]:
    """Source token ids that are also in an English tokenizer's vocabulary (the FOCUS paper's "English tokens").

    Tokens are compared in canonical form (:func:`methods._canon.compute_overlap`, exact matches
    only), so word-start pieces match across families (``▁the`` = ``Ġthe`` = WordPiece ``the``);
    special tokens are never English tokens.

    Args:
        tokenizer: the source tokenizer.
        english_tokenizer: a tokenizer of the source's main language (English for XLM-R).
        n_rows: size of the returned mask.

    Returns:
        ``(mask, info)``: boolean ``n_rows`` mask and ``{"english_vocab": …, "tokens": …}``.
    """
    ov = _canon.compute_overlap(english_tokenizer, tokenizer, fuzzy=False)
    seen = np.zeros(n_rows, dtype=bool)
    ids = ov.exact[:, 0] if len(ov.exact) else np.zeros(0, dtype=np.int64)
    seen[ids[ids < n_rows]] = True
    return seen, {"english_vocab": int(_canon.vocab_size(english_tokenizer)), "tokens": int(seen.sum()),
                  "english_family": ov.source_family}


# ------------------------------------------------------------------------------------------------
# The registered method
# ------------------------------------------------------------------------------------------------


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
    """Rows are top-k mixtures of source rows: an all-fallback result is flagged (harness.sanity)."""

    def __init__(self, config: WechselConfig) -> None:
        self.config = config

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
        cache = Path(inputs.cache_dir) if inputs.cache_dir is not None else None
        if cfg.alignment == "procrustes" and inputs.dictionary is None:
            raise ValueError("WECHSEL with alignment='procrustes' needs inputs.dictionary (TSV target_word<TAB>source_word)")
        if cfg.source_tokens == "english-only" and cfg.english_tokens == "source-corpus" and inputs.source_corpus is None:
            raise ValueError("WECHSEL with source_tokens='english-only' and english_tokens='source-corpus' needs "
                             "inputs.source_corpus (source-language text)")

        # 1. word vectors, dimensions, alignment
        t0 = time.perf_counter()
        src_wv, src_info = self._word_vectors("source", inputs.source_word_vectors, inputs.source_corpus, int(seeds[0]), cache)
        tgt_wv, tgt_info = self._word_vectors("target", inputs.target_word_vectors, inputs.target_corpus, int(seeds[1]), cache)
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

        # 2. subword embeddings
        t0 = time.perf_counter()
        sub_info: dict[str, Any] = {"variant": cfg.variant}
        if cfg.variant == "subword":
            u_s, has_s = subword_embeddings(src_tok, src_wv, n_source)
            u_t, has_t = subword_embeddings(tgt_tok, tgt_wv, n_target)
        else:
            u_s, has_s, sub_info["source_tfr"] = tfr_embeddings(
                src_tok, src_wv, n_source, counts=self._counts(src_wv, inputs.source_corpus), max_words=cfg.tfr_max_words)
            u_t, has_t, sub_info["target_tfr"] = tfr_embeddings(
                tgt_tok, tgt_wv, n_target, counts=self._counts(tgt_wv, inputs.target_corpus), max_words=cfg.tfr_max_words)
        if w_align is not None:
            u_t = (u_t.astype(np.float64) @ w_align).astype(np.float32)
        timings["subword_embeddings_s"] = time.perf_counter() - t0

        # specials by role; source candidates
        pairs, unmatched = _canon.match_specials(src_tok, tgt_tok)
        pairs = pairs[(pairs[:, 0] < n_target) & (pairs[:, 1] < n_source)] if len(pairs) else pairs.reshape(0, 2)
        target_special = np.zeros(n_target, dtype=bool)
        target_special[[i for i in _canon.special_ids(tgt_tok) if i < n_target]] = True
        source_special = np.zeros(n_source, dtype=bool)
        source_special[[i for i in _canon.special_ids(src_tok) if i < n_source]] = True
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
        unmatched_ids = target_special.copy()
        unmatched_ids[pairs[:, 0]] = False

        # 3. similarity, weights, mapping
        t0 = time.perf_counter()
        core = wechsel_mapping(
            u_t, u_s, k=cfg.k, tau=cfg.temperature, specials=pairs, target_mask=~target_special, source_mask=smask,
            chunk_rows=cfg.chunk_rows, screen=cfg.screen, special_candidates=cfg.special_candidates,
        )
        timings["similarity_s"] = time.perf_counter() - t0
        st = core.stats

        sub_info.update({
            "source_with_vector": int(has_s.sum()), "source_zero_vectors": int((~has_s & ~source_special).sum()),
            "target_with_vector": int((has_t & ~target_special).sum()),
            "target_zero_vectors": int((~has_t & ~target_special).sum()),
        })
        fallbacks: list[dict] = []
        if st["fallback_zero_vector"]:
            why = "zero subword vector (no character n-gram: empty or non-UTF-8 token string)" if cfg.variant == "subword" \
                else "zero subword vector (the token occurs in no vocabulary word)"
            fallbacks.append({"reason": why, "count": st["fallback_zero_vector"], "fallback": "random N(mean, std) of the source rows"})
        if unmatched_ids.any():
            fallbacks.append({
                "reason": "target special token with no source special of the same role", "count": int(unmatched_ids.sum()),
                "tokens": list(unmatched), "fallback": "random N(mean, std) of the source rows",
            })
        timings["total_s"] = time.perf_counter() - t_start
        info = {
            "preset": preset_name(cfg),
            "variant": cfg.variant,
            "source_tokens": cfg.source_tokens if cfg.source_tokens == "all" else f"english-only ({cfg.english_tokens})",
            "case_expansion": cfg.case_expansion,
            "procrustes_precision": cfg.procrustes_precision,
            "special_candidates": cfg.special_candidates,
            "near_ties": {k: v for k, v in st["near_ties"].items() if k != "ids"},
            "word_vectors": {"source": src_info, "target": tgt_info, "dimensions": dim_info},
            "alignment": align_info,
            "subword_embeddings": sub_info,
            "source_candidates": cand_info,
            "wechsel": st,
            "specials": {"matched": int(len(pairs)), "unmatched": list(unmatched)},
            "fallbacks": fallbacks,
            "timings": {k: round(v, 3) for k, v in timings.items()},
        }
        return InitResult(mapping=core.mapping, tokenizer=tgt_tok, info=info)

    # ------------------------------------------------------------------------------------------

    def _word_vectors(self, side: str, path: Any, corpus: Any, seed: int, cache: Path | None) -> tuple[wv_mod.WordVectors, dict]:
        """Load ``path`` or train on ``corpus``; a clear error when neither is given."""
        cfg = self.config
        if path is not None:
            vectors = wv_mod.load_word_vectors(path)
            info: dict[str, Any] = {"path": str(path)}
        elif corpus is not None:
            report: dict = {}
            vectors = wv_mod.train_word_vectors(
                corpus, dim=cfg.dim, epoch=cfg.epochs, min_count=cfg.min_count, model=cfg.fasttext_model,
                minn=cfg.minn, maxn=cfg.maxn, neg=cfg.neg, bucket=cfg.bucket, seed=seed, threads=cfg.threads,
                cache_dir=cache, report=report,
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
