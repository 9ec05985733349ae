"""Speed and memory of FOCUS's numeric core against the reference implementation (``deepfocus``).

Every method runs in its own subprocess on the same deterministic synthetic inputs
(:mod:`benchmarks._synthetic`: XLM-R-sized source matrix, 50k target vocabulary, ~17k overlap,
300-d auxiliary vectors given directly as arrays), so peak RSS is per method. Each worker builds
the inputs, records its RSS, then runs and times only the method:

* ``tokxfer``   — :func:`methods.focus.focus_mapping` (chunked cosine + exact top-k sparsemax) and
  :func:`harness.surgery.materialize` (the rows the harness installs).
* ``deepfocus`` — the reference package (PyPI ``deepfocus`` 1.0.1, installed ``--no-deps`` with
  ``fasttext-numpy2``, ``fastdist``, ``numba``, ``print-on-steroids``): its step 4 (copy overlap
  rows) and step 6 ``focus_additional_token_initialization`` (fastdist float64 cosine matrix, then a
  per-row ``entmax.sparsemax`` over all anchors). Its steps 1–3 (fastText, overlap, the per-token
  ``token in fasttext_model`` checks, which are O(|V|) each) are *not* timed, which favours it.
  fastdist's numba JIT is compiled before the timer starts.
* ``naive``     — a straightforward re-implementation of the reference algorithm in float32
  (full cosine rows, per-row full ``entmax.sparsemax``, i.e. a full ``torch.sort``), for when
  ``deepfocus`` cannot be installed, and as an exactness check in the same precision.

Outputs are compared on non-fallback rows (copied + combined): max absolute difference of the
embedding rows. FALLBACK rows are random in every implementation and are excluded.

Run (quick, ~1 min)::

    .venv/bin/python benchmarks/bench_focus.py --scale 0.1

Full XLM-R scale (several minutes and ~6 GB for deepfocus; the machine is shared, run it rarely)::

    .venv/bin/python benchmarks/bench_focus.py --scale 1 --json runs/bench_focus.json
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

METHODS = ("tokxfer", "deepfocus", "naive")


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def _rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


# ----------------------------------------------------------------------------------------------
# Workers (run in a subprocess each)
# ----------------------------------------------------------------------------------------------


def _run_tokxfer(x, args) -> tuple:
    import torch

    from methods.focus import focus_mapping

    core = focus_mapping(
        x.n_target, x.n_source, specials=x.specials, overlap=x.overlap, aux=x.aux, has_aux=x.has_aux,
        k=args.k, chunk_rows=args.chunk_rows,
    )
    m = core.mapping
    # The CSR product harness.surgery.materialize performs; its fallback draws are left out (as in deepfocus's timed part).
    W = torch.sparse_csr_tensor(
        torch.from_numpy(m.indptr), torch.from_numpy(m.indices), torch.from_numpy(m.weights), size=(m.n_target, m.n_source)
    )
    out = W @ torch.from_numpy(x.source_embeddings)
    return out.numpy(), m.provenance, core.stats


def _run_deepfocus(x, args) -> tuple:
    import numpy as np
    import torch
    from deepfocus.focus import focus_additional_token_initialization
    from deepfocus.vocab_helper import NewToken, OverlappingToken, TokenClass
    from fastdist import fastdist

    from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL

    fastdist.cosine_matrix_to_matrix(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))  # JIT outside the timer

    def tc(i: int) -> TokenClass:
        return TokenClass(str(i), int(i), str(i), str(i), str(i), str(i), False)

    # Inputs in deepfocus's own structures (untimed, like the steps 1-3 they come from).
    E = torch.from_numpy(x.source_embeddings)
    overlapping, anchors = [], {}
    for t, s in x.overlap:
        o = OverlappingToken(source=[tc(s)], target=tc(t), source_embedding=E[s])
        if x.has_aux[t]:
            o.auxiliary_embedding = x.aux[t]
            anchors[str(t)] = o
        overlapping.append(o)
    prov = np.full(x.n_target, FALLBACK, dtype=np.int8)
    prov[x.specials[:, 0]] = SPECIAL
    prov[x.overlap[:, 0]] = COPIED
    new_tokens = {}
    for t in np.flatnonzero((prov == FALLBACK) & x.has_aux):
        new_tokens[str(t)] = NewToken(target=tc(t), auxiliary_embedding=x.aux[t])
        prov[t] = COMBINED

    os.environ["TQDM_DISABLE"] = "1"
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.no_grad():
        target = torch.zeros((x.n_target, E.shape[1]))
        for o in overlapping:  # deepfocus step 4
            target[o.target.id] = o.source_embedding
        target[x.specials[:, 0]] = E[x.specials[:, 1]]
        target = focus_additional_token_initialization(anchors, new_tokens, target, device="cpu")  # step 6
    return target.numpy(), prov, {"timed_from": (t0, c0)}


def _run_naive(x, args) -> tuple:
    import entmax
    import numpy as np
    import torch

    from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL

    prov = np.full(x.n_target, FALLBACK, dtype=np.int8)
    prov[x.specials[:, 0]] = SPECIAL
    prov[x.overlap[:, 0]] = COPIED
    anchor = x.overlap[x.has_aux[x.overlap[:, 0]]]
    E = torch.from_numpy(x.source_embeddings)
    A = torch.from_numpy(x.aux[anchor[:, 0]])
    A = A / A.norm(dim=1, keepdim=True)
    anchor_E = E[anchor[:, 1]]
    out = torch.zeros((x.n_target, E.shape[1]))
    out[x.overlap[:, 0]] = E[x.overlap[:, 1]]
    out[x.specials[:, 0]] = E[x.specials[:, 1]]
    with torch.no_grad():
        for t in np.flatnonzero((prov == FALLBACK) & x.has_aux):
            q = torch.from_numpy(x.aux[t])
            w = entmax.sparsemax(A @ (q / q.norm()), dim=-1)
            nz = w > 0
            out[t] = w[nz] @ anchor_E[nz]
            prov[t] = COMBINED
    return out.numpy(), prov, {}


def worker(args) -> None:
    """Build inputs, run one method, write its rows/provenance (.npz) and measurements (.json)."""
    import numpy as np
    import torch

    from benchmarks._synthetic import make_inputs

    torch.set_num_threads(args.threads)
    x = make_inputs(args.scale, args.seed)
    rss_inputs, peak_inputs = _rss_bytes(), _peak_rss_bytes()
    fn = {"tokxfer": _run_tokxfer, "deepfocus": _run_deepfocus, "naive": _run_naive}[args.worker]
    t0, c0 = time.perf_counter(), time.process_time()
    rows, prov, stats = fn(x, args)
    t1, c1 = time.perf_counter(), time.process_time()
    t0, c0 = stats.pop("timed_from", (t0, c0))
    np.savez(args.out, rows=rows, provenance=prov)
    result = {
        "method": args.worker, "seconds": round(t1 - t0, 3), "cpu_seconds": round(c1 - c0, 3), "peak_rss_gb": round(_peak_rss_bytes() / 2**30, 3),
        "rss_after_inputs_gb": round(rss_inputs / 2**30, 3), "peak_rss_after_inputs_gb": round(peak_inputs / 2**30, 3),
        "stats": stats, "inputs": x.describe(),
    }
    Path(args.out).with_suffix(".json").write_text(json.dumps(result))


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------


def _spawn(method: str, args, tmp: Path) -> dict:
    out = tmp / f"{method}.npz"
    cmd = [
        sys.executable, str(Path(__file__).resolve()), "--worker", method, "--scale", str(args.scale), "--seed", str(args.seed),
        "--k", str(args.k), "--chunk-rows", str(args.chunk_rows), "--threads", str(args.threads), "--out", str(out),
    ]
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[var] = str(args.threads)
    env["TQDM_DISABLE"] = "1"
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"method": method, "error": (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["failed"], "wall_s": round(time.perf_counter() - t0, 1)}
    res = json.loads(out.with_suffix(".json").read_text())
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    res["npz"] = str(out)
    return res


def _compare(a: dict, b: dict) -> dict:
    import numpy as np

    from harness.protocols import FALLBACK

    ra, rb = np.load(a["npz"]), np.load(b["npz"])
    pa, pb = ra["provenance"], rb["provenance"]
    same_prov = bool(np.array_equal(pa, pb))
    rows = np.flatnonzero((pa != FALLBACK) & (pb != FALLBACK))
    diff = np.abs(ra["rows"][rows].astype(np.float64) - rb["rows"][rows].astype(np.float64))
    scale = float(np.abs(rb["rows"][rows]).max()) if len(rows) else 0.0
    return {"rows_compared": int(len(rows)), "same_provenance": same_prov, "max_abs_diff": float(diff.max()) if len(rows) else 0.0,
            "mean_abs_diff": float(diff.mean()) if len(rows) else 0.0, "max_abs_value": scale}


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=0.1, help="vocabulary-size multiplier; 1.0 = XLM-R -> 50k target")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--methods", default="tokxfer,deepfocus", help=f"comma-separated subset of {','.join(METHODS)}")
    p.add_argument("--k", type=int, default=32, help="initial sparsemax top-k slice (tokxfer)")
    p.add_argument("--chunk-rows", type=int, default=2048, help="rows scored at once (tokxfer)")
    p.add_argument("--threads", type=int, default=1, help="torch/BLAS threads for every method (1: fair, reproducible, kind to a shared machine)")
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
    with tempfile.TemporaryDirectory(prefix="bench-focus-") as tmp:
        for m in methods:
            print(f"running {m} (scale {args.scale}) ...", flush=True)
            results[m] = _spawn(m, args, Path(tmp))
            if "error" in results[m]:
                print(f"  {m} failed: {results[m]['error']}", flush=True)
        ok = [m for m in methods if "error" not in results[m]]
        comparisons = {}
        if "tokxfer" in ok:
            for ref in [m for m in ok if m != "tokxfer"]:
                comparisons[ref] = _compare(results["tokxfer"], results[ref])
                comparisons[ref]["speedup"] = round(results[ref]["seconds"] / max(results["tokxfer"]["seconds"], 1e-9), 2)
                comparisons[ref]["speedup_cpu"] = round(results[ref]["cpu_seconds"] / max(results["tokxfer"]["cpu_seconds"], 1e-9), 2)
        for r in results.values():
            r.pop("npz", None)

    print()
    print(f"{'method':<10} {'wall s':>8} {'cpu s':>8} {'peak RSS GB':>12} {'RSS after inputs GB':>20}")
    for m in methods:
        r = results[m]
        if "error" in r:
            print(f"{m:<10} {'failed':>8}")
            continue
        print(f"{m:<10} {r['seconds']:>8.2f} {r['cpu_seconds']:>8.2f} {r['peak_rss_gb']:>12.2f} {r['rss_after_inputs_gb']:>20.2f}")
    for ref, c in comparisons.items():
        print(f"tokxfer vs {ref}: {c['speedup']}x faster (wall), {c['speedup_cpu']}x (cpu); max |diff| {c['max_abs_diff']:.3g} over {c['rows_compared']} non-fallback rows "
              f"(|values| <= {c['max_abs_value']:.3g}); same provenance: {c['same_provenance']}")
    first_ok = next((results[m] for m in methods if "inputs" in results[m]), None)
    if first_ok:
        print("inputs:", json.dumps(first_ok["inputs"]))
    if "tokxfer" in results and "stats" in results["tokxfer"]:
        print("tokxfer stats:", json.dumps(results["tokxfer"]["stats"]))
    record = {
        "bench": "focus", "scale": args.scale, "seed": args.seed, "k": args.k, "chunk_rows": args.chunk_rows, "threads": args.threads,
        "results": results, "comparisons": comparisons,
        "environment": {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()},
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
