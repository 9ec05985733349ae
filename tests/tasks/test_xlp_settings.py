"""The XLP paper's settings on the tiny world: sources pretrained with a language encoding, XNLI
cross-lingual transfer and translate-train over several languages (mean and transfer gap),
multilingual X->src translation (BLEU per language, both signatures), and the xlp-table specs."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch

from harness import registry
from harness.cache import content_hash
from harness.registry import build_config
from harness.world import pretrain as pt
from harness.world.pretrain import PretrainConfig, multilingual_config, pretrain_on_files, pretrained_source

TINY = {k: v for k, v in PretrainConfig.tiny().to_dict().items() if k not in ("kind", "extra_languages", "encoding")}
WORLD_TARGETS = ["near", "far", "script", "agglu"]


def _source(world: Path, encoding: str, kind: str = "mlm") -> Path:
    return Path(pretrained_source(world, config=multilingual_config(world, kind, encoding, **TINY), progress=False))


@pytest.fixture(scope="module")
def xlp_source(tiny_world) -> Path:
    return _source(tiny_world, "xlp")


def _encoded(path: Path):
    from transformers import AutoTokenizer

    from harness.language_encoding import load_encoded

    return load_encoded(path), AutoTokenizer.from_pretrained(path)


def _ctx(model, tok, world: Path, languages=("near",), encoding=None):
    from harness.protocols import TaskContext

    return TaskContext(model=model, tokenizer=tok, languages=list(languages), seed=1, data_root=world,
                       encoding=encoding, source_language="src", progress=False)  # fmt: skip


def _enc(name: str):
    from harness.registry import get

    return get("encoding", name).make(None)


# ------------------------------------------------------------------------------ pretraining


def test_pretrain_cache_key_is_per_encoding_and_unchanged_without_one():
    # keys computed before PretrainConfig had an encoding field: those cached sources stay valid
    assert content_hash(pt._cache_key(PretrainConfig(), [], [])) == (
        "8fdeeb9a86eb7d500ba1095098c34092307a1af5445cf917190579fddfd34e33")
    tiny_clm = PretrainConfig.tiny(kind="clm", extra_languages=("near",))
    assert content_hash(pt._cache_key(tiny_clm, [], [])) == (
        "bb37b190edd1f25030b149fa403bc39731f753b81fc6d972f048da766b40cfd7")
    keys = {enc: content_hash(pt._cache_key(PretrainConfig(encoding=enc), [], []))
            for enc in (None, "none", "additive", "attached", "xlp")}  # fmt: skip
    assert len(set(keys.values())) == 5
    with pytest.raises(ValueError, match=r"PretrainConfig\.encoding .*got 'xpl'"):
        PretrainConfig(encoding="xpl")
    with pytest.raises(ValueError, match="encoding needs a world"):
        pretrain_on_files(["unused.txt"], PretrainConfig.tiny(encoding="xlp"))


def test_encoded_source_is_cached_per_encoding_and_round_trips(tiny_world, tiny_source, xlp_source):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from harness.language_encoding import load_encoded, read_pretrained

    info = json.loads((xlp_source / pt.INFO_FILE).read_text())
    assert list(info["language_blocks"]) == ["src", *WORLD_TARGETS] and all(info["language_blocks"].values())
    assert info["encoding"]["name"] == "xlp" and info["encoding"]["parameters_added"] == 5 * 16 * 16
    assert _source(tiny_world, "xlp") == xlp_source  # served from the cache
    none = _source(tiny_world, "none")
    assert len({none, xlp_source, Path(tiny_source)}) == 3  # one entry per encoding, the plain source apart
    assert read_pretrained(none) is None  # 'none': a plain model, pretrained on the same blocks
    # the same tokenizer for every encoding (trained on the same mixed corpus)
    assert AutoTokenizer.from_pretrained(none).get_vocab() == AutoTokenizer.from_pretrained(xlp_source).get_vocab()

    saved = read_pretrained(xlp_source)
    assert saved["meta"]["encoding"] == "xlp" and saved["meta"]["model_class"] == "RobertaForMaskedLM"
    proj = saved["state"]["input"]
    assert list(proj) == ["src", *WORLD_TARGETS]
    assert any(not torch.allclose(w, torch.eye(16)) for w in proj.values())  # trained, not the identity start
    loaded = load_encoded(xlp_source)
    # the trial's path: a plain load wrapped by the encoding with the saved parameters
    trial = _enc("xlp").wrap(AutoModelForMaskedLM.from_pretrained(xlp_source), ["near", "src"], pretrained=saved)
    assert trial.languages == ["src", *WORLD_TARGETS]
    tok = AutoTokenizer.from_pretrained(xlp_source)
    batch = tok(["Ka kasuri trasonon tel le norlo."] * 2, return_tensors="pt")
    outs = []
    for m in (loaded, trial):
        m.eval()
        with torch.no_grad():
            outs.append(m(**m.prepare_batch(dict(batch), ["src", "far"])).logits)
    assert torch.equal(outs[0], outs[1])
    with torch.no_grad():  # the language matters: far's projection is not src's
        other = loaded(**loaded.prepare_batch(dict(batch), ["far", "src"])).logits
    assert not torch.allclose(outs[0], other)


@pytest.mark.parametrize("kind", ["mlm", "clm"])
def test_attached_pretraining_inserts_the_language_token(tiny_world, kind):
    from harness.language_encoding import read_pretrained

    path = _source(tiny_world, "attached", kind)
    saved = read_pretrained(path)
    assert saved["meta"]["insert_at"] == (1 if kind == "mlm" else 0)
    vectors = torch.stack(list(saved["state"]["input"].values()))
    assert vectors.abs().sum(1).gt(0).all()  # every language's token trained away from its zero start
    info = json.loads((path / pt.INFO_FILE).read_text())
    assert all(v == v for v in (info["final_loss"], info["dev_loss"]))  # finite, with the inserted column


def test_trial_encoding_selects_the_source(monkeypatch, tiny_world):
    from harness.run import resources
    from harness.run.config import SourceSpec, WorldSpec

    seen = []
    monkeypatch.setattr(pt, "pretrained_source", lambda world, kind, config, progress: seen.append(config) or "x")
    spec = SourceSpec(model="world:mlm", pretrain={"encoding": "trial", "extra_languages": WORLD_TARGETS})
    resources.source_model_dir(spec, WorldSpec(size="tiny"), encoding="xlp", progress=False)
    # exactly what 'tokxfer world pretrain --encoding xlp' builds
    assert seen == [multilingual_config(tiny_world, "mlm", "xlp")]
    with pytest.raises(resources.ResourceError, match="'trial' follows the trial's encoding"):
        resources.source_model_dir(spec, WorldSpec(size="tiny"), progress=False)


def test_world_pretrain_cli_flags(capsys):
    from harness.cli import main

    assert main(["world", "build", "--size", "tiny", "--encoding", "xlp"]) == 2
    assert "--encoding and --languages apply to 'world pretrain' only" in capsys.readouterr().err
    assert main(["world", "pretrain", "--size", "tiny", "--languages", "near"]) == 2
    assert "--languages needs --encoding" in capsys.readouterr().err


# ------------------------------------------------------------------------------------- xnli


XNLI_FAST = {"epochs": 1, "batch_size": 8, "eval_batch_size": 16, "max_length": 64, "max_train_examples": 16,
             "max_eval_examples": 16, "learning_rate": 1e-3}  # fmt: skip


def test_language_summary_mean_and_gap():
    from tasks.xnli import language_summary

    s = language_summary({"src": 0.75, "near": 0.5, "far": 0.25}, "src")
    assert s == {"accuracy": pytest.approx(0.5), "transfer_gap": pytest.approx(0.375)}
    assert language_summary({"near": 0.5, "far": 0.25}, "src") == {"accuracy": pytest.approx(0.375)}


def test_xnli_cross_lingual_metrics_on_a_tiny_run(tiny_world, xlp_source):
    from tasks.languages import SUMMARY
    from tasks.xnli import Xnli, XnliConfig

    model, tok = _encoded(xlp_source)
    cfg = build_config(XnliConfig, dict(setting="cross-lingual", train_language="src", eval_languages=["src", "near", "far"], **XNLI_FAST))
    r = Xnli(cfg).run(_ctx(model, tok, tiny_world, encoding=_enc("xlp")))
    assert set(r.metrics) == {"src", "near", "far", SUMMARY}
    acc = {lang: r.metrics[lang]["accuracy"] for lang in ("src", "near", "far")}
    for lang, a in acc.items():
        assert r.counts[lang]["test"] == 16 and (a * 16) == pytest.approx(round(a * 16))  # a count of 16 pairs
    assert r.metrics[SUMMARY]["accuracy"] == pytest.approx(sum(acc.values()) / 3)
    assert r.metrics[SUMMARY]["transfer_gap"] == pytest.approx(acc["src"] - (acc["near"] + acc["far"]) / 2)
    assert list(r.curves) == ["src/train_loss"] and r.info["train_language"] == "src"
    assert "encoding_languages_added" not in r.info  # the multilingual source knows every language
    json.dumps(r.info)
    with pytest.raises(ValueError, match=r"eval_languages \['src', 'far'\] must include .*\['near'\]"):
        Xnli(build_config(XnliConfig, dict(setting="cross-lingual", eval_languages=["src", "far"], **XNLI_FAST))).run(
            _ctx(model, tok, tiny_world))


def test_xnli_translate_train_adds_missing_languages(tiny_world, tiny_source):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from tasks.languages import SUMMARY
    from tasks.xnli import Xnli, XnliConfig

    enc = _enc("additive")  # a plain source wrapped for the trial's two languages, as the runner does
    model = enc.wrap(AutoModelForMaskedLM.from_pretrained(tiny_source), ["near", "src"], seed=1)
    tok = AutoTokenizer.from_pretrained(tiny_source)
    cfg = build_config(XnliConfig, dict(setting="translate-train", eval_languages=["near", "agglu"], **XNLI_FAST))
    r = Xnli(cfg).run(_ctx(model, tok, tiny_world, encoding=enc))
    assert r.info["encoding_languages_added"] == ["agglu"] and model.languages == ["near", "src"]  # a copy grew
    assert set(r.info["finetune"]) == {"near", "agglu"} and set(r.metrics) == {"near", "agglu", SUMMARY}
    # src is not tested, so there is no gap; the mean is over the tested languages
    assert r.metrics[SUMMARY] == {"accuracy": pytest.approx((r.metrics["near"]["accuracy"] + r.metrics["agglu"]["accuracy"]) / 2)}


# ------------------------------------------------------------------------------- translation


def _iwslt(**overrides):
    from harness.registry import get

    values = dict(size="tiny", encoder_layers=1, decoder_layers=1, attention_heads=2, ffn_dim=32, epochs=1,
                  batch_size=8, warmup_steps=2, learning_rate=1e-3, num_beams=2, max_target_length=16,
                  target_vocab_size=80, max_train_examples=12, max_eval_examples=6, eval_batch_size=6)  # fmt: skip
    values.update(overrides)
    return get("task", "iwslt-bleu").make(values)


def test_multilingual_translation_bleu_per_language_and_both_signatures(tiny_world, xlp_source, tmp_path):
    from tasks.languages import SUMMARY

    model, tok = _encoded(xlp_source)
    ctx = _ctx(model, tok, tiny_world, encoding=_enc("xlp"))
    ctx.work_dir = tmp_path
    r = _iwslt(languages=["near", "far"], tokenized_bleu="13a").run(ctx)
    assert set(r.metrics) == {"near", "far", SUMMARY}
    for lang in ("near", "far"):
        assert set(r.metrics[lang]) == {"bleu", "bleu_tokenized"} and 0 <= r.metrics[lang]["bleu"] <= 100
        assert r.counts[lang] == {"train": 12, "dev": 6, "test": 6}
        assert len(r.info["samples"][lang]) == 5 and r.info["data"][lang]["target_language"] == "src"
    for key in ("bleu", "bleu_tokenized"):
        assert r.metrics[SUMMARY][key] == pytest.approx(statistics.fmean(r.metrics[lang][key] for lang in ("near", "far")))
    assert "|tok:13a|" in r.info["sacrebleu_signature"]
    assert r.info["sacrebleu_signature_tokenized"].startswith("pretok:sacrebleu-13a|") and "|tok:none|" in (
        r.info["sacrebleu_signature_tokenized"])
    assert r.info["multilingual"] == {"languages": ["near", "far"], "target_language": "src", "train_pairs": 24}
    sides = r.info["model"]["near+far"]["encoding"]["sides"]
    assert {"near", "far"} <= set(sides["encoder"]["languages"]) and sides["decoder"]["languages"] == ["src"]
    assert list(r.curves) == ["near+far/train_loss"]
    json.dumps(r.info)


def test_multilingual_translation_with_a_plain_model(tiny_world, tiny_source, tmp_path):
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from tasks.languages import SUMMARY

    model, tok = AutoModelForMaskedLM.from_pretrained(tiny_source), AutoTokenizer.from_pretrained(tiny_source)
    ctx = _ctx(model, tok, tiny_world, languages=("far",))
    ctx.work_dir = tmp_path
    r = _iwslt(languages=["near", "far"]).run(ctx)  # no tokenized BLEU asked: the default metrics only
    assert set(r.metrics["far"]) == {"bleu"} and set(r.metrics[SUMMARY]) == {"bleu"}
    assert "sacrebleu_signature_tokenized" not in r.info
    with pytest.raises(ValueError, match=r"languages \['near'\] must include .*\['far'\]"):
        _iwslt(languages=["near"]).run(ctx)


def test_tokenized_bleu_options(caplog):
    from tasks.iwslt import IwsltConfig, tokenized_bleu

    hyp, ref = ["He said: it's fine."], ["He said : it 's fine ."]
    assert tokenized_bleu(hyp, ref, "none")["score"] < tokenized_bleu(hyp, ref, "13a")["score"]
    # the texts are tokenized on purpose: no "forgot to detokenize" warning (sacreBLEU's, from 100 segments
    # ending in " .") in every BLEU trial's log
    with caplog.at_level("WARNING", logger="sacrebleu"):
        tokenized_bleu(hyp * 120, ref * 120, "13a", examples=True)
    assert "detokenize" not in caplog.text
    with pytest.raises(ValueError, match="tokenized_bleu must be one of"):
        IwsltConfig(tokenized_bleu="spm")
    with pytest.raises(ValueError, match="lists a language twice"):
        IwsltConfig(languages=["de", "de"])
    try:
        import sacremoses  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="needs the sacremoses package"):
            tokenized_bleu(hyp, ref, "moses")
    else:
        assert tokenized_bleu(hyp, ref, "moses")["signature"].startswith("pretok:moses-en+sacremoses")


# ------------------------------------------------------------------------------------- specs


def _record(encoding: str, seed: int, task: str, setting: str | None, metrics: dict, tlm: float | None = 0.5,
            style: str | None = "xlm") -> dict:
    task_cfg = {"setting": setting} if setting else {}
    pretrain = {"encoding": "trial"} if tlm is None else {"encoding": "trial", "tlm_fraction": tlm}
    if tlm is not None and style is not None:  # a packed-TLM source's config omits tlm_style (its default)
        pretrain["tlm_style"] = style
    name = "xlp" if encoding == "xlp-nodec" else encoding
    return {"schema_version": 1, "tokxfer_version": "0.1.0", "status": "ok",
            "trial_id": f"{encoding}-{seed}-{setting}-{tlm}-{style}", "seed": seed, "flags": [], "metrics": metrics,
            "config": {"method": {"id": "original", "name": "original"}, "encoding": {"id": encoding, "name": name},
                       "task": {"name": task, "config": task_cfg}, "target": {"language": "near"}, "seed": seed,
                       "source": {"model": "world:mlm", "pretrain": pretrain}}}  # fmt: skip


def test_xlp_specs_render_from_synthetic_records():
    from leaderboards.aggregate import aggregate
    from leaderboards.render import render_markdown
    from leaderboards.spec import PACKAGED_SPECS, load_spec
    from tasks.xnli import language_summary

    langs = ["src", *WORLD_TARGETS]
    recs = []
    for i, encoding in enumerate(["none", "additive", "attached", "xlp", "xlp-shared", "xlp-nodec"]):
        for seed in (1, 2, 3, 4, 5):
            acc = {lang: 0.5 + 0.01 * i + 0.02 * j + 0.001 * seed for j, lang in enumerate(langs)}
            for setting in ("cross-lingual", "translate-train"):
                if encoding == "xlp-nodec" or (setting == "translate-train" and seed > 3):
                    continue
                m = {lang: {"accuracy": a - (0.1 if setting == "translate-train" else 0)} for lang, a in acc.items()}
                m["all"] = language_summary({lang: v["accuracy"] for lang, v in m.items()}, "src")
                recs.append(_record(encoding, seed, "xnli", setting, m))
                recs.append(_record(encoding, seed, "xnli", setting, m, tlm=None))  # an earlier source: not shown
                wrong = {lang: {"accuracy": 0.0} for lang in m} | {"all": m["all"]}
                recs.append(_record(encoding, seed, "xnli", setting, wrong, style=None))  # a packed-TLM source: not shown
            bleu = {lang: {"bleu": 10.0 + i + j + seed, "bleu_tokenized": 11.0 + i + j + seed} for j, lang in enumerate(WORLD_TARGETS)}
            recs.append(_record(encoding, seed, "iwslt-bleu", None, bleu))
            recs.append(_record(encoding, seed, "iwslt-bleu", None, {lang: {"bleu": 0.0, "bleu_tokenized": 0.0} for lang in bleu},
                                style=None))  # a packed-TLM source: not shown

    t1 = aggregate(recs, load_spec(PACKAGED_SPECS / "xlp-table1.yaml"))
    rows = {r.method: r for r in t1.rows}
    assert list(rows) == ["none", "additive", "attached", "xlp", "xlp-shared"]
    xlp = rows["xlp"]
    # xlp (i = 3): src 0.533 on average over seeds; the gap is src minus the mean of the four targets
    assert xlp.cells["xnli/src/accuracy"].mean == pytest.approx(0.533) and xlp.cells["xnli/src/accuracy"].n == 5
    assert xlp.cells["xnli/all/transfer_gap"].mean == pytest.approx(-0.05)
    assert xlp.cells["xnli/avg/accuracy"].mean == pytest.approx(0.573)
    md = render_markdown(t1)
    assert "Transfer gap" in md and "XLP (paper)" in md and "XLP (language projection)" in md
    assert "Shared projection" in md
    tt = aggregate(recs, load_spec(PACKAGED_SPECS / "xlp-table1-translate-train.yaml"))
    assert {r.method: r for r in tt.rows}["none"].cells["xnli/src/accuracy"].mean == pytest.approx(0.402)
    t2 = aggregate(recs, load_spec(PACKAGED_SPECS / "xlp-table2.yaml"))
    assert [r.method for r in t2.rows][-2:] == ["xlp-shared", "xlp-nodec"]
    row = {r.method: r for r in t2.rows}["attached"]  # i = 2
    assert row.cells["iwslt-bleu/far/bleu_tokenized"].mean == pytest.approx(17.0)
    assert row.cells["iwslt-bleu/avg/bleu_tokenized"].mean == pytest.approx(17.5)
    assert all(not c.flags for r in t2.rows for c in r.cells.values())  # complete, unmixed cells
    real = aggregate([], load_spec(PACKAGED_SPECS / "real" / "xlp-table2.yaml"))
    assert "Language Embedding (attaching) (paper)" in render_markdown(real)


# ----------------------------------------------------------------------------- a world grid


_GRID = """
name: xlp-grid
world: {{size: tiny, seed: 0}}
source: {{model: "world:mlm", pretrain: {pretrain}}}
targets:
  - {{language: near, tokenizer: {{algorithm: unigram, vocab_size: 300}}}}
methods: [original]
encodings: [none, xlp]
tasks:
  - {{name: xnli, config: {{setting: cross-lingual, train_language: src, eval_languages: [src, near], epochs: 1,
       batch_size: 8, max_length: 64, max_train_examples: 8, max_eval_examples: 8}}}}
seeds: [1]
"""


@pytest.mark.slow
def test_grid_pretrains_one_source_per_encoding(tmp_path):
    from harness.run import records
    from harness.run.config import load_experiment
    from harness.run.experiment import run_experiment

    pretrain = {**TINY, "encoding": "trial", "extra_languages": ["near"]}
    path = tmp_path / "grid.yaml"
    path.write_text(_GRID.format(pretrain=json.dumps(pretrain)), encoding="utf-8")
    summary = run_experiment(load_experiment(path), tmp_path / "runs", progress=False)
    recs = {r["config"]["encoding"]["name"]: r for r in records.iter_records(tmp_path / "runs" / "xlp-grid")}
    assert summary.failed == 0, [r["error"]["message"] for r in recs.values() if r["status"] != "ok"]
    assert recs["none"]["revisions"]["source_model"] != recs["xlp"]["revisions"]["source_model"]
    assert recs["none"]["encoding"] is None
    assert recs["xlp"]["encoding"]["sides"]["input"]["languages"] == ["src", "near"]
    assert recs["xlp"]["encoding"]["sides"]["input"]["trainable"] is True  # the trial's wrapper; frozen in its task copy
    for r in recs.values():
        assert set(r["metrics"]) == {"src", "near", "all"} and "transfer_gap" in r["metrics"]["all"]


# ------------------------------------------------------------------------------------- packaged grids (issue 28)

XLP_GRIDS = ("xlp-table1", "xlp-table1-translate-train", "xlp-table2")


def _grid_trials(name: str, medium: bool = False):
    from harness.cli import CONFIG_DIR
    from harness.run.config import load_experiment

    return load_experiment(CONFIG_DIR / ("medium" if medium else "") / f"{name}.yaml").trials()


def test_xlp_grids_share_one_tlm_source_per_encoding_and_seed_and_carry_the_controls():
    sources: dict[tuple[str, int], set[str]] = {}
    for name in XLP_GRIDS:
        trials = _grid_trials(name)
        by_id = {t.encoding.id: t.encoding for t in trials}
        assert {"none", "additive", "attached", "xlp", "xlp-shared"} <= set(by_id), name
        seeds = sorted({t.seed for t in trials})
        assert seeds == ([1, 2, 3] if name.endswith("translate-train") else [1, 2, 3, 4, 5]), name
        for t in trials:
            cfg = t.source.pretrain_config(t.encoding.name)
            assert cfg.tlm_fraction > 0 and cfg.kind == "mlm" and cfg.encoding == t.encoding.name
            assert set(cfg.extra_languages) == set(WORLD_TARGETS) and cfg.seed == t.seed
            sources.setdefault((t.encoding.name, t.seed), set()).add(content_hash(cfg.to_dict()))
    # the three grids (and xlp-nodec with xlp) pretrain the same cached source for an encoding and seed
    assert all(len(hashes) == 1 for hashes in sources.values()), sources
    nodec = {t.encoding.id: t.encoding for t in _grid_trials("xlp-table2")}["xlp-nodec"]
    assert nodec.name == "xlp" and build_config(registry.get("encoding", "xlp").config_cls, nodec.config).decoder is False


@pytest.mark.parametrize("name", [*XLP_GRIDS, "methods-x-encodings-new-downstream"])
def test_medium_presets_keep_the_small_grids_rows_seeds_and_tasks(name):
    small, medium = _grid_trials(name), _grid_trials(name, medium=True)

    def rows(trials):
        return sorted({(t.method.id, t.encoding.id, t.task.id) for t in trials})

    assert rows(medium) == rows(small)
    # at least the small grid's seeds (translate-train keeps 5 on a GPU, 3 on CPU where it is compute-bound)
    assert {t.seed for t in medium} >= {t.seed for t in small}
    for t in medium:  # a bigger TLM source of the same languages
        cfg, ref = t.source.pretrain_config(t.encoding.name), small[0].source.pretrain_config(t.encoding.name)
        assert cfg.tlm_fraction == ref.tlm_fraction and cfg.extra_languages == ref.extra_languages
        assert cfg.hidden_size > ref.hidden_size and cfg.steps > ref.steps
