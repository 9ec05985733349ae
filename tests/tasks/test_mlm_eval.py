"""mlm-at-init's evaluation against a straightforward reference, and its per-process memo.

The evaluation applies the LM head only at masked positions, batches examples by length and runs
under ``torch.inference_mode``; the reference below is the plain one (batches in file order, full
logits at every position, ``no_grad``). They must agree to 1e-6 in loss and exactly in accuracy
and masked-token count, on every masked-LM family the harness claims and with a language encoding
that inserts a token (``attached``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import tasks.mlm_at_init as mod
from harness.protocols import TaskContext
from tasks.loop import HeadAtPositions, length_batches
from tasks.mlm_at_init import (
    IGNORE_INDEX,
    MlmAtInit,
    MlmAtInitConfig,
    _collate,
    build_masked_examples,
    masked_lm_scores,
    read_lines,
)
from tests._tokfixtures import FAMILIES, SOURCE_TEXT

MLM_FAMILIES = [name for name, fam in FAMILIES.items() if fam.kind == "mlm"]
LINES = SOURCE_TEXT * 3  # 36 lines of different lengths


def reference_scores(model, examples, *, pad_id: int, batch_size: int, prepare=None, language=None) -> dict:
    """Full logits at every position, batches in file order, the mean over masked positions."""
    model.eval()
    nll, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for start in range(0, len(examples), batch_size):
            batch = _collate(examples[start : start + batch_size], pad_id)
            if prepare is not None:
                batch = prepare(batch, [language] * batch["input_ids"].shape[0])
            labels = batch.pop("labels")
            logits = model(**batch).logits
            sel = labels != IGNORE_INDEX
            picked, gold = logits[sel].float(), labels[sel]
            nll += float(torch.nn.functional.cross_entropy(picked, gold, reduction="sum"))
            correct += int((picked.argmax(-1) == gold).sum())
            count += int(sel.sum())
    return {"loss": nll / count, "accuracy": correct / count, "masked_tokens": count}


def _setup(family: str, tmp_path):
    fam = FAMILIES[family]
    tok = fam.tokenizer(SOURCE_TEXT)
    if tok.mask_token is None:  # the unigram fixture tokenizer has no mask token; XLM-R's vocabulary needs one
        tok.add_special_tokens({"mask_token": "<mask>"})
    model = fam.build(tok)
    path = tmp_path / "eval.txt"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return tok, model, path


@pytest.mark.parametrize("family", MLM_FAMILIES)
def test_masked_head_evaluation_matches_full_logits_reference(family, tmp_path):
    tok, model, path = _setup(family, tmp_path)
    cfg = MlmAtInitConfig(mlm_probability=0.3, max_length=24)
    examples = build_masked_examples(tok, read_lines(path), cfg)
    assert len({len(ids) for ids, _ in examples}) > 3  # lengths differ: length buckets reorder the batches
    ref = reference_scores(model, examples, pad_id=tok.pad_token_id, batch_size=5)
    new = masked_lm_scores(model, examples, pad_id=tok.pad_token_id, batch_size=5, show_progress=False)
    assert new["masked_tokens"] == ref["masked_tokens"] > 20
    assert new["accuracy"] == ref["accuracy"]
    assert abs(new["loss"] - ref["loss"]) <= 1e-6
    assert new["perplexity"] == pytest.approx(math.exp(new["loss"]))


def test_head_runs_only_at_masked_positions(tmp_path):
    """The vocabulary projection sees one row per masked token, not one per position."""
    tok, model, path = _setup("roberta", tmp_path)
    examples = build_masked_examples(tok, read_lines(path), MlmAtInitConfig(mlm_probability=0.3))
    rows: list[int] = []
    handle = model.get_output_embeddings().register_forward_hook(lambda m, a, o: rows.append(a[0].shape[:-1].numel()))
    try:
        r = masked_lm_scores(model, examples, pad_id=tok.pad_token_id, batch_size=8, show_progress=False)
    finally:
        handle.remove()
    assert sum(rows) == r["masked_tokens"]
    positions = sum(len(ids) for ids, _ in examples)
    assert sum(rows) < positions / 2


def test_head_at_positions_leaves_other_models_alone():
    """A model whose forward is not base model -> head falls back to selecting rows of the full logits."""

    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)
            self.out = torch.nn.Linear(4, 10)

        def forward(self, input_ids):
            return (self.out(self.emb(input_ids)),)

    model = Plain()
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    pos = torch.tensor([[True, False, True], [False, False, True]])
    with torch.no_grad(), HeadAtPositions(model) as head:
        picked = head.logits(model, {"input_ids": ids}, pos)
        assert torch.equal(picked, model(ids)[0][pos])


def test_evaluation_with_an_inserted_language_token_matches_reference(tmp_path):
    from harness.registry import build_config, get

    tok, model, path = _setup("roberta", tmp_path)
    entry = get("encoding", "attached")
    enc = entry.make(build_config(entry.config_cls, {}))
    wrapped = enc.wrap(model, ["near"], seed=1)
    cfg = MlmAtInitConfig(mlm_probability=0.3, max_length=24 - wrapped.added_tokens)
    examples = build_masked_examples(tok, read_lines(path), cfg)
    ref = reference_scores(
        wrapped, examples, pad_id=tok.pad_token_id, batch_size=4, prepare=wrapped.prepare_batch, language="near"
    )
    new = masked_lm_scores(
        wrapped, examples, pad_id=tok.pad_token_id, batch_size=4, encoding=enc, language="near", show_progress=False
    )
    assert new["masked_tokens"] == ref["masked_tokens"]
    assert new["accuracy"] == ref["accuracy"]
    assert abs(new["loss"] - ref["loss"]) <= 1e-6


def test_length_batches_cover_every_index_once():
    lengths = [7, 3, 3, 9, 1, 3, 5]
    batches = length_batches(lengths, 3)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths))) and [len(b) for b in batches] == [3, 3, 1]
    assert [lengths[i] for i in flat] == sorted(lengths)
    with pytest.raises(ValueError, match="batch_size"):
        length_batches(lengths, 0)


# ------------------------------------------------------------------------------------- memo


def _ctx(model, tok) -> TaskContext:
    return TaskContext(model=model, tokenizer=tok, languages=["near"], seed=1, progress=False)


def test_evaluation_set_built_once_per_tokenizer_and_file(tmp_path, monkeypatch):
    tok, model, path = _setup("roberta", tmp_path)
    mod._EXAMPLES_MEMO.clear()
    built: list[int] = []
    real = mod.build_masked_examples

    def counting(tokenizer, texts, cfg):
        built.append(len(texts))
        return real(tokenizer, texts, cfg)

    monkeypatch.setattr(mod, "build_masked_examples", counting)
    task = MlmAtInit(MlmAtInitConfig(eval_file=str(path)))
    r1 = task.run(_ctx(model, tok))
    r2 = MlmAtInit(MlmAtInitConfig(eval_file=str(path), batch_size=3)).run(
        _ctx(FAMILIES["roberta"].build(tok, seed=7), tok)
    )
    assert len(built) == 1  # a second trial (another model, another batch size) reuses the examples
    assert r1.counts == r2.counts and r1.metrics != r2.metrics

    # a fresh copy of the same tokenizer (the state each encoding call leaves behind is ignored) hits too
    again = FAMILIES["roberta"].tokenizer(SOURCE_TEXT)
    MlmAtInit(MlmAtInitConfig(eval_file=str(path))).run(_ctx(model, again))
    assert len(built) == 1

    # what determines the examples: the mask seed, the file's bytes, the tokenizer
    MlmAtInit(MlmAtInitConfig(eval_file=str(path), mask_seed=7)).run(_ctx(model, tok))
    assert len(built) == 2
    path.write_text("\n".join(reversed(LINES)) + "\n", encoding="utf-8")
    r3 = MlmAtInit(MlmAtInitConfig(eval_file=str(path))).run(_ctx(model, tok))
    assert len(built) == 3 and r3.metrics != r1.metrics
    other = FAMILIES["roberta"].tokenizer(SOURCE_TEXT[:6])
    assert mod.tokenizer_state(other) != mod.tokenizer_state(tok)
    assert mod.tokenizer_state(again) == mod.tokenizer_state(tok)


def test_memo_returns_what_building_returns(tmp_path):
    tok, model, path = _setup("bert", tmp_path)
    mod._EXAMPLES_MEMO.clear()
    cfg = MlmAtInitConfig(mlm_probability=0.4)
    first, n = mod.evaluation_examples(tok, path, cfg)
    second, _ = mod.evaluation_examples(tok, path, cfg)
    assert second is first and n == len(LINES)
    built = build_masked_examples(tok, read_lines(path), cfg)
    assert [(list(a), list(b)) for a, b in first] == [(list(a), list(b)) for a, b in built]
    for i in range(mod.MEMO_ENTRIES + 1):  # bounded: the oldest entry goes first
        mod.evaluation_examples(tok, path, MlmAtInitConfig(mlm_probability=0.4, mask_seed=100 + i))
    assert len(mod._EXAMPLES_MEMO) == mod.MEMO_ENTRIES
    assert mod.evaluation_examples(tok, path, cfg)[0] is not first
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        mod.evaluation_examples(tok, tmp_path / "missing.txt", cfg)


def test_predict_with_lengths_keeps_feature_order(tmp_path):
    from tasks.loop import pad_collate, predict

    tok, model, _ = _setup("roberta", tmp_path)
    feats = [{"input_ids": ids, "attention_mask": [1] * len(ids)} for ids in tok(LINES[:13])["input_ids"]]

    def per_feature(batch, out):
        n = batch["attention_mask"].sum(1).tolist()
        return [out.logits[i, : n[i]].double().sum().item() for i in range(len(n))]

    kw = dict(batch_size=4, show_progress=False)
    plain = predict(model, feats, pad_collate(tok.pad_token_id), per_feature, **kw)
    bucketed = predict(
        model, feats, pad_collate(tok.pad_token_id), per_feature, lengths=[len(f["input_ids"]) for f in feats], **kw
    )
    assert len(bucketed) == len(feats)
    assert bucketed == pytest.approx(plain, rel=1e-5, abs=1e-5)
    with pytest.raises(ValueError, match="lengths"):
        predict(model, feats, pad_collate(tok.pad_token_id), per_feature, lengths=[1, 2], **kw)
    with pytest.raises(ValueError, match="output_fn returned"):
        predict(model, feats, pad_collate(tok.pad_token_id), lambda b, o: [0], **kw)


def test_collate_gives_the_tensors_of_the_row_by_row_fill():
    """The vectorized batch is the one the row-by-row fill gave: same integers, dtypes and shapes."""
    from tasks.mlm_at_init import IGNORE_INDEX, _collate

    rng = np.random.default_rng(0)
    examples = []
    for n in rng.integers(1, 40, size=33):
        ids = rng.integers(0, 5000, size=n).tolist()
        labels = np.where(rng.random(n) < 0.15, ids, IGNORE_INDEX).tolist()
        examples.append((tuple(ids), tuple(labels)))
    width = max(len(ids) for ids, _ in examples)
    want = {"input_ids": torch.full((33, width), 3, dtype=torch.long), "attention_mask": torch.zeros((33, width), dtype=torch.long),
            "labels": torch.full((33, width), IGNORE_INDEX, dtype=torch.long)}
    for row, (ids, lab) in enumerate(examples):
        want["input_ids"][row, : len(ids)] = torch.tensor(ids)
        want["labels"][row, : len(lab)] = torch.tensor(lab)
        want["attention_mask"][row, : len(ids)] = 1
    got = _collate(examples, pad_id=3)
    assert list(got) == list(want)
    for k in want:
        assert got[k].dtype == torch.long and torch.equal(got[k], want[k]), k
