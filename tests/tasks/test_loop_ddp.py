"""The shared loop under two-process CPU DDP (gloo) gives the single-process result.

Two processes are started with ``torch.multiprocessing.spawn`` and rendezvous through a file.
The model (plain torch, HF's forward contract) has no dropout, so the only differences allowed are floating-point reassociation in the
gradient all-reduce. The data size (13 examples, global batch 4) makes the last batch hold one
example, so one rank takes part with zero weight. The same run with a language encoding (XLP,
random projections, two languages mixed in every batch) must also agree.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

N_TRAIN, N_EVAL, VOCAB = 13, 10, 40


def _data(n: int, seed: int, languages: tuple[str, ...] = ()) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        length = int(torch.randint(4, 9, (1,), generator=g))
        ids = [0] + torch.randint(5, VOCAB, (length,), generator=g).tolist() + [2]
        rows.append({"input_ids": ids, "attention_mask": [1] * len(ids), "labels": int(ids[1] % 3)})
        if languages:
            rows[-1]["language"] = languages[i % len(languages)]
    return rows


class TinyClassifier(torch.nn.Module):
    """Embedding, masked mean pooling, a hidden layer and a 3-way head; returns ``.loss``/``.logits``.

    Plain torch, so the spawned processes need not import transformers (seconds on 2 shared cores);
    the loop only relies on the forward contract HF models also follow.
    """

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, 16, padding_idx=1)
        self.hidden = torch.nn.Linear(16, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.out = torch.nn.Linear(16, 3)

    def forward(self, input_ids, attention_mask, labels=None):
        m = attention_mask.unsqueeze(-1).float()
        pooled = (self.emb(input_ids) * m).sum(1) / m.sum(1)
        logits = self.out(torch.tanh(self.norm(self.hidden(pooled))))
        loss = None if labels is None else torch.nn.functional.cross_entropy(logits, labels)
        return SimpleNamespace(loss=loss, logits=logits)


    def get_input_embeddings(self) -> torch.nn.Module:
        return self.emb


def _model() -> TinyClassifier:
    torch.manual_seed(0)
    return TinyClassifier()


LANGS = ("a", "b")


def _run(encoding: str | None = None) -> dict:
    """Fine-tune with the shared loop; returns metrics, curves and final parameters.

    ``encoding="xlp"``: the classifier is wrapped with random XLP projections for two languages
    (trained), and every batch mixes them.
    """
    from tasks.data import language_collate
    from tasks.loop import TrainConfig, finetune, pad_collate, predict

    langs = LANGS if encoding else ()
    train, dev, test = _data(N_TRAIN, 1, langs), _data(N_EVAL, 2, langs), _data(N_EVAL, 3, langs)
    model = _model()
    if encoding:
        from harness.language_encoding import wrap_model
        from methods.encodings.xlp import XlpConfig

        model = wrap_model(model, list(LANGS), encoding=encoding, config=XlpConfig(init="random"), seed=3)
    collate = language_collate(pad_collate(1), model)

    def scores(model, feats):
        logits = predict(model, feats, collate, lambda b, o: o.logits.tolist(), batch_size=3, show_progress=False)
        t = torch.tensor(logits)
        y = torch.tensor([f["labels"] for f in feats])
        return {
            "accuracy": float((t.argmax(-1) == y).float().mean()),
            "loss": float(torch.nn.functional.cross_entropy(t, y)),
            "n": len(logits),
        }

    cfg = TrainConfig(batch_size=4, epochs=3, learning_rate=1e-2, log_every=1)
    res = finetune(
        model,
        train,
        lambda m: scores(m, dev),
        lambda m: scores(m, test),
        cfg,
        seed=5,
        collate_fn=collate,
        select_metric="loss",
        greater_is_better=False,
        show_progress=False,
    )
    return {
        "test": res.test,
        "dev": res.dev_history,
        "best_epoch": res.best_epoch,
        "curve": res.loss_curve,
        "params": {k: v.flatten()[:50].tolist() for k, v in model.state_dict().items() if v.is_floating_point()},
    }


def _worker(rank: int, world: int, rendezvous: str, out_dir: str, encoding: str | None = None) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    try:
        result = _run(encoding)
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("encoding", [None, "xlp"])
def test_two_process_ddp_matches_single_process(tmp_path, encoding):
    import torch.multiprocessing as mp

    single = _run(encoding)
    assert single["curve"] and len(single["curve"]) == 3 * 4  # 4 steps per epoch (13 / 4)
    if encoding:
        assert any(k.startswith("tables.input") for k in single["params"])
    os.environ.pop("WORLD_SIZE", None)
    mp.spawn(_worker, args=(2, str(tmp_path / "rendezvous"), str(tmp_path), encoding), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert ranks[0]["test"] == ranks[1]["test"]  # every rank saw all predictions
    ddp = ranks[0]
    assert ddp["test"]["n"] == N_EVAL and ddp["best_epoch"] == single["best_epoch"]
    for a, b in zip(ddp["dev"], single["dev"]):
        assert a["accuracy"] == b["accuracy"] and a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6)
    assert ddp["test"]["accuracy"] == single["test"]["accuracy"]
    assert ddp["test"]["loss"] == pytest.approx(single["test"]["loss"], rel=1e-4, abs=1e-6)
    assert [s for s, _ in ddp["curve"]] == [s for s, _ in single["curve"]]
    for (_, a), (_, b) in zip(ddp["curve"], single["curve"]):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-6)
    for k, v in single["params"].items():
        assert ddp["params"][k] == pytest.approx(v, rel=1e-3, abs=1e-5), k


def test_selects_best_dev_epoch_and_scores_that_checkpoint():
    from tasks.loop import TrainConfig, finetune, pad_collate

    snapshots, dev_values = [], iter([0.5, 0.9, 0.7])

    def dev_eval(model):
        snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
        return {"f1": next(dev_values)}

    def test_eval(model):
        return {"is_epoch_2": all(torch.equal(v, snapshots[1][k]) for k, v in model.state_dict().items())}

    cfg = TrainConfig(batch_size=4, epochs=3, learning_rate=1e-2)
    res = finetune(
        _model(),
        _data(8, 1),
        dev_eval,
        test_eval,
        cfg,
        seed=1,
        collate_fn=pad_collate(1),
        select_metric="f1",
        show_progress=False,
    )
    assert res.best_epoch == 2 and res.best_dev == {"f1": 0.9} and res.test == {"is_epoch_2": True}
    assert not all(torch.equal(v, snapshots[1][k]) for k, v in snapshots[2].items())  # epoch 3 did change it


def test_seeded_and_independent_of_global_rng():
    from tasks.loop import TrainConfig, finetune, pad_collate

    def once(seed: int, noise: int):
        torch.manual_seed(noise)
        model = _model()
        res = finetune(
            model,
            _data(8, 1),
            None,
            lambda m: None,
            TrainConfig(batch_size=3, learning_rate=1e-2),
            seed=seed,
            collate_fn=pad_collate(1),
            show_progress=False,
        )
        return res.loss_curve, model.out.weight.detach().clone()

    (c1, w1), (c2, w2), (c3, _) = once(1, 0), once(1, 99), once(2, 0)
    assert c1 == c2 and torch.equal(w1, w2)
    assert c1 != c3  # the trial seed changes the data order
