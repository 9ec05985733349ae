"""``clp`` (CLP-Transfer, Ostendorff & Rehm 2023) and the helper-model resource it reads.

Rows are checked against a brute-force re-derivation (cosines of the helper's embeddings divided by
their sum, in float64); the world's helper (``targets[].helper_model: world:mlm``) against the
target tokenizer's vocabulary; the resource through the config, the runner's cache key and
``tokxfer init --helper-model``.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from harness import registry, seeding
from harness import vocab as _canon
from harness.protocols import COMBINED, COPIED, FALLBACK, TransferResources
from harness.run.config import ConfigError, SourceSpec, TargetSpec, TokenizerSpec
from methods.clp import MIN_SIMILARITY_SUM, ClpConfig, clp_weights


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return a @ b.T


@pytest.mark.parametrize("top_k", [None, 3])
def test_weights_are_cosines_divided_by_their_sum(top_k):
    g = np.random.default_rng(0)
    new, anchors = g.normal(size=(40, 6)) + 0.5, g.normal(size=(9, 6)) + 0.5
    indptr, idx, w, ok = clp_weights(new, anchors, top_k=top_k, chunk_rows=7)
    C = _cos(new, anchors)
    rows = np.flatnonzero(ok)
    assert len(indptr) == len(rows) + 1
    for r, i in enumerate(rows):
        keep = np.arange(9) if top_k is None else np.argsort(-C[i])[:top_k]
        want = C[i, keep] / C[i, keep].sum()
        a, b = indptr[r], indptr[r + 1]
        np.testing.assert_allclose(dict(zip(idx[a:b], w[a:b]))[keep[0]], want[0], rtol=1e-5)
        got = dict(zip(idx[a:b].tolist(), w[a:b]))
        np.testing.assert_allclose([got[j] for j in keep], want, rtol=1e-5, atol=1e-7)
        assert abs(w[a:b].sum() - 1) < 1e-9
    bad = C.sum(1) <= MIN_SIMILARITY_SUM if top_k is None else np.sort(C, 1)[:, -top_k:].sum(1) <= MIN_SIMILARITY_SUM
    assert np.array_equal(~ok, bad)


def test_a_token_whose_cosines_cancel_is_not_combined():
    anchors = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])
    _, idx, w, ok = clp_weights(np.array([[0.0, -1.0], [0.0, 1.0]]), anchors)
    assert ok.tolist() == [False, True]  # cosines 0, 0, -1 sum to -1: dividing by it would flip every weight
    assert idx.tolist() == [0, 1, 2] and w.tolist() == [0.0, 0.0, 1.0]


# ------------------------------------------------------------------------- the method on the tiny world


@pytest.fixture(scope="module")
def transfer(near_transfer):
    return near_transfer


def _run(inputs, **cfg):
    return registry.get("method", "clp").make(cfg).initialize(inputs, seeding.numpy_rng(1, "init", "clp"))


@pytest.mark.parametrize("top_k", [None, 5])
def test_rows_are_the_brute_force_clp_average_of_the_overlap(transfer, top_k):
    inputs, H = transfer["inputs"], transfer["helper"]
    res = _run(inputs, top_k=top_k)
    m = res.mapping
    assert res.info["helper"]["same_vocabulary"] is True  # ids of the helper are the target's
    ov = _canon.compute_overlap(inputs.source_tokenizer, inputs.target_tokenizer, fuzzy=False)
    anchors = ov.exact
    specials = _canon.special_ids(inputs.target_tokenizer)
    new = [t for t in range(m.n_target) if t not in set(anchors[:, 0].tolist()) and t not in specials]
    C = _cos(H[new], H[anchors[:, 0]])
    combined = 0
    for i, t in enumerate(new):
        keep = np.arange(len(anchors)) if top_k is None else np.argsort(-C[i], kind="stable")[:top_k]
        total = C[i, keep].sum()
        if total <= MIN_SIMILARITY_SUM:
            assert m.provenance[t] == FALLBACK
            continue
        combined += 1
        assert m.provenance[t] == COMBINED
        got = dict(zip(*(x.tolist() for x in m.row(t))))
        want = {int(anchors[j, 1]): C[i, j] / total for j in keep}
        assert got.keys() == want.keys()
        np.testing.assert_allclose([got[s] for s in want], list(want.values()), rtol=1e-4, atol=1e-6)
    assert combined > 50
    for t, s in anchors:
        assert m.provenance[t] == COPIED and m.row(int(t))[0].tolist() == [int(s)]
    # every random row has its reason; the weights of a combined row sum to 1
    fb = set(m.fallback_ids().tolist()) - specials
    assert {t for ids in res.random_reasons.values() for t in ids} == fb
    comb = np.flatnonzero(m.provenance == COMBINED)
    sums = np.bincount(np.repeat(np.arange(m.n_target), np.diff(m.indptr)), weights=m.weights.astype(np.float64))
    np.testing.assert_allclose(sums[comb], 1.0, atol=1e-5)


def test_extension_rows_are_the_brute_force_clp_average_and_old_rows_stay(transfer):
    """Extension mode: the added tokens are CLP averages of the overlap (now the whole source vocabulary
    the helper knows), re-derived by hand with the helper's vectors looked up by canonical form; every
    old id keeps its source row once the harness applies ``keep_original_rows``."""
    from harness.extension import extend_tokenizer, keep_original_rows

    inputs, H = transfer["inputs"], transfer["helper"]
    src_tok = inputs.source_tokenizer
    ext, added = extend_tokenizer(src_tok, inputs.target_tokenizer, inputs.target_corpus, 40)
    assert len(added) == 40
    res = _run(dataclasses.replace(inputs, target_tokenizer=ext, extension_tokenizer=inputs.target_tokenizer))
    n_old = _canon.vocab_size(src_tok)
    m, info = keep_original_rows(res.mapping, n_old, _canon.special_ids(src_tok))
    assert info["n_added"] == 40
    assert np.array_equal(m.indices[m.indptr[:n_old]], np.arange(n_old)) and np.all(m.weights[m.indptr[:n_old]] == 1)
    # the helper's row of each extended-vocabulary token, by canonical form (the helper speaks the target vocabulary)
    helper_row = {c: i for i, c in reversed(list(enumerate(_canon.canonical_vocab(inputs.target_tokenizer))))
                  if c is not None}
    canon = _canon.canonical_vocab(ext)
    ov = _canon.compute_overlap(src_tok, ext, fuzzy=False)
    anchors = np.array([(t, s) for t, s in ov.exact if canon[t] in helper_row], dtype=np.int64)
    A = H[[helper_row[canon[t]] for t in anchors[:, 0]]]
    combined = 0
    for t in added:
        if canon[t] not in helper_row:
            assert m.provenance[t] == FALLBACK
            continue
        c = _cos(H[[helper_row[canon[t]]]], A)[0]
        if c.sum() <= MIN_SIMILARITY_SUM:
            assert m.provenance[t] == FALLBACK
            continue
        combined += 1
        assert m.provenance[t] == COMBINED
        got = dict(zip(*(x.tolist() for x in m.row(t))))
        want: dict[int, float] = {}
        for s, w in zip(anchors[:, 1].tolist(), (c / c.sum()).tolist()):
            want[s] = want.get(s, 0.0) + w
        assert got.keys() == want.keys()
        np.testing.assert_allclose([got[s] for s in want], list(want.values()), rtol=1e-4, atol=1e-6)
    assert combined >= 10  # the rest: cosines over the whole source vocabulary that sum to <= 0 (checked above)
    assert {t for ids in res.random_reasons.values() for t in ids} >= {t for t in added if m.provenance[t] == FALLBACK}


def test_without_a_helper_or_with_a_foreign_one(transfer):
    inputs = transfer["inputs"]
    with pytest.raises(ValueError, match="inputs.helper_model"):
        _run(dataclasses.replace(inputs, helper_model=None))
    # a helper in the source vocabulary knows the overlap but no new token: every new row random, said so
    res = _run(dataclasses.replace(inputs, helper_model=transfer["model_dir"]))
    assert np.sum(res.mapping.provenance == COMBINED) == 0
    [(why, ids)] = res.random_reasons.items()
    assert "helper model's vocabulary" in why
    assert set(ids) == set(res.mapping.fallback_ids().tolist()) - _canon.special_ids(inputs.target_tokenizer)


def test_dense_weights_have_a_ceiling_that_names_top_k(transfer):
    with pytest.raises(ValueError, match="set top_k"):
        _run(transfer["inputs"], max_dense_weights=100)
    assert _run(transfer["inputs"], max_dense_weights=100, top_k=2).mapping.counts()["combined"] > 0
    with pytest.raises(ValueError, match="top_k"):
        ClpConfig(top_k=0)


# ------------------------------------------------------------------------- the helper-model resource


def test_world_helper_is_pretrained_in_the_target_tokenizers_vocabulary(tiny_world, tiny_helper):
    from harness.run.resources import target_tokenizer
    from harness.tokenizers import load_tokenizer
    from harness.world import World

    target = TargetSpec("near", tokenizer=TokenizerSpec(algorithm="unigram", vocab_size=300), helper_model="world:mlm")
    tok = target_tokenizer(target, World(tiny_world), progress=False)
    assert load_tokenizer(tiny_helper).get_vocab() == tok.get_vocab()
    info = json.loads((tiny_helper / "pretrain_info.json").read_text())
    assert info["train_files"] == ["train.txt"] and info["dev_loss"] is not None  # the target's text, its dev split
    assert (tiny_helper / "config.json").is_file()


def test_helper_model_in_the_config():
    plain = TargetSpec("near")
    assert "helper_model" not in plain.resolved()  # targets without a helper keep their trial ids
    assert TargetSpec("near", helper_model="world:mlm").resolved()["helper_model"] == "world:mlm"
    with pytest.raises(ConfigError, match="world:mlm or world:clm"):
        TargetSpec("near", helper_model="world:bert")
    with pytest.raises(ConfigError, match="tokenizer.path"):
        TargetSpec("near", tokenizer=TokenizerSpec(path="/no/such/tok"), helper_model="world:mlm")
    from harness.run.config import parse_experiment

    raw = {"name": "x", "source": {"model": "/no/such/model"}, "targets": [{"language": "de", "helper_model": "world:mlm"}],
           "methods": ["clp"], "tasks": ["mlm-at-init"]}
    with pytest.raises(ConfigError, match="give targets\\[\\].corpus or a 'world:' section"):
        parse_experiment(raw, where="x.yaml")
    # a real source: the helper is pretrained on the target's own corpus
    raw["targets"][0]["corpus"] = "/no/such/train.txt"
    assert parse_experiment(raw, where="x.yaml").targets[0].helper_model == "world:mlm"
    # helper_pretrain: PretrainConfig keys, only for a helper the harness pretrains, omitted while unset
    assert "helper_pretrain" not in TargetSpec("near", helper_model="world:mlm").resolved()
    small = TargetSpec("near", helper_model="world:mlm", helper_pretrain={"hidden_size": 32, "num_heads": 2})
    assert small.resolved()["helper_pretrain"] == {"hidden_size": 32, "num_heads": 2}
    assert small.helper_pretrain_config({"steps": 7, "hidden_size": 64}).hidden_size == 32  # over the source's
    for bad, words in (({"hiden_size": 32}, ["helper_pretrain", "hiden_size", "hidden_size"]),
                       ({"vocab_size": 10}, ["helper_pretrain.vocab_size", "tokenizer"]),
                       ({"steps": -1}, ["helper_pretrain", "steps", "-1"])):
        with pytest.raises(ConfigError) as e:
            TargetSpec("near", helper_model="world:mlm", helper_pretrain=bad)
        assert all(w in str(e.value) for w in words), str(e.value)
    with pytest.raises(ConfigError, match="helper_pretrain: only a helper the harness pretrains"):
        TargetSpec("near", helper_model="/some/dir", helper_pretrain={"steps": 5})


def test_the_init_cache_key_hashes_the_helper_directory(tiny_helper, tmp_path):
    import shutil

    from harness.run.runner import init_inputs
    from harness.tokenizers import load_tokenizer

    tok = load_tokenizer(tiny_helper)
    a = init_inputs(tok, TransferResources(helper_model=tiny_helper))["files"]["helper_model"]
    copy = shutil.copytree(tiny_helper, tmp_path / "copy")
    assert init_inputs(tok, TransferResources(helper_model=copy))["files"]["helper_model"] == a  # content, not path
    (copy / "config.json").write_text((copy / "config.json").read_text() + " ")
    assert init_inputs(tok, TransferResources(helper_model=copy))["files"]["helper_model"] != a


def test_tokxfer_init_takes_a_helper_model(tiny_world, tiny_source, tiny_helper, tmp_path, capfd):
    from harness.cli.main import main
    from harness.run.resources import target_tokenizer
    from harness.world import World

    tok = target_tokenizer(TargetSpec("near", tokenizer=TokenizerSpec(vocab_size=300)), World(tiny_world), progress=False)
    tok.save_pretrained(tmp_path / "tok")
    def run(out: str, *extra: str) -> int:
        try:
            return main(["init", "--method", "clp", "--source", str(tiny_source), "--target-tokenizer",
                         str(tmp_path / "tok"), "--out", str(tmp_path / out), "--quiet", *extra])
        except SystemExit as e:
            return e.code

    assert run("out", "--helper-model", str(tiny_helper)) == 0
    info = json.loads((tmp_path / "out" / "init_info.json").read_text())
    rec = info["inputs"]["helper_model"]
    assert rec["flag"] == "--helper-model" and rec["read_by_method"] is True and len(rec["sha256"]) == 64
    assert info["categories"]["combined"] > 0
    capfd.readouterr()
    assert run("out2") == 2  # without it: one line naming the flag
    assert "--helper-model" in capfd.readouterr().err
    assert run("out3", "--helper-model", str(tmp_path / "tok")) == 2  # a tokenizer is not a model
    assert "--helper-model" in capfd.readouterr().err


def test_world_helper_uses_the_sources_pretraining_settings(tiny_world, tiny_pretrain_overrides, monkeypatch):
    """world:clm on a source with extra languages: one language, the target tokenizer's size, kind clm."""
    from harness.run import resources
    from harness.world import World

    seen = {}
    monkeypatch.setattr("harness.world.pretrain.pretrain_on_files",
                        lambda files, cfg, **kw: seen.update(files=files, cfg=cfg, **kw) or "/helper")
    source = SourceSpec(pretrain={**tiny_pretrain_overrides, "extra_languages": ["far"], "seed": 4})
    target = TargetSpec("near", tokenizer=TokenizerSpec(algorithm="bpe", vocab_size=123), helper_model="world:clm")
    assert str(resources.helper_model_dir(target, World(tiny_world), source)) == "/helper"
    cfg = seen["cfg"]
    assert (cfg.kind, cfg.vocab_size, cfg.tokenizer_algorithm, cfg.extra_languages, cfg.seed) == ("clm", 123, "bpe", (), 4)
    assert cfg.hidden_size == tiny_pretrain_overrides["hidden_size"]
    assert [p.name for p in seen["files"]] == ["train.txt"] and [p.name for p in seen["dev_files"]] == ["dev.txt"]


def test_helper_of_a_real_source_follows_the_trial_seed(tmp_path, monkeypatch):
    """A source that is not a built-in model has no pretraining settings: the helper starts from the
    defaults, takes ``helper_pretrain``, and its seed is the trial's init seed (one helper per seed,
    as a world grid pretrains one source per seed) unless ``helper_pretrain`` holds it; no world, so
    no dev text."""
    from harness.run import resources

    corpus = tmp_path / "train.txt"
    corpus.write_text("ein satz\nnoch ein satz\n", encoding="utf-8")
    seen = []
    monkeypatch.setattr("harness.world.pretrain.pretrain_on_files",
                        lambda files, cfg, **kw: seen.append((files, cfg, kw)) or "/helper")
    target = TargetSpec("de", tokenizer=TokenizerSpec(vocab_size=99), corpus=str(corpus), helper_model="world:mlm",
                        helper_pretrain={"hidden_size": 32, "num_heads": 2, "steps": 9})
    real = SourceSpec(model="/models/e5")
    for seed in (3, 4):
        assert str(resources.transfer_resources(target, None, source=real, seed=seed).helper_model) == "/helper"
    held = dataclasses.replace(target, helper_pretrain={**target.helper_pretrain, "seed": 0})
    resources.helper_model_dir(held, None, real, seed=5)
    (files, cfg, kw), (_, cfg4, _), (_, cfg_held, _) = seen
    assert files == [corpus] and kw["dev_files"] == []
    assert (cfg.hidden_size, cfg.num_heads, cfg.steps, cfg.vocab_size, cfg.seed) == (32, 2, 9, 99, 3)
    assert (cfg4.seed, cfg_held.seed) == (4, 0)
    assert resources.transfer_resources(target, None, source=real, seed=3, helper=False).helper_model is None


def test_only_trials_whose_method_reads_the_helper_pretrain_it():
    """A target with ``helper_model: world:mlm`` shared by several methods (harness/configs/new-methods.yaml):
    the helper is resolved (pretrained) only for CLP and OMP with ``donor: helper``, not for every trial,
    and it is part of the trial id only for them: adding a helper to a target keeps the other methods' ids."""
    from harness.run.config import parse_experiment

    exp = parse_experiment({
        "name": "h", "world": {"size": "tiny", "seed": 0}, "source": {"model": "world:mlm"},
        "targets": [{"language": "near", "helper_model": "world:mlm"}],
        "methods": ["clp", "random", "multivariate", "omp", {"id": "omp-helper", "name": "omp", "config": {"donor": "helper"}}],
        "tasks": ["mlm-at-init"], "seeds": [1],
    })
    assert {t.method.id: t.reads_helper_model() for t in exp.trials()} == {
        "clp": True, "random": False, "multivariate": False, "omp": False, "omp-helper": True}
    plain = parse_experiment({
        "name": "h", "world": {"size": "tiny", "seed": 0}, "source": {"model": "world:mlm"},
        "targets": [{"language": "near"}], "methods": ["clp", "random", "multivariate", "omp"],
        "tasks": ["mlm-at-init"], "seeds": [1]})
    ids = {t.method.id: t.trial_id for t in plain.trials()}
    for t in exp.trials():
        if t.method.id in ids:
            assert (t.trial_id == ids[t.method.id]) == (not t.reads_helper_model()), t.method.id
            assert ("helper_model" in t.resolved()["target"]) == t.reads_helper_model()
