"""Deterministic synthetic inputs for FOCUS benchmarks, at XLM-R scale by default.

Shapes follow the paper's German setting: a 250,002-token source vocabulary with d=768
(XLM-R base), a 50,000-token target vocabulary, ~17k overlapping tokens, 300-d auxiliary vectors
of which ~85% exist (minCount). Auxiliary vectors have cluster structure (tokens of one "topic"
share a center), so that sparsemax supports are small, as with real fastText similarities, rather
than the near-uniform similarities of isotropic noise.

Example:
    >>> x = make_inputs(scale=0.01, seed=0)
    >>> x.source_embeddings.shape, x.aux.shape
    ((2500, 768), (500, 300))
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

XLMR_SOURCE_VOCAB = 250_002
XLMR_DIM = 768
TARGET_VOCAB = 50_000
OVERLAP = 17_000
AUX_DIM = 300
AUX_COVERAGE = 0.85
N_SPECIALS = 5
TOKENS_PER_CLUSTER = 25
CLUSTER_NOISE = 1.0


@dataclass
class SyntheticFocusInputs:
    """Arrays for :func:`methods.focus.focus_mapping` plus the source matrix.

    Attributes:
        n_source / n_target: vocabulary sizes.
        source_embeddings: float32 ``n_source x 768``.
        specials: ``(5, 2)`` ``[target, source]`` pairs (ids 0..4 on both sides).
        overlap: ``(n, 2)`` ``[target, source]`` pairs (distinct targets and sources).
        aux: float32 ``n_target x 300`` auxiliary vectors (zero rows where ``has_aux`` is False).
        has_aux: boolean ``n_target`` mask.
    """

    n_source: int
    n_target: int
    source_embeddings: np.ndarray
    specials: np.ndarray
    overlap: np.ndarray
    aux: np.ndarray
    has_aux: np.ndarray

    def describe(self) -> dict:
        """Sizes, for printing and for the bench record."""
        anchors = int(self.has_aux[self.overlap[:, 0]].sum())
        additional = self.n_target - len(self.specials) - len(self.overlap)
        return {
            "n_source": self.n_source, "n_target": self.n_target, "dim": int(self.source_embeddings.shape[1]),
            "aux_dim": int(self.aux.shape[1]), "overlap": int(len(self.overlap)), "anchors": anchors,
            "additional": int(additional), "with_aux": int(self.has_aux.sum()),
        }


def make_inputs(scale: float = 1.0, seed: int = 0) -> SyntheticFocusInputs:
    """Build the synthetic inputs (deterministic in ``scale`` and ``seed``).

    Args:
        scale: multiplies the vocabulary and overlap sizes (dimensions stay 768 and 300).
        seed: generator seed.

    Returns:
        :class:`SyntheticFocusInputs`. The source matrix is generated directly in float32
        (no float64 temporary), so peak memory is the arrays themselves.
    """
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    rng = np.random.default_rng(seed)
    n_source = max(int(round(XLMR_SOURCE_VOCAB * scale)), 64)
    n_target = max(int(round(TARGET_VOCAB * scale)), 32)
    n_overlap = min(max(int(round(OVERLAP * scale)), 4), n_target - N_SPECIALS - 1)

    source = rng.standard_normal((n_source, XLMR_DIM), dtype=np.float32)
    source *= np.float32(0.05)

    specials = np.stack([np.arange(N_SPECIALS), np.arange(N_SPECIALS)], axis=1).astype(np.int64)
    tgt_ids = N_SPECIALS + rng.permutation(n_target - N_SPECIALS)[:n_overlap]
    src_ids = N_SPECIALS + rng.permutation(n_source - N_SPECIALS)[:n_overlap]
    overlap = np.stack([np.sort(tgt_ids), src_ids], axis=1).astype(np.int64)

    n_clusters = max(n_target // TOKENS_PER_CLUSTER, 1)
    centers = rng.standard_normal((n_clusters, AUX_DIM), dtype=np.float32)
    cluster = rng.integers(0, n_clusters, size=n_target)
    aux = rng.standard_normal((n_target, AUX_DIM), dtype=np.float32)
    aux *= np.float32(CLUSTER_NOISE)
    aux += centers[cluster]
    has_aux = rng.random(n_target) < AUX_COVERAGE
    has_aux[:N_SPECIALS] = False
    aux[~has_aux] = 0.0
    return SyntheticFocusInputs(n_source, n_target, source, specials, overlap, aux, has_aux)


# ----------------------------------------------------------------------------------------------
# Synthetic text for end-to-end benchmarks (tokenizers, fastText and methods run on files)
# ----------------------------------------------------------------------------------------------

SOURCE_LETTERS = ("bcdfghjklmnprstvwz", "aeiouy")
TARGET_LETTERS = ("bdfghkllmnprsstvz", "aeiouäö")
SHARED_WORD_FRACTION = 0.03
ZIPF_A = 1.05


def make_lexicon(n_words: int, seed: int, letters: tuple[str, str], shared: list[str] | None = None) -> list[str]:
    """``n_words`` distinct pseudo-words in frequency-rank order (rank 0 most frequent).

    Words are 1-4 syllables (consonant-vowel, sometimes a closing consonant) over the language's
    ``letters`` (consonants, vowels); frequent ranks get short words, as in natural languages.
    ``shared`` words (names, loans common to two languages) are spread over the ranks.

    Example:
        >>> make_lexicon(3, 0, SOURCE_LETTERS)[:1] == make_lexicon(3, 0, SOURCE_LETTERS)[:1]
        True
    """
    rng = np.random.default_rng(seed)
    cons, vows = np.array(list(letters[0])), np.array(list(letters[1]))
    words: set[str] = set(shared or ())
    out: list[str] = []
    while len(out) < n_words:
        n = max(n_words - len(out), 64)
        n_syl = rng.choice([1, 2, 3, 4], size=n, p=[0.15, 0.4, 0.3, 0.15])
        for k in n_syl:
            w = "".join(cons[rng.integers(len(cons))] + vows[rng.integers(len(vows))]
                        + (cons[rng.integers(len(cons))] if rng.random() < 0.25 else "") for _ in range(k))
            if w not in words:
                words.add(w)
                out.append(w)
    out = out[:n_words]
    out.sort(key=lambda w: len(w) + rng.random() * 6)  # short words tend to be frequent
    for w in shared or ():  # anywhere but among the most frequent (function) words
        out.insert(int(rng.integers(min(50, len(out)), len(out) + 1)), w)
    return out[:n_words]


def _zipf(n: int) -> np.ndarray:
    p = 1.0 / (np.arange(n, dtype=np.float64) + 2.7) ** ZIPF_A
    return p / p.sum()


def _sentence_words(rng: np.random.Generator, n_lexicon: int, n_lines: int, n_topics: int) -> tuple[np.ndarray, np.ndarray]:
    """Sentence lengths (4-18) and the lexicon ranks of their words, concatenated (see :func:`write_corpus`)."""
    n_func = min(100, n_lexicon // 10)
    n_topics = n_topics or max((n_lexicon - n_func) // 300, 1)
    per_topic = (n_lexicon - n_func) // n_topics
    lengths = rng.integers(4, 19, size=n_lines)
    total = int(lengths.sum())
    topic = np.repeat(rng.integers(0, n_topics, size=n_lines), lengths)
    func = rng.random(total) < 0.5
    ids = np.where(
        func,
        rng.choice(n_func, size=total, p=_zipf(n_func)),
        n_func + topic + n_topics * rng.choice(per_topic, size=total, p=_zipf(per_topic)),
    )
    return lengths, ids


def write_corpus(path: Path, lexicon: list[str], n_lines: int, seed: int, *, n_topics: int = 0) -> Path:
    """Write ``n_lines`` sentences of Zipf-distributed words from ``lexicon`` (deterministic in ``seed``).

    Every sentence has a topic: about half of its words are function words (the 100 most frequent
    ranks, shared by all topics), the rest are drawn, Zipf-distributed, from the topic's own words
    (ranks ``100 + topic + i * n_topics``). Words that share topics share contexts, so embeddings
    trained on the text have neighbourhoods (as on natural text) instead of near-uniform
    similarities. Sentences have 4-18 words, a capitalized first word, commas, numbers, parentheses,
    quotes and rarely a backslash path (so that a few tokens contain characters fastText tools
    escape), and end in ``.``, ``?`` or ``!``.

    Args:
        path: output file (UTF-8, one sentence per line).
        lexicon: words in frequency-rank order.
        n_lines: sentences to write.
        seed: generator seed.
        n_topics: topics; default ``len(lexicon) // 300`` (at least 1).
    """
    rng = np.random.default_rng(seed)
    lengths, ids = _sentence_words(rng, len(lexicon), n_lines, n_topics)
    lex = np.array(lexicon, dtype=object)
    ends = np.array([".", ".", ".", "?", "!"], dtype=object)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pos = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for n in lengths:
            ws = list(lex[ids[pos : pos + n]])
            pos += n
            r = rng.random(5)
            if r[0] < 0.2:
                ws.insert(int(rng.integers(0, len(ws))), str(int(rng.integers(0, 3000))))
            if r[1] < 0.3:
                i = int(rng.integers(1, len(ws)))
                ws[i - 1] += ","
            if r[2] < 0.05:
                i = int(rng.integers(0, len(ws)))
                ws[i] = f"({ws[i]})" if r[3] < 0.5 else f'"{ws[i]}"'
            if r[4] < 0.01:
                ws.append(f"C:\\{ws[0]}\\{ws[-1]}")
            ws[0] = ws[0][:1].upper() + ws[0][1:]
            f.write(" ".join(ws) + ends[int(rng.integers(len(ends)))] + "\n")
    return path


def make_corpora(out_dir: Path, scale: float = 1.0, seed: int = 0) -> dict[str, Path]:
    """Source- and target-language text files for end-to-end benchmarks.

    At ``scale=1``: lexicons of 80k (source) / 60k (target) words, 3 % of the target's shared with the
    source (names, loans), 300k / 200k lines (~3.6M / ~2.4M words), enough for 32k / 16k
    SentencePiece vocabularies and a token-level fastText with ``minCount=10``. Smaller scales keep at
    least 8k / 6k words and 30k / 60k lines: with less text, cbow vectors (3 epochs) have near-uniform
    cosines, and sparsemax then spreads weight over every anchor, which no real corpus does.

    Returns:
        ``{"source": path, "target": path}`` under ``out_dir``.
    """
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    n_src_words = max(int(80_000 * scale), 8000)
    n_tgt_words = max(int(60_000 * scale), 6000)
    source_lex = make_lexicon(n_src_words, seed, SOURCE_LETTERS)
    rng = np.random.default_rng(seed + 1)
    shared = [source_lex[i] for i in rng.choice(len(source_lex), int(n_tgt_words * SHARED_WORD_FRACTION), replace=False)]
    target_lex = make_lexicon(n_tgt_words, seed + 2, TARGET_LETTERS, shared=shared)
    out_dir = Path(out_dir)
    return {
        "source": write_corpus(out_dir / "source.txt", source_lex, max(int(300_000 * scale), 30_000), seed + 3),
        "target": write_corpus(out_dir / "target.txt", target_lex, max(int(200_000 * scale), 60_000), seed + 4),
    }


# ----------------------------------------------------------------------------------------------
# XLM-R-shaped inputs on files for the scale benchmark (every method end to end)
# ----------------------------------------------------------------------------------------------

OTHER_LETTERS = (
    ("бвгдзклмнпрстфхцчш", "аеиоуыэюя"),  # Cyrillic
    ("βγδζθκλμνξπρστφχψ", "αεηιουω"),  # Greek
    ("bcdfgjklmnpqrstvwxz", "aeiou"),  # a third Latin-script language
)
"""Alphabets of the pseudo-languages that fill a multilingual source vocabulary up to its size."""
OVERLAP_FRACTION = 0.34
"""Share of the target pieces also in the source vocabulary (about XLM-R's 17k of a 50k German vocabulary)."""
WORD_START_FRACTION = 0.7
"""Share of the filler pieces that start a word (``▁``), about as in XLM-R."""


@dataclass
class ScaleTexts:
    """Text inputs of the scale benchmark (all under one folder)."""

    source: Path
    """Source-language text, one sentence per line."""
    target: Path
    """Target-language text."""
    parallel: Path
    """JSON lines ``{"source": ..., "target": ...}``: each target sentence a word-by-word translation."""
    dictionary: Path
    """``target<TAB>source`` word pairs (``tokxfer init --dictionary``)."""
    source_lexicon: list[str]
    target_lexicon: list[str]


def write_parallel(path: Path, source_lex: list[str], target_lex: list[str], n_pairs: int, seed: int) -> Path:
    """``n_pairs`` sentence pairs: source sentences as :func:`write_corpus` draws them, translated word by word.

    Source rank ``i`` translates to target rank ``i`` (words beyond the target lexicon are dropped);
    one pair in three swaps two neighbouring target words, one in five carries the same number on
    both sides, so a word aligner sees reordering and shared tokens.
    """
    rng = np.random.default_rng(seed)
    lengths, ids = _sentence_words(rng, len(source_lex), n_pairs, 0)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n_tgt = len(target_lex)
    pos = 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for n in lengths:
            ranks = ids[pos : pos + n].tolist()
            pos += n
            src = [source_lex[r] for r in ranks]
            tgt = [target_lex[r] for r in ranks if r < n_tgt] or [target_lex[0]]
            r = rng.random(3)
            if r[0] < 1 / 3 and len(tgt) > 1:
                i = int(rng.integers(0, len(tgt) - 1))
                tgt[i], tgt[i + 1] = tgt[i + 1], tgt[i]
            if r[1] < 0.2:
                num = str(int(rng.integers(0, 3000)))
                src.insert(int(rng.integers(0, len(src) + 1)), num)
                tgt.insert(int(rng.integers(0, len(tgt) + 1)), num)
            end = "." if r[2] < 0.8 else "?"
            line = {"source": " ".join(src).capitalize() + end, "target": " ".join(tgt).capitalize() + end}
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    return path


def write_dictionary(path: Path, source_lex: list[str], target_lex: list[str], n_pairs: int) -> Path:
    """``target<TAB>source`` pairs of the ``n_pairs`` most frequent translations (rank ``i`` ↔ rank ``i``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = min(n_pairs, len(source_lex), len(target_lex))
    path.write_text("".join(f"{target_lex[i]}\t{source_lex[i]}\n" for i in range(n)), encoding="utf-8")
    return path


def make_scale_texts(out_dir: Path, *, n_target_words: int, n_lines: int, n_pairs: int, n_dictionary: int,
                     seed: int = 0) -> ScaleTexts:
    """Source and target text, a parallel corpus and a dictionary of two pseudo-languages.

    The target lexicon has ``n_target_words`` words (3 % shared with the source's), the source lexicon a
    third more; each monolingual text has ``n_lines`` sentences. Deterministic in the arguments.
    """
    n_src_words = int(n_target_words * 4 / 3)
    source_lex = make_lexicon(n_src_words, seed, SOURCE_LETTERS)
    rng = np.random.default_rng(seed + 1)
    shared = [source_lex[i] for i in rng.choice(len(source_lex), int(n_target_words * SHARED_WORD_FRACTION), replace=False)]
    target_lex = make_lexicon(n_target_words, seed + 2, TARGET_LETTERS, shared=shared)
    out_dir = Path(out_dir)
    return ScaleTexts(
        source=write_corpus(out_dir / "source.txt", source_lex, n_lines, seed + 3),
        target=write_corpus(out_dir / "target.txt", target_lex, n_lines, seed + 4),
        parallel=write_parallel(out_dir / "parallel.jsonl", source_lex, target_lex, n_pairs, seed + 5),
        dictionary=write_dictionary(out_dir / "dictionary.tsv", source_lex, target_lex, n_dictionary),
        source_lexicon=source_lex,
        target_lexicon=target_lex,
    )


def filler_pieces(n: int, seed: int, taken: set[str]) -> list[str]:
    """``n`` distinct SentencePiece pieces of other pseudo-languages, not in ``taken``.

    A lexicon of ``n`` words is drawn in the first alphabet of :data:`OTHER_LETTERS` (Cyrillic); the
    next alphabets replace the pieces that came out twice (word tails repeat often): at XLM-R's size
    174k Cyrillic, 25k Greek and 2k Latin pieces. About
    :data:`WORD_START_FRACTION` start a word (``▁``); the others are word-inner pieces (a word's
    tail). These stand for the other languages of a multilingual vocabulary.
    """
    rng = np.random.default_rng(seed)
    out: list[str] = []
    seen = set(taken)
    k = 0
    while len(out) < n:
        letters = OTHER_LETTERS[k % len(OTHER_LETTERS)]
        for w in make_lexicon(max(n - len(out), 64), seed + 100 + k, letters):
            piece = f"▁{w}" if rng.random() < WORD_START_FRACTION else w[len(w) // 2 :]
            if piece not in seen:
                seen.add(piece)
                out.append(piece)
                if len(out) == n:
                    break
        k += 1
    return out


def xlmr_like_vocabulary(language_pieces: list[tuple[str, float]], target_pieces: list[tuple[str, float]],
                         n_source: int, seed: int) -> list[tuple[str, float]]:
    """A multilingual SentencePiece-Unigram vocabulary of exactly ``n_source`` pieces, XLM-R's layout.

    ``<s> <pad> </s> <unk>`` at ids 0-3, then the source language's own pieces (``language_pieces``,
    a trained Unigram's ``[piece, score]`` without its specials), target pieces drawn from its more
    frequent 60 % until :data:`OVERLAP_FRACTION` of the target's pieces are shared, pieces of other pseudo-languages
    (:func:`filler_pieces`, scored below every real piece), and ``<mask>`` last (id ``n_source - 1``).
    """
    specials = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
    own = [(p, s) for p, s in language_pieces if p not in {"<s>", "<pad>", "</s>", "<unk>", "<mask>"}]
    have = {p for p, _ in own}
    rng = np.random.default_rng(seed)
    pool = [(p, s) for p, s in target_pieces[: int(0.6 * len(target_pieces))]
            if p not in have and p not in {"<s>", "<pad>", "</s>", "<unk>", "<mask>"}]  # fmt: skip
    already = sum(1 for p, _ in target_pieces if p in have)  # characters, short pieces, shared words
    n_shared = min(max(int(OVERLAP_FRACTION * len(target_pieces)) - already, 0), len(pool), max(n_source - len(own) - 5, 0))
    shared = [pool[i] for i in sorted(rng.choice(len(pool), n_shared, replace=False).tolist())]
    pieces = own + shared
    n_fill = n_source - len(specials) - len(pieces) - 1
    if n_fill < 0:
        raise ValueError(f"n_source={n_source} is smaller than the language's own and shared pieces ({len(pieces) + 5})")
    low = min([s for _, s in pieces] + [0.0]) - 1.0
    fill = [(p, low - 1e-4 * i) for i, p in enumerate(filler_pieces(n_fill, seed + 1, {p for p, _ in pieces}))]
    return specials + pieces + fill + [("<mask>", 0.0)]
