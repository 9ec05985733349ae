"""Tik-to-Tok's fastText token space at scale: the vectorized :func:`fasttext_token_space` gives, bit for bit,
what the per-token algorithm it replaced gave (kept below as the reference), on a model trained in a second."""

from __future__ import annotations

import numpy as np
import pytest

from harness import progress
from harness.vocab import canonical_vocab
from methods import _fasttext, _tiktotok_knn
from methods._tiktotok_knn import IN_VOCABULARY, NGRAMS, NO_VECTOR
from tests._tokfixtures import from_vocab

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
# small fastText: dim 16 needs bucket >= methods._fasttext.min_bucket(16)
PARAMS = {"dim": 16, "epoch": 3, "min_count": 3, "model": "skipgram", "minn": 2, "maxn": 5, "bucket": 540_672,
          "seed": 3, "threads": 1}  # fmt: skip


def reference_token_space(model, tokenizer, n_rows: int, *, skip: np.ndarray, ngrams: bool):
    """The old ``fasttext_token_space`` (one ``np.isin`` against every trained n-gram row per token), verbatim."""
    words = _fasttext.fasttext_words(tokenizer, "string")
    vecs = np.zeros((n_rows, model.get_dimension()), dtype=np.float32)
    kinds = np.zeros(n_rows, dtype=np.int8)
    oov: list[int] = []
    for i, w in enumerate(words[:n_rows]):
        if skip[i]:
            continue
        if model.get_word_id(w) >= 0:
            vecs[i] = model.get_word_vector(w)
            kinds[i] = IN_VOCABULARY
        elif ngrams:
            oov.append(i)
    if not oov:
        return vecs, kinds
    vocab = model.get_words()
    n_words = len(vocab)
    trained = np.unique(
        np.concatenate([np.zeros(0, np.int64)] + [np.asarray(model.get_subwords(w)[1], dtype=np.int64) for w in vocab])
    )
    trained = trained[trained >= n_words]
    per_token: list[tuple[int, np.ndarray]] = []
    for i in oov:
        ids = np.asarray(model.get_subwords(words[i])[1], dtype=np.int64)
        ids = ids[np.isin(ids, trained)]
        if len(ids):
            per_token.append((i, ids))
    if not per_token:
        return vecs, kinds
    rows_needed = np.unique(np.concatenate([ids for _, ids in per_token]))
    table = np.stack([np.asarray(model.get_input_vector(int(r)), dtype=np.float32) for r in rows_needed])
    for i, ids in per_token:
        v = table[np.searchsorted(rows_needed, ids)].mean(axis=0)
        if np.any(v != 0):
            vecs[i] = v
            kinds[i] = NGRAMS
    return vecs, kinds


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A 600-word pseudo-language: every word is a vocabulary piece, plus prefixes, suffixes and letters;
    fastText (token level, n-grams 2-5) trained on 2,000 sentences of it — about a second."""
    tmp = tmp_path_factory.mktemp("token-space")
    rng = np.random.default_rng(0)
    letters = np.array(list("bdfgklmnprstvzaeiou"))
    words = sorted({"".join(rng.choice(letters, size=int(rng.integers(3, 9)))) for _ in range(800)})[:600]
    rng.shuffle(words)
    pieces = SPECIALS + [f"▁{w}" for w in words] + sorted({w[:3] for w in words} | {w[-4:] for w in words})
    pieces += [f"▁{c}" for c in letters] + [c for c in letters if c not in pieces] + ["▁zzqq", "qqzz"]
    pieces = list(dict.fromkeys(pieces))
    tok = from_vocab("sentencepiece", pieces)
    p = 1.0 / np.arange(1, len(words) + 1) ** 1.1
    lines = [" ".join(rng.choice(words, size=int(rng.integers(4, 12)), p=p / p.sum())) for _ in range(2000)]
    raw = tmp / "text.txt"
    raw.write_text("\n".join(lines) + "\n", encoding="utf-8")
    text = _fasttext.pretokenize(raw, tok, tmp / "text.tok.txt")
    model = _fasttext.train_fasttext(text, **PARAMS)
    skip = np.array([c is None or not c.text for c in canonical_vocab(tok)])
    return {"model": model, "tok": tok, "skip": skip}


@pytest.mark.parametrize("ngrams", [True, False])
def test_vectorized_token_space_is_bit_identical_to_the_per_token_algorithm(small, ngrams):
    tok, model, skip = small["tok"], small["model"], small["skip"]
    n_rows = len(tok) + 7  # ids beyond the tokenizer get no vector, in both
    skip = np.concatenate([skip, np.ones(7, bool)])
    want_v, want_k = reference_token_space(model, tok, n_rows, skip=skip, ngrams=ngrams)
    got_v, got_k = _tiktotok_knn.fasttext_token_space(model, tok, n_rows, skip=skip, ngrams=ngrams)
    assert got_v.dtype == want_v.dtype and got_k.dtype == want_k.dtype
    assert np.array_equal(got_k, want_k)
    assert got_v.tobytes() == want_v.tobytes()  # bit for bit, signed zeros included
    kinds = set(want_k.tolist())
    assert {IN_VOCABULARY, NO_VECTOR} <= kinds and (NGRAMS in kinds) == ngrams  # a case that exercises every branch
    if ngrams:
        assert int(np.sum(want_k == NGRAMS)) > 50


@pytest.mark.parametrize("dim", [1, 2, 24, 300])
def test_ngram_means_match_per_token_means(dim):
    """The position-by-position sums give ``table[ids].mean(axis=0)`` per token, bit for bit (numpy sums
    one-number rows pairwise: ``dim=1`` is its own case)."""
    rng = np.random.default_rng(1)
    table = rng.standard_normal((300, dim)).astype(np.float32)
    table[5] = 0.0  # an all-zero row: a token made only of it keeps no vector
    table[7, :3] = -0.0
    counts = rng.integers(1, 40, size=500)
    counts[[3, 4]] = 1
    owner = np.repeat(np.arange(500), counts)
    row_of = rng.integers(0, 300, size=len(owner))
    row_of[owner == 3] = 5
    row_of[owner == 4] = 7
    oov = np.sort(rng.choice(10_000, size=500, replace=False))
    want_v, want_k = np.zeros((10_000, dim), np.float32), np.zeros(10_000, np.int8)
    for k in range(500):
        v = table[row_of[owner == k]].mean(axis=0)
        if np.any(v != 0):
            want_v[oov[k]], want_k[oov[k]] = v, NGRAMS
    assert want_k[oov[3]] == NO_VECTOR
    got_v, got_k = np.zeros_like(want_v), np.zeros_like(want_k)
    keep = owner != 9  # a token with no trained n-gram is absent from ``owner``
    _tiktotok_knn._ngram_means(oov, owner[keep], row_of[keep], table, got_v, got_k)
    want_v[oov[9]], want_k[oov[9]] = 0.0, NO_VECTOR
    assert got_v.tobytes() == want_v.tobytes() and np.array_equal(got_k, want_k)


def test_token_space_reports_progress_for_each_long_loop(small):
    seen: list[tuple[str, int | None]] = []

    class Bar:
        def __init__(self, desc, total):
            seen.append((desc, total))

        def update(self, n=1):
            pass

        def close(self):
            pass

    tok = small["tok"]
    with progress.reporting(Bar):
        _tiktotok_knn.fasttext_token_space(small["model"], tok, len(tok), skip=small["skip"], ngrams=True)
    names = [d for d, _ in seen]
    assert names[0] == "fastText token vectors (vocabulary lookups)" and seen[0][1] == len(tok)
    assert "fastText token vectors (n-gram means, by position)" in names and len(names) == 5


def test_token_space_with_no_ngram_rows_at_all(tmp_path):
    """``maxn=0``: rare tokens have no n-gram rows; they get no vector and nothing fails."""
    tok = from_vocab("sentencepiece", SPECIALS + ["▁ab", "▁cd", "▁ef"])
    raw = tmp_path / "t.txt"
    raw.write_text("ab cd\n" * 40 + "ef\n", encoding="utf-8")
    model = _fasttext.train_fasttext(_fasttext.pretokenize(raw, tok, tmp_path / "t.tok"), **{**PARAMS, "maxn": 0})
    skip = np.array([c is None or not c.text for c in canonical_vocab(tok)])
    got = _tiktotok_knn.fasttext_token_space(model, tok, len(tok), skip=skip, ngrams=True)
    want = reference_token_space(model, tok, len(tok), skip=skip, ngrams=True)
    assert np.array_equal(got[1], want[1]) and got[0].tobytes() == want[0].tobytes()
    assert got[1][tok.convert_tokens_to_ids("▁ef")] == NO_VECTOR and got[1][tok.convert_tokens_to_ids("▁ab")] == IN_VOCABULARY

