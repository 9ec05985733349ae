"""Speed and memory of FOCUS's numeric core against the reference implementation (``deepfocus``).

Every method runs in its own subprocess on the same deterministic synthetic inputs
(:mod:`benchmarks._synthetic`: XLM-R-sized source matrix, 50k target vocabulary, ~17k overlap,
300-d auxiliary vectors given directly as arrays), so peak RSS is per method. Each worker builds
the inputs, records its RSS, then runs and times only the method:

* ``tokxfer``   — :func:`methods.focus.focus_mapping` (chunked cosine + exact top-k sparsemax) and
  :func:`harness.model.surgery.materialize` (the rows the harness installs).
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

End to end (``--end-to-end``): both implementations run whole, on files, as a user runs them. The
driver writes (under ``--work-dir``, reused when present) synthetic source/target text
(:func:`benchmarks._synthetic.make_corpora`), SentencePiece-Unigram tokenizers with ``▁`` pieces
(32,000 source / 16,000 target pieces at ``--scale 1``), a source model with a 768-d embedding matrix
(a one-layer XLM-R saved as a Hugging Face directory) and a token-level fastText ``.bin`` (cbow, dim
100, neg 10, 3 epochs, minCount 10) trained on the target text tokenized the way ``deepfocus`` does it
(``" ".join(tokenizer.tokenize(line))``). Then

* ``deepfocus`` — ``deepfocus.FOCUS(target_tokenizer, source_tokenizer, source_embeddings,
  fasttext_model_path=...)`` with its defaults, in a subprocess; its overlap and its combined tokens
  are recorded on the way (wrappers that only observe), so every row has a provenance;
* ``tokxfer`` — ``python -m harness.cli init --method focus`` (what ``tokxfer init`` runs) with
  :meth:`methods.focus.FocusConfig.reference` and the same ``.bin`` as ``aux_model_path``, once per
  ``--variants`` entry: ``reference``, ``no-special-anchors`` (the paper's specials, never anchors) and
  ``escaped-tokens`` (tokxfer's own escaped fastText words), which show what each option changes.

Every row is compared: rows random in both (different generators by design) are counted apart, and
on the others the benchmark reports the rows beyond ``--atol``, max absolute difference and minimum row
cosine, provenance disagreements, and which option explains the differing rows. JSON output
(``--json``); wall times are recorded for information only (the comparison is the result)::

    .venv/bin/python benchmarks/bench_focus.py --end-to-end --scale 0.1 --json runs/bench_focus_e2e.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._e2e import (  # noqa: E402
    environment,
    peak_rss_bytes,
    rss_bytes,
    run_worker,
    save_source_model,
    spawn_core_worker,
    subprocess_env,
)
from benchmarks._load import LoadMonitor, shown, speed_line, speedups, target_speed  # noqa: E402

METHODS = ("tokxfer", "deepfocus", "naive")
E2E_TARGET = 20.0
"""End to end, ``deepfocus.FOCUS(...)`` over tokxfer's FOCUS method (both without loading), at least (issue 27)."""


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
    # The CSR product harness.model.surgery.materialize performs; its fallback draws are left out (as in deepfocus's timed part).
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
    rss_inputs, peak_inputs = rss_bytes(), peak_rss_bytes()
    fn = {"tokxfer": _run_tokxfer, "deepfocus": _run_deepfocus, "naive": _run_naive}[args.worker]
    t0, c0 = time.perf_counter(), time.process_time()
    rows, prov, stats = fn(x, args)
    t1, c1 = time.perf_counter(), time.process_time()
    t0, c0 = stats.pop("timed_from", (t0, c0))
    np.savez(args.out, rows=rows, provenance=prov)
    result = {
        "method": args.worker, "seconds": round(t1 - t0, 3), "cpu_seconds": round(c1 - c0, 3), "peak_rss_gb": round(peak_rss_bytes() / 2**30, 3),
        "rss_after_inputs_gb": round(rss_inputs / 2**30, 3), "peak_rss_after_inputs_gb": round(peak_inputs / 2**30, 3),
        "stats": stats, "inputs": x.describe(),
    }
    Path(args.out).with_suffix(".json").write_text(json.dumps(result))


# ----------------------------------------------------------------------------------------------
# End to end: deepfocus.FOCUS against `tokxfer init` on the same files
# ----------------------------------------------------------------------------------------------

E2E_VARIANTS = ("reference", "no-special-anchors", "escaped-tokens")
E2E_SOURCE_VOCAB = 32_000
E2E_TARGET_VOCAB = 16_000
E2E_DIM = 768
E2E_FASTTEXT = {"dim": 100, "epoch": 3, "min_count": 10, "model": "cbow", "neg": 10, "bucket": 200_000, "seed": 0, "threads": 1}
"""The aux model: deepfocus's training settings (cbow, dim 100, neg 10, 3 epochs, minCount 10), one thread
and a fixed seed (reproducible), 200k n-gram buckets instead of 2M (an 80 MB instead of an 800 MB file; the
model is an input both sides read, so how it was trained does not affect the comparison)."""


def _variant_config(variant: str, aux_path: Path) -> dict:
    """The FOCUS config values (those differing from the defaults) of a tokxfer variant."""
    import dataclasses

    from methods.focus import FocusConfig

    overrides = {"no-special-anchors": {"special_anchors": False}, "escaped-tokens": {"aux_token_format": "string"}}
    cfg = FocusConfig.reference(aux_model_path=str(aux_path), **overrides.get(variant, {}))
    default = FocusConfig()
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if getattr(cfg, f.name) != getattr(default, f.name)}


def e2e_files(work: Path, scale: float, seed: int) -> dict:
    """Build (or reuse) the end-to-end inputs under ``work``; return their paths and sizes."""
    from transformers.utils import logging as hf_logging

    from benchmarks._synthetic import make_corpora
    from harness.tokenizers import train_tokenizer
    from methods import _fasttext

    hf_logging.set_verbosity_error()
    work.mkdir(parents=True, exist_ok=True)
    manifest = work / "manifest.json"
    want = {"scale": scale, "seed": seed, "fasttext": E2E_FASTTEXT, "version": 2}
    if manifest.is_file() and json.loads(manifest.read_text()).get("inputs") == want:
        return json.loads(manifest.read_text())
    t0 = time.perf_counter()
    corpora = make_corpora(work / "text", scale, seed)
    src_tok = train_tokenizer([corpora["source"]], "unigram", vocab_size=max(int(round(E2E_SOURCE_VOCAB * scale)), 500), cache_dir=work / "cache")
    tgt_tok = train_tokenizer([corpora["target"]], "unigram", vocab_size=max(int(round(E2E_TARGET_VOCAB * scale)), 300), cache_dir=work / "cache")
    tgt_dir, src_dir = work / "target-tokenizer", work / "source-model"
    tgt_tok.save_pretrained(tgt_dir)
    save_source_model(src_tok, E2E_DIM, seed, src_dir)
    # the target text tokenized as deepfocus tokenizes it for fastText
    tok_text = work / "aux" / "target.tokenized.txt"
    tok_text.parent.mkdir(parents=True, exist_ok=True)
    with open(corpora["target"], encoding="utf-8") as f, open(tok_text, "w", encoding="utf-8", newline="\n") as out:
        for line in f:
            out.write(" ".join(tgt_tok.tokenize(line.rstrip("\n"))) + "\n")
    aux = work / "aux" / "target-cbow-100.bin"
    _fasttext.train_fasttext(tok_text, **E2E_FASTTEXT).save_model(str(aux))
    info = {
        "inputs": want, "build_s": round(time.perf_counter() - t0, 1),
        "paths": {"source_text": str(corpora["source"]), "target_text": str(corpora["target"]), "source_model": str(src_dir),
                  "target_tokenizer": str(tgt_dir), "aux_model": str(aux)},
        "sizes": {"n_source": len(src_tok), "n_target": len(tgt_tok), "dim": E2E_DIM,
                  "source_text_mb": round(corpora["source"].stat().st_size / 2**20, 2),
                  "target_text_mb": round(corpora["target"].stat().st_size / 2**20, 2),
                  "aux_words": len(_fasttext.load_fasttext(aux).get_words())},
    }
    manifest.write_text(json.dumps(info, indent=1))
    return info


def e2e_deepfocus_worker(work: Path, out: Path, threads: int) -> None:
    """Run ``deepfocus.FOCUS`` whole on the files in ``work``; write rows, per-row provenance and timing."""
    import deepfocus.focus as dfm
    import numpy as np
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    torch.set_num_threads(threads)
    paths = json.loads((work / "manifest.json").read_text())["paths"]
    seen: dict = {}
    overlap_fn, combine_fn = dfm.get_overlapping_tokens, dfm.focus_additional_token_initialization

    def observe_overlap(*a, **k):  # records deepfocus's own decisions, changes nothing
        overlap, new = overlap_fn(*a, **k)
        seen["copied"] = sorted(int(v.target.id) for v in overlap.values())
        return overlap, new

    def observe_combine(anchors, new_tokens, *a, **k):
        seen["anchors"] = sorted(int(v.target.id) for v in anchors.values())
        seen["combined"] = sorted(int(v.target.id) for v in new_tokens.values())
        return combine_fn(anchors, new_tokens, *a, **k)

    dfm.get_overlapping_tokens, dfm.focus_additional_token_initialization = observe_overlap, observe_combine
    t0 = time.perf_counter()
    src = AutoTokenizer.from_pretrained(paths["source_model"])
    tgt = AutoTokenizer.from_pretrained(paths["target_tokenizer"])
    E = AutoModelForMaskedLM.from_pretrained(paths["source_model"]).get_input_embeddings().weight.detach().float()
    t1 = time.perf_counter()
    rows = dfm.FOCUS(target_tokenizer=tgt, source_tokenizer=src, source_embeddings=E,
                     fasttext_model_path=paths["aux_model"], verbosity="silent")
    t2 = time.perf_counter()
    cls = np.full(len(tgt), 3, dtype=np.int8)  # 1 copied, 2 combined, 3 random (harness provenance codes)
    cls[seen["copied"]] = 1
    cls[seen["combined"]] = 2
    anchors = np.zeros(len(tgt), dtype=bool)
    anchors[seen["anchors"]] = True
    np.savez(out, rows=rows.numpy(), provenance=cls, anchors=anchors)
    specials = [t for t in tgt.convert_ids_to_tokens(seen["anchors"]) if t in tgt.all_special_tokens]
    out.with_suffix(".json").write_text(json.dumps({"load_s": round(t1 - t0, 3), "focus_s": round(t2 - t1, 3),
                                                    "special_anchors": specials}))


def _tokxfer_rows(out: Path) -> tuple:
    import numpy as np
    from transformers import AutoModelForMaskedLM

    rows = AutoModelForMaskedLM.from_pretrained(out).get_input_embeddings().weight.detach().float().numpy()
    info = json.loads((out / "init_info.json").read_text())
    prov = np.frombuffer(info["provenance"].encode("ascii"), dtype=np.uint8) - ord("0")
    return rows, prov.astype(np.int8), info


def compare_rows(tk_rows, tk_prov, df_rows, df_prov, atol: float) -> dict:
    """Row-by-row comparison of tokxfer's and deepfocus's matrices (provenance codes of the harness).

    Returns counts of rows random in both (``random_fallback_both``), random in one only, compared rows
    (random in neither), those beyond ``atol`` (max absolute entry difference), max absolute difference,
    minimum row cosine, and the row ids beyond tolerance (``beyond_ids``).
    """
    import numpy as np

    from harness.protocols import COMBINED, FALLBACK

    fb_t, fb_d = tk_prov == FALLBACK, df_prov == FALLBACK
    both = fb_t & fb_d
    cmp = ~fb_t & ~fb_d
    a, b = tk_rows[cmp].astype(np.float64), df_rows[cmp].astype(np.float64)
    diff = np.abs(a - b).max(axis=1) if len(a) else np.zeros(0)
    cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30) if len(a) else np.zeros(0)
    ids = np.flatnonzero(cmp)
    beyond = ids[diff > atol]
    tk_comb, df_comb = tk_prov == COMBINED, df_prov == COMBINED
    return {
        "rows": int(len(tk_prov)),
        "random_fallback_both": int(both.sum()),
        "random_tokxfer_only": int((fb_t & ~fb_d).sum()),
        "random_deepfocus_only": int((fb_d & ~fb_t).sum()),
        "compared": int(cmp.sum()),
        "beyond_tolerance": int(len(beyond)),
        "beyond_tolerance_combined": int(np.sum(tk_comb[beyond])),
        "max_abs_diff": float(diff.max()) if len(diff) else 0.0,
        "min_row_cosine": float(cos.min()) if len(cos) else 1.0,
        "combined_disagreement": int(np.sum(tk_comb != df_comb)),
        "beyond_ids": beyond.tolist(),
    }


def end_to_end(scale: float, seed: int, variants: list[str], atol: float, threads: int, work_dir: Path | None) -> dict:
    """Build the files, run deepfocus and each tokxfer variant, compare; return the JSON record."""
    import numpy as np
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="bench-focus-e2e-") as tmp:
        work = Path(work_dir) if work_dir is not None else Path(tmp)
        print(f"building inputs in {work} (scale {scale}) ...", flush=True)
        files = e2e_files(work, scale, seed)
        paths = files["paths"]
        env = subprocess_env(threads, work)
        mon = LoadMonitor().start()  # the timed workers only, not the input build
        print("running deepfocus.FOCUS ...", flush=True)
        df_out = work / "deepfocus.npz"
        wall = {"deepfocus": run_worker([sys.executable, str(Path(__file__).resolve()), "--e2e-worker", "deepfocus", "--work-dir", str(work),
                                   "--out", str(df_out), "--threads", str(threads)], env, "deepfocus worker")}
        df = np.load(df_out)
        df_info = json.loads(df_out.with_suffix(".json").read_text())
        tgt = AutoTokenizer.from_pretrained(paths["target_tokenizer"])
        tokens = tgt.convert_ids_to_tokens(list(range(len(tgt))))
        results: dict = {}
        rows: dict = {}
        for v in variants:
            print(f"running tokxfer init ({v}) ...", flush=True)
            out = work / f"tokxfer-{v}"
            cfg = _variant_config(v, Path(paths["aux_model"]))
            cmd = [sys.executable, "-m", "harness.cli", "init", "--method", "focus", "--source", paths["source_model"],
                   "--target-tokenizer", paths["target_tokenizer"], "--seed", "1", "--out", str(out), "--overwrite",
                   "--config", *[f"{k}={json.dumps(val)}" for k, val in cfg.items()]]
            wall[f"tokxfer-{v}"] = run_worker(cmd, env, f"tokxfer init ({v})")
            tk_rows, tk_prov, info = _tokxfer_rows(out)
            rows[v] = tk_rows
            res = compare_rows(tk_rows, tk_prov, df["rows"], df["provenance"], atol)
            res["config"] = cfg
            res["anchors_tokxfer"] = info["info"]["focus"]["anchors"]
            res["anchors_deepfocus"] = int(df["anchors"].sum())
            res["method_s"] = info["info"]["timings"]["total_s"]
            res["method_timings_s"] = info["info"]["timings"]  # overlap, aux (loading the .bin), combine
            results[v] = res
        mon.stop()
        load = mon.record()
        # what explains each difference: the rows an option changes in tokxfer's own output
        for v, alt, reason in (("no-special-anchors", "reference", "special_anchors"), ("escaped-tokens", "reference", "aux_token_format")):
            if v in results and alt in rows:
                changed = np.abs(rows[v].astype(np.float64) - rows[alt]).max(axis=1) > atol
                beyond = np.array(results[v]["beyond_ids"], dtype=np.int64)
                results[v]["explained_by_" + reason] = int(changed[beyond].sum()) if len(beyond) else 0
                results[v]["rows_changed_by_" + reason] = int(changed.sum())
        for res in results.values():
            ids = res.pop("beyond_ids")
            res["beyond_examples"] = [{"id": int(i), "token": tokens[i]} for i in ids[:10]]
            res["beyond_with_backslash"] = int(sum("\\" in tokens[i] for i in ids))
        return {
            "bench": "focus-end-to-end", "scale": scale, "seed": seed, "atol": atol, "threads": threads,
            "sizes": files["sizes"], "deepfocus": {**df_info, "anchors": int(df["anchors"].sum()),
                                                   "random": int(np.sum(df["provenance"] == 3))},
            "variants": results, "wall_s_information_only": wall, "speed": None if "reference" not in results else target_speed(
                df_info["focus_s"], results["reference"]["method_s"], wall["deepfocus"], wall["tokxfer-reference"], E2E_TARGET, load),
            "load": load, "load_banner": mon.banner(), "environment": environment(),
        }


def print_end_to_end(record: dict) -> None:
    """Print the end-to-end comparison as a table."""
    s = record["sizes"]
    print(f"\n{s['n_source']} source / {s['n_target']} target tokens, dim {s['dim']}, fastText words {s['aux_words']}; "
          f"deepfocus: {record['deepfocus']['anchors']} anchors, {record['deepfocus']['random']} random rows, "
          f"special anchors {record['deepfocus']['special_anchors']}")
    head = f"{'variant':<20} {'compared':>9} {'beyond tol':>10} {'max |diff|':>11} {'min cos':>8} {'random both':>11} {'random 1 side':>13}"
    print(head)
    for v, r in record["variants"].items():
        print(f"{v:<20} {r['compared']:>9} {r['beyond_tolerance']:>10} {r['max_abs_diff']:>11.3g} {r['min_row_cosine']:>8.5f} "
              f"{r['random_fallback_both']:>11} {r['random_tokxfer_only'] + r['random_deepfocus_only']:>13}")
        for k in ("explained_by_special_anchors", "explained_by_aux_token_format"):
            if k in r:
                print(f"{'':<20} {r[k]} of {r['beyond_tolerance']} differing rows are rows that the option {k.removeprefix('explained_by_')} changes")
    if record["speed"] is not None:
        print(speed_line("deepfocus.FOCUS", record["deepfocus"]["focus_s"], record["variants"]["reference"]["method_s"], record["speed"]))
    print(record["load_banner"])


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------


def _spawn(method: str, args, tmp: Path) -> dict:
    argv = ["--scale", str(args.scale), "--seed", str(args.seed), "--k", str(args.k), "--chunk-rows", str(args.chunk_rows)]
    return spawn_core_worker(Path(__file__).resolve(), method, argv, args.threads, tmp / f"{method}.npz")


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
    # Long but flat: the flags, then one branch per mode (core, end to end, variants), each calling helpers.
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=0.1, help="vocabulary-size multiplier; 1.0 = XLM-R -> 50k target")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--methods", default="tokxfer,deepfocus", help=f"comma-separated subset of {','.join(METHODS)}")
    p.add_argument("--k", type=int, default=32, help="initial sparsemax top-k slice (tokxfer)")
    p.add_argument("--chunk-rows", type=int, default=2048, help="rows scored at once (tokxfer)")
    p.add_argument("--threads", type=int, default=1, help="torch/BLAS threads for every method (1: fair, reproducible, kind to a shared machine)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("--end-to-end", action="store_true", help="run deepfocus.FOCUS and `tokxfer init` whole on files and compare every row")
    p.add_argument("--work-dir", type=Path, default=None, help="end to end: where the files are built (reused if present); default a temporary folder")
    p.add_argument("--variants", default=",".join(E2E_VARIANTS), help=f"end to end: tokxfer configurations, a subset of {','.join(E2E_VARIANTS)}")
    p.add_argument("--atol", type=float, default=1e-5, help="end to end: largest absolute difference of a row's entries counted as equal")
    p.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    p.add_argument("--e2e-worker", choices=("deepfocus",), help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if args.e2e_worker:
        e2e_deepfocus_worker(Path(args.work_dir), Path(args.out), args.threads)
        return 0
    if args.end_to_end:
        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        unknown = [v for v in variants if v not in E2E_VARIANTS]
        if unknown or not variants:
            p.error(f"unknown variant(s) {unknown}; choose from {E2E_VARIANTS}")
        record = end_to_end(args.scale, args.seed, variants, args.atol, args.threads, args.work_dir)
        print_end_to_end(record)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(record, indent=1))
        return 0

    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        p.error(f"unknown method(s) {unknown}; choose from {METHODS}")
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-focus-") as tmp:
        with LoadMonitor() as mon:
            for m in methods:
                print(f"running {m} (scale {args.scale}) ...", flush=True)
                results[m] = _spawn(m, args, Path(tmp))
                if "error" in results[m]:
                    print(f"  {m} failed: {results[m]['error']}", flush=True)
        load = mon.record()
        ok = [m for m in methods if "error" not in results[m]]
        comparisons = {}
        if "tokxfer" in ok:
            for ref in [m for m in ok if m != "tokxfer"]:
                comparisons[ref] = {**_compare(results["tokxfer"], results[ref]), **speedups(results[ref], results["tokxfer"], load)}
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
        print(f"tokxfer vs {ref}: {shown(c['speedup'])} faster (wall), {shown(c['speedup_cpu'])} (cpu); max |diff| {c['max_abs_diff']:.3g} over {c['rows_compared']} non-fallback rows "
              f"(|values| <= {c['max_abs_value']:.3g}); same provenance: {c['same_provenance']}")
    first_ok = next((results[m] for m in methods if "inputs" in results[m]), None)
    if first_ok:
        print("inputs:", json.dumps(first_ok["inputs"]))
    if "tokxfer" in results and "stats" in results["tokxfer"]:
        print("tokxfer stats:", json.dumps(results["tokxfer"]["stats"]))
    record = {
        "bench": "focus", "scale": args.scale, "seed": args.seed, "k": args.k, "chunk_rows": args.chunk_rows, "threads": args.threads,
        "results": results, "comparisons": comparisons, "load": load,
        "environment": environment(),
    }
    print(mon.banner())
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
