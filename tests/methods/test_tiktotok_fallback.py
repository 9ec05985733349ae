"""Tik-to-Tok's ``fasttext-knn`` fallback: k-NN rows in a bilingual token-level fastText space for the
tokens the random fallback would fill; counts, determinism, degradation, configuration."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL, TransferInputs
from harness.registry import get
from harness.vocab import Canon, canonical_vocab
from methods import _fasttext, _tiktotok_knn
from methods._tiktotok_corpus import read_parallel_corpus
from methods.tiktotok import (
    IN_VOCABULARY,
    NGRAMS,
    NO_VECTOR,
    ORIGINS,
    FallbackSpace,
    TikToTokConfig,
    procrustes_knn,
    tiktotok_mapping,
)
from tests._tokfixtures import from_vocab
from tests.methods.test_align import race_two

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
SRC_ALPHABET, TGT_ALPHABET = "abcdefgh", "pqrstuvw"
CIPHER = str.maketrans(SRC_ALPHABET, TGT_ALPHABET)
# small fastText: dim 16 needs bucket >= methods._fasttext.min_bucket(16)
FAST_FT = {"fasttext_dim": 16, "fasttext_bucket": 540_672, "fasttext_epochs": 5, "fasttext_min_count": 2}


class KnnWorld:
    """A letter-cipher parallel corpus (source words over a-h, target words over p-w).

    The 24 most frequent words are single target tokens; 4 rarer ones are spelled in characters.
    Target extras that nothing maps with ``smoothing="none"``: prefixes of frequent words that
    never occur alone (vectors from character n-grams), a single-token word seen only twice
    (below the alignment ``min_count=3`` but in fastText's vocabulary: an in-vocabulary vector),
    and ``▁xyz``, whose letters never occur (no vector: still random).
    """

    def __init__(self, tmp: Path, n_pairs: int = 400, seed: int = 0) -> None:
        r = random.Random(seed)
        words = sorted({"".join(r.choice(SRC_ALPHABET) for _ in range(r.randint(5, 6))) for _ in range(80)})
        r.shuffle(words)
        self.words = words[:28]
        self.frequent = self.words[:24]
        self.rare = words[28]  # one token on both sides, in exactly two sentence pairs
        tgt = {w: w.translate(CIPHER) for w in [*self.words, self.rare]}
        chars_s = [f"▁{c}" for c in SRC_ALPHABET] + list(SRC_ALPHABET)
        chars_t = [f"▁{c}" for c in TGT_ALPHABET] + list(TGT_ALPHABET)
        self.src_vocab = SPECIALS + ["▁" + w for w in [*self.words, self.rare]] + chars_s + ["▁."]
        self.prefixes = sorted({"▁" + tgt[w][:4] for w in self.frequent[:4]} - {"▁" + tgt[w] for w in self.words})
        self.tgt_vocab = (
            SPECIALS + ["▁" + tgt[w] for w in [*self.frequent, self.rare]] + chars_t + ["▁."] + self.prefixes + ["▁xyz"]
        )
        assert len(set(self.tgt_vocab)) == len(self.tgt_vocab)
        self.src = from_vocab("sentencepiece", self.src_vocab)
        self.tgt = from_vocab("sentencepiece", self.tgt_vocab)
        zipf = np.array([1.0 / (k + 1) ** 0.5 for k in range(len(self.words))])
        rng = np.random.default_rng(seed)
        sentences = [
            [self.words[k] for k in rng.choice(len(self.words), size=int(rng.integers(3, 8)), p=zipf / zipf.sum())]
            for _ in range(n_pairs)
        ]
        sentences += [[self.frequent[0], self.rare], [self.rare, self.frequent[1]]]
        lines = [
            json.dumps({"source": " ".join(ws) + " .", "target": " ".join(tgt[w] for w in ws) + " ."})
            for ws in sentences
        ]
        self.corpus = tmp / "parallel.jsonl"
        self.corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
        self.E = torch.randn(len(self.src_vocab), 8, generator=torch.Generator().manual_seed(seed))
        self.rare_token = self.tgt.convert_tokens_to_ids("▁" + tgt[self.rare])

    def inputs(self, **kw) -> TransferInputs:
        kw.setdefault("parallel_corpus", self.corpus)
        return TransferInputs(self.src, self.tgt, self.E, **kw)

    def run(self, seed: int = 0, inputs: TransferInputs | None = None, **cfg):
        cfg = {"min_count": 3, "aligner": "ibm1", "smoothing": "none", "fallback": "random", **cfg}
        if cfg.get("fallback") == "fasttext-knn":
            cfg = {**FAST_FT, **cfg}
        return get("method", "tiktotok").make(cfg).initialize(inputs or self.inputs(), np.random.default_rng(seed))


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> KnnWorld:
    return KnnWorld(tmp_path_factory.mktemp("knn-world"))


@pytest.fixture(scope="module")
def runs(world, tmp_path_factory):
    """The random and the k-NN fallback on the same world and seed (k = 3)."""
    cache = tmp_path_factory.mktemp("knn-cache")
    return {
        "random": world.run(seed=4),
        "knn": world.run(seed=4, fallback="fasttext-knn", inputs=world.inputs(cache_dir=cache)),
        "cache": cache,
    }


def _same_mapping(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("indptr", "indices", "weights", "provenance"))


# ------------------------------------------------------------------------------------------------
# The method on the cipher world
# ------------------------------------------------------------------------------------------------


def test_knn_rows_replace_random_rows_with_k_source_averages(world, runs):
    rnd, knn = runs["random"].mapping, runs["knn"].mapping
    k = 3
    was_random = np.flatnonzero(rnd.provenance == FALLBACK)
    now_knn = [t for t in was_random if knn.provenance[t] != FALLBACK]
    assert len(now_knn) >= 2
    unk = world.src.convert_tokens_to_ids("<unk>")
    for t in now_knn:
        ids, ws = knn.row(int(t))
        assert knn.provenance[t] == COMBINED
        assert len(ids) == k == len(set(ids.tolist())) and np.allclose(ws, 1.0 / k)
        assert unk not in ids.tolist() and all(world.src_vocab[s] not in SPECIALS for s in ids)
    # the fallback changes nothing that was already mapped
    for t in np.flatnonzero(rnd.provenance != FALLBACK):
        assert knn.provenance[t] == rnd.provenance[t]
        assert all(np.array_equal(x, y) for x, y in zip(knn.row(int(t)), rnd.row(int(t))))
    # a prefix that never occurs alone gets a vector from its n-grams, the twice-seen word its own vector
    fb = runs["knn"].info["fallback"]
    assert world.rare_token in now_knn and fb["with_vector_in_vocabulary"] >= 1 and fb["with_vector_ngrams"] >= 1
    assert any(world.tgt.convert_tokens_to_ids(p) in now_knn for p in world.prefixes)
    # ▁xyz shares no n-gram with anything seen: still random, and says why
    xyz = world.tgt.convert_tokens_to_ids("▁xyz")
    assert knn.provenance[xyz] == FALLBACK and runs["knn"].info["fallback_reasons"]["no-fasttext-vector"] >= 1


def test_info_counts_add_up(world, runs):
    rnd, knn = runs["random"].info, runs["knn"].info
    n_target = len(world.tgt_vocab)
    assert set(knn["sources"]) == {*ORIGINS, "fallback"}
    assert sum(knn["sources"].values()) == n_target == sum(rnd["sources"].values())
    assert rnd["sources"]["knn"] == 0 and rnd["fallback"] == {"mode": "random"}
    fb = knn["fallback"]
    assert fb["mode"] == "fasttext-knn" and fb["k"] == 3 and fb["skipped"] is None
    assert fb["knn"] == knn["sources"]["knn"] == fb["with_vector"] > 0
    assert fb["with_vector"] == fb["with_vector_in_vocabulary"] + fb["with_vector_ngrams"]
    assert fb["random"] == knn["sources"]["fallback"] == knn["counts"]["fallback"]
    assert fb["knn"] + fb["random"] == rnd["sources"]["fallback"]
    assert sum(knn["fallback_reasons"].values()) == fb["random"]
    assert knn["counts"]["combined"] == rnd["counts"]["combined"] + fb["knn"]
    fit = fb["procrustes"]
    assert fit["pairs"] >= 10 and 0.0 <= fit["precision_at_1"] <= fit["precision_at_k"] <= 1.0
    assert (
        fit["mean_pair_cosine_after"] >= fit["mean_pair_cosine_before"] and fit["residual"] <= fit["residual_unaligned"]
    )
    ft = fb["fasttext"]
    assert ft["target"]["deterministic"] and ft["source"]["cache"] == "miss" and ft["target"]["in_vocabulary"] > 0
    assert {"overlap", "corpus", "alignment", "examples"} <= set(knn)  # the rest of the info is still there
    assert knn["timings"]["fasttext_s"] > 0 and "fallback_s" in knn["timings"]
    json.dumps(knn)  # the record must be JSON-serializable


def test_determinism_under_disturbed_global_rng_and_cache(world, runs):
    a = runs["knn"]
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    _ = random.random(), np.random.rand(3), torch.rand(3)
    b = world.run(seed=4, fallback="fasttext-knn", inputs=world.inputs(cache_dir=runs["cache"]))
    assert b.info["fallback"]["fasttext"]["target"]["cache"] == "hit"
    assert _same_mapping(a.mapping, b.mapping)
    c = world.run(seed=4, fallback="fasttext-knn")  # no cache: trained again, same seed, same rows
    assert c.info["fallback"]["fasttext"]["target"]["cache"] == "off"
    assert _same_mapping(a.mapping, c.mapping)
    d = world.run(seed=5, fallback="fasttext-knn", inputs=world.inputs(cache_dir=runs["cache"]))
    assert d.info["fallback"]["fasttext"]["seed"] != a.info["fallback"]["fasttext"]["seed"]


def test_held_fasttext_seed_trains_once_for_every_trial_seed(world, tmp_path):
    """``fasttext_seed`` holds the fallback's fastText models (the quickstart's one training per language):
    another trial seed hits the cache; unset, the id-relevant config is unchanged (omitted from trial ids)."""
    from harness.run.config import resolved_fields

    held = {"fallback": "fasttext-knn", "fasttext_seed": 0}
    a = world.run(seed=4, inputs=world.inputs(cache_dir=tmp_path), **held)
    b = world.run(seed=5, inputs=world.inputs(cache_dir=tmp_path), **held)
    assert a.info["fallback"]["fasttext"]["seed"] == b.info["fallback"]["fasttext"]["seed"] == 0
    assert b.info["fallback"]["fasttext"]["target"]["cache"] == "hit"
    resolved = resolved_fields(TikToTokConfig())
    assert "fasttext_seed" not in resolved and "align_seed" not in resolved
    assert resolved_fields(TikToTokConfig(fasttext_seed=0))["fasttext_seed"] == 0
    with pytest.raises(ValueError, match="TikToTokConfig.fasttext_seed"):
        TikToTokConfig(fasttext_seed=-1)


def test_k_and_ngram_vectors_options(world, runs):
    one = world.run(seed=4, fallback="fasttext-knn", fallback_k=1, inputs=world.inputs(cache_dir=runs["cache"]))
    t = world.rare_token
    assert one.mapping.provenance[t] == COPIED and one.mapping.row(t)[1].tolist() == [1.0]  # one source row
    own_only = world.run(
        seed=4, fallback="fasttext-knn", fasttext_ngram_vectors=False, inputs=world.inputs(cache_dir=runs["cache"])
    )
    fb = own_only.info["fallback"]
    assert fb["with_vector_ngrams"] == 0 and fb["with_vector_in_vocabulary"] >= 1
    assert fb["knn"] < runs["knn"].info["fallback"]["knn"]


def test_no_fasttext_vocabulary_degrades_to_random_rows(world, runs):
    res = world.run(seed=4, fallback="fasttext-knn", fasttext_min_count=10**6)
    fb = res.info["fallback"]
    assert fb["knn"] == 0 and fb["skipped"] and fb["procrustes"] is None
    assert "error" in fb["fasttext"]["target"] and "error" in fb["fasttext"]["source"]
    assert _same_mapping(res.mapping, runs["random"].mapping)
    assert res.info["fallback_reasons"] == {"no-fasttext-vector": runs["random"].info["counts"]["fallback"]}


# ------------------------------------------------------------------------------------------------
# The token-space cache: what the fallback reads of fastText, and no fastText model
# ------------------------------------------------------------------------------------------------

SPACE_SEED = 7
SPACE_CFG = TikToTokConfig(min_count=3, fallback="fasttext-knn", **FAST_FT)


def _fallback_space(world: KnnWorld, cache: Path | None) -> FallbackSpace:
    """``train_fallback_space`` on the cipher world: both sides, the target one with n-gram vectors."""
    return _tiktotok_knn.train_fallback_space(
        SPACE_CFG, world.inputs(cache_dir=cache), read_parallel_corpus(world.corpus), SPACE_SEED,
        canonical_vocab(world.src), canonical_vocab(world.tgt), len(world.src_vocab),
    )  # fmt: skip


def _same_space(a: FallbackSpace, b: FallbackSpace) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("target", "target_kind", "source", "source_kind"))


def _forbid_training(monkeypatch) -> None:
    def refuse(*_a, **_k):
        raise AssertionError("fastText was trained although the cache holds what is needed")

    monkeypatch.setattr(_fasttext, "_train_unsupervised", refuse)


@pytest.fixture(scope="module")
def reference(world, tmp_path_factory):
    """Each side's token space computed directly from a freshly trained full fastText model.

    The models are trained the way an older version cached them (a full ``<key>.bin`` under
    ``old_cache``), which ``test_an_old_bin_in_the_cache_is_used_without_training`` then finds.
    """
    old_cache, tmp = tmp_path_factory.mktemp("old-cache"), tmp_path_factory.mktemp("old-tmp")
    pairs = read_parallel_corpus(world.corpus)
    params = _tiktotok_knn.fasttext_params(SPACE_CFG, SPACE_SEED)
    out = {"cache": old_cache}
    sides = (("target", world.tgt, [t for _, t in pairs], True), ("source", world.src, [s for s, _ in pairs], False))
    for side, tok, lines, ngrams in sides:
        text = _tiktotok_knn._side_text(lines, tok, old_cache, tmp, side)
        rep: dict = {}
        model = _fasttext.train_fasttext(text, cache_dir=old_cache, report=rep, **params)
        assert rep["cache"] == "miss" and rep["path"].endswith(".bin")
        skip = np.array([c is None or not c.text for c in canonical_vocab(tok)])
        out[side] = _tiktotok_knn.fasttext_token_space(model, tok, len(tok), skip=skip, ngrams=ngrams)
    t_kind, s_kind = out["target"][1], out["source"][1]
    assert {IN_VOCABULARY, NGRAMS, NO_VECTOR} <= set(t_kind.tolist()) and IN_VOCABULARY in s_kind  # not a trivial space
    out["space"] = FallbackSpace(out["target"][0], t_kind, out["source"][0], s_kind)
    return out


@pytest.fixture(scope="module")
def cached_space(world, tmp_path_factory):
    """A fresh cache after one ``train_fallback_space`` call (a miss: trained and stored)."""
    cache = tmp_path_factory.mktemp("space-cache")
    return {"cache": cache, "space": _fallback_space(world, cache)}


def test_the_cached_token_space_is_bit_identical_to_the_trained_model(world, reference, cached_space, monkeypatch):
    first = cached_space["space"]
    assert _same_space(first, reference["space"])  # stored on a miss: exactly what the model gives
    _forbid_training(monkeypatch)
    again = _fallback_space(world, cached_space["cache"])
    assert _same_space(again, reference["space"])  # served from the cache: the same arrays
    assert again.target.dtype == np.float32 and again.target_kind.dtype == np.int8
    for side in ("target", "source"):
        assert first.info[side]["cache"] == "miss" and again.info[side]["cache"] == "hit"
        kept = ("params", "n_words", "deterministic", "in_vocabulary", "ngrams", "no_vector", "path", "bytes")
        assert {k: again.info[side][k] for k in kept} == {k: first.info[side][k] for k in kept}


def test_two_workers_wanting_one_uncached_token_space_train_it_once(world, reference, tmp_path, monkeypatch):
    """A held fastText seed makes two workers ask for the same token spaces at once: per side one trains
    and stores, the other waits on the entry's build lock (<cache>/.locks/tokspace-*) and reads it."""
    spaces, built = race_two(monkeypatch, lambda: _fallback_space(world, tmp_path), _fasttext, "_train_unsupervised")
    assert built == 2  # one training per side, not per worker
    for side in ("target", "source"):
        assert sorted(s.info[side]["cache"] for s in spaces) == ["hit", "miss"]
    assert all(_same_space(s, reference["space"]) for s in spaces)
    assert len(list((tmp_path / "fasttext").glob(f"{_tiktotok_knn.TOKEN_SPACE_PREFIX}*.npz"))) == 2
    assert len(list((tmp_path / ".locks").glob("tokspace-*.lock"))) == 2


def test_the_cache_keeps_token_spaces_and_no_fasttext_model(world, runs, cached_space, monkeypatch):
    cache = runs["cache"]  # after a whole Tik-to-Tok init with the fasttext-knn fallback
    assert list(cache.rglob("*.bin")) == [] and list(cached_space["cache"].rglob("*.bin")) == []
    ft = runs["knn"].info["fallback"]["fasttext"]
    for side in ("target", "source"):
        path = Path(ft[side]["path"])
        assert ft[side]["stored"] == "token-space" and path.parent == cache / "fasttext"
        assert path.name.startswith(_tiktotok_knn.TOKEN_SPACE_PREFIX) and ft[side]["bytes"] == path.stat().st_size
        assert ft[side]["bytes"] < 100_000  # the .bin of one of these models takes over 34 MB
    # the second init reads both sides from the cache and trains nothing
    _forbid_training(monkeypatch)
    again = world.run(seed=4, fallback="fasttext-knn", inputs=world.inputs(cache_dir=cache))
    assert {again.info["fallback"]["fasttext"][s]["cache"] for s in ("target", "source")} == {"hit"}
    assert _same_mapping(again.mapping, runs["knn"].mapping)


def test_the_token_space_key_covers_what_the_space_depends_on(world):
    skip = np.zeros(len(world.tgt), bool)
    base = _tiktotok_knn.token_space_key("a" * 64, world.tgt, len(world.tgt), skip, True)
    assert base == _tiktotok_knn.token_space_key("a" * 64, world.tgt, len(world.tgt), skip.copy(), True)
    skip_one = skip.copy()
    skip_one[3] = True
    others = {
        _tiktotok_knn.token_space_key("b" * 64, world.tgt, len(world.tgt), skip, True),
        _tiktotok_knn.token_space_key("a" * 64, world.src, len(world.tgt), skip, True),
        _tiktotok_knn.token_space_key("a" * 64, world.tgt, len(world.tgt) + 1, np.append(skip, False), True),
        _tiktotok_knn.token_space_key("a" * 64, world.tgt, len(world.tgt), skip_one, True),
        _tiktotok_knn.token_space_key("a" * 64, world.tgt, len(world.tgt), skip, False),
    }
    assert base not in others and len(others) == 5
    with pytest.raises(ValueError, match="skip has 3 entries, expected at least n_rows="):
        _tiktotok_knn.token_space_key("a" * 64, world.tgt, len(world.tgt), skip[:3], True)


def test_an_old_bin_in_the_cache_is_used_without_training(world, reference, monkeypatch, caplog):
    old = reference["cache"]
    bins = sorted(old.rglob("*.bin"))
    assert len(bins) == 2
    _forbid_training(monkeypatch)
    with caplog.at_level(logging.INFO, logger="methods._tiktotok_knn"):
        space = _fallback_space(world, old)
    assert _same_space(space, reference["space"])
    assert sorted(space.info[s]["migrated_from"] for s in ("target", "source")) == sorted(str(b) for b in bins)
    assert {space.info[s]["cache"] for s in ("target", "source")} == {"hit"}
    assert list(old.rglob("*.bin")) == [] and "replaced the full model" in caplog.text
    assert _same_space(_fallback_space(world, old), reference["space"])  # now from the token spaces


def _other_entry(path: Path) -> None:
    """A well-formed entry of another key (the source side's) under this name."""
    (other,) = [p for p in path.parent.glob(f"{_tiktotok_knn.TOKEN_SPACE_PREFIX}*") if p != path]
    path.write_bytes(other.read_bytes())


def _rewrite_kind(path: Path) -> None:
    """A well-formed entry that says a token without a vector has an n-gram vector: must not be trusted."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    kinds = arrays["kinds"].copy()
    kinds[np.flatnonzero(kinds == NO_VECTOR)[-1]] = NGRAMS
    with open(path, "wb") as f:
        np.savez(f, **{**arrays, "kinds": kinds})


DAMAGE = {
    "garbage": lambda p: p.write_bytes(b"not a zip file"),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "empty": lambda p: p.write_bytes(b""),
    "wrong-kinds": _rewrite_kind,
    "other-key": _other_entry,
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_token_space_is_rebuilt_with_a_warning(world, reference, cached_space, damage, tmp_path, caplog):
    cache = tmp_path / "cache"
    for p in (cached_space["cache"] / "fasttext").iterdir():  # a copy: the other tests keep their entries
        (cache / "fasttext").mkdir(parents=True, exist_ok=True)
        (cache / "fasttext" / p.name).write_bytes(p.read_bytes())
    entry = cache / "fasttext" / Path(cached_space["space"].info["target"]["path"]).name
    DAMAGE[damage](entry)
    with caplog.at_level(logging.WARNING, logger="methods._tiktotok_knn"):
        space = _fallback_space(world, cache)
    assert f"cannot read {entry}" in caplog.text and "building it again" in caplog.text
    assert space.info["target"]["cache"] == "miss" and space.info["source"]["cache"] == "hit"
    assert _same_space(space, reference["space"])
    assert list(cache.rglob("*.bin")) == []
    assert _fallback_space(world, cache).info["target"]["cache"] == "hit"  # the rebuilt entry reads back


# ------------------------------------------------------------------------------------------------
# The core with hand-made vectors
# ------------------------------------------------------------------------------------------------


def test_core_knn_finds_the_rotated_neighbours():
    rng = np.random.default_rng(0)
    d, n_src = 6, 12
    src_vecs = rng.normal(size=(n_src, d)).astype(np.float32)
    rot, _ = np.linalg.qr(rng.normal(size=(d, d)))
    source = [None] + [Canon(f"s{i}".encode(), True) for i in range(1, n_src)]
    # targets 1..8 are aligned to sources 1..8; target 9 is unmapped and sits on source 10, target 10 on source 11
    target = [None] + [Canon(f"t{i}".encode(), True) for i in range(1, 11)] + [Canon(b"q", True)]
    tgt_vecs = np.zeros((len(target), d), np.float32)
    tgt_vecs[1:9] = src_vecs[1:9] @ rot.T
    tgt_vecs[9] = src_vecs[10] @ rot.T
    tgt_vecs[10] = src_vecs[11] @ rot.T
    kinds = np.array([NO_VECTOR] + [IN_VOCABULARY] * 9 + [NGRAMS, NO_VECTOR], dtype=np.int8)
    space = FallbackSpace(tgt_vecs, kinds, src_vecs, np.full(n_src, IN_VOCABULARY, np.int8))
    word_pairs = {((t,), (t,)): 5 for t in range(1, 9)}
    # no centering: the two spaces' means differ (different token sets), which would spoil the exact rotation
    cfg = TikToTokConfig(min_count=1, smoothing="none", fallback="fasttext-knn", fallback_k=1, fasttext_center=False)
    m, info = tiktotok_mapping(
        target, source, n_source=n_src, word_pairs=word_pairs, exact=np.zeros((0, 2)), fuzzy=np.zeros((0, 2)),
        specials=np.array([[0, 0]]), config=cfg, fallback_space=space,
    )  # fmt: skip
    assert m.row(9)[0].tolist() == [10] and m.row(10)[0].tolist() == [11]
    assert m.provenance[11] == FALLBACK and m.provenance[0] == SPECIAL
    fb = info["fallback"]
    assert fb["procrustes"]["pairs"] == 8 and fb["procrustes"]["precision_at_1"] == 1.0
    assert fb["procrustes"]["residual"] < 1e-5 and fb["with_vector_ngrams"] == 1
    assert info["sources"]["knn"] == 2 and info["fallback_reasons"] == {"no-fasttext-vector": 1}
    # k = 3, centered (the default): three distinct neighbours, the true one among them
    m3, info3 = tiktotok_mapping(
        target, source, n_source=n_src, word_pairs=word_pairs, exact=np.zeros((0, 2)), fuzzy=np.zeros((0, 2)),
        specials=np.array([[0, 0]]), config=TikToTokConfig(min_count=1, smoothing="none", fallback="fasttext-knn"),
        fallback_space=space,
    )  # fmt: skip
    ids, ws = m3.row(9)
    assert len(ids) == 3 and 10 in ids.tolist() and 0 not in ids.tolist() and np.allclose(ws, 1 / 3)
    assert info3["fallback"]["procrustes"]["centered"] and not info["fallback"]["procrustes"]["centered"]
    # no source vectors: no bilingual space, the tokens with a vector say so
    no_source = FallbackSpace(tgt_vecs, kinds, src_vecs, np.zeros(n_src, np.int8))
    m0, info0 = tiktotok_mapping(
        target, source, n_source=n_src, word_pairs=word_pairs, exact=np.zeros((0, 2)), fuzzy=np.zeros((0, 2)),
        specials=np.array([[0, 0]]), config=cfg, fallback_space=no_source,
    )  # fmt: skip
    assert info0["fallback"]["skipped"] and info0["sources"]["knn"] == 0
    assert info0["fallback_reasons"] == {"no-bilingual-space": 2, "no-fasttext-vector": 1}
    with pytest.raises(ValueError, match="fallback_space"):
        tiktotok_mapping(
            target, source, n_source=n_src, word_pairs=word_pairs, exact=np.zeros((0, 2)), fuzzy=np.zeros((0, 2)),
            specials=np.array([[0, 0]]), config=cfg,
        )  # fmt: skip


def test_procrustes_knn_clips_k_to_the_keys():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 3))
    idx, cos, info = procrustes_knn(x[:1], x, x, x[:2], k=5)
    assert idx.shape == cos.shape == (1, 2) and cos[0, 0] >= cos[0, 1]
    assert "precision_at_1" not in info and info["residual"] < 1e-6
    with pytest.raises(ValueError, match="at least one pair"):
        procrustes_knn(x[:1], x[:0], x[:0], x, k=1)


# ------------------------------------------------------------------------------------------------
# Configuration
# ------------------------------------------------------------------------------------------------


def test_the_default_fallback_is_the_blogs_fasttext_knn(world, runs):
    """METHODS.md step 4 / the blog: after smoothing, the fastText k-NN step; ``random`` is the option."""
    assert TikToTokConfig().fallback == "fasttext-knn" and TikToTokConfig().fallback_k == 3
    cfg = {**FAST_FT, "min_count": 3, "aligner": "ibm1", "smoothing": "none"}  # no "fallback" key: the default
    res = get("method", "tiktotok").make(cfg).initialize(world.inputs(cache_dir=runs["cache"]), np.random.default_rng(4))
    assert res.info["fallback"]["mode"] == "fasttext-knn" and res.info["sources"]["knn"] >= 2
    assert _same_mapping(res.mapping, runs["knn"].mapping)
    assert res.info["sources"]["fallback"] < runs["random"].info["sources"]["fallback"]
    assert "nondeterministic" not in res.info  # one fastText thread, a deterministic aligner


def test_two_cold_runs_of_the_full_default_are_bit_identical(world):
    """The method's own defaults end to end (fast-align, fastText-kNN), no cache and no in-process memo:
    two runs with one trial seed and a disturbed global RNG in between give the same links and rows."""
    from methods import _align

    cfg = {**FAST_FT, "min_count": 3}  # nothing else: the default aligner, smoothing and fallback
    results = []
    for k in range(2):
        _align._MEMO.clear()
        if k:
            random.seed(11)
            np.random.seed(11)
            torch.manual_seed(11)
            _ = random.random(), np.random.rand(3), torch.rand(3)
        res = get("method", "tiktotok").make(cfg).initialize(world.inputs(), np.random.default_rng(9))
        assert res.info["alignment"]["aligner"] == "fast-align" and res.info["alignment"]["links_from"] == "computed"
        assert res.info["fallback"]["mode"] == "fasttext-knn" and res.info["fallback"]["fasttext"]["target"]["cache"] == "off"
        assert "nondeterministic" not in res.info
        results.append(res)
    a, b = results
    assert a.info["sources"]["knn"] > 0 and a.info["sources"]["aligned"] > 0
    assert a.info["alignment"]["cache_key"] == b.info["alignment"]["cache_key"]
    assert a.info["alignment"]["model"] == b.info["alignment"]["model"]  # tension, likelihood: identical floats
    assert _same_mapping(a.mapping, b.mapping)


def test_fasttext_threads_are_listed_as_nondeterministic(world):
    res = world.run(seed=4, fallback="fasttext-knn", fasttext_threads=2)
    assert res.info["nondeterministic"] == ["fasttext"]
    assert res.info["fallback"]["fasttext"]["target"]["deterministic"] is False


def test_config_accepts_fasttext_knn_and_rejects_unknown_fallbacks():
    assert TikToTokConfig(fallback="random").fallback == "random"
    assert TikToTokConfig(fallback="fasttext-knn").fallback_k == 3
    with pytest.raises(
        ValueError, match=r"TikToTokConfig\.fallback must be one of \('random', 'fasttext-knn'\), got 'knn'"
    ):
        TikToTokConfig(fallback="knn")
    with pytest.raises(ValueError, match="fallback_k"):
        TikToTokConfig(fallback="fasttext-knn", fallback_k=0)
    with pytest.raises(ValueError, match="fasttext_model"):
        TikToTokConfig(fasttext_model="glove")
    with pytest.raises(ValueError, match="fasttext_bucket"):
        TikToTokConfig(fasttext_dim=16, fasttext_bucket=1000)
    with pytest.raises(ValueError, match="fasttext_minn"):
        TikToTokConfig(fasttext_minn=7, fasttext_maxn=6)
    with pytest.raises(ValueError, match="fallback"):
        get("method", "tiktotok").make({"fallback": "nearest"})
