"""Scaling of VIPI and Tik-to-Tok with the target vocabulary size (both should be linear in |Vt|).

Synthetic, deterministic inputs (seeded): a source vocabulary of ``--source`` canonical tokens and
target vocabularies of growing size, about a third of each shared with the source, the rest new
strings that VIPI must split into source pieces. Tik-to-Tok's core gets ``2·|Vt|`` counted aligned
word pairs of 1–3 tokens per side (so a fixed share of tokens is aligned, the others go through
identity, smoothing or fallback). Timed are the cores on canonical vocabularies
(:func:`methods.vipi.vipi_mapping`, :func:`methods.tiktotok.tiktotok_mapping`), which is where
the per-token work is; with ``--full`` also VIPI's whole ``initialize`` on real ``tokenizers``
Unigram tokenizers built from the same pieces (adds canonicalization and overlap). Alignment cost
depends on the corpus, not on |Vt|, and is not part of this benchmark.

Run:
    .venv/bin/python benchmarks/bench_linear.py                     # 5k, 10k, 20k, 40k vs 50k
    .venv/bin/python benchmarks/bench_linear.py --sizes 5000 10000 --repeat 1 --full --out bench.json

The table shows the best of ``--repeat`` runs (wall-clock and CPU time; CPU time is the steadier
on a shared machine) and CPU microseconds per target token; a flat µs/token column means linear
scaling.
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.vocab import Canon  # noqa: E402
from methods.tiktotok import TikToTokConfig, tiktotok_mapping  # noqa: E402
from methods.vipi import VipiConfig, vipi_mapping  # noqa: E402

ALPHABET = "etaoinshrdlucmfwypvbgkjqxz"
N_SPECIALS = 5


def _random_strings(rng: np.random.Generator, n: int, lo: int, hi: int, seen: set) -> list[tuple[bytes, bool]]:
    """``n`` new distinct (text, word_start) pairs with lengths in [lo, hi], letter frequencies skewed like English."""
    p = 1.0 / np.arange(1, len(ALPHABET) + 1) ** 0.8
    p /= p.sum()
    out: list[tuple[bytes, bool]] = []
    letters = np.array(list(ALPHABET))
    while len(out) < n:
        k = int(rng.integers(lo, hi + 1))
        form = ("".join(rng.choice(letters, size=k, p=p)).encode(), bool(rng.random() < 0.5))
        if form not in seen:
            seen.add(form)
            out.append(form)
    return out


def make_source(n: int, seed: int = 0) -> list[Canon | None]:
    """Specials, every single letter in both flavours, then random 2–8 letter tokens."""
    rng = np.random.default_rng(seed)
    seen: set = set()
    vocab: list[Canon | None] = [None] * N_SPECIALS
    for ch in ALPHABET:
        for ws in (True, False):
            seen.add((ch.encode(), ws))
            vocab.append(Canon(ch.encode(), ws))
    vocab += [Canon(t, ws) for t, ws in _random_strings(rng, n - len(vocab), 2, 8, seen)]
    return vocab


def make_target(source: list[Canon | None], n: int, seed: int = 1, shared: float = 0.33) -> list[Canon | None]:
    """Specials, ``shared`` of the rest sampled from the source, the others new 3–12 letter strings."""
    rng = np.random.default_rng(seed)
    pool = [c for c in source if c is not None]
    k = int((n - N_SPECIALS) * shared)
    picks = rng.choice(len(pool), size=k, replace=False)
    seen = {(c.text, c.word_start) for c in pool}
    new = _random_strings(rng, n - N_SPECIALS - k, 3, 12, seen)
    body = [pool[i] for i in picks] + [Canon(t, ws) for t, ws in new]
    order = rng.permutation(len(body))
    return [None] * N_SPECIALS + [body[i] for i in order]


def exact_pairs(target: list[Canon | None], source: list[Canon | None]) -> np.ndarray:
    index: dict[Canon, int] = {}
    for i, c in enumerate(source):
        if c is not None:
            index.setdefault(c, i)
    return np.array(
        [(t, index[c]) for t, c in enumerate(target) if c is not None and c in index], dtype=np.int64
    ).reshape(-1, 2)


def synthetic_word_pairs(n_target: int, n_source: int, seed: int = 2) -> dict:
    """``2·|Vt|`` aligned (target word, source word) pairs, 1–3 tokens a side, Zipfian counts."""
    rng = np.random.default_rng(seed)
    pairs: dict = {}
    for r in range(2 * n_target):
        tt = tuple(int(x) for x in rng.integers(N_SPECIALS, n_target, size=int(rng.integers(1, 4))))
        ss = tuple(int(x) for x in rng.integers(N_SPECIALS, n_source, size=int(rng.integers(1, 4))))
        pairs[(tt, ss)] = pairs.get((tt, ss), 0) + int(1 + 2000 // (r + 1) + rng.integers(0, 20))
    return pairs


def _best(fn, repeat: int) -> tuple[float, float, object]:
    """Best wall-clock and best CPU (process) seconds over ``repeat`` runs, and the last result.

    CPU time is reported too because shared machines make wall-clock time noisy.
    """
    best_wall, best_cpu, out = float("inf"), float("inf"), None
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        best_wall = min(best_wall, time.perf_counter() - w0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best_wall, best_cpu, out


def _unigram_tokenizer(vocab: list[Canon | None]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    pieces = specials + [("▁" if c.word_start else "") + c.text.decode() for c in vocab[N_SPECIALS:]]
    bk = Tokenizer(models.Unigram([(p, -1.0) for p in pieces], unk_id=3))
    bk.pre_tokenizer = pre_tokenizers.Metaspace()
    bk.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(
        tokenizer_object=bk,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
    )


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=int, default=50_000, help="source vocabulary size")
    ap.add_argument(
        "--sizes", type=int, nargs="+", default=[5_000, 10_000, 20_000, 40_000], help="target vocabulary sizes"
    )
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement (the best is kept)")
    ap.add_argument("--full", action="store_true", help="also time VIPI.initialize on real tokenizers")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)

    source = make_source(args.source)
    specials = np.array([[i, i] for i in range(N_SPECIALS)], dtype=np.int64)
    rows = []
    for n in args.sizes:
        target = make_target(source, n)
        exact = exact_pairs(target, source)
        vipi = functools.partial(
            vipi_mapping, target, source, n_source=len(source), exact=exact, specials=specials, config=VipiConfig()
        )
        t_vipi, c_vipi, (_, info_v) = _best(lambda f=vipi: f(rng=np.random.default_rng(0)), args.repeat)
        tiktotok = functools.partial(
            tiktotok_mapping, target, source, n_source=len(source), word_pairs=synthetic_word_pairs(n, len(source)),
            exact=exact, fuzzy=np.zeros((0, 2), dtype=np.int64), specials=specials, config=TikToTokConfig(min_count=10),
        )  # fmt: skip
        t_tt, c_tt, (_, info_t) = _best(tiktotok, args.repeat)
        row = {
            "target": n,
            "source": len(source),
            "vipi_s": round(t_vipi, 4),
            "vipi_cpu_s": round(c_vipi, 4),
            "vipi_us_per_token": round(1e6 * t_vipi / n, 2),
            "vipi_cpu_us_per_token": round(1e6 * c_vipi / n, 2),
            "vipi_counts": info_v["counts"],
            "tiktotok_s": round(t_tt, 4),
            "tiktotok_cpu_s": round(c_tt, 4),
            "tiktotok_us_per_token": round(1e6 * t_tt / n, 2),
            "tiktotok_cpu_us_per_token": round(1e6 * c_tt / n, 2),
            "tiktotok_sources": info_t["sources"],
            "tiktotok_timings": info_t["timings"],
        }
        if args.full:
            import torch

            from harness.protocols import TransferInputs
            from methods.vipi import VIPI

            s_tok, t_tok = _unigram_tokenizer(source), _unigram_tokenizer(target)
            E = torch.zeros(len(source), 4)
            inputs = TransferInputs(s_tok, t_tok, E)
            t_full, c_full, res = _best(
                lambda x=inputs: VIPI(VipiConfig()).initialize(x, np.random.default_rng(0)), args.repeat
            )
            row["vipi_full_s"] = round(t_full, 4)
            row["vipi_full_cpu_s"] = round(c_full, 4)
            row["vipi_full_timings"] = res.info["timings"]
        rows.append(row)
        extra = f"   full VIPI {t_full:6.3f}s wall {c_full:6.3f}s cpu" if args.full else ""
        print(
            f"|Vt|={n:>6}  VIPI {t_vipi:6.3f}s wall {c_vipi:6.3f}s cpu ({row['vipi_cpu_us_per_token']:5.1f} cpu-µs/token)   "
            f"Tik-to-Tok core {t_tt:6.3f}s wall {c_tt:6.3f}s cpu ({row['tiktotok_cpu_us_per_token']:5.1f} cpu-µs/token){extra}",
            flush=True,
        )
    result = {
        "benchmark": "bench_linear",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "repeat": args.repeat,
        "rows": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
