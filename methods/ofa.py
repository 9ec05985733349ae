"""``ofa`` (Liu et al., NAACL 2024 Findings, "OFA: A framework of initializing unseen subword
embeddings for efficient large-scale multilingual continued pretraining").

OFA factorizes the source embeddings ``Es ≈ Fs · P`` (coordinates ``|Vs| x d'``, primitives
``d' x d``) and initializes the target's coordinates ``Ft``; the model's embeddings are ``Et = Ft · P``.

1. **Multilingual word vectors** put words of both languages in one space (the reference uses
   ColexNet+, graph embeddings of colexification patterns in Bible translations). On our data they
   are built from the parallel corpus (``vectors: parallel``, default): each sentence pair becomes
   one line of language-tagged words (``src:dog tgt:hund …``), shuffled with the trial's generator,
   and word-level fastText skipgram (no character n-grams) is trained on those lines — the
   "merge and shuffle" construction of bilingual word vectors from aligned text (Vulić & Moens 2016),
   so a word and its translations share contexts. ``vectors: given`` reads two word-vector files
   already in one space (``inputs.source_word_vectors`` / ``target_word_vectors``, e.g. ColexNet+ or
   Procrustes-aligned fastText) instead.
2. **Subword vectors** in that space (the reference's ``get_subword_embeddings_in_word_embedding_space``):
   every word of a language is tokenized as ``w``, ``" " + w`` and ``" " + W`` (first letter upper
   case) with that language's tokenizer; a token's vector is the mean of the vectors of the words
   whose tokenizations contain it (source words with the source tokenizer, target words with the
   target tokenizer). A token no word contains has no vector.
3. Overlap tokens (canonical exact matches; ``fuzzy`` adds FOCUS's fuzzy ones) copy their source
   coordinates (COPIED), specials by role (SPECIAL).
4. Every other target token with a vector: its ``k`` most cosine-similar source tokens ``J``
   (among the source tokens with a vector), ``Ft[a] = Σ_{j∈J} softmax(cos / τ)_j · Fs[j]`` (COMBINED);
   reference defaults ``k = 10``, ``τ = 0.1``.
5. A new token without a vector (or with no candidate) is random (FALLBACK, with its reason).

**Factorization.** ``rank: null`` (default) is the reference's default ``keep_dim``, the model's
width (768 for XLM-R base), where it skips the factorization: ``Fs = Es``, ``P = I``, and the rows
above are exactly the mapping's weighted sums of source rows. A smaller ``rank`` (the paper's
OFA-100/200/400) factorizes by SVD as the reference does — ``Fs = U_r``, ``P = S_r V_rᵀ`` — and, since
``Et = Ft · P`` is linear in the coordinates, the mapping's weights are the coordinate weights at every
rank: the method returns the same mapping plus :class:`~harness.protocols.LowRank` ``(rank)``, and the
harness installs ``(W · Es) · V_r V_rᵀ`` per matrix (copied rows too become their rank-``r``
reconstruction; an untied output matrix gets its own SVD) and draws random rows as random coordinates
(N(mean, std) of ``Fs``'s columns, the reference's fallback) times ``P``. The installed model keeps the
full-width embedding matrix: OFA's parameter saving during continued pretraining (training ``Ft`` and
``P`` apart) is not modelled, only the initialization.

Differences from the reference code (``cisnlp/ofa``, ``ofa/utils.py``), each an option where it
changes rows: ``candidates: with-vector`` (default) lets only source tokens that have a vector be
neighbours — the reference compares against every source row, those without a vector at cosine 0,
so they can fill the top ``k`` and take softmax weight (``candidates: all``); ``word_counts: unique``
(default, the paper's "average of the words containing the subword") counts a word once per
token — the reference appends the word once per tokenization variant that contains the token, so
``w`` and ``" " + w`` tokenized alike count it twice (``word_counts: per-variant``). Not options: the
reference matches the overlap case-insensitively on every token (here canonical forms, METHODS.md),
copies specials by string (here by role), and draws random rows from ``RandomState(114514)`` (here
the harness draws them with the trial's generator, N(mean, std) of the source rows).
"""

from __future__ import annotations

import itertools
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from harness import progress
from harness import vocab as _canon
from harness.protocols import InitResult, LowRank, Need, TransferInputs
from harness.registry import register_method
from methods import _align, _fasttext
from methods._anchors import anchor_mapping
from methods._similarity import DEFAULT_CHUNK_ROWS, chunked_topk_cosine

__all__ = ["OfaConfig", "Ofa", "subword_vectors", "softmax_weights", "pseudo_bilingual_lines", "train_epochs", "token_ids"]

MAX_TRAIN_WORDS = 10_000_000
"""``max_train_words: null``: the most words fastText reads over all its epochs (``parallel``). The small
world's 18k pairs (318k words) run the full 30 epochs (9.5M); a 40k-pair corpus of 965k words gets 10
epochs (one core: ~9 CPU minutes of training at 30 epochs, past the 5-minute target of issue 31). There, a
target word's nearest source word is its dictionary translation for 99.5% of 4,993 dictionary pairs at 10
epochs, 99.8% at 30 (the benchmark's synthetic languages)."""
MIN_EPOCHS = 5
"""The fewest epochs :data:`MAX_TRAIN_WORDS` lowers ``epochs`` to: fastText's default."""
SOURCE_TAG = "src:"
TARGET_TAG = "tgt:"
"""Language tags of the words in the multilingual space (ColexNet+ writes ``eng:word`` the same way)."""


@dataclass(frozen=True)
class OfaConfig:
    """Configuration of ``ofa``. Defaults follow the reference code (``k=10``, ``τ=0.1``, no factorization)."""

    k: int = 10
    """Source neighbours combined per new token (reference ``--neighbors 10``)."""

    temperature: float = 0.1
    """Softmax temperature over the neighbours' cosines (reference ``--temperature 0.1``)."""

    rank: int | None = None
    """``d'``, the coordinates' width (the paper: 100, 200, 400, or the model's width); ``null``: the embedding
    width, i.e. no factorization (the reference's default ``keep_dim``)."""

    vectors: Literal["parallel", "given"] = "parallel"
    """``parallel``: multilingual word vectors trained here on ``inputs.parallel_corpus`` (merge and shuffle);
    ``given``: ``inputs.source_word_vectors`` and ``inputs.target_word_vectors``, already in one space."""

    candidates: Literal["with-vector", "all"] = "with-vector"
    """Which source tokens may be neighbours: those with a vector (default), or every source row as the
    reference (rows without a vector at cosine 0)."""

    word_counts: Literal["unique", "per-variant"] = "unique"
    """A word counts once in the mean of each token it contains (default), or once per tokenization
    variant containing the token (reference)."""

    max_words: int | None = None
    """Use only the first N words of each language (the vectors' order: most frequent first; reference
    ``max_n_word_vectors``); ``null``: all."""

    fuzzy: bool = False
    """Also copy FOCUS's fuzzy overlap matches (symbolic tokens, case and word start ignored)."""

    dim: int = 100
    """``parallel``: vector width (the reference's ColexNet+ vectors are 200-d graph embeddings; 100 suits the
    small parallel corpora this builds from)."""

    epochs: int = 30
    """``parallel``: fastText epochs. Parallel corpora are small: on the tiny world's 360 pairs, gold translations
    are each other's nearest word for 89% of dictionary pairs at 30 epochs, 21% at fastText's default 5-10.
    Lowered on a large corpus: ``max_train_words``."""

    max_train_words: int | None = None
    """``parallel``: the most words fastText reads over all epochs (corpus words x epochs). A corpus of more than
    ``max_train_words / epochs`` words trains ``max(5, max_train_words // words)`` epochs instead (never more than
    ``epochs``; recorded as ``vectors.fasttext_epochs``): on large corpora every word is seen often enough in fewer
    passes. ``null``: :data:`MAX_TRAIN_WORDS` (10M: the world's corpora train the full ``epochs``); ``0``: no limit."""

    min_count: int = 2
    """``parallel``: words seen fewer times (per language) get no vector."""

    window: int = 10
    """``parallel``: skipgram context window, in tagged words of the shuffled pair."""

    center: bool = True
    """``parallel``: subtract the mean of all the trained word vectors (both languages). Skipgram on a small
    corpus leaves every vector with a large shared component (on the tiny world every pair of words has
    cosine > 0.99), which keeps the neighbour ranking but flattens softmax(cos / τ) to uniform weights;
    removing it (Mu & Viswanath 2018, "all-but-the-top") keeps the space's alignment. ``false``: raw
    fastText vectors. ColexNet+ (the reference's vectors) needs no such step; ``given`` vectors are used
    as they are."""

    threads: int = 1
    """``parallel``: fastText threads (1 is bit-reproducible)."""

    fasttext_seed: int | None = None
    """``parallel``: fastText's seed; ``null`` draws it from the trial's generator."""

    chunk_rows: int = DEFAULT_CHUNK_ROWS
    """Target rows scored at once (memory ~ chunk_rows x |Vs| x 4 bytes)."""

    NEW_FIELDS_OMITTED_WHEN_NONE = ("max_train_words",)
    """Left out of trial ids while ``null`` (harness.run.config.resolved_fields): records made before it existed
    trained on corpora under the limit, so they keep their ids."""

    def __post_init__(self) -> None:
        choices = {"vectors": ("parallel", "given"), "candidates": ("with-vector", "all"),
                   "word_counts": ("unique", "per-variant")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"OfaConfig.{name} must be one of {', '.join(map(repr, allowed))}, "
                                 f"got {getattr(self, name)!r}")
        if not isinstance(self.center, bool):
            raise ValueError(f"OfaConfig.center must be a bool, got {self.center!r}")
        for name in ("k", "dim", "epochs", "min_count", "window", "threads", "chunk_rows"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"OfaConfig.{name} must be an integer >= 1, got {v!r}")
        for name in ("rank", "max_words", "fasttext_seed", "max_train_words"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)
                                  or v < (0 if name in ("fasttext_seed", "max_train_words") else 1)):
                raise ValueError(f"OfaConfig.{name} must be null or a positive integer, got {v!r}")
        if isinstance(self.temperature, bool) or not (float(self.temperature) > 0 and np.isfinite(self.temperature)):
            raise ValueError(f"OfaConfig.temperature must be a positive number, got {self.temperature!r}")
        if not isinstance(self.fuzzy, bool):
            raise ValueError(f"OfaConfig.fuzzy must be a bool, got {self.fuzzy!r}")


def pseudo_bilingual_lines(pairs: list[tuple[str, str]], rng: np.random.Generator) -> list[str]:
    """One line per sentence pair: its source words tagged ``src:``, its target words ``tgt:``, shuffled.

    Words are :func:`methods._align.word_spans` (runs of word characters, single punctuation marks).

    Example:
        >>> pseudo_bilingual_lines([("a dog", "ein Hund")], np.random.default_rng(0))
        ['tgt:ein src:a src:dog tgt:Hund']
    """
    out = []
    for src, tgt in pairs:
        words = [SOURCE_TAG + src[a:b] for a, b in _align.word_spans(src)]
        words += [TARGET_TAG + tgt[a:b] for a, b in _align.word_spans(tgt)]
        out.append(" ".join(words[i] for i in rng.permutation(len(words))))
    return out


def subword_vectors(tokenizer: Any, words: list[str], vectors: np.ndarray, n_rows: int, *,
                    word_counts: str = "unique") -> tuple[np.ndarray, np.ndarray]:
    """Step 2: each token's vector is the mean of the vectors of the words whose tokenizations contain it.

    Each word is tokenized as ``w``, ``" " + w`` and ``" " + W`` (first letter upper case), without
    special tokens. With ``word_counts="per-variant"`` a word counts once per variant containing the
    token (the reference), else once.

    Returns:
        ``(float32 n_rows x dim, has_vector bool [n_rows])``.

    Example:
        >>> from tokenizers import Tokenizer, models, pre_tokenizers
        >>> from transformers import PreTrainedTokenizerFast
        >>> t = Tokenizer(models.WordLevel({"a": 0, "b": 1, "A": 2, "[UNK]": 3}, unk_token="[UNK]"))
        >>> t.pre_tokenizer = pre_tokenizers.Whitespace()
        >>> tok = PreTrainedTokenizerFast(tokenizer_object=t)
        >>> v, has = subword_vectors(tok, ["a"], np.array([[1.0, 0.0]]), 4)  # "A" from the upper-case variant
        >>> v.tolist(), has.tolist()
        ([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]], [True, False, True, False])
    """
    vectors = np.asarray(vectors, dtype=np.float64)
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    for variant in (words, [" " + w for w in words], [" " + w[:1].upper() + w[1:] for w in words]):
        ids = token_ids(tokenizer, variant) if variant else []
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=int(lengths.sum()))
        # each word's distinct tokens, words in order and tokens sorted within a word (one sort for all words)
        base = int(flat.max()) + 1 if len(flat) else 1
        key = np.unique(np.repeat(np.arange(len(ids), dtype=np.int64), lengths) * base + flat)
        rows.append(key % base)
        cols.append(key // base)
    r, c = np.concatenate(rows), np.concatenate(cols)
    keep = (r >= 0) & (r < n_rows)
    r, c = r[keep], c[keep]
    if word_counts == "unique":
        key = np.unique(r * max(len(words), 1) + c)
        r, c = key // max(len(words), 1), key % max(len(words), 1)
    counts = np.bincount(r, minlength=n_rows).astype(np.float64)
    out = np.zeros((n_rows, vectors.shape[1]), dtype=np.float64)
    np.add.at(out, r, vectors[c])
    has = counts > 0
    out[has] /= counts[has, None]
    return out.astype(np.float32), has


def token_ids(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """``tokenizer(texts, add_special_tokens=False)["input_ids"]``, for a fast tokenizer straight from its backend.

    transformers converts each encoding to a dict in Python (a few seconds per 100k words); with no
    truncation or padding set on the backend and its special-token splitting as the tokenizer's, the
    backend's own ``encode_batch`` gives the same ids. Any other tokenizer is called as usual.

    Example:
        >>> from tokenizers import Tokenizer, models, pre_tokenizers
        >>> from transformers import PreTrainedTokenizerFast
        >>> t = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
        >>> t.pre_tokenizer = pre_tokenizers.Whitespace()
        >>> token_ids(PreTrainedTokenizerFast(tokenizer_object=t), ["a b", "b c"])
        [[0, 1], [1, 2]]
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if (backend is not None and backend.truncation is None and backend.padding is None
            and bool(getattr(backend, "encode_special_tokens", False)) == bool(getattr(tokenizer, "split_special_tokens", False))):
        return [e.ids for e in backend.encode_batch(list(texts), add_special_tokens=False)]
    return tokenizer(list(texts), add_special_tokens=False)["input_ids"]


def train_epochs(epochs: int, corpus_words: int, max_train_words: int | None) -> int:
    """The epochs fastText trains: ``epochs``, lowered on a corpus of more than ``limit / epochs`` words to
    ``max(5, limit // corpus_words)`` (never above ``epochs``); ``limit`` is ``max_train_words``, ``None``
    :data:`MAX_TRAIN_WORDS`, ``0`` none.

    Example:
        >>> train_epochs(30, 318_266, None), train_epochs(30, 965_000, None), train_epochs(30, 965_000, 0)
        (30, 10, 30)
        >>> train_epochs(30, 50_000_000, None), train_epochs(3, 50_000_000, None)
        (5, 3)
    """
    limit = MAX_TRAIN_WORDS if max_train_words is None else int(max_train_words)
    if limit == 0 or corpus_words * epochs <= limit:
        return int(epochs)
    return int(min(epochs, max(MIN_EPOCHS, limit // max(corpus_words, 1))))


def softmax_weights(cosines: np.ndarray, temperature: float) -> np.ndarray:
    """``softmax(cos / τ)`` per row, in float64 (max subtracted first).

    Example:
        >>> np.round(softmax_weights(np.array([[1.0, 0.9]]), 0.1), 4).tolist()
        [[0.7311, 0.2689]]
    """
    z = np.asarray(cosines, dtype=np.float64) / float(temperature)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


@register_method(
    "ofa", config=OfaConfig,
    description="OFA: copy overlap; new rows = softmax over the k source tokens nearest in multilingual word-vector space",
)
class Ofa:
    """OFA (see the module docstring).

    Example:
        >>> from harness.registry import get
        >>> get("method", "ofa").make({"k": 5}).config.k
        5
    """

    combines = True
    """New tokens are combinations of source rows: an all-fallback result is flagged (harness.run.sanity)."""
    needs = (
        Need(("parallel_corpus",), "sentence pairs to build multilingual word vectors from", (("vectors", "parallel"),)),
        Need(("source_word_vectors",), "source-language word vectors in the same space as the target's",
             (("vectors", "given"),)),
        Need(("target_word_vectors",), "target-language word vectors in the same space as the source's",
             (("vectors", "given"),)),
    )
    """What OFA reads besides the tokenizers and source embeddings (``tokxfer init`` and the runner read it)."""

    def __init__(self, config: OfaConfig) -> None:
        self.config = config

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Copy the overlap; combine the nearest source tokens in the multilingual space for the rest."""
        cfg = self.config
        t_start = time.perf_counter()
        src_tok, tgt_tok = inputs.source_tokenizer, inputs.target_tokenizer
        n_source, d = (int(x) for x in inputs.source_embeddings.shape)
        n_target = _canon.vocab_size(tgt_tok)
        if cfg.rank is not None and cfg.rank > d:
            raise ValueError(f"ofa: rank={cfg.rank} exceeds the embedding width {d} (the reference refuses it too)")
        factorized = cfg.rank is not None and cfg.rank < d
        t0 = time.perf_counter()
        (src_words, src_vecs), (tgt_words, tgt_vecs), vec_info = self._word_vectors(inputs, rng)
        t_vectors = time.perf_counter() - t0
        t0 = time.perf_counter()
        with progress.step(f"subword vectors of the source tokens ({len(src_words):,} words)"):
            u_src, has_src = subword_vectors(src_tok, src_words, src_vecs, n_source, word_counts=cfg.word_counts)
        with progress.step(f"subword vectors of the target tokens ({len(tgt_words):,} words)"):
            u_tgt, has_tgt = subword_vectors(tgt_tok, tgt_words, tgt_vecs, n_target, word_counts=cfg.word_counts)
        t_subwords = time.perf_counter() - t0

        ov = _canon.compute_overlap(src_tok, tgt_tok, fuzzy=cfg.fuzzy, n_source=n_source)
        pairs = ov.pairs(fuzzy=cfg.fuzzy)
        specials_t = _canon.special_ids(tgt_tok)
        specials_s = _canon.special_ids(src_tok)
        taken = np.zeros(n_target, dtype=bool)
        taken[pairs[:, 0]] = True
        taken[[t for t in specials_t if t < n_target]] = True
        new = np.flatnonzero(~taken).astype(np.int64)
        if cfg.candidates == "all":
            cand = np.arange(n_source, dtype=np.int64)
        else:
            cand = np.array([s for s in np.flatnonzero(has_src).tolist() if s not in specials_s], dtype=np.int64)
        solve = new[has_tgt[new]] if len(cand) else new[:0]
        t0 = time.perf_counter()
        if len(solve):
            cos, idx = chunked_topk_cosine(u_tgt[solve], u_src[cand], cfg.k, chunk_rows=cfg.chunk_rows)
            w = softmax_weights(cos, cfg.temperature)
            kk = cos.shape[1]
            indptr = np.arange(len(solve) + 1, dtype=np.int64) * kk
            sources, weights = cand[idx].ravel(), w.ravel()
        else:
            indptr, sources, weights, cos = np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros((0, 0))
        t_search = time.perf_counter() - t0
        mapping = anchor_mapping(n_target, n_source, specials=ov.specials, copied=pairs, targets=solve,
                                 indptr=indptr, sources=sources, weights=weights)
        fb = np.array([t for t in mapping.fallback_ids().tolist() if t not in specials_t], dtype=np.int64)
        groups = {
            "no word of the target language's multilingual vectors contains this token: no vector":
                [int(t) for t in fb if not has_tgt[t]],
            "no source token has a multilingual vector: no neighbour to combine":
                [int(t) for t in fb if has_tgt[t] and len(cand) == 0],
        }
        info = {
            "overlap": {**ov.report(), "fuzzy_matching": cfg.fuzzy, "used": int(len(pairs))},
            "vectors": vec_info,
            "ofa": {
                "k": cfg.k, "temperature": cfg.temperature, "rank": cfg.rank, "factorized": factorized,
                "candidates": cfg.candidates, "word_counts": cfg.word_counts, "candidate_tokens": int(len(cand)),
                "source_coverage": round(float(has_src.mean()), 4) if n_source else None,
                "target_coverage": round(float(has_tgt.mean()), 4) if n_target else None,
                "new_tokens": int(len(new)), "combined": int(len(solve)),
                "fallback_no_vector": int(np.sum(~has_tgt[new])) if len(new) else 0,
                "mean_top_cosine": round(float(cos[:, 0].mean()), 4) if cos.size else None,
            },
            "timings": {"vectors_s": round(t_vectors, 3), "subwords_s": round(t_subwords, 3),
                        "search_s": round(t_search, 3), "total_s": round(time.perf_counter() - t_start, 3)},
        }
        if cfg.vectors == "parallel" and cfg.threads > 1:
            info["nondeterministic"] = ["fasttext"]
        return InitResult(mapping=mapping, tokenizer=tgt_tok, info=info,
                          random_reasons={why: ids for why, ids in groups.items() if ids},
                          low_rank=LowRank(int(cfg.rank)) if factorized else None)

    def _word_vectors(self, inputs: TransferInputs, rng: np.random.Generator
                      ) -> tuple[tuple[list[str], np.ndarray], tuple[list[str], np.ndarray], dict]:
        """Step 1: ``(source words, vectors), (target words, vectors), info`` in one space."""
        cfg = self.config
        if cfg.vectors == "given":
            from methods._wordvectors import load_word_vectors

            missing = [f for f in ("source_word_vectors", "target_word_vectors") if getattr(inputs, f) is None]
            if missing:
                raise ValueError(f"ofa with vectors: given needs inputs.{' and inputs.'.join(missing)} "
                                 "(word vectors of both languages in one multilingual space)")
            sides = []
            for f in ("source_word_vectors", "target_word_vectors"):
                wv = load_word_vectors(getattr(inputs, f))
                words = wv.words[: cfg.max_words]
                sides.append((words, wv.word_vectors(words)))
            if sides[0][1].shape[1] != sides[1][1].shape[1]:
                raise ValueError(f"ofa: inputs.source_word_vectors ({sides[0][1].shape[1]}-d) and "
                                 f"inputs.target_word_vectors ({sides[1][1].shape[1]}-d) are not one space")
            return sides[0], sides[1], {"kind": "given", "source_words": len(sides[0][0]),
                                        "target_words": len(sides[1][0]), "dim": int(sides[0][1].shape[1])}
        if inputs.parallel_corpus is None:
            raise ValueError('ofa with vectors: parallel needs inputs.parallel_corpus (JSON lines {"source": ..., '
                             '"target": ...}) to build multilingual word vectors; or vectors: given with word vectors')
        from methods._tiktotok_corpus import read_parallel_corpus

        pairs = read_parallel_corpus(Path(inputs.parallel_corpus))
        lines = pseudo_bilingual_lines(pairs, rng)
        seed = int(rng.integers(0, 2**31 - 1)) if cfg.fasttext_seed is None else int(cfg.fasttext_seed)
        # fastText with fewer than 10 threads randomly initializes only the first threads/10 of its input
        # matrix (methods._fasttext): with no n-grams, buckets are what keeps every word row inside it
        counts = Counter(w for line in lines for w in line.split())
        n_words = sum(1 for c in counts.values() if c >= cfg.min_count)
        epochs = train_epochs(cfg.epochs, sum(counts.values()), cfg.max_train_words)
        spare = -(-(n_words + 1) * (10 - cfg.threads) // cfg.threads) + 10 if cfg.threads < 10 else 0  # +1: "</s>"
        bucket = max(_fasttext.min_bucket(cfg.dim), spare)
        report: dict = {}
        with tempfile.TemporaryDirectory() as tmp:
            text = Path(tmp) / "pseudo-bilingual.txt"
            text.write_text("\n".join(lines) + "\n", encoding="utf-8")
            ft = _fasttext.train_fasttext(
                text, dim=cfg.dim, epoch=epochs, min_count=cfg.min_count, model="skipgram", minn=0, maxn=0,
                ws=cfg.window, bucket=bucket, seed=seed, threads=cfg.threads,
                cache_dir=Path(inputs.cache_dir) if inputs.cache_dir is not None else None, report=report, compact=True,
            )
        words, matrix = list(ft.words), np.asarray(ft.word_matrix, dtype=np.float64)
        tagged = [[i for i, w in enumerate(words) if w.startswith(tag)][: cfg.max_words] for tag in (SOURCE_TAG, TARGET_TAG)]
        if cfg.center and tagged[0] + tagged[1]:
            matrix = matrix - matrix[tagged[0] + tagged[1]].mean(0)
        sides = [([words[i][len(tag):] for i in ids], matrix[ids]) for tag, ids in zip((SOURCE_TAG, TARGET_TAG), tagged)]
        info = {"kind": "parallel (merge and shuffle)", "sentence_pairs": len(pairs), "source_words": len(sides[0][0]),
                "target_words": len(sides[1][0]), "dim": cfg.dim, "centered": cfg.center, "fasttext_seed": seed,
                "corpus_words": sum(counts.values()), "fasttext_epochs": epochs,
                "fasttext": {**{k: report.get(k) for k in ("cache", "seconds", "deterministic", "zero_init_words")},
                             "bucket": bucket}}
        return sides[0], sides[1], info
