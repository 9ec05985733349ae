"""Parameters and training-step overhead of the language encodings relative to ``none``.

A random RoBERTa masked LM (default: the world's small source shape, 4 layers x 256, vocabulary
5000) is trained for ``--steps`` optimizer steps (forward, backward, AdamW) on random batches of
``--batch`` x ``--length`` tokens in two languages, once per encoding; the table gives the
parameters each encoding adds and the median step time (wall and CPU) relative to ``none``.
Encodings run interleaved, step by step, so that a drift in machine load hits them all alike.

Run:
    python benchmarks/bench_encodings.py                         # world small shape, CPU
    python benchmarks/bench_encodings.py --hidden 16 --layers 2  # the tests' tiny shape
    python benchmarks/bench_encodings.py --device cuda --hidden 1024 --layers 12 --vocab 95000  # XLM15-like
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._load import LoadMonitor, ratio  # noqa: E402

ENCODINGS = ("none", "additive", "attached", "xlp")


def build(name: str, args: argparse.Namespace):
    from transformers import RobertaConfig, RobertaForMaskedLM
    from transformers.utils import logging

    from harness import registry

    logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = RobertaConfig(vocab_size=args.vocab, hidden_size=args.hidden, num_hidden_layers=args.layers,
                        num_attention_heads=max(1, args.hidden // 64), intermediate_size=4 * args.hidden,
                        max_position_embeddings=args.length + 4, pad_token_id=1)  # fmt: skip
    model = RobertaForMaskedLM(cfg).to(args.device)
    enc = registry.get("encoding", name).make({"init": "random"} if name == "xlp" else None)
    wrapped = enc.wrap(model, ["a", "b"], seed=0)
    optim = torch.optim.AdamW([p for p in wrapped.parameters() if p.requires_grad], lr=1e-4)
    return enc, wrapped, optim


def batch(enc, args: argparse.Namespace, step: int) -> dict:
    g = torch.Generator().manual_seed(step)
    length = args.length - (1 if enc.registry_name == "attached" else 0)  # the same sequence budget for all
    ids = torch.randint(5, args.vocab, (args.batch, length), generator=g)
    ids[:, 0] = 0
    labels = torch.where(torch.rand(ids.shape, generator=g) < 0.15, ids, torch.full_like(ids, -100))
    b = enc.prepare({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels},
                    ["a", "b"] * (args.batch // 2) + ["a"] * (args.batch % 2))  # fmt: skip
    return {k: v.to(args.device) if torch.is_tensor(v) else v for k, v in b.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    runs = {name: build(name, args) for name in ENCODINGS}
    wall: dict[str, list[float]] = {n: [] for n in ENCODINGS}
    cpu: dict[str, list[float]] = {n: [] for n in ENCODINGS}
    mon = LoadMonitor().start()  # the timed steps only
    for step in range(args.warmup + args.steps):
        for name, (enc, model, optim) in runs.items():
            b = batch(enc, args, step)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            t0, c0 = time.perf_counter(), time.process_time()
            model(**b).loss.backward()
            optim.step()
            optim.zero_grad(set_to_none=True)
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            if step >= args.warmup:
                wall[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
    mon.stop()
    load = mon.record()
    base_params = sum(p.numel() for p in runs["none"][1].parameters())
    base_wall, base_cpu = statistics.median(wall["none"]), statistics.median(cpu["none"])
    rows = []
    print(f"model: {args.layers} x {args.hidden}, vocab {args.vocab}, {base_params:,} parameters; "
          f"batch {args.batch} x {args.length}, {args.steps} steps, {args.threads} thread(s), {args.device}")  # fmt: skip
    print(f"{'encoding':<9} {'added params':>13} {'% of model':>10} {'step ms (wall)':>15} {'x none':>7} "
          f"{'step ms (CPU)':>14} {'x none':>7}")  # fmt: skip
    for name, (_, model, _) in runs.items():
        added = model.encoding_info()["parameters_added"] if hasattr(model, "encoding_info") else 0
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        # relative step times are results only on a machine nobody else used (benchmarks/_load.py)
        rows.append({"encoding": name, "parameters_added": added, "step_wall_s": w, "step_cpu_s": c,
                     "wall_vs_none": ratio(w, base_wall, load, 3), "cpu_vs_none": ratio(c, base_cpu, load, 3)})  # fmt: skip
        print(f"{name:<9} {added:>13,} {100 * added / base_params:>9.2f}% {1000 * w:>15.1f} {w / base_wall:>7.3f} "
              f"{1000 * c:>14.1f} {c / base_cpu:>7.3f}")  # fmt: skip
    print(mon.banner())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "model_parameters": base_params, "rows": rows, "load": load}, f, indent=1)


if __name__ == "__main__":
    main()
