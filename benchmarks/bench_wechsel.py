"""Speed and memory of WECHSEL's numeric core against the reference implementation (``wechsel``).

Every method runs in its own subprocess on the same deterministic synthetic inputs (built here,
see :func:`make_inputs`: XLM-R-sized source — 250,002 tokens, a d=768 embedding matrix — a
50,000-token target vocabulary, and 300-d fastText-like subword vectors for both, given directly
as arrays and already aligned), so peak RSS is per method and includes the inputs. Each worker
builds the inputs, records its RSS, then runs and times only WECHSEL's step 3 (similarity, top-k,
softmax) and the target rows it produces:

* ``tokxfer``   — :func:`methods.wechsel.wechsel_mapping` (chunked exact top-k with a bfloat16
  screen where the CPU has native bf16) and :func:`harness.model.surgery.materialize` (the rows the
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
With ``--inputs clustered`` (default) the synthetic vectors have no exact duplicates, so no method has
to break a tie. ``--inputs concentrated`` puts every vector near one common direction (best neighbour
~0.968, 10th ~0.965, as with word fastText models trained on a few MB, where a bf16 screen's error
margin keeps half of every row) and gives 30% of the source tokens another token's vector (``▁x`` and
``x``): the inputs on which an exact search must not blow up. Exact ties at the k-th place then make
some rows differ from the reference's (it breaks ties by ``argpartition``'s order, tokxfer by the lower
id); ``tokxfer stats`` shows the screens used and the candidates rescored per row.

Run (quick, ~1 min)::

    .venv/bin/python benchmarks/bench_wechsel.py --scale 0.1
    .venv/bin/python benchmarks/bench_wechsel.py --scale 0.1 --inputs concentrated

Full XLM-R scale (several minutes, ~5 GB for the reference; the machine is shared, run it rarely)::

    .venv/bin/python benchmarks/bench_wechsel.py --scale 1 --json runs/bench_wechsel.json

End to end (``--end-to-end``): both implementations run whole, on files, as a user runs them. The
driver writes (under ``--work-dir``, reused when present) SentencePiece-Unigram tokenizers with
``▁`` pieces (32,000 source / 16,000 target pieces at ``--scale 1``; the source trained on every
language of the built-in world, the target on ``--language``'s text), a source model with a 768-d
embedding matrix (a one-layer XLM-R saved as a Hugging Face directory), cbow dim-100 word fastText
``.bin`` models with character n-grams for both languages (:data:`E2E_FASTTEXT`), and the world's
3,000-pair gold dictionary (``target<TAB>source``, and swapped for the reference). Then

* ``reference`` — ``wechsel.WECHSEL(source_ft, target_ft, bilingual_dictionary=...).apply(source_tokenizer,
  target_tokenizer, E)``, in a subprocess; its neighbours (``info.sources``) are kept per row;
* ``tokxfer`` — :func:`harness.model.initialize.initialize` (the function ``tokxfer init`` calls; its CLI has
  no word-vector flags) with each ``--variants`` entry: ``reference`` (:meth:`WechselConfig.reference`),
  ``reference-unique-pairs``, ``reference-float64-procrustes`` and ``reference-no-special-candidates``
  (one option back at the paper's setting: the rows each option explains), ``paper`` (the defaults).

Every row is compared: rows random in both are counted apart; the others are split by tokxfer's
per-run near-tie list (k-th and (k+1)-th cosines within 1e-6, where float-level differences
legitimately change the k-th neighbour) and, per group, the benchmark reports rows beyond ``--atol``,
rows whose neighbour sets differ, max absolute difference and minimum row cosine. JSON output
(``--json``), with ``WECHSEL(...).apply(...)`` over tokxfer's method as the speed figure (target
:data:`E2E_TARGET`) unless the machine was busy (:mod:`benchmarks._load`)::

    .venv/bin/python benchmarks/bench_wechsel.py --end-to-end --scale 0.1 --json runs/bench_wechsel_e2e.json
"""

from __future__ import annotations

import argparse
import json
import os
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

METHODS = ("tokxfer", "wechsel", "wechsel-f32", "naive")
E2E_TARGET = 6.0
"""End to end, ``WECHSEL(...).apply(...)`` over tokxfer's WECHSEL method (both after loading), at least (issue 27)."""

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
        kind: the :data:`INPUT_KINDS` entry the vectors were made as.
        twins: source tokens made to share another token's vector (before zero rows are drawn).
    """

    source_embeddings: np.ndarray
    u_source: np.ndarray
    u_target: np.ndarray
    specials: np.ndarray
    kind: str = "clustered"
    twins: int = 0

    def describe(self) -> dict:
        """Sizes, for printing and for the bench record."""
        return {
            "kind": self.kind, "source_twins": self.twins,
            "n_source": int(len(self.u_source)), "n_target": int(len(self.u_target)),
            "dim": int(self.source_embeddings.shape[1]), "subword_dim": int(self.u_source.shape[1]),
            "source_zero_vectors": int((~self.u_source.any(axis=1)).sum()),
            "target_zero_vectors": int((~self.u_target[len(SPECIALS):].any(axis=1)).sum()),
            "input_bytes": int(self.source_embeddings.nbytes + self.u_source.nbytes + self.u_target.nbytes),
        }


INPUT_KINDS = ("clustered", "concentrated")
"""Subword vectors of :func:`make_inputs`: well-separated clusters, or concentrated cosines with duplicates."""

CONCENTRATED_CLUSTER_VAR = 0.0214
CONCENTRATED_NOISE_VAR = 0.0426
"""``concentrated``: variances (relative to a unit common direction) of the cluster and token components;
they put a random pair at cosine ~0.94, the best neighbour at ~0.968 and the 10th at ~0.965 (the
ranges measured on word fastText models trained on a few MB: 0.945-0.978 and 0.938-0.976)."""

DUPLICATE_FRACTION = 0.3
"""``concentrated``: share of source tokens whose subword vector is another token's (``▁x`` and ``x``)."""


def _concentrated_vectors(rng: np.random.Generator, n_source: int, n_target: int) -> tuple[np.ndarray, np.ndarray]:
    """Subword vectors around one common direction (see :data:`CONCENTRATED_CLUSTER_VAR`), source twins included."""
    common = rng.standard_normal(SUBWORD_DIM, dtype=np.float32)
    common /= np.linalg.norm(common)
    n_clusters = max(n_target // TOKENS_PER_CLUSTER, 1)
    centers = rng.standard_normal((n_clusters, SUBWORD_DIM), dtype=np.float32) / np.float32(np.sqrt(SUBWORD_DIM))
    scale_c, scale_n = np.float32(np.sqrt(CONCENTRATED_CLUSTER_VAR)), np.float32(np.sqrt(CONCENTRATED_NOISE_VAR / SUBWORD_DIM))

    def vectors(n: int) -> np.ndarray:
        u = rng.standard_normal((n, SUBWORD_DIM), dtype=np.float32)
        u *= scale_n
        u += scale_c * centers[rng.integers(0, n_clusters, size=n)]
        u += common
        return u

    u_s, u_t = vectors(n_source), vectors(n_target)
    twins = rng.permutation(np.arange(len(SPECIALS), n_source))[: int(DUPLICATE_FRACTION * n_source)]
    u_s[twins] = u_s[rng.integers(len(SPECIALS), n_source, size=len(twins))]
    return u_s, u_t


def make_inputs(scale: float = 1.0, seed: int = 0, kind: str = "clustered") -> SyntheticWechselInputs:
    """Deterministic synthetic WECHSEL inputs (float32 throughout, no float64 temporaries).

    ``clustered``: subword vectors have cluster structure (tokens of one "topic" share a center;
    cosine ~0.5 within a cluster), so each target token has a few dozen close source tokens, as
    with real aligned fastText vectors, rather than the near-uniform cosines of isotropic noise;
    no two vectors are equal. ``concentrated``: every vector is close to one common direction,
    as with word fastText models trained on a few MB (best neighbour ~0.968, 10th ~0.965, a
    random pair ~0.94: a bf16 screen's error margin keeps about half of every row), and 30% of
    the source tokens share their vector with another one (``▁x`` and ``x``), so exact ties at
    the k-th place occur; there the reference and tokxfer may pick different twins.

    Args:
        scale: multiplies both vocabulary sizes (dimensions stay 768 and 300).
        seed: generator seed.
        kind: one of :data:`INPUT_KINDS`.

    Returns:
        :class:`SyntheticWechselInputs`.

    Example:
        >>> x = make_inputs(scale=0.01)
        >>> x.u_source.shape, x.u_target.shape, x.source_embeddings.shape
        ((2500, 300), (500, 300), (2500, 768))
    """
    if scale <= 0:
        raise ValueError(f"scale must be > 0, got {scale}")
    if kind not in INPUT_KINDS:
        raise ValueError(f"kind must be one of {INPUT_KINDS}, got {kind!r}")
    rng = np.random.default_rng(seed)
    n_source = max(int(round(XLMR_SOURCE_VOCAB * scale)), 64)
    n_target = max(int(round(TARGET_VOCAB * scale)), 32)
    source = rng.standard_normal((n_source, XLMR_DIM), dtype=np.float32)
    source *= np.float32(0.05)
    if kind == "concentrated":
        u_s, u_t = _concentrated_vectors(rng, n_source, n_target)
    else:
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
    twins = int(DUPLICATE_FRACTION * n_source) if kind == "concentrated" else 0
    return SyntheticWechselInputs(source, u_s, u_t, specials, kind, twins)


# ----------------------------------------------------------------------------------------------
# Workers (run in a subprocess each)
# ----------------------------------------------------------------------------------------------


def _run_tokxfer(x: SyntheticWechselInputs, args) -> tuple:
    import torch

    from harness.model.surgery import materialize
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
    x = make_inputs(args.scale, args.seed, args.inputs)
    rss_inputs, peak_inputs = rss_bytes(), peak_rss_bytes()
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
        "peak_rss_gb": round(peak_rss_bytes() / 2**30, 3), "rss_after_inputs_gb": round(rss_inputs / 2**30, 3),
        "peak_rss_after_inputs_gb": round(peak_inputs / 2**30, 3), "stats": stats, "inputs": x.describe(),
    }
    Path(args.out).with_suffix(".json").write_text(json.dumps(result))


# ----------------------------------------------------------------------------------------------
# End to end, on files
# ----------------------------------------------------------------------------------------------

E2E_VARIANTS = ("reference", "reference-unique-pairs", "reference-float64-procrustes", "reference-no-special-candidates", "paper")
"""tokxfer configurations run end to end: the reference preset, the preset with one option back at the
paper's setting each (which rows each option explains), and the paper's defaults."""
E2E_SOURCE_VOCAB = 32_000
E2E_TARGET_VOCAB = 16_000
E2E_DIM = 768
E2E_FASTTEXT = {"dim": 100, "epoch": 5, "min_count": 5, "model": "cbow", "minn": 5, "maxn": 5, "neg": 10,
                "bucket": 200_000, "seed": 0, "threads": 1}
"""Word fastText models: the reference's ``train_embeddings`` settings (cbow, dim 100, neg 10, 5-grams only)
with 5 instead of 20 epochs, minCount 5, one thread and a fixed seed (reproducible), 200k n-gram buckets (an
80 MB file). The models are inputs both sides read, so how they were trained does not affect the comparison."""


def _variant_config(variant: str, screen: str = "auto") -> dict:
    """The WECHSEL config values (those differing from the defaults) of a tokxfer variant, with the similarity
    search's ``screen`` (``--screen``; the result is the same for every screen, only the time differs)."""
    import dataclasses

    from methods.wechsel import WechselConfig

    cfg = {
        "reference": WechselConfig.reference(),
        "reference-unique-pairs": WechselConfig.reference(case_expansion="unique"),
        "reference-float64-procrustes": WechselConfig.reference(procrustes_precision="float64"),
        "reference-no-special-candidates": WechselConfig.reference(special_candidates=False),
        "paper": WechselConfig(),
    }[variant]
    cfg = dataclasses.replace(cfg, screen=screen)
    default = WechselConfig()
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if getattr(cfg, f.name) != getattr(default, f.name)}


def e2e_files(work: Path, scale: float, seed: int, language: str) -> dict:
    """Build (or reuse) the end-to-end inputs under ``work``; return their paths and sizes.

    Text and dictionary come from the built-in world (``world build --size small``) and
    :func:`benchmarks._synthetic.make_corpora`: the source side is the text of every world language
    plus synthetic source text (a multilingual source, as XLM-R's), the target side ``language``'s
    text plus synthetic target text (the world alone supports only ~22k / ~10k pieces); both
    tokenizers and both fastText models are trained on these. The dictionary is the world's gold
    dictionary (3,000 lemma pairs, ``target<TAB>source``; a swapped copy ``source<TAB>target`` for the
    reference, whose files are ``english<TAB>target``).
    """
    from transformers.utils import logging as hf_logging

    from benchmarks._synthetic import make_corpora
    from harness.tokenizers import train_tokenizer
    from harness.world import build_world
    from methods._wordvectors import train_word_vectors

    hf_logging.set_verbosity_error()
    work.mkdir(parents=True, exist_ok=True)
    manifest = work / "manifest.json"
    want = {"scale": scale, "seed": seed, "language": language, "fasttext": E2E_FASTTEXT, "version": 2}
    if manifest.is_file() and json.loads(manifest.read_text()).get("inputs") == want:
        return json.loads(manifest.read_text())
    t0 = time.perf_counter()
    world = Path(build_world(size="small", seed=seed))
    meta = json.loads((world / "world.json").read_text())
    src_lang = meta["source_language"]
    if language == src_lang or not (world / language / "gold" / "dictionary.tsv").is_file():
        raise ValueError(f"--language {language!r}: not a target language of the world (its targets: {meta['targets']})")
    langs = [src_lang, *[t for t in meta["targets"]]]
    # the world's few MB support ~22k source / ~10k target pieces: synthetic text of two more languages
    # (benchmarks._synthetic) is added to both sides so that 32k / 16k vocabularies can be trained
    synthetic = make_corpora(work / "synthetic", scale, seed)
    src_text, tgt_text = work / "text" / "source.txt", work / "text" / "target.txt"
    _concat([*(world / lang / "text" / "train.txt" for lang in langs), synthetic["source"]], src_text)
    _concat([world / language / "text" / "train.txt", synthetic["target"]], tgt_text)
    src_tok = train_tokenizer([src_text], "unigram", vocab_size=max(int(round(E2E_SOURCE_VOCAB * scale)), 500),
                              cache_dir=work / "cache")
    tgt_tok = train_tokenizer([tgt_text], "unigram", vocab_size=max(int(round(E2E_TARGET_VOCAB * scale)), 300),
                              cache_dir=work / "cache")
    tgt_dir, src_dir = work / "target-tokenizer", work / "source-model"
    tgt_tok.save_pretrained(tgt_dir)
    save_source_model(src_tok, E2E_DIM, seed, src_dir)
    ft = dict(E2E_FASTTEXT)
    bins = {}
    for side, text in (("source", src_text), ("target", tgt_text)):
        wv = train_word_vectors(text, dim=ft["dim"], epoch=ft["epoch"], min_count=ft["min_count"], model=ft["model"],
                                minn=ft["minn"], maxn=ft["maxn"], neg=ft["neg"], bucket=ft["bucket"], seed=ft["seed"],
                                threads=ft["threads"], cache_dir=None)
        bins[side] = work / "fasttext" / f"{side}-cbow-100.bin"
        bins[side].parent.mkdir(parents=True, exist_ok=True)
        wv.model.save_model(str(bins[side]))
    pairs = [line.split("\t")[:2] for line in (world / language / "gold" / "dictionary.tsv").read_text(encoding="utf-8").splitlines()
             if line.strip()]
    ours, theirs = work / "dictionary.tsv", work / "dictionary-reference.tsv"
    ours.write_text("".join(f"{t}\t{s}\n" for t, s in pairs), encoding="utf-8")
    theirs.write_text("".join(f"{s}\t{t}\n" for t, s in pairs), encoding="utf-8")
    info = {
        "inputs": want, "build_s": round(time.perf_counter() - t0, 1),
        "paths": {"source_text": str(src_text), "target_text": str(tgt_text), "source_model": str(src_dir),
                  "target_tokenizer": str(tgt_dir), "source_vectors": str(bins["source"]),
                  "target_vectors": str(bins["target"]), "dictionary": str(ours), "reference_dictionary": str(theirs)},
        "sizes": {"n_source": len(src_tok), "n_target": len(tgt_tok), "dim": E2E_DIM, "dictionary_pairs": len(pairs),
                  "source_text_mb": round(src_text.stat().st_size / 2**20, 2), "target_text_mb": round(tgt_text.stat().st_size / 2**20, 2)},
    }
    manifest.write_text(json.dumps(info, indent=1))
    return info


def _concat(parts: list[Path], out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", encoding="utf-8", newline="\n") as w:
        for p in parts:
            w.write(Path(p).read_text(encoding="utf-8"))
    return out


def e2e_reference_worker(work: Path, out: Path, threads: int) -> None:
    """Run ``wechsel.WECHSEL(...).apply(...)`` whole on the files in ``work``; write rows, provenance, neighbours."""
    import fasttext
    import numpy as np
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from harness.protocols import COMBINED, FALLBACK, SPECIAL

    hf_logging.set_verbosity_error()
    torch.set_num_threads(threads)
    wechsel = import_reference()
    paths = json.loads((work / "manifest.json").read_text())["paths"]
    t0 = time.perf_counter()
    src = AutoTokenizer.from_pretrained(paths["source_model"])
    tgt = AutoTokenizer.from_pretrained(paths["target_tokenizer"])
    E = AutoModelForMaskedLM.from_pretrained(paths["source_model"]).get_input_embeddings().weight.detach().float().numpy()
    src_ft, tgt_ft = fasttext.load_model(paths["source_vectors"]), fasttext.load_model(paths["target_vectors"])
    t1 = time.perf_counter()
    model = wechsel.WECHSEL(src_ft, tgt_ft, bilingual_dictionary=paths["reference_dictionary"])
    rows, info = model.apply(src, tgt, E)
    t2 = time.perf_counter()
    prov = np.full(len(tgt), COMBINED, dtype=np.int8)
    prov[tgt.convert_tokens_to_ids(list(info.not_found))] = FALLBACK
    # specials it copies: every special of the source found by string in the target vocabulary
    copied = [tgt.convert_tokens_to_ids(t) for t in src.all_special_tokens if t in tgt.get_vocab()]
    prov[copied] = SPECIAL
    nb = np.full((len(tgt), 10), -1, dtype=np.int64)
    for token, (tokens, _w, _s) in info.sources.items():
        ids = src.convert_tokens_to_ids(list(tokens))
        nb[tgt.convert_tokens_to_ids(token), : len(ids)] = ids
    special_ids = set(src.all_special_ids)
    with_special = int(sum(any(int(i) in special_ids for i in nb[t]) for t in np.flatnonzero(prov == COMBINED)))
    np.savez(out, rows=rows.astype(np.float32), provenance=prov, neighbours=nb)
    out.with_suffix(".json").write_text(json.dumps({"load_s": round(t1 - t0, 3), "wechsel_s": round(t2 - t1, 3),
                                                    "rows_with_a_special_neighbour": with_special}))


def e2e_tokxfer_worker(work: Path, out: Path, variant: str, threads: int, screen: str = "auto") -> None:
    """Run WECHSEL through :func:`harness.model.initialize.initialize` (what ``tokxfer init`` runs) on the same files.

    ``tokxfer init`` has no flags for word-vector files, so this calls the function it calls, with
    the same transfer paths plus the two ``.bin`` models, and writes ``init_info.json`` the same way.
    """
    import numpy as np
    import torch

    from harness.model.initialize import InitRequest, initialize, write_init_info
    from harness.protocols import COMBINED, TransferResources
    from harness.registry import build_config, get
    from harness.run.resources import load_tokenizer

    torch.set_num_threads(threads)
    paths = json.loads((work / "manifest.json").read_text())["paths"]
    entry = get("method", "wechsel")
    cfg = build_config(entry.config_cls, _variant_config(variant, screen), where=f"variant {variant}")
    tgt = load_tokenizer(paths["target_tokenizer"])
    t0 = time.perf_counter()
    init = initialize(InitRequest(
        source_model=paths["source_model"], target_tokenizer=tgt, method="wechsel", method_config=cfg, seed=1,
        model_kind="mlm", resources=TransferResources(
            target_corpus=Path(paths["target_text"]), source_corpus=Path(paths["source_text"]),
            dictionary=Path(paths["dictionary"]), source_word_vectors=Path(paths["source_vectors"]),
            target_word_vectors=Path(paths["target_vectors"]),
        ),
    ))
    wall = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    write_init_info(out / "init_info.json", init, {"method": "wechsel", "variant": variant, "seed": 1})
    m = init.result.mapping
    nb = np.full((m.n_target, 10), -1, dtype=np.int64)
    for t in np.flatnonzero(m.provenance == COMBINED):
        ids = m.indices[m.indptr[t] : m.indptr[t + 1]][:10]
        nb[t, : len(ids)] = ids
    rows = init.model.get_input_embeddings().weight.detach().float().numpy()
    np.savez(out / "rows.npz", rows=rows, provenance=m.provenance, neighbours=nb)
    (out / "wall.json").write_text(json.dumps({"initialize_model_s": round(wall, 3)}))


def compare_e2e(tk: dict, ref: dict, near_ids: list[int], atol: float) -> dict:
    """Row-by-row comparison of tokxfer's and the reference's matrices (harness provenance codes).

    Rows random in both (different generators by design) are counted apart; the other rows are split
    into those with a near tie (tokxfer's ``near_ties`` ids: k-th and (k+1)-th cosines within 1e-6) and
    those without, and for each group the benchmark reports rows beyond ``atol`` (max absolute entry
    difference), rows whose neighbour *sets* differ, max absolute difference and minimum row cosine.
    """
    import numpy as np

    from harness.protocols import FALLBACK, SPECIAL

    fb_t, fb_r = tk["provenance"] == FALLBACK, ref["provenance"] == FALLBACK
    near = np.zeros(len(fb_t), dtype=bool)
    near[np.asarray(near_ids, dtype=np.int64)] = True
    cmp = ~fb_t & ~fb_r
    a, b = tk["rows"].astype(np.float64), ref["rows"].astype(np.float64)
    diff = np.abs(a - b).max(axis=1)
    cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30)
    nt, nr = np.sort(tk["neighbours"], axis=1), np.sort(ref["neighbours"], axis=1)
    same_set = np.all(nt == nr, axis=1) | (tk["provenance"] == SPECIAL)

    def group(mask: np.ndarray) -> dict:
        ids = np.flatnonzero(mask)
        beyond = ids[diff[ids] > atol]
        return {"rows": int(len(ids)), "beyond_tolerance": int(len(beyond)), "neighbour_set_differs": int(np.sum(~same_set[ids])),
                "max_abs_diff": float(diff[ids].max()) if len(ids) else 0.0,
                "min_row_cosine": float(cos[ids].min()) if len(ids) else 1.0, "beyond_ids": beyond.tolist()}

    return {
        "rows": int(len(fb_t)), "random_fallback_both": int((fb_t & fb_r).sum()),
        "random_tokxfer_only": int((fb_t & ~fb_r).sum()), "random_reference_only": int((fb_r & ~fb_t).sum()),
        "compared": int(cmp.sum()), "without_near_tie": group(cmp & ~near), "with_near_tie": group(cmp & near),
    }


def end_to_end(scale: float, seed: int, language: str, variants: list[str], atol: float, threads: int,
               work_dir: Path | None, screen: str = "auto") -> dict:
    """Build the files, run the reference and each tokxfer variant (its similarity search screened as ``screen``
    says), compare; return the JSON record."""
    import numpy as np
    from transformers import AutoTokenizer

    with tempfile.TemporaryDirectory(prefix="bench-wechsel-e2e-") as tmp:
        work = Path(work_dir) if work_dir is not None else Path(tmp)
        print(f"building inputs in {work} (scale {scale}, target {language}) ...", flush=True)
        files = e2e_files(work, scale, seed, language)
        paths = files["paths"]
        env = subprocess_env(threads, work)
        me = str(Path(__file__).resolve())
        mon = LoadMonitor().start()  # the timed workers only, not the input build
        print("running wechsel.WECHSEL(...).apply(...) ...", flush=True)
        ref_out = work / "reference.npz"
        wall = {"reference": run_worker([sys.executable, me, "--e2e-worker", "reference", "--work-dir", str(work),
                                       "--out", str(ref_out), "--threads", str(threads)], env, "reference worker")}
        ref = dict(np.load(ref_out))
        ref_info = json.loads(ref_out.with_suffix(".json").read_text())
        tokens = AutoTokenizer.from_pretrained(paths["target_tokenizer"]).convert_ids_to_tokens(list(range(files["sizes"]["n_target"])))
        results: dict = {}
        for v in variants:
            print(f"running tokxfer initialize_model ({v}) ...", flush=True)
            out = work / f"tokxfer-{v}"
            wall[f"tokxfer-{v}"] = run_worker([sys.executable, me, "--e2e-worker", "tokxfer", "--variant", v, "--screen", screen, "--work-dir", str(work),
                                             "--out", str(out), "--threads", str(threads)], env, f"tokxfer ({v})")
            tk = dict(np.load(out / "rows.npz"))
            info = json.loads((out / "init_info.json").read_text())["info"]
            near_ids = info["wechsel"]["near_ties"]["ids"]
            res = compare_e2e(tk, ref, near_ids, atol)
            res["config"] = _variant_config(v, screen)
            res["near_ties"] = info["near_ties"]
            res["alignment"] = {k: info["alignment"][k] for k in ("pairs_used", "distinct_pairs", "mean_pair_cosine_before",
                                                                   "mean_pair_cosine_after")}
            res["screen"] = {k: info["wechsel"]["similarity"][k] for k in ("screen", "screen_switched", "candidates_per_row")}
            res["method_s_information_only"] = info["timings"]["total_s"]
            res["method_timings_s"] = info["timings"]  # word vectors, alignment, subword embeddings, similarity
            for g in ("without_near_tie", "with_near_tie"):
                ids = res[g].pop("beyond_ids")
                res[g]["beyond_examples"] = [{"id": int(i), "token": tokens[i]} for i in ids[:10]]
            results[v] = res
        mon.stop()
        load = mon.record()
        return {
            "bench": "wechsel-end-to-end", "scale": scale, "seed": seed, "language": language, "atol": atol, "threads": threads, "screen": screen,
            "sizes": files["sizes"], "reference": {**ref_info, "random": int(np.sum(ref["provenance"] == 3))},
            "variants": results, "wall_s_information_only": wall, "speed": None if "reference" not in results else target_speed(
                ref_info["wechsel_s"], results["reference"]["method_s_information_only"], wall["reference"], wall["tokxfer-reference"], E2E_TARGET, load),
            "load": load, "load_banner": mon.banner(), "environment": environment(),
        }


def print_end_to_end(record: dict) -> None:
    """Print the end-to-end comparison as a table."""
    s = record["sizes"]
    print(f"\n{s['n_source']} source / {s['n_target']} target tokens, dim {s['dim']}, {s['dictionary_pairs']} dictionary pairs; "
          f"reference: {record['reference']['random']} random rows, {record['reference']['rows_with_a_special_neighbour']} rows "
          "with a special among the neighbours")
    print(f"{'variant':<32} {'random both':>11} {'random 1 side':>13} {'no near tie: rows':>17} {'differ':>7} {'set differs':>11} "
          f"{'max |diff|':>10} {'near tie: rows':>14} {'differ':>7}")
    for v, r in record["variants"].items():
        a, b = r["without_near_tie"], r["with_near_tie"]
        print(f"{v:<32} {r['random_fallback_both']:>11} {r['random_tokxfer_only'] + r['random_reference_only']:>13} "
              f"{a['rows']:>17} {a['beyond_tolerance']:>7} {a['neighbour_set_differs']:>11} {a['max_abs_diff']:>10.3g} "
              f"{b['rows']:>14} {b['beyond_tolerance']:>7}")
    if record["speed"] is not None:
        print(speed_line("WECHSEL(...).apply", record["reference"]["wechsel_s"], record["variants"]["reference"]["method_s_information_only"], record["speed"]))
    print(record["load_banner"])


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------


def _spawn(method: str, args, tmp: Path) -> dict:
    argv = ["--scale", str(args.scale), "--seed", str(args.seed), "--inputs", args.inputs, "--k", str(args.k), "--tau", str(args.tau),
            "--chunk-rows", str(args.chunk_rows), "--screen", args.screen]
    return spawn_core_worker(Path(__file__).resolve(), method, argv, args.threads, tmp / f"{method}.npz")


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
    # Long but flat: the flags, then one branch per mode (core, end to end, variants), each calling helpers.
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scale", type=float, default=0.1, help="vocabulary-size multiplier; 1.0 = XLM-R (250,002) -> 50k target")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--methods", default="tokxfer,wechsel", help=f"comma-separated subset of {','.join(METHODS)}")
    p.add_argument("--k", type=int, default=10, help="neighbours (paper: 10)")
    p.add_argument("--tau", type=float, default=0.1, help="temperature (paper: 0.1)")
    p.add_argument("--chunk-rows", type=int, default=512, help="target rows scored at once (tokxfer)")
    p.add_argument("--inputs", choices=INPUT_KINDS, default="clustered",
                   help="synthetic subword vectors: well-separated clusters, or concentrated cosines with duplicate vectors")
    p.add_argument("--screen", choices=("auto", "bf16", "fp32", "fp64"), default="auto", help="screening precision (tokxfer)")
    p.add_argument("--threads", type=int, default=1, help="torch/BLAS threads for every method (1: fair, kind to a shared machine)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("--end-to-end", action="store_true",
                   help="run wechsel.WECHSEL(...).apply(...) and tokxfer's init path whole on files and compare every row")
    p.add_argument("--work-dir", type=Path, default=None, help="end to end: where the files are built (reused if present)")
    p.add_argument("--language", default="near", help="end to end: the world's target language (near, far, script)")
    p.add_argument("--variants", default=",".join(E2E_VARIANTS), help=f"end to end: a subset of {','.join(E2E_VARIANTS)}")
    p.add_argument("--atol", type=float, default=1e-5, help="end to end: largest absolute row difference counted as equal")
    p.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    p.add_argument("--e2e-worker", choices=("reference", "tokxfer"), help=argparse.SUPPRESS)
    p.add_argument("--variant", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if args.e2e_worker == "reference":
        e2e_reference_worker(Path(args.work_dir), Path(args.out), args.threads)
        return 0
    if args.e2e_worker == "tokxfer":
        e2e_tokxfer_worker(Path(args.work_dir), Path(args.out), args.variant, args.threads, args.screen)
        return 0
    if args.end_to_end:
        variants = [v.strip() for v in args.variants.split(",") if v.strip()]
        unknown = [v for v in variants if v not in E2E_VARIANTS]
        if unknown or not variants:
            p.error(f"unknown variant(s) {unknown}; choose from {E2E_VARIANTS}")
        record = end_to_end(args.scale, args.seed, args.language, variants, args.atol, args.threads, args.work_dir, args.screen)
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
    with tempfile.TemporaryDirectory(prefix="bench-wechsel-") as tmp:
        with LoadMonitor() as mon:
            for m in methods:
                print(f"running {m} (scale {args.scale}, {args.inputs} inputs) ...", flush=True)
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
        load = mon.record()
        comparisons = {}
        if "tokxfer" in ok:
            for ref in [m for m in ok if m != "tokxfer"]:
                comparisons[ref] = {**_compare(results["tokxfer"], results[ref]), **speedups(results[ref], results["tokxfer"], load)}
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
        print(f"tokxfer vs {ref}: {shown(c['speedup'])} faster (wall), {shown(c['speedup_cpu'])} (cpu); max |diff| {c['max_abs_diff']:.3g} over "
              f"{c['rows_compared']} non-fallback rows (|values| <= {c['max_abs_value']:.3g}; rows differing by > 1e-5: "
              f"{c['rows_differing_over_1e-5']}); same provenance: {c['same_provenance']}")
    first_ok = next((results[m] for m in methods if "inputs" in results[m]), None)
    if first_ok:
        print("inputs:", json.dumps(first_ok["inputs"]))
    if "tokxfer" in results and "stats" in results["tokxfer"]:
        print("tokxfer stats:", json.dumps(results["tokxfer"]["stats"]))
    record = {
        "bench": "wechsel", "inputs": args.inputs, "scale": args.scale, "seed": args.seed, "k": args.k, "tau": args.tau, "chunk_rows": args.chunk_rows,
        "screen": args.screen, "threads": args.threads, "results": results, "comparisons": comparisons,
        "load": load, "environment": environment(),
    }
    print(mon.banner())
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
