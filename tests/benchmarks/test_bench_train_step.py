"""benchmarks/bench_train_step.py: the step it times is a real training step, and the profile sums to its shares."""

from __future__ import annotations

import torch

from benchmarks import bench_train_step as bts


def test_the_timed_step_trains_the_model_and_the_profile_names_its_operators():
    model, opt = bts.build(vocab=50, hidden=16, layers=1, heads=2, ffn=32, seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    step = bts.make_step(model, opt, batch=2, length=6, vocab=50, bf16=True, seed=1)
    assert bts.time_step(step, warmup=1, steps=2) > 0
    changed = sum(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert changed > len(before) // 2  # AdamW moved the weights
    ops = bts.op_shares(step, steps=2, top=5)
    assert len(ops) == 5 and all(0 <= o["share"] <= 1 for o in ops)
    assert ops == sorted(ops, key=lambda o: -o["share"]) and sum(o["share"] for o in ops) <= 1.0 + 1e-9
