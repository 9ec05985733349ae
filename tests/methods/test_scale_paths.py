"""What issue 31 changed in the newer methods for 250k x 50k inputs, on the tiny world: OFA's training
budget (lowers fastText's epochs only on corpora past it, recorded; the world's corpora and existing
trial ids unchanged) and the progress OMP and multivariate now report (what they compute unchanged)."""

from __future__ import annotations

import dataclasses

import numpy as np

from harness import progress, registry, seeding
from harness.run.config import resolved_fields
from methods.ofa import MAX_TRAIN_WORDS, OfaConfig, train_epochs
from methods.omp import omp_select
from tests.methods.test_ofa import FAST, transfer  # noqa: F401  (a fixture)


def _ofa(inputs, **cfg):
    return registry.get("method", "ofa").make(cfg).initialize(inputs, seeding.numpy_rng(1, "init", "ofa"))


def _same(a, b) -> bool:
    fields = ("indptr", "indices", "weights", "provenance")
    return all(np.array_equal(getattr(a.mapping, f), getattr(b.mapping, f)) for f in fields)


def test_train_epochs_lowers_only_past_the_budget():
    assert train_epochs(30, MAX_TRAIN_WORDS // 30, None) == 30  # at the limit: unchanged
    assert train_epochs(30, MAX_TRAIN_WORDS // 30 + 1, None) == 29
    assert train_epochs(30, 965_000, None) == 10  # the 40k-pair scale benchmark
    assert train_epochs(30, 10**9, None) == 5  # never below fastText's default ...
    assert train_epochs(2, 10**9, None) == 2  # ... nor above what was asked
    assert train_epochs(30, 10**9, 0) == 30  # 0: no limit
    assert train_epochs(30, 1000, 3000) == 5


def test_ofa_trial_ids_are_unchanged_while_the_budget_is_default():
    assert "max_train_words" not in resolved_fields(OfaConfig())  # records made before it keep their ids
    assert resolved_fields(OfaConfig(max_train_words=0))["max_train_words"] == 0


def test_ofa_under_the_budget_is_the_unlimited_result_and_over_it_trains_fewer_epochs(transfer):  # noqa: F811
    inputs = transfer["inputs"]
    cfg = {**FAST, "epochs": 8}
    default, unlimited = _ofa(inputs, **cfg), _ofa(inputs, **cfg, max_train_words=0)
    words = default.info["vectors"]["corpus_words"]
    assert default.info["vectors"]["fasttext_epochs"] == unlimited.info["vectors"]["fasttext_epochs"] == 8
    assert _same(default, unlimited)
    lowered = _ofa(inputs, **cfg, max_train_words=words * 6)
    assert lowered.info["vectors"]["fasttext_epochs"] == 6  # 8 epochs would read 8 x words
    six = _ofa(inputs, **{**cfg, "epochs": 6}, max_train_words=0)
    assert _same(lowered, six) and not _same(lowered, default)  # the same training as asking for 6 epochs


def test_omp_reports_its_pursuit_and_computes_the_same():
    g = np.random.default_rng(0)
    X, D = g.normal(size=(50, 6)), g.normal(size=(20, 6))
    silent = omp_select(X, D, 3, chunk_rows=16)
    seen: list = []

    class Bar:
        def __init__(self, desc, total):
            seen.append((desc, total))

        def update(self, n=1):
            seen.append(n)

        def close(self):
            seen.append("closed")

    with progress.reporting(Bar):
        shown = omp_select(X, D, 3, chunk_rows=16)
    assert all(np.array_equal(a, b) for a, b in zip(silent, shown))
    assert seen[0] == ("orthogonal matching pursuit, k=3 over 20 anchors (new tokens)", 50)
    steps = seen[1:-1]
    assert seen[-1] == "closed" and sum(steps) == 50 and all(n >= 0 for n in steps)
    assert len([n for n in steps if n > 0]) > 4  # within a chunk too (a share per pursuit step), not once per chunk


def test_multivariate_names_its_covariance_step(near_transfer):
    seen: list = []

    class Bar:
        def __init__(self, desc, total):
            seen.append(desc)

        def update(self, n=1):
            pass

        def close(self):
            pass

    inputs = near_transfer["inputs"]
    m = registry.get("method", "multivariate").make({})
    silent = m.initialize(inputs, np.random.default_rng(0))
    with progress.reporting(Bar):
        shown = m.initialize(inputs, np.random.default_rng(0))
    n, d = (int(x) for x in inputs.source_embeddings.shape)
    assert f"covariance of the source rows ({n:,} x {d})" in seen
    assert _same(silent, shown)
    assert dataclasses.asdict(silent.random_rows) == dataclasses.asdict(shown.random_rows)


def _subword_vectors_before(tokenizer, words, vectors, n_rows, *, word_counts="unique"):
    """``methods.ofa.subword_vectors`` before issue 31 (per-word ``np.unique`` over transformers' encodings), verbatim."""
    vectors = np.asarray(vectors, dtype=np.float64)
    rows, cols = [], []
    for variant in (words, [" " + w for w in words], [" " + w[:1].upper() + w[1:] for w in words]):
        ids = tokenizer(variant, add_special_tokens=False)["input_ids"] if variant else []
        r = np.concatenate([np.unique(np.asarray(x, dtype=np.int64)) for x in ids]) if ids else np.zeros(0, np.int64)
        c = np.repeat(np.arange(len(ids), dtype=np.int64), [len(np.unique(x)) for x in ids]) if ids else r
        rows.append(r)
        cols.append(c)
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


def test_subword_vectors_are_bit_identical_to_the_per_word_version(transfer):  # noqa: F811
    from harness import vocab as _canon
    from methods.ofa import subword_vectors, token_ids

    inputs = transfer["inputs"]
    g = np.random.default_rng(3)
    for tok, (words, _) in ((inputs.source_tokenizer, transfer["vectors"]["source"]),
                            (inputs.target_tokenizer, transfer["vectors"]["target"])):
        words = [*words, "", "<mask>", "Ünïcode-ß", "a  b"]  # an empty word, a special token's text, odd characters
        texts = words + [" " + w for w in words]
        assert token_ids(tok, texts) == tok(texts, add_special_tokens=False)["input_ids"]
        n = _canon.vocab_size(tok)
        vecs = g.normal(size=(len(words), 5))
        for mode in ("unique", "per-variant"):
            new, old = subword_vectors(tok, words, vecs, n, word_counts=mode), _subword_vectors_before(tok, words, vecs, n, word_counts=mode)
            assert np.array_equal(new[0], old[0]) and np.array_equal(new[1], old[1]) and new[1].sum() > 10
        assert np.array_equal(subword_vectors(tok, [], np.zeros((0, 5)), n)[0], np.zeros((n, 5), np.float32))
