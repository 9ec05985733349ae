"""The init cache (a ``cached_dir`` entry per method output) and the InitRequest value."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.cache import KEY_FILE, cache_root
from harness.model.initialize import INIT_CACHE_KIND, cached_init
from harness.protocols import COMBINED, COPIED, InitResult, TokenMapping, TransferResources


class _Tok:
    """Stands for a tokenizer: only its identity matters to the cache."""


def _result(tok, scale: float = 0.5) -> InitResult:
    m = TokenMapping.from_coo(3, 4, [0, 1, 1], [2, 0, 3], [1.0, scale, 1 - scale],
                              np.array([COPIED, COMBINED, 3], dtype=np.int8))
    return InitResult(m, tok, info={"overlap": 1}, directives={"reinitialize_body": False})


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKXFER_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_second_call_is_a_hit_with_the_same_mapping(cache):
    tok, calls = _Tok(), []

    def compute():
        calls.append(1)
        return _result(tok)

    key = {"method": {"name": "m"}, "seed": 1}
    first = cached_init(key, compute, tok)
    second = cached_init(key, compute, tok)
    assert len(calls) == 1 and "cache_hit" not in first.info and second.info["cache_hit"] is True
    assert second.tokenizer is tok and second.directives == first.directives
    for a in ("indptr", "indices", "weights", "provenance"):
        assert np.array_equal(getattr(second.mapping, a), getattr(first.mapping, a))
    entries = list((cache_root() / INIT_CACHE_KIND).iterdir())
    assert len(entries) == 1 and json.loads((entries[0] / KEY_FILE).read_text()) == key
    cached_init({"method": {"name": "m"}, "seed": 2}, compute, tok)  # another key: computed again
    assert len(calls) == 2


def test_a_result_for_another_tokenizer_is_not_cached(cache):
    calls = []

    def compute():
        calls.append(1)
        return _result(_Tok())  # like ``original``: keeps the source tokenizer

    for _ in range(2):
        cached_init({"k": 1}, compute, _Tok())
    assert len(calls) == 2
    assert not [p for p in (cache_root() / INIT_CACHE_KIND).iterdir() if not p.name.startswith(".")]


def test_no_key_no_cache(cache):
    tok = _Tok()
    assert cached_init(None, lambda: _result(tok), tok).info == {"overlap": 1}
    assert not (cache_root() / INIT_CACHE_KIND).exists()


def test_a_failing_method_leaves_no_entry(cache):
    def compute():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        cached_init({"k": 1}, compute, _Tok())
    assert not [p for p in (cache_root() / INIT_CACHE_KIND).iterdir() if not p.name.startswith(".")]


PLUGIN = '''
from dataclasses import dataclass
from harness.registry import register_method

@dataclass(frozen=True)
class C:
    pass

@register_method("{name}", config=C, description="test")
class M:
    def __init__(self, config):
        self.config = config

    def initialize(self, inputs, rng):  # {comment}
        raise NotImplementedError
'''


def test_the_method_code_is_part_of_the_init_cache_key(tmp_path):
    """A changed method file gives another key: a mapping from the old code is never served."""
    from harness import registry

    hashes = []
    for i, comment in enumerate(("v1", "v2")):
        f = tmp_path / f"plug{i}.py"
        f.write_text(PLUGIN.format(name=f"code-hash-test-{i}", comment=comment))
        registry.load_plugin(f)
        hashes.append(registry.code_hash("method", f"code-hash-test-{i}"))
    assert hashes[0] != hashes[1]
    assert registry.code_hash("method", "code-hash-test-0") == hashes[0]  # stable (memoized)
    # a built-in method hashes its whole package: its shared private helpers change its output too
    assert registry.code_hash("method", "focus") == registry.code_hash("method", "wechsel")


def test_the_code_hash_covers_the_harness_helpers_a_method_computes_with(monkeypatch):
    """canonical forms live in harness/families.py behind harness.vocab: an edit there changes the key."""
    from pathlib import Path

    from harness import registry

    harness_dir = Path(registry.__file__).parent
    for name in ("vocab.py", "families.py", "words.py", "seeding.py", "random_rows.py"):
        assert name in registry.RESULT_HELPERS and (harness_dir / name).is_file()
    monkeypatch.setattr(registry, "_CODE_HASHES", {})
    monkeypatch.setattr(registry, "_SOURCE_HASHES", {})
    before = registry.code_hash("method", "random")
    real = Path.read_bytes

    def edited(self):  # families.py read as if a comment had been added
        data = real(self)
        return data + b"# edit\n" if self.name == "families.py" and self.parent == harness_dir else data

    monkeypatch.setattr(Path, "read_bytes", edited)
    monkeypatch.setattr(registry, "_CODE_HASHES", {})
    monkeypatch.setattr(registry, "_SOURCE_HASHES", {})
    assert registry.code_hash("method", "random") != before


def test_the_init_cache_key_covers_the_content_of_the_files_the_method_reads(tmp_path):
    """A corpus edited in place (or a world rebuilt by another generator version under the same
    spec) gives another key; the same content under another path name gives the same files part."""
    from harness.run.config import load_experiment
    from harness.run.runner import init_cache_key, init_inputs
    from tests._tokfixtures import unigram

    tok = unigram()
    corpus, dic = tmp_path / "t.txt", tmp_path / "d.tsv"
    corpus.write_text("a b c\n", encoding="utf-8")
    dic.write_text("a\tb\n", encoding="utf-8")
    res = TransferResources(target_corpus=corpus, dictionary=dic)
    first = init_inputs(tok, res)
    assert set(first["files"]) == {"target_corpus", "dictionary"}
    assert init_inputs(tok, res) == first
    corpus.write_text("a b d\n", encoding="utf-8")
    second = init_inputs(tok, res)
    assert second["files"]["target_corpus"] != first["files"]["target_corpus"]
    assert second["files"]["dictionary"] == first["files"]["dictionary"]
    spec = load_experiment(Path(__file__).parents[2] / "harness" / "configs" / "quickstart-tiny.yaml").trials()[0]
    assert init_cache_key(spec, "/src", "mlm", first) != init_cache_key(spec, "/src", "mlm", second)
    assert init_cache_key(spec, "/src", "mlm", first)["inputs"] == first


def test_the_method_runs_with_the_long_lived_objects_frozen_and_they_are_handed_back(tmp_path, monkeypatch):
    """``initialize`` runs the method inside :func:`long_lived_objects_frozen` (a full collection during
    FOCUS's overlap walked every object of the process: ~0.2 s of 0.26 s on 32k/16k files), and the
    objects are returned to the collector afterwards, also when the method fails."""
    import gc

    from harness.model.initialize import InitRequest, initialize
    from harness.registry import build_config, get
    from tests._tokfixtures import FAMILIES, SOURCE_TEXT, TARGET_TEXT, unigram

    monkeypatch.setenv("TOKXFER_CACHE", str(tmp_path / "cache"))
    fam = FAMILIES["xlm-r-untied"]
    tok = fam.tokenizer(SOURCE_TEXT)
    fam.build(tok).save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    entry = get("method", "overlap")
    seen = []
    config = build_config(entry.config_cls, {})
    method_cls = type(entry.make(config))
    original = method_cls.initialize

    def observed(self, inputs, rng):
        seen.append(gc.get_freeze_count())
        return original(self, inputs, rng)

    monkeypatch.setattr(method_cls, "initialize", observed)
    request = InitRequest(source_model=str(tmp_path / "model"), target_tokenizer=unigram(TARGET_TEXT), method="overlap",
                          method_config=config, seed=1, model_kind="mlm")
    init = initialize(request)
    assert init.result.mapping.n_target == len(request.target_tokenizer)
    assert len(seen) == 1 and seen[0] > 1000  # at least the imported libraries' objects
    assert gc.get_freeze_count() == 0

    def failing(self, inputs, rng):
        raise RuntimeError("the method failed")

    monkeypatch.setattr(method_cls, "initialize", failing)
    with pytest.raises(RuntimeError, match="the method failed"):
        initialize(request)
    assert gc.get_freeze_count() == 0


def test_a_caller_s_own_freeze_is_left_as_it_was():
    import gc

    from harness.model.initialize import long_lived_objects_frozen

    gc.freeze()
    try:
        before = gc.get_freeze_count()
        with long_lived_objects_frozen():
            pass
        assert gc.get_freeze_count() == before > 0
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0
