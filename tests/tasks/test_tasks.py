"""End-to-end tests of the task adapters on a tiny random model and 8-example local files.

Everything is built in the test: a byte-level BPE tokenizer trained on a few sentences and a
2-layer RoBERTa with hidden size 16. No network, no GPU.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# datasets caches every local JSON file it reads: keep that out of the user's cache
os.environ.setdefault("HF_HOME", os.path.join(tempfile.gettempdir(), "tokxfer-tests-hf-home"))

from harness.protocols import TaskContext, TaskResult  # noqa: E402
from harness.registry import build_config  # noqa: E402
from tasks.mlm_at_init import MlmAtInit, MlmAtInitConfig, build_masked_examples, read_lines  # noqa: E402
from tests.api.test_examples import assert_examples_match  # noqa: E402

SENTENCES = [
    "Anna lives in Berlin and works for Siemens .",
    "The cat sat on the mat near the door .",
    "Paul visited Paris with his friend Maria .",
    "A dog ran across the green park in the morning .",
    "The river flows from the mountains to the sea .",
    "Google opened a new office in Nairobi last year .",
    "Birds fly over the hills and far away .",
    "The children played football after school .",
    "Rain fell on the city for three days .",
    "Lena bought bread at the market on Monday .",
]


def make_tokenizer():
    """A byte-level BPE tokenizer with RoBERTa specials, trained on :data:`SENTENCES`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(SENTENCES * 3, trainer)
    tk.post_processor = processors.RobertaProcessing(("</s>", tk.token_to_id("</s>")), ("<s>", tk.token_to_id("<s>")))
    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
        cls_token="<s>",
        sep_token="</s>",
    )


def make_mlm(tokenizer, seed: int = 0, dropout: float = 0.1):
    """A tiny random RobertaForMaskedLM (hidden 16, 2 layers) matching ``tokenizer``."""
    from transformers import RobertaConfig, RobertaForMaskedLM
    from transformers.utils import logging

    logging.set_verbosity_error()
    config = RobertaConfig(
        vocab_size=len(tokenizer),
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=200,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    torch.manual_seed(seed)
    return RobertaForMaskedLM(config)


@pytest.fixture(scope="module")
def tokenizer():
    return make_tokenizer()


@pytest.fixture()
def text_file(tmp_path: Path) -> Path:
    path = tmp_path / "near.txt"
    path.write_text("\n".join(SENTENCES[:8]) + "\n\n", encoding="utf-8")
    return path


def _ctx(model, tokenizer, languages=("near",), **kw) -> TaskContext:
    return TaskContext(model=model, tokenizer=tokenizer, languages=list(languages), seed=1, progress=False, **kw)


# ---------------------------------------------------------------------------------- mlm-at-init


def test_mlm_at_init_masks_independent_of_model_and_batching(tokenizer, text_file):
    cfg = MlmAtInitConfig(eval_file=str(text_file), mlm_probability=0.5)
    texts = read_lines(text_file)
    a = build_masked_examples(tokenizer, texts, cfg)
    b = build_masked_examples(tokenizer, texts, cfg)
    assert a == b
    specials = set(tokenizer.all_special_ids)
    n_masked = 0
    for (ids, labels), orig in zip(a, tokenizer(texts)["input_ids"]):
        for pos, (lab, o) in enumerate(zip(labels, orig)):
            if o in specials:
                assert lab == -100 and ids[pos] == o  # specials are never masked or replaced
            if lab != -100:
                n_masked += 1
                assert lab == o
    assert n_masked > 0
    other = build_masked_examples(tokenizer, texts, MlmAtInitConfig(mlm_probability=0.5, mask_seed=7))
    assert other != a  # the mask seed, not the trial seed, decides the masks


def test_mlm_at_init_scores_two_models_on_identical_masks(tokenizer, text_file, monkeypatch):
    import tasks.mlm_at_init as mod

    seen: list[list] = []
    real = mod.masked_lm_scores

    def spy(model, examples, **kw):
        seen.append(examples)
        return real(model, examples, **kw)

    monkeypatch.setattr(mod, "masked_lm_scores", spy)
    cfg = MlmAtInitConfig(eval_file=str(text_file), batch_size=3)
    task = MlmAtInit(cfg)
    m1, m2 = make_mlm(tokenizer, seed=0), make_mlm(tokenizer, seed=1)
    torch.manual_seed(123)
    r1 = task.run(_ctx(m1, tokenizer))
    torch.manual_seed(999)  # global RNG perturbed between runs: must not matter
    r2 = task.run(_ctx(m2, tokenizer))
    assert seen[0] == seen[1]
    assert isinstance(r1, TaskResult)
    for r in (r1, r2):
        s = r.metrics["near"]
        assert set(s) == {"loss", "accuracy", "perplexity"}
        assert math.isfinite(s["loss"]) and 0.0 <= s["accuracy"] <= 1.0
        assert s["perplexity"] == pytest.approx(math.exp(s["loss"]))
        assert r.counts["near"]["test"] == 8 and r.counts["near"]["masked_tokens"] > 0
    assert r1.metrics != r2.metrics
    # deterministic, independent of batch size, and the model is left in its previous mode
    m1.train()
    r1b = MlmAtInit(MlmAtInitConfig(eval_file=str(text_file), batch_size=8)).run(_ctx(m1, tokenizer))
    assert m1.training
    assert r1b.metrics["near"]["loss"] == pytest.approx(r1.metrics["near"]["loss"], rel=1e-5)
    assert r1b.metrics["near"]["accuracy"] == r1.metrics["near"]["accuracy"]


def test_mlm_at_init_loss_matches_manual_cross_entropy(tokenizer, text_file):
    cfg = MlmAtInitConfig(eval_file=str(text_file), batch_size=2)
    model = make_mlm(tokenizer).eval()
    examples = build_masked_examples(tokenizer, read_lines(text_file), cfg)
    nll, n = 0.0, 0
    with torch.no_grad():
        for ids, labels in examples:  # one example at a time, no padding
            logits = model(input_ids=torch.tensor([ids])).logits[0]
            lab = torch.tensor(labels)
            sel = lab != -100
            nll += float(torch.nn.functional.cross_entropy(logits[sel], lab[sel], reduction="sum"))
            n += int(sel.sum())
    r = MlmAtInit(cfg).run(_ctx(model, tokenizer))
    assert_examples_match(r, counts=False)
    assert r.metrics["near"]["loss"] == pytest.approx(nll / n, rel=1e-5)


def test_mlm_at_init_missing_file_is_named(tokenizer, tmp_path):
    task = MlmAtInit(MlmAtInitConfig(eval_file=str(tmp_path / "{lang}.txt")))
    with pytest.raises(FileNotFoundError, match="near.txt"):
        task.run(_ctx(make_mlm(tokenizer), tokenizer))


def test_mlm_at_init_registered():
    from harness.registry import get

    entry = get("task", "mlm-at-init")
    assert entry.config_cls is MlmAtInitConfig and entry.cls.model_kind == "mlm"


# ----------------------------------------------------------------------------- 8-example files

NAMES = ["Anna", "Paul", "Maria", "Lena"]
CITIES = ["Berlin", "Paris", "Nairobi", "Rome"]


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _xnli_rows(offset: int = 0) -> list[dict]:
    rows = []
    for i in range(8):
        name, city = NAMES[(i + offset) % 4], CITIES[(i + offset) % 4]
        premise = f"{name} lives in {city} and works there ."
        hyp = [f"{name} lives in {city} .", f"{name} likes the park .", f"{name} never saw {city} ."][i % 3]
        rows.append({"premise": premise, "hypothesis": hyp, "label": i % 3})
    return rows


def _ner_rows(offset: int = 0) -> list[dict]:
    # WikiANN order: O B-PER I-PER B-ORG I-ORG B-LOC I-LOC
    rows = []
    for i in range(8):
        name, city = NAMES[(i + offset) % 4], CITIES[(i + offset) % 4]
        rows.append(
            {"tokens": [name, "Schmidt", "visited", city, "with", "Google", "."], "ner_tags": [1, 2, 0, 5, 0, 3, 0]}
        )
    return rows


def _qa_rows(offset: int = 0) -> list[dict]:
    rows = []
    for i in range(8):
        name, city = NAMES[(i + offset) % 4], CITIES[(i + offset) % 4]
        context = f"The weather was fine . {name} lives in {city} and works for Siemens . The river flows to the sea ."
        question, answer = (f"Where does {name} live ?", city) if i % 2 == 0 else (f"Who lives in {city} ?", name)
        rows.append(
            {
                "id": f"q{offset}-{i}",
                "title": "t",
                "context": context,
                "question": question,
                "answers": {"text": [answer], "answer_start": [context.index(answer)]},
            }
        )
    return rows


@pytest.fixture()
def task_files(tmp_path: Path) -> Path:
    """``{root}/{lang}/{task}/{split}.jsonl`` for two languages, 8 examples per split."""
    for k, lang in enumerate(("near", "far")):
        for split in ("train", "dev", "test"):
            _write_jsonl(tmp_path / lang / "xnli" / f"{split}.jsonl", _xnli_rows(k))
            _write_jsonl(tmp_path / lang / "ner" / f"{split}.jsonl", _ner_rows(k))
            _write_jsonl(tmp_path / lang / "qa" / f"{split}.jsonl", _qa_rows(k))
    return tmp_path


FAST = {"batch_size": 4, "epochs": 2, "eval_batch_size": 8, "max_length": 64, "log_every": 1}


def _check_finetune_result(r: TaskResult, langs, keys, upper: float) -> None:
    assert set(r.metrics) == set(langs)
    for lang in langs:
        assert set(r.metrics[lang]) == set(keys)
        for v in r.metrics[lang].values():
            assert 0.0 <= v <= upper
        assert r.counts[lang]["test"] == 8
    for curve in r.curves.values():
        assert curve and all(math.isfinite(v) for _, v in curve)
    json.dumps(r.info)  # JSON-serializable for the record
    assert_examples_match(r)


def test_xnli_translate_train_end_to_end(tokenizer, task_files):
    from harness.registry import build_config
    from tasks.xnli import Xnli, XnliConfig

    cfg = build_config(XnliConfig, {**FAST, "files": str(task_files / "{lang}" / "xnli" / "{split}.jsonl")})
    model = make_mlm(tokenizer)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    r = Xnli(cfg).run(_ctx(model, tokenizer, ("near", "far")))
    _check_finetune_result(r, ["near", "far"], ["accuracy"], 1.0)
    assert r.counts["near"] == {"train": 8, "dev": 8, "test": 8}
    assert r.info["finetune"]["near"]["steps"] == 4 and len(r.info["finetune"]["near"]["dev_history"]) == 2
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())  # ctx.model untouched
    # deterministic given the seed
    r2 = Xnli(cfg).run(_ctx(model, tokenizer, ("near", "far")))
    assert r2.metrics == r.metrics and r2.curves == r.curves


def test_xnli_cross_lingual_and_limits(tokenizer, task_files):
    from tasks.xnli import Xnli, XnliConfig

    cfg = build_config(XnliConfig, dict(
        **FAST,
        setting="cross-lingual",
        files=str(task_files / "{lang}" / "xnli" / "{split}.jsonl"),
        max_train_examples=6,
        max_eval_examples=5,
    ))  # fmt: skip
    r = Xnli(cfg).run(_ctx(make_mlm(tokenizer), tokenizer, ("near", "far"), source_language="near"))
    assert set(r.metrics) == {"near", "far"} and list(r.curves) == ["near/train_loss"]
    assert_examples_match(r)
    assert r.counts["far"] == {"train": 6, "dev": 5, "test": 5}
    with pytest.raises(ValueError, match="setting"):
        XnliConfig(setting="zero-shot")


def test_ner_end_to_end_records_mode(tokenizer, task_files):
    from tasks.ner import Ner, NerConfig

    files = str(task_files / "{lang}" / "ner" / "{split}.jsonl")
    r = Ner(build_config(NerConfig, dict(**FAST, files=files, seqeval_mode="strict"))).run(_ctx(make_mlm(tokenizer), tokenizer, ("near",)))
    _check_finetune_result(r, ["near"], ["f1", "precision", "recall"], 1.0)
    assert r.info["seqeval"] == {"mode": "strict", "scheme": "IOB2"}
    assert r.info["data"]["near"]["labels"][:3] == ["O", "B-PER", "I-PER"]
    # a labels.json next to the files overrides the WikiANN default
    (task_files / "far" / "ner" / "labels.json").write_text(
        json.dumps(["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-DATE"])
    )
    r2 = Ner(build_config(NerConfig, {**FAST, "epochs": 1, "files": files})).run(_ctx(make_mlm(tokenizer), tokenizer, ("far",)))
    assert r2.info["data"]["far"]["labels"][-1] == "B-DATE" and r2.info["seqeval"]["mode"] == "default"


def test_ner_first_subword_labels(tokenizer):
    import datasets

    from tasks.ner import encode_words

    ds = datasets.Dataset.from_list([{"tokens": ["Anna", "Schmidtberger", "visited"], "ner_tags": [1, 2, 0]}])
    (feat,), (wids,) = encode_words(tokenizer, ds, 64)
    firsts = [i for i, w in enumerate(wids) if w is not None and (i == 0 or wids[i - 1] != w)]
    assert [feat["labels"][i] for i in firsts] == [1, 2, 0]
    assert sum(lab != -100 for lab in feat["labels"]) == 3  # other subwords and specials ignored


def test_qa_end_to_end(tokenizer, task_files):
    from tasks.qa import Qa, QaConfig

    cfg = build_config(
        QaConfig, {**FAST, "max_length": 32, "doc_stride": 8, "files": str(task_files / "{lang}" / "qa" / "{split}.jsonl")}
    )
    r = Qa(cfg).run(_ctx(make_mlm(tokenizer), tokenizer, ("near",)))
    _check_finetune_result(r, ["near"], ["exact_match", "f1"], 100.0)
    assert r.counts["near"]["test_windows"] > 8  # contexts longer than a window were split


def test_qa_windows_map_answers_back(tokenizer, tmp_path):
    import datasets
    import numpy as np

    from tasks.qa import QaConfig, best_spans, encode_eval, encode_train

    rows = _qa_rows()
    ds = datasets.Dataset.from_list(rows)
    cfg = QaConfig(max_length=32, doc_stride=8)
    train = encode_train(tokenizer, ds, cfg)
    feats, ex_idx, offsets = encode_eval(tokenizer, ds, cfg)
    assert len(train) == len(feats) > len(rows)
    # gold start/end positions, read back through the offsets, give the answer text exactly
    hits = set()
    for f, ex, offs in zip(train, ex_idx, offsets):
        s, e = f["start_positions"], f["end_positions"]
        if s == 0:
            continue
        text = rows[ex]["context"][offs[s][0] : offs[e][1]]
        assert text == rows[ex]["answers"]["text"][0]
        hits.add(ex)
        # logits peaked at the gold positions decode to the answer
        n = len(f["input_ids"])
        sl, el = np.zeros(n), np.zeros(n)
        sl[s], el[e] = 5.0, 5.0
        assert (
            best_spans([sl], [el], [ex], [offs], [r["context"] for r in rows], n_best=3, max_answer_length=30)[ex]
            == text
        )
    assert hits == set(range(len(rows)))


# ------------------------------------------------------------------------------------- loaders


def test_local_loader_errors_name_the_file(tmp_path):
    from tasks.data import DataError, load_jsonl, load_task_splits

    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        load_jsonl(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"premise": "a", "hypothesis": "b", "label": 0}\n{"premise": "a",\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.jsonl.*line 2"):
        load_jsonl(bad)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(DataError, match="empty.jsonl"):
        load_jsonl(empty)
    wrong = tmp_path / "wrong.jsonl"
    _write_jsonl(wrong, [{"tokens": ["a"], "ner_tags": [0]}])
    with pytest.raises(DataError, match=r"wrong\.jsonl is not a xnli file.*premise"):
        load_jsonl(wrong, task="xnli")
    with pytest.raises(FileNotFoundError, match="train.jsonl"):
        load_task_splits("xnli", "near", files=str(tmp_path / "{lang}" / "{split}.jsonl"))


def test_missing_dev_is_carved_from_train(tmp_path):
    from tasks.data import load_task_splits

    rows = _xnli_rows() + _xnli_rows(1) + _xnli_rows(2)  # 24
    _write_jsonl(tmp_path / "near" / "train.jsonl", rows)
    _write_jsonl(tmp_path / "near" / "test.jsonl", rows[:8])
    files = str(tmp_path / "{lang}" / "{split}.jsonl")
    data, info = load_task_splits("xnli", "near", files=files)
    assert info["dev_from_train"] and len(data["dev"]) == 2 and len(data["train"]) == 22
    again, _ = load_task_splits("xnli", "near", files=files)
    assert again["dev"]["premise"] == data["dev"]["premise"]  # fixed dev-split seed


def test_language_table():
    from tasks.data import resolve_source
    from tasks.languages import LANGUAGES, WORLD_LANGUAGES, get_language, hub_config

    assert set(WORLD_LANGUAGES) == {"src", "near", "far", "script", "agglu"}
    assert hub_config("de", "xnli") == "de" and get_language("de").qa == "germanquad"
    assert get_language("ar").tydiqa == "arabic" and get_language("ur").xnli == "ur"
    assert all(row.code == code for code, row in LANGUAGES.items())
    with pytest.raises(KeyError, match="did you mean"):
        get_language("sww")
    with pytest.raises(ValueError, match="world"):
        hub_config("near", "xnli")
    assert resolve_source("near", files=None, data_root="/w") == "world"
    assert resolve_source("de", files=None, data_root=None) == "hub"
    assert resolve_source("de", files="x/{lang}/{split}.jsonl", data_root=None) == "files"


def test_build_task_model_copies_encoder_and_seeds_head(tokenizer):
    from transformers import AutoModelForSequenceClassification

    from tasks.loop import build_task_model

    src = make_mlm(tokenizer)
    a, info = build_task_model(src, AutoModelForSequenceClassification, seed=3, num_labels=3)
    torch.manual_seed(12345)  # perturbing the global RNG must not change the head
    b, _ = build_task_model(src, AutoModelForSequenceClassification, seed=3, num_labels=3)
    c, _ = build_task_model(src, AutoModelForSequenceClassification, seed=4, num_labels=3)
    for k, v in src.base_model.state_dict().items():
        assert torch.equal(a.base_model.state_dict()[k], v)
    assert info["copied"] > 0 and info["kept_random"] == []
    assert all(torch.equal(x, y) for x, y in zip(a.classifier.parameters(), b.classifier.parameters()))
    assert not torch.equal(a.classifier.out_proj.weight, c.classifier.out_proj.weight)


# ------------------------------------------------------------------ speed options of the shared loop


SPEED = {"batching": "length", "length_pool": 2, "adamw_impl": "fused", "cpu_bf16": True}


@pytest.mark.parametrize("task", ["xnli", "qa", "ner"])
def test_speed_options_end_to_end_deterministic_and_recorded(tokenizer, task_files, task):
    """Length-grouped batches, fused AdamW and CPU bf16: the same seed gives identical metrics twice,
    the per-example rows reproduce the metrics, and the options are stored in the resolved config."""
    from harness.run.config import resolved_fields
    from tasks.ner import Ner, NerConfig
    from tasks.qa import Qa, QaConfig
    from tasks.xnli import Xnli, XnliConfig

    cls, cfg_cls, extra = {"xnli": (Xnli, XnliConfig, {}), "qa": (Qa, QaConfig, {"max_length": 32, "doc_stride": 8}),
                           "ner": (Ner, NerConfig, {})}[task]  # fmt: skip
    files = str(task_files / "{lang}" / task / "{split}.jsonl")
    cfg = build_config(cfg_cls, {**FAST, **extra, **SPEED, "files": files})
    runs = []
    for noise in (0, 99):
        torch.manual_seed(noise)  # the global RNG must not matter
        runs.append(cls(cfg).run(_ctx(make_mlm(tokenizer), tokenizer, ("near",))))
    a, b = runs
    assert a.metrics == b.metrics and a.curves == b.curves
    assert_examples_match(a)
    stored = resolved_fields(cfg)
    assert {k: stored[k] for k in SPEED} == SPEED
    assert not set(SPEED) & set(resolved_fields(build_config(cfg_cls, {**FAST, **extra, "files": files})))


def test_length_batches_of_an_epoch_are_the_permutation_regrouped():
    from tasks.batching import epoch_batches

    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 60, (203,), generator=g).tolist()
    plain = epoch_batches(203, 16, 7, 2)
    # the default order is today's: consecutive slices of the seeded permutation
    from harness.seeding import torch_generator

    ref = torch.randperm(203, generator=torch_generator(7, "task", "data-order", "2")).split(16)
    assert all(torch.equal(x, y) for x, y in zip(plain, ref)) and len(plain) == len(ref)
    grouped = epoch_batches(203, 16, 7, 2, lengths=lengths, pool=4)
    assert len(grouped) == len(plain) and sorted(i for b in grouped for i in b.tolist()) == list(range(203))
    assert sum(len(b) < 16 for b in grouped) == 1  # only the last pool's last batch is short
    assert [b.tolist() for b in grouped] == [b.tolist() for b in epoch_batches(203, 16, 7, 2, lengths=lengths, pool=4)]
    assert [b.tolist() for b in grouped] != [b.tolist() for b in epoch_batches(203, 16, 7, 3, lengths=lengths, pool=4)]

    def padded(batches):
        return sum(max(lengths[i] for i in b.tolist()) * len(b) for b in batches)

    assert padded(grouped) < 0.8 * padded(plain)


def test_train_config_rejects_unknown_speed_options():
    from tasks.loop import TrainConfig

    for bad, match in (({"batching": "sorted"}, "batching must be one of"), ({"adamw_impl": "apex"}, "adamw_impl"),
                       ({"length_pool": 0}, "length_pool")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            TrainConfig(**bad)


def test_task_features_are_encoded_once_per_process(tokenizer, task_files, monkeypatch):
    """Two trials that share a tokenizer, data and settings tokenize each split once; other settings re-encode."""
    import tasks.data
    import tasks.xnli
    from harness.cache import ProcessMemo
    from tasks.xnli import Xnli, XnliConfig

    monkeypatch.setattr(tasks.data, "_FEATURE_MEMO", ProcessMemo(12))
    calls = []
    real = tasks.xnli.encode_pairs
    monkeypatch.setattr(tasks.xnli, "encode_pairs", lambda tok, ds, n: calls.append(n) or real(tok, ds, n))
    files = str(task_files / "{lang}" / "xnli" / "{split}.jsonl")
    cfg = build_config(XnliConfig, {**FAST, "epochs": 1, "files": files})
    first = Xnli(cfg).run(_ctx(make_mlm(tokenizer), tokenizer, ("near",)))
    assert len(calls) == 3  # train, dev, test
    again = Xnli(cfg).run(_ctx(make_mlm(tokenizer), tokenizer, ("near",)))
    assert len(calls) == 3 and again.metrics == first.metrics
    Xnli(build_config(XnliConfig, {**FAST, "epochs": 1, "max_length": 48, "files": files})).run(
        _ctx(make_mlm(tokenizer), tokenizer, ("near",)))
    assert calls[3:] == [48, 48, 48]


def test_freeze_embeddings_keeps_the_word_rows_and_trains_the_rest(tokenizer):
    """``freeze_embeddings``: the word embedding matrix ends bit-identical while the encoder moves; without
    it the matrix moves (so the check can fail); it is stored in the resolved config only when set; a
    model without input embeddings is refused by name."""
    import torch.nn as nn
    from transformers import AutoModelForSequenceClassification

    from harness.run.config import resolved_fields
    from tasks.batching import pad_collate
    from tasks.loop import TrainConfig, build_task_model, finetune
    from tasks.xnli import XnliConfig

    data = [{"input_ids": [0, 5 + i % 7, 6 + i % 3, 2], "attention_mask": [1] * 4, "labels": i % 3} for i in range(16)]
    moved = {}
    for freeze in (True, False):
        model, _ = build_task_model(make_mlm(tokenizer), AutoModelForSequenceClassification, seed=1, num_labels=3)
        before = {k: v.clone() for k, v in model.state_dict().items()}
        cfg = TrainConfig(batch_size=4, epochs=2, learning_rate=1e-2, freeze_embeddings=freeze)
        finetune(model, data, None, lambda m: {}, cfg, seed=1, collate_fn=pad_collate(tokenizer.pad_token_id),
                 show_progress=False)  # fmt: skip
        moved[freeze] = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    word = "roberta.embeddings.word_embeddings.weight"
    assert word not in moved[True] and word in moved[False]
    assert "roberta.encoder.layer.0.attention.self.query.weight" in moved[True]
    assert resolved_fields(build_config(XnliConfig, {"train": {"freeze_embeddings": True}}))["freeze_embeddings"] is True
    assert "freeze_embeddings" not in resolved_fields(build_config(XnliConfig, {}))

    class NoEmbeddings(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Linear(1, 2)

    with pytest.raises(ValueError, match="NoEmbeddings has no input embedding matrix"):
        finetune(NoEmbeddings(), data, None, lambda m: {}, TrainConfig(freeze_embeddings=True), seed=1,
                 collate_fn=pad_collate(0), show_progress=False)  # fmt: skip
