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
    assert seen[1:] == [16, 16, 16, 2, "closed"]  # one update per chunk, up to every target


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
