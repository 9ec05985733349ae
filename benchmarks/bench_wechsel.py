"""Speed and memory of WECHSEL's numeric core against the reference implementation (``wechsel``).

Every method runs in its own subprocess on the same deterministic synthetic inputs (built here,
see :func:`make_inputs`: XLM-R-sized source — 250,002 tokens, a d=768 embedding matrix — a
50,000-token target vocabulary, and 300-d fastText-like subword vectors for both, given directly
as arrays and already aligned), so peak RSS is per method and includes the inputs. Each worker
builds the inputs, records its RSS, then runs and times only WECHSEL's step 3 (similarity, top-k,
softmax) and the target rows it produces:

* ``tokxfer``   — :func:`methods.wechsel.wechsel_mapping` (chunked exact top-k with a bfloat16
  screen where the CPU has native bf16) and :func:`harness.surgery.materialize` (the rows the
  harness installs, fallback draws included).
* ``wechsel``   — the reference package (PyPI ``wechsel`` 0.0.4, installed ``--no-deps``; it
  needs ``scikit-learn``, and ``fasttext-numpy2`` in place of its ``fasttext`` pin; its
  ``gensim``/``nltk`` imports, used only for Word2Vec models and corpus tokenization, are stubbed):
  the row normalization of ``WECHSEL.apply`` and ``create_target_embeddings`` (sklearn
  ``cosine_similarity`` per 1024 target rows, per-row ``argpartition``, softmax, a Python loop
  over the neighbours, a fallback matrix from ``RandomState(1234)``, specials by string). Its
  ``apply`` builds the subword matrices in float64 (``np.zeros`` default), so it is fed float64
  copies of the inputs, made before the timer starts.
* ``wechsel-f32`` — the same reference code fed float32 arrays (sklearn then computes in
  float32): not how the reference runs, but the fairest comparison of the algorithms.
* ``naive``     — a faithful re-implementation of the reference algorithm in float32 torch (full
  similarity rows per 1024-row chunk, per-chunk ``argsort``), for when ``wechsel`` cannot be
  imported, and as an exactness check.

Outputs are compared on non-fallback rows (combined + special): max absolute difference of the
target embedding rows. FALLBACK rows are random in every implementation and are excluded.
The synthetic vectors have no exact duplicates, so no method has to break a tie.

Run (quick, ~1 min)::

    .venv/bin/python benchmarks/bench_wechsel.py --scale 0.1

Full XLM-R scale (several minutes, ~5 GB for the reference; the machine is shared, run it rarely)::

    .venv/bin/python benchmarks/bench_wechsel.py --scale 1 --json runs/bench_wechsel.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

METHODS = ("tokxfer", "wechsel", "wechsel-f32", "naive")

XLMR_SOURCE_VOCAB = 250_002
XLMR_DIM = 768
TARGET_VOCAB = 50_000
SUBWORD_DIM = 300
SPECIALS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
TOKENS_PER_CLUSTER = 25
TARGET_ZERO_FRACTION = 0.03
SOURCE_ZERO_FRACTION = 0.01


# ----------------------------------------------------------------------------------------------
# Synthetic inputs
# ----------------------------------------------------------------------------------------------


@dataclass
class SyntheticWechselInputs:
    """Arrays for :func:`methods.wechsel.wechsel_mapping` plus the source embedding matrix.

    Attributes:
        source_embeddings: float32 ``n_source x 768``.
        u_source: float32 ``n_source x 300`` source subword vectors (zero rows: no n-gram).
        u_target: float32 ``n_target x 300`` aligned target subword vectors (zero rows: FALLBACK).
        specials: ``(5, 2)`` ``[target, source]`` pairs (ids 0..4 on both sides, same strings).
    """

    source_embeddings: np.ndarray
    u_source: np.ndarray
    u_target: np.ndarray
    specials: np.ndarray

    def describe(self) -> dict:
        """Sizes, for printing and for the bench record."""
        return {
            "n_source": int(len(self.u_source)), "n_target": int(len(self.u_target)),
            "dim": int(self.source_embeddings.shape[1]), "subword_dim": int(self.u_source.shape[1]),
            "source_zero_vectors": int((~self.u_source.any(axis=1)).sum()),
            "target_zero_vectors": int((~self.u_target[len(SPECIALS):].any(axis=1)).sum()),
            "input_bytes": int(self.source_embeddings.nbytes + self.u_source.nbytes + self.u_target.nbytes),
        }


def make_inputs(scale: float = 1.0, seed: int = 0) -> SyntheticWechselInputs:
    """Deterministic synthetic WECHSEL inputs (float32 throughout, no float64 temporaries).

    Subword vectors have cluster structure (tokens of one "topic" share a center; cosine ~0.5
    within a cluster), so each target token has a few dozen close source tokens, as with real
    aligned fastText vectors, rather than the near-uniform cosines of isotropic noise.

    Args:
        scale: multiplies both vocabulary sizes (dimensions stay 768 and 300).
        seed: generator seed.

    Returns:
        :class:`SyntheticWechselInputs`.

    Example:
        >>> x = make_inputs(scale=0.01)
        >>> x.u_source.shape, x.u_target.shape, x.source_embeddings.shape
        ((2500, 300), (500, 300), (2500, 768))
    """
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    rng = np.random.default_rng(seed)
    n_source = max(int(round(XLMR_SOURCE_VOCAB * scale)), 64)
    n_target = max(int(round(TARGET_VOCAB * scale)), 32)
    source = rng.standard_normal((n_source, XLMR_DIM), dtype=np.float32)
    source *= np.float32(0.05)
    n_clusters = max(n_target // TOKENS_PER_CLUSTER, 1)
    centers = rng.standard_normal((n_clusters, SUBWORD_DIM), dtype=np.float32)
    u_s = rng.standard_normal((n_source, SUBWORD_DIM), dtype=np.float32)
    u_s += centers[rng.integers(0, n_clusters, size=n_source)]
    u_t = rng.standard_normal((n_target, SUBWORD_DIM), dtype=np.float32)
    u_t += centers[rng.integers(0, n_clusters, size=n_target)]
    u_s[rng.random(n_source) < SOURCE_ZERO_FRACTION] = 0.0
    u_t[rng.random(n_target) < TARGET_ZERO_FRACTION] = 0.0
    ns = len(SPECIALS)
    u_s[:ns] = 0.0  # specials: no vector, copied by role (tokxfer) / by string (reference)
    u_t[:ns] = 0.0
    specials = np.stack([np.arange(ns), np.arange(ns)], axis=1).astype(np.int64)
    return SyntheticWechselInputs(source, u_s, u_t, specials)


# ----------------------------------------------------------------------------------------------
# Workers (run in a subprocess each)
# ----------------------------------------------------------------------------------------------


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def _rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def _run_tokxfer(x: SyntheticWechselInputs, args) -> tuple:
    import torch

    from harness.surgery import materialize
    from methods.wechsel import wechsel_mapping

    t0, c0 = time.perf_counter(), time.process_time()
    core = wechsel_mapping(
        x.u_target, x.u_source, k=args.k, tau=args.tau, specials=x.specials, chunk_rows=args.chunk_rows, screen=args.screen,
    )
    rows = materialize(core.mapping, torch.from_numpy(x.source_embeddings), torch.Generator().manual_seed(args.seed))
    return rows.numpy(), core.mapping.provenance, {"timed_from": (t0, c0), **core.stats}


class _FakeTokenizer:
    """The slice of a Hugging Face tokenizer that ``wechsel.create_target_embeddings`` touches."""

    def __init__(self, n: int, prefix: str) -> None:
        self.tokens = list(SPECIALS) + [f"{prefix}{i}" for i in range(len(SPECIALS), n)]
        self.vocab = {t: i for i, t in enumerate(self.tokens)}
        self.special_tokens_map = {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>", "mask_token": "<mask>"}

    def __len__(self) -> int:
        return len(self.tokens)

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, (int, np.integer)):
            return self.tokens[int(ids)]
        return [self.tokens[int(i)] for i in ids]


def import_reference():
    """Import ``wechsel`` with stand-ins for the modules it imports but this benchmark never uses (gensim, nltk)."""
    for name, attrs in (("gensim", {}), ("gensim.models", {"Word2Vec": type("Word2Vec", (), {})}), ("nltk", {"word_tokenize": None})):
        if name not in sys.modules:
            try:
                __import__(name)
            except ImportError:
                mod = types.ModuleType(name)
                for k, v in attrs.items():
                    setattr(mod, k, v)
                sys.modules[name] = mod
    if "gensim.models" in sys.modules and "gensim" in sys.modules:
        sys.modules["gensim"].models = sys.modules["gensim.models"]
    import wechsel

    return wechsel


def _run_reference(x: SyntheticWechselInputs, args, dtype) -> tuple:
    from harness.protocols import COMBINED, FALLBACK, SPECIAL

    wechsel = import_reference()
    os.environ["TQDM_DISABLE"] = "1"
    src_tok = _FakeTokenizer(len(x.u_source), "s")
    tgt_tok = _FakeTokenizer(len(x.u_target), "t")
    u_s = x.u_source.astype(dtype)  # the reference's own subword matrices are float64 (np.zeros default)
    u_t = x.u_target.astype(dtype)
    t0, c0 = time.perf_counter(), time.process_time()
    # WECHSEL.apply: normalize, then create_target_embeddings (which copies the source matrix too)
    u_s /= np.linalg.norm(u_s, axis=1)[:, np.newaxis] + 1e-8
    u_t /= np.linalg.norm(u_t, axis=1)[:, np.newaxis] + 1e-8
    rows, not_found, _ = wechsel.create_target_embeddings(
        u_s, u_t, src_tok, tgt_tok, x.source_embeddings.copy(), neighbors=args.k, temperature=args.tau, verbose=False,
    )
    prov = np.full(len(u_t), COMBINED, dtype=np.int8)
    prov[[tgt_tok.vocab[t] for t in not_found]] = FALLBACK
    prov[x.specials[:, 0]] = SPECIAL
    return rows, prov, {"timed_from": (t0, c0), "reference_version": getattr(wechsel, "__version__", "?"), "input_dtype": np.dtype(dtype).name}


def _run_naive(x: SyntheticWechselInputs, args) -> tuple:
    import torch

    from harness.protocols import COMBINED, FALLBACK, SPECIAL

    t0, c0 = time.perf_counter(), time.process_time()
    with torch.no_grad():
        us = torch.from_numpy(x.u_source)
        ut = torch.from_numpy(x.u_target)
        us = us / (us.norm(dim=1, keepdim=True) + 1e-8)
        ut = ut / (ut.norm(dim=1, keepdim=True) + 1e-8)
        E = torch.from_numpy(x.source_embeddings)
        out = torch.zeros((len(ut), E.shape[1]))
        has = ut.abs().sum(1) > 0
        for a in range(0, len(ut), 1024):
            sims = ut[a : a + 1024] @ us.T
            order = torch.argsort(sims, dim=1, descending=True)[:, : args.k]
            top = torch.gather(sims, 1, order)
            w = torch.softmax(top / args.tau, dim=1)
            out[a : a + 1024] = torch.einsum("rk,rkd->rd", w, E[order])
        prov = np.where(has.numpy(), COMBINED, FALLBACK).astype(np.int8)
        out[~has] = 0.0
        out[x.specials[:, 0]] = E[x.specials[:, 1]]
        prov[x.specials[:, 0]] = SPECIAL
    return out.numpy(), prov, {"timed_from": (t0, c0)}


def worker(args) -> None:
    """Build inputs, run one method, write its rows/provenance (.npz) and measurements (.json)."""
    import torch

    torch.set_num_threads(args.threads)
    x = make_inputs(args.scale, args.seed)
    rss_inputs, peak_inputs = _rss_bytes(), _peak_rss_bytes()
    if args.worker == "tokxfer":
        rows, prov, stats = _run_tokxfer(x, args)
    elif args.worker == "wechsel":
        rows, prov, stats = _run_reference(x, args, np.float64)
    elif args.worker == "wechsel-f32":
        rows, prov, stats = _run_reference(x, args, np.float32)
    else:
        rows, prov, stats = _run_naive(x, args)
    t1, c1 = time.perf_counter(), time.process_time()
    t0, c0 = stats.pop("timed_from")
    np.savez(args.out, rows=rows, provenance=prov)
    result = {
        "method": args.worker, "seconds": round(t1 - t0, 3), "cpu_seconds": round(c1 - c0, 3),
        "peak_rss_gb": round(_peak_rss_bytes() / 2**30, 3), "rss_after_inputs_gb": round(rss_inputs / 2**30, 3),
        "peak_rss_after_inputs_gb": round(peak_inputs / 2**30, 3), "stats": stats, "inputs": x.describe(),
    }
    Path(args.out).with_suffix(".json").write_text(json.dumps(result))


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------


def _spawn(method: str, args, tmp: Path) -> dict:
    out = tmp / f"{method}.npz"
    cmd = [
        sys.executable, str(Path(__file__).resolve()), "--worker", method, "--scale", str(args.scale), "--seed", str(args.seed),
        "--k", str(args.k), "--tau", str(args.tau), "--chunk-rows", str(args.chunk_rows), "--screen", args.screen,
        "--threads", str(args.threads), "--out", str(out),
    ]
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[var] = str(args.threads)
    env["TQDM_DISABLE"] = "1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        return {"method": method, "error": lines[-1] if lines else "failed", "wall_s": round(time.perf_counter() - t0, 1)}
    res = json.loads(out.with_suffix(".json").read_text())
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    res["npz"] = str(out)
    return res


def _compare(a: dict, b: dict) -> dict:
    from harness.protocols import FALLBACK

    ra, rb = np.load(a["npz"]), np.load(b["npz"])
    pa, pb = ra["provenance"], rb["provenance"]
    rows = np.flatnonzero((pa != FALLBACK) & (pb != FALLBACK))
    diff = np.abs(ra["rows"][rows].astype(np.float64) - rb["rows"][rows].astype(np.float64))
    row_max = diff.max(axis=1) if len(rows) else np.zeros(0)
    return {
        "rows_compared": int(len(rows)), "same_provenance": bool(np.array_equal(pa, pb)),
        "rows_differing_over_1e-5": int((row_max > 1e-5).sum()), "first_differing_rows": rows[row_max > 1e-5][:10].tolist(),
        "max_abs_diff": float(diff.max()) if len(rows) else 0.0, "mean_abs_diff": float(diff.mean()) if len(rows) else 0.0,
        "max_abs_value": float(np.abs(rb["rows"][rows]).max()) if len(rows) else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=0.1, help="vocabulary-size multiplier; 1.0 = XLM-R (250,002) -> 50k target")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--methods", default="tokxfer,wechsel", help=f"comma-separated subset of {','.join(METHODS)}")
    p.add_argument("--k", type=int, default=10, help="neighbours (paper: 10)")
    p.add_argument("--tau", type=float, default=0.1, help="temperature (paper: 0.1)")
    p.add_argument("--chunk-rows", type=int, default=512, help="target rows scored at once (tokxfer)")
    p.add_argument("--screen", choices=("auto", "bf16", "fp32"), default="auto", help="first-pass precision (tokxfer)")
    p.add_argument("--threads", type=int, default=1, help="torch/BLAS threads for every method (1: fair, kind to a shared machine)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        p.error(f"unknown method(s) {unknown}; choose from {METHODS}")
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-wechsel-") as tmp:
        for m in methods:
            print(f"running {m} (scale {args.scale}) ...", flush=True)
            results[m] = _spawn(m, args, Path(tmp))
            if "error" in results[m]:
                print(f"  {m} failed: {results[m]['error']}", flush=True)
        ok = [m for m in methods if "error" not in results[m]]
        if "wechsel" in methods and "wechsel" not in ok and "naive" not in methods:
            print("reference unavailable: running the faithful re-implementation ('naive') instead", flush=True)
            results["naive"] = _spawn("naive", args, Path(tmp))
            methods.append("naive")
            if "error" not in results["naive"]:
                ok.append("naive")
        comparisons = {}
        if "tokxfer" in ok:
            for ref in [m for m in ok if m != "tokxfer"]:
                c = _compare(results["tokxfer"], results[ref])
                c["speedup"] = round(results[ref]["seconds"] / max(results["tokxfer"]["seconds"], 1e-9), 2)
                c["speedup_cpu"] = round(results[ref]["cpu_seconds"] / max(results["tokxfer"]["cpu_seconds"], 1e-9), 2)
                comparisons[ref] = c
        for r in results.values():
            r.pop("npz", None)

    print()
    print(f"{'method':<12} {'wall s':>8} {'cpu s':>8} {'peak RSS GB':>12} {'RSS after inputs GB':>20}")
    for m in methods:
        r = results[m]
        if "error" in r:
            print(f"{m:<12} {'failed':>8}  {r['error']}")
            continue
        print(f"{m:<12} {r['seconds']:>8.2f} {r['cpu_seconds']:>8.2f} {r['peak_rss_gb']:>12.2f} {r['rss_after_inputs_gb']:>20.2f}")
    for ref, c in comparisons.items():
        print(f"tokxfer vs {ref}: {c['speedup']}x faster (wall), {c['speedup_cpu']}x (cpu); max |diff| {c['max_abs_diff']:.3g} over "
              f"{c['rows_compared']} non-fallback rows (|values| <= {c['max_abs_value']:.3g}; rows differing by > 1e-5: "
              f"{c['rows_differing_over_1e-5']}); same provenance: {c['same_provenance']}")
    first_ok = next((results[m] for m in methods if "inputs" in results[m]), None)
    if first_ok:
        print("inputs:", json.dumps(first_ok["inputs"]))
    if "tokxfer" in results and "stats" in results["tokxfer"]:
        print("tokxfer stats:", json.dumps(results["tokxfer"]["stats"]))
    record = {
        "bench": "wechsel", "scale": args.scale, "seed": args.seed, "k": args.k, "tau": args.tau, "chunk_rows": args.chunk_rows,
        "screen": args.screen, "threads": args.threads, "results": results, "comparisons": comparisons,
        "environment": {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()},
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
