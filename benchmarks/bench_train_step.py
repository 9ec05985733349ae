"""Where one fine-tuning step of the small world's model spends its time: seconds per step against batch size,
and the share of each operator (``torch.profiler``), at one thread.

Issue 27 asks for a QA trial of at most 3 minutes on one core; the committed budget is 2,000 steps of 16
windows (~40 tokens each) with the task loop's speed options (bf16 autocast, fused AdamW). This benchmark
builds the world model's shape (RoBERTa, 4 layers x 256, 4 heads, FFN 1024, 6k vocabulary) with a QA head,
and times the step the task loop runs (forward under bf16 autocast, backward, fused AdamW), so a reader can
see whether the step is bound by its matrix products (time linear in tokens) or by overhead that a faster
loop could remove::

    python benchmarks/bench_train_step.py --json benchmarks/results/train_step_qa.json

The model is randomly initialized (the step's cost does not depend on the weights); the JSON records the
machine's load while it ran (:class:`benchmarks._load.LoadMonitor`, the other benchmarks' check), and the printed
banner says loudly when other processes took CPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._load import LoadMonitor  # noqa: E402
from benchmarks.bench_quickstart import _git, machine_facts  # noqa: E402


def build(vocab: int, hidden: int, layers: int, heads: int, ffn: int, seed: int):
    """A RoBERTa QA model of the world's shape and its fused AdamW (the task loop's optimizer)."""
    import torch
    from transformers import RobertaConfig, RobertaForQuestionAnswering

    torch.manual_seed(seed)
    cfg = RobertaConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=ffn, max_position_embeddings=130)  # fmt: skip
    model = RobertaForQuestionAnswering(cfg)
    model.train()
    return model, torch.optim.AdamW(model.parameters(), lr=8e-4, fused=True)


def make_step(model, opt, batch: int, length: int, vocab: int, bf16: bool, seed: int):
    """A closure running one training step on a fixed random batch (token ids, full attention, one span each)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (batch, length), generator=g)
    mask = torch.ones(batch, length, dtype=torch.long)
    start = torch.randint(0, length, (batch,), generator=g)

    def step() -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(input_ids=ids, attention_mask=mask, start_positions=start, end_positions=start)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def time_step(step, warmup: int, steps: int) -> float:
    """Median seconds of ``steps`` timed calls after ``warmup`` untimed ones."""
    import statistics

    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def op_shares(step, steps: int, top: int) -> list[dict]:
    """The ``top`` operators by self CPU time over ``steps`` steps, with their share of the total."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    rows = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    return [{"op": e.key, "share": round(e.self_cpu_time_total / total, 4), "calls_per_step": e.count / steps}
            for e in rows]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="8,16,32", help="batch sizes to time (comma-separated)")
    ap.add_argument("--length", type=int, default=40, help="tokens per window (QA's mean window on the small world: 40)")
    ap.add_argument("--profile-batch", type=int, default=16, help="the batch whose operators are profiled")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--fp32", action="store_true", help="no bf16 autocast")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    shape = {"vocab": 6000, "hidden": 256, "layers": 4, "heads": 4, "ffn": 1024}
    result = {"benchmark": "bench_train_step", "shape": shape, "length": args.length, "bf16": not args.fp32,
              "threads": 1, "git": _git(), "machine": machine_facts(), "batches": {}}  # fmt: skip
    mon = LoadMonitor().start()
    for b in (int(x) for x in args.batches.split(",")):
        model, opt = build(**shape, seed=0)
        s = time_step(make_step(model, opt, b, args.length, shape["vocab"], not args.fp32, seed=1), 3, args.steps)
        result["batches"][str(b)] = {"s_per_step": round(s, 4), "ms_per_1k_tokens": round(1000 * s / (b * args.length) * 1000, 2)}
        print(f"batch {b:3d} x {args.length} tokens: {s * 1000:.1f} ms/step, "
              f"{result['batches'][str(b)]['ms_per_1k_tokens']:.1f} ms per 1k tokens", flush=True)
    model, opt = build(**shape, seed=0)
    step = make_step(model, opt, args.profile_batch, args.length, shape["vocab"], not args.fp32, seed=1)
    time_step(step, 3, 1)
    result["profile_batch"] = args.profile_batch
    result["ops"] = op_shares(step, max(5, args.steps // 2), 12)
    for o in result["ops"]:
        print(f"  {o['op']:<32} {100 * o['share']:5.1f} %  ({o['calls_per_step']:.0f} calls a step)")
    mon.stop()
    result["load"] = mon.record()
    print(mon.banner())
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
