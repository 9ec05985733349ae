"""The similarity search's screen products at one chunk's shape, by precision and key layout, at one thread.

WECHSEL's exact top-k search (``methods/_exact_topk.py``) screens 512 query rows against every key at once. This
times that product (and the pass that takes each 64-key block's maximum of its scores) for float32, bfloat16 with
the keys kept ``m x d`` (multiplied through a transposed view) and kept ``d x m`` (the layout the screen uses), and
a bfloat16 product three times as wide (a split, more accurate bfloat16 screen), so a reader can see what AMX tiles
buy and what the passes over the scores cost beside it::

    python benchmarks/bench_screen_product.py --json benchmarks/results/screen_product.json

Random inputs (a product's cost does not depend on its values); the JSON records the machine's load while it ran
(:class:`benchmarks._load.LoadMonitor`) and the CPU (AMX and AVX512-BF16 flags among the facts).
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


def best_ms(fn, repeat: int) -> float:
    """The fastest of ``repeat`` calls after one warm-up, in milliseconds."""
    fn()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return round(best * 1000, 4)


def measure(rows: int, keys: int, dim: int, repeat: int, seed: int) -> dict:
    """Milliseconds per product and per pass at ``rows x keys x dim``."""
    import torch

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(rows, dim, generator=g)
    k = torch.randn(keys, dim, generator=g)
    wide = -(-(3 * dim + 1) // 32) * 32
    qb, kb = q.to(torch.bfloat16), k.to(torch.bfloat16)
    kb_dm = kb.T.contiguous()
    q3 = torch.randn(rows, wide, generator=g).to(torch.bfloat16)
    k3 = torch.randn(wide, keys, generator=g).to(torch.bfloat16)
    out32 = torch.empty(rows, keys)
    outb = torch.empty(rows, keys, dtype=torch.bfloat16)
    blocks = keys // 64
    res = {
        "fp32 product": best_ms(lambda: torch.matmul(q, k.T, out=out32), repeat),
        "bf16 product, keys m x d (transposed view)": best_ms(lambda: torch.matmul(qb, kb.T, out=outb), repeat),
        "bf16 product, keys d x m": best_ms(lambda: torch.matmul(qb, kb_dm, out=outb), repeat),
        f"bf16 product {wide} wide, keys d x m": best_ms(lambda: torch.matmul(q3, k3, out=outb), repeat),
        "bf16 scores widened to float32": best_ms(lambda: out32.copy_(outb), repeat),
        "64-key block maxima, float32 scores": best_ms(lambda: out32[:, : blocks * 64].reshape(rows, blocks, 64).amax(2), repeat),
        "64-key block maxima, bf16 scores": best_ms(lambda: outb[:, : blocks * 64].reshape(rows, blocks, 64).amax(2), repeat),
    }
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=512, help="query rows per chunk (the search's EXACT_CHUNK_ROWS)")
    p.add_argument("--keys", type=int, default=29648, help="keys (the WECHSEL end-to-end bench's unique usable source pieces)")
    p.add_argument("--dim", type=int, default=100, help="vector width (its fastText dimension)")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    mon = LoadMonitor().start()
    ms = measure(args.rows, args.keys, args.dim, args.repeat, args.seed)
    mon.stop()
    result = {"benchmark": "bench_screen_product", "shape": {"rows": args.rows, "keys": args.keys, "dim": args.dim},
              "threads": 1, "repeat": args.repeat, "ms": ms, "git": _git(), "machine": machine_facts(), "load": mon.record()}
    for name, v in ms.items():
        print(f"{name:48s} {v:8.2f} ms")
    print(mon.banner())
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
