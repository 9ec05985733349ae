"""``hypernet``: a ZeTT-style hypernetwork (Minixhofer, Ponti & Vulić 2024, "Zero-Shot Tokenizer
Transfer") that maps a token's decomposition under the *source* tokenizer to its embedding, trained
on the source model itself — a method that trains, brought as one file like a plugin.

1. **Training data**: source tokens (not special, not ``<unk>``) whose string can be cut into a left
   and a right part that the source tokenizer segments *without the token itself* (the cut with the
   fewest pieces, :func:`methods._hypernet_model.best_split`); at most ``max_train_tokens`` of them
   (a seeded sample), at most ``max_pieces`` pieces each; ``holdout`` of them held out to report how
   far training moved the held-out loss from mean-of-pieces' and, with ``select: best-holdout``
   (default), to keep the logged network of lowest held-out loss (step 0 = mean-of-pieces included: a
   tiny source overfits in a few dozen steps). The target is the token's own source input-embedding row.
2. **Network**: the pieces' frozen source rows plus learned position embeddings, a ``layers``-layer
   pre-norm transformer encoder of width ``hidden``, and a head giving one weight per piece; the
   token's embedding is the weighted sum of its pieces' rows, with weights ``1/n + delta`` (``weights:
   free``) or ``softmax(delta)`` (``softmax``). The head starts at zero, so before training the output
   *is* mean-of-pieces (a residual from the mean).
3. **Inference**: specials by role (SPECIAL); exact overlap copied (COPIED) with ``copy_overlap``;
   every other target token is segmented by the source tokenizer as ``mean-of-pieces`` does
   (``segmentation: model``) and gets the network's weights over its pieces (COMBINED, also for one
   piece, whose weight need not be 1); a token with no usable piece is a FALLBACK row (the harness's
   random rows, :mod:`harness.random_rows`), counted with its reason. Inference runs in chunks of
   ``chunk_rows`` tokens.

Simplifications against ZeTT, named:

* ``objective: reconstruct`` (the only one implemented): regress each source token's own row
  (cosine + relative MSE). ZeTT trains with the source model's LM loss on text tokenized by diverse
  *sampled* tokenizers (plus an auxiliary loss keeping overlap embeddings near the source's); that
  needs the frozen model and a corpus in the loop and is not built here.
* The output is a weighted sum of the token's piece rows, not a free vector: a :class:`TokenMapping`
  is the harness's currency (one mapping is applied to the input rows, an untied head and the MLM
  bias alike, METHODS.md "Output side"), so an untied head gets the input side's weights — the
  network never sees the output rows. ZeTT predicts input and output embeddings freely.
* ``copy_overlap: true`` (default) copies exact-overlap rows as FOCUS/overlap do; ZeTT predicts every
  row (``copy_overlap: false``).
* Small and CPU-fast: a 1-layer encoder of width 128 over the source rows, not ZeTT's multi-layer
  hypernetwork initialized from the source model. Defaults, one thread, on a loaded 2-core machine:
  28 s of training on the small world's 6k x 256 source; at 250k x 768 (synthetic pieces, 50k training
  tokens) 41-74 s of training, 8-14 s to predict 50k tokens, 1.4 GB peak (the source rows are 0.8 GB).

Randomness: the network's initialization, the training sample, the holdout and every batch come from
``seed`` (``null``: drawn from the trial's generator) through :mod:`harness.seeding`, and training and
inference run on one torch thread, so a seed gives bit-identical rows whatever the number of cores (on one CPU build); the trained
network is cached under ``inputs.cache_dir`` by everything it depends on (source rows, source
tokenizer, training settings, seed), and its training facts are recorded in ``info["hypernet"]``.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from harness import progress as _progress
from harness import seeding
from harness.cache import cached_dir
from harness.families import tokenizer_key
from harness.files import write_atomic
from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL, InitResult, TokenMapping, TransferInputs
from harness.registry import register_method
from harness.vocab import (
    canonical_vocab,
    compute_overlap,
    encode_canon,
    family_spec,
    show_canon,
    special_ids,
    vocab_size,
)
from methods._hypernet_model import PieceHypernet, TrainSettings, best_split, pad_pieces, predict_weights, train
from methods.mean_of_pieces import RANDOM_REASONS

__all__ = ["HypernetConfig", "Hypernet"]

CACHE_VERSION = 3
"""Bumped whenever the training code changes what a cached network holds."""
_MAX_LOGGED = 50
TRAIN_FIELDS = ("objective", "weights", "hidden", "layers", "heads", "max_pieces", "steps", "batch_size", "lr",
                "weight_decay", "mse_weight", "max_train_tokens", "holdout", "select")
"""The config fields that decide the trained network (its cache key, with the seed and the source)."""


@dataclass(frozen=True)
class HypernetConfig:
    """Configuration of ``hypernet``."""

    objective: Literal["reconstruct"] = "reconstruct"
    """Training objective: ``reconstruct`` regresses each source token's own row from its pieces (cosine +
    ``mse_weight`` x relative MSE). ZeTT's LM loss over sampled tokenizers is not implemented."""
    weights: Literal["free", "softmax"] = "free"
    """Per-piece weights: ``free`` = ``1/n + delta`` (any sign, any sum), ``softmax`` = convex."""
    copy_overlap: bool = True
    """Copy exact-overlap rows (as FOCUS/overlap); ``false`` predicts them too (ZeTT)."""
    fuzzy: bool = False
    """With ``copy_overlap``, also copy fuzzy overlap matches (case and word start ignored)."""
    hidden: int = 128
    """Width of the encoder."""
    layers: int = 1
    """Transformer encoder layers."""
    heads: int = 4
    """Attention heads (must divide ``hidden``)."""
    max_pieces: int = 16
    """Learned positions; training skips source tokens with more pieces; at inference later pieces share the last position."""
    steps: int = 300
    """Optimizer steps (AdamW)."""
    batch_size: int = 256
    """Training tokens per step."""
    lr: float = 1e-3
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    mse_weight: float = 1.0
    """Weight of the relative MSE (``sum ||pred - row||² / sum ||row||²``) next to ``1 - cosine``."""
    max_train_tokens: int = 50_000
    """Most source tokens decomposed for training (a seeded sample of a larger vocabulary): bounds the cost at 250k."""
    holdout: float = 0.05
    """Share of the training tokens held out (their loss before and after training is recorded)."""
    select: Literal["best-holdout", "last"] = "best-holdout"
    """Which network to keep: the logged step (every ``steps // 10``; step 0, i.e. mean-of-pieces, included)
    of lowest held-out loss, or the last step. ``best-holdout`` needs ``holdout > 0`` (else: the last)."""
    chunk_rows: int = 1024
    """Target tokens predicted at once (memory ~ chunk_rows x pieces x d floats)."""
    seed: int | None = None
    """Seed of the network's initialization, sample and batches; ``null`` draws it from the trial's generator."""

    def __post_init__(self) -> None:
        name = type(self).__name__
        for f, least in (("hidden", 1), ("layers", 1), ("heads", 1), ("max_pieces", 2), ("steps", 0),
                         ("batch_size", 1), ("max_train_tokens", 2), ("chunk_rows", 1)):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < least:
                raise ValueError(f"{name}.{f} must be an integer >= {least}, got {v!r}")
        if self.hidden % self.heads:
            raise ValueError(f"{name}.heads must divide hidden={self.hidden}, got {self.heads!r}")
        for f, ok, want in (("lr", lambda v: v > 0, "> 0"), ("weight_decay", lambda v: v >= 0, ">= 0"),
                            ("mse_weight", lambda v: v >= 0, ">= 0"), ("holdout", lambda v: 0 <= v < 1, "in [0, 1)")):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or not ok(v):
                raise ValueError(f"{name}.{f} must be a finite number {want}, got {v!r}")
        for f, allowed in (("objective", ("reconstruct",)), ("weights", ("free", "softmax")),
                           ("select", ("best-holdout", "last"))):
            if getattr(self, f) not in allowed:
                raise ValueError(f"{name}.{f} must be one of {allowed}, got {getattr(self, f)!r}")
        for f in ("copy_overlap", "fuzzy"):
            if not isinstance(getattr(self, f), bool):
                raise ValueError(f"{name}.{f} must be a bool, got {getattr(self, f)!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0):
            raise ValueError(f"{name}.seed must be null or an integer >= 0, got {self.seed!r}")

    def train_settings(self) -> TrainSettings:
        """The training loop's settings."""
        return TrainSettings(steps=self.steps, batch_size=self.batch_size, lr=float(self.lr),
                             weight_decay=float(self.weight_decay), mse_weight=float(self.mse_weight),
                             select=self.select)


def _source_key(E: torch.Tensor, src_tok: Any) -> dict:
    """What identifies the source for the cache: a hash of its rows and of its tokenizer."""
    h = hashlib.sha256()
    flat = E.detach().to(torch.float32).contiguous().view(-1)
    for a in range(0, flat.numel(), 1 << 24):
        h.update(flat[a : a + (1 << 24)].numpy().tobytes())
    return {"rows": h.hexdigest(), "shape": list(E.shape), "tokenizer": tokenizer_key(src_tok)}


def training_data(src_tok: Any, n_source: int, cfg: HypernetConfig, rng: np.random.Generator) -> tuple[dict, dict]:
    """Decompose a seeded sample of source tokens (:func:`best_split`) and split off the holdout.

    Returns:
        ``(tensors for :func:`train`, counts for the record)``.
    """
    canon = canonical_vocab(src_tok)
    drop = special_ids(src_tok)
    spec = family_spec(src_tok)
    cand = np.array([t for t in range(min(n_source, len(canon))) if t not in drop and canon[t] is not None
                     and len(canon[t].text) >= 2], dtype=np.int64)
    if len(cand) > cfg.max_train_tokens:
        cand = np.sort(rng.choice(cand, cfg.max_train_tokens, replace=False))
    seqs, targets, too_long = [], [], 0
    for t in _progress.iterate(cand.tolist(), "hypernet: decomposing source tokens"):
        pieces = best_split(src_tok, canon[t], spec=spec, token_id=t, drop=drop, n_source=n_source)
        if pieces is None:
            continue
        if len(pieces) > cfg.max_pieces:
            too_long += 1
            continue
        seqs.append(pieces)
        targets.append(t)
    if len(seqs) < 2:
        raise ValueError(f"hypernet: only {len(seqs)} source tokens can be cut into known source pieces; "
                         "nothing to train on (a source vocabulary of single characters?)")
    order = rng.permutation(len(seqs))
    n_hold = min(int(round(cfg.holdout * len(seqs))), len(seqs) - 1)  # at least one token to train on
    hold, fit = order[:n_hold], order[n_hold:]
    ids, mask = pad_pieces(seqs)
    tgt = torch.as_tensor(targets, dtype=torch.long)
    idx = torch.as_tensor(np.sort(fit)), torch.as_tensor(np.sort(hold))
    data = {"ids": ids[idx[0]], "mask": mask[idx[0]], "targets": tgt[idx[0]],
            "hold_ids": ids[idx[1]], "hold_mask": mask[idx[1]], "hold_targets": tgt[idx[1]]}
    counts = {"candidates": int(len(cand)), "decomposed": len(seqs), "skipped_too_many_pieces": too_long,
              "train": int(len(fit)), "holdout": int(n_hold),
              "pieces_mean": round(float(np.mean([len(s) for s in seqs])), 3)}
    return data, counts


def build_network(E: torch.Tensor, cfg: HypernetConfig, seed: int) -> PieceHypernet:
    """A fresh network whose parameters are drawn from ``seed`` (the global RNGs are restored after)."""
    step = max(1, (1 << 22) // max(int(E.shape[1]), 1))  # row chunks: a 250k x 768 matrix is never copied whole
    total = sum(float(E[a : a + step].detach().to(torch.float64).pow(2).sum()) for a in range(0, int(E.shape[0]), step))
    scale = (total / max(E.numel(), 1)) ** 0.5 or 1.0
    with seeding.seeded_globals(seed, "hypernet", "init"):
        return PieceHypernet(int(E.shape[1]), hidden=cfg.hidden, layers=cfg.layers, heads=cfg.heads,
                             max_pieces=cfg.max_pieces, scale=scale, weights=cfg.weights)


def trained_network(inputs: TransferInputs, E: torch.Tensor, cfg: HypernetConfig, seed: int) -> tuple[PieceHypernet, dict]:
    """The network trained on the source (from the cache when ``inputs.cache_dir`` holds it) and its training facts."""
    src_tok = inputs.source_tokenizer
    trained = []

    def build(directory: Path) -> None:
        trained.append(True)
        net = build_network(E, cfg, seed)
        t0 = time.perf_counter()
        data, counts = training_data(src_tok, int(E.shape[0]), cfg, seeding.numpy_rng(seed, "hypernet", "data"))
        t_data = time.perf_counter() - t0
        report = train(net, E, data, cfg.train_settings(), seeding.torch_generator(seed, "hypernet", "batches"))
        facts = {"seed": seed, "data": counts, "train_loss_first": report.train_loss_first,
                 "train_loss_last": report.train_loss_last, "curve": report.curve, "holdout": report.holdout,
                 "holdout_curve": report.holdout_curve, "selected_step": report.selected_step,
                 "timings": {"decompose_s": round(t_data, 3), "train_s": report.seconds}}
        torch.save(net.state_dict(), directory / "network.pt")
        write_atomic(directory / "training.json", json.dumps(facts, indent=1))

    if inputs.cache_dir is None:
        with tempfile.TemporaryDirectory() as tmp:
            build(Path(tmp))
            return _load(Path(tmp), E, cfg, seed, cache_dir=None, trained=True)
    key = {"version": CACHE_VERSION, "source": _source_key(E, src_tok), "seed": seed,
           "train": {f: getattr(cfg, f) for f in TRAIN_FIELDS}}
    directory = cached_dir("hypernet", key, build, root=Path(inputs.cache_dir))
    return _load(directory, E, cfg, seed, cache_dir=directory, trained=bool(trained))


def _load(directory: Path, E: torch.Tensor, cfg: HypernetConfig, seed: int, *, cache_dir: Path | None,
          trained: bool) -> tuple[PieceHypernet, dict]:
    """The network saved in ``directory`` and its training facts (plus where it is cached and whether this call trained it)."""
    net = build_network(E, cfg, seed)
    net.load_state_dict(torch.load(directory / "network.pt", weights_only=True))
    facts = json.loads((directory / "training.json").read_text())
    return net, {**facts, "cache_dir": None if cache_dir is None else str(cache_dir), "trained_in_this_call": trained}


@register_method(
    "hypernet", config=HypernetConfig,
    description="copy overlap; a small network trained on the source weights each new token's source pieces (ZeTT-style)",
)
class Hypernet:
    """ZeTT-style hypernetwork over source pieces (see the module docstring).

    Example:
        >>> from harness.registry import get
        >>> get("method", "hypernet").make({"steps": 10}).config.steps
        10
    """

    combines = True
    """New rows combine source rows: an all-fallback result is flagged (harness.run.sanity)."""
    convex = False
    """``weights: free`` gives weights of any sign and sum (``softmax`` is convex; its own test checks it)."""

    def __init__(self, config: HypernetConfig) -> None:
        self.config = config

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Train (or load) the network on the source, then weight every non-copied target token's pieces."""
        cfg = self.config
        t_start = time.perf_counter()
        src, tgt = inputs.source_tokenizer, inputs.target_tokenizer
        E = torch.as_tensor(inputs.source_embeddings).detach().to(torch.float32).cpu()
        n_source, n_target = int(E.shape[0]), vocab_size(tgt)
        seed = int(rng.integers(0, 2**32)) if cfg.seed is None else int(cfg.seed)
        ov = compute_overlap(src, tgt, fuzzy=cfg.fuzzy, n_source=n_source)
        copied = ov.pairs(fuzzy=cfg.fuzzy) if cfg.copy_overlap else np.zeros((0, 2), dtype=np.int64)
        copied = copied[~np.isin(copied[:, 0], ov.specials[:, 0])] if len(ov.specials) else copied
        net, facts = trained_network(inputs, E, cfg, seed)
        t0 = time.perf_counter()
        todo, seqs, fallback, stats = self._decompose(src, tgt, n_source, ov.specials, copied)
        weights = predict_weights(net, E, seqs, cfg.chunk_rows)
        t_predict = time.perf_counter() - t0
        mapping = _mapping(n_target, n_source, ov.specials, copied, todo, seqs, weights)
        info = {
            "overlap": {**ov.report(), "fuzzy_matching": cfg.fuzzy, "copied": int(len(copied))},
            "objective": cfg.objective,
            "hypernet": facts,
            "rows": {"special": int(len(ov.specials)), "copied_overlap": int(len(copied)), "predicted": len(todo),
                     **stats["counts"]},
            "fallbacks": stats["logged"],
            "timings": {"predict_s": round(t_predict, 3), "total_s": round(time.perf_counter() - t_start, 3)},
        }
        reasons = {RANDOM_REASONS[why]: ids for why, ids in fallback.items() if ids}
        return InitResult(mapping=mapping, tokenizer=tgt, info=info, random_reasons=reasons)

    def _decompose(self, src: Any, tgt: Any, n_source: int, specials: np.ndarray, copied: np.ndarray):
        """Source pieces of every target token the network predicts, and the FALLBACK tokens by reason."""
        spec, drop = family_spec(src), special_ids(src)
        done = set(specials[:, 0].tolist()) | set(copied[:, 0].tolist())
        todo, seqs = [], []
        fallback: dict[str, list[int]] = {"no_pieces": [], "only_unk": []}
        counts = {"single_piece": 0, "beyond_max_pieces": 0, "partial_unk": 0, "no_canonical_form": 0}
        logged: list[dict] = []
        for t, canon in enumerate(_progress.iterate(canonical_vocab(tgt), "hypernet: target tokens")):
            if t in done:
                continue
            if canon is None:  # a special or added token without a source role: the harness's random row
                counts["no_canonical_form"] += 1
                continue
            pieces = encode_canon(src, canon, spec=spec)
            kept = [p for p in pieces if p not in drop and p < n_source]
            if not kept:
                why = "no_pieces" if not pieces else "only_unk"
                fallback[why].append(t)
                if len(logged) < _MAX_LOGGED:
                    logged.append({"id": t, "token": show_canon(canon), "reason": why})
                continue
            counts["partial_unk"] += len(kept) < len(pieces)
            counts["single_piece"] += len(kept) == 1
            counts["beyond_max_pieces"] += len(kept) > self.config.max_pieces
            todo.append(t)
            seqs.append(kept)
        counts.update({f"fallback_{why}": len(ids) for why, ids in fallback.items()})
        return todo, seqs, fallback, {"counts": counts, "logged": logged}


def _mapping(n_target: int, n_source: int, specials: np.ndarray, copied: np.ndarray, todo: list[int],
             seqs: list[list[int]], weights: list[np.ndarray]) -> TokenMapping:
    """SPECIAL and COPIED pairs with weight 1; predicted rows COMBINED (a repeated piece's weights summed)."""
    prov = np.full(n_target, FALLBACK, dtype=np.int8)
    rows, cols, vals = [], [], []
    for t, seq, w in zip(todo, seqs, weights):
        merged: dict[int, float] = {}
        for p, x in zip(seq, w.tolist()):
            merged[p] = merged.get(p, 0.0) + x
        rows.extend([t] * len(merged))
        cols.extend(merged)
        vals.extend(merged.values())
        prov[t] = COMBINED
    for code, pairs in ((COPIED, copied), (SPECIAL, specials)):
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        rows.extend(pairs[:, 0].tolist())
        cols.extend(pairs[:, 1].tolist())
        vals.extend([1.0] * len(pairs))
        prov[pairs[:, 0]] = code
    return TokenMapping.from_coo(n_target, n_source, rows, cols, vals, prov)
