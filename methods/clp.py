"""``clp`` (Ostendorff & Rehm 2023, "Efficient language model training through cross-lingual and
progressive transfer learning"): CLP-Transfer's embedding initialization.

Needs a small *helper* model trained in the target vocabulary (``inputs.helper_model``; on the
built-in world ``targets[].helper_model: world:mlm`` pretrains one on the target's text with the
target tokenizer).

1. Overlap tokens ``O`` (canonical exact matches; ``fuzzy=True`` adds FOCUS's fuzzy ones) are copied
   from the source (COPIED); special tokens by role (SPECIAL).
2. Each other target token ``a`` with a helper embedding ``h_a`` is a similarity-weighted average of
   the overlap rows: ``Et[a] = sum_o w_a,o Es[o]`` with ``w_a,o = cos(h_a, h_o) / sum_o' cos(h_a, h_o')``
   over the overlap tokens that have a helper embedding (COMBINED). The weights sum to 1 but are
   not clipped: a negative cosine gives a negative weight, as in the paper's formula and the
   reference code (``clp.py``, which divides the raw cosines by their sum).
3. Tokens without a helper embedding (not in the helper's vocabulary), tokens whose cosines sum to
   (numerically) zero or less (the normalization is then undefined), and every new token when no
   overlap token has a helper embedding are FALLBACK rows, each group with its reason.

A sum that is small but positive is the formula's weak point: the weights then sum to 1 with absolute
values summing to hundreds, and the row lands far outside the source rows (measured on the small world,
tasks-encoder's CLP, seed 3: one row of norm 10.3 against a largest source row of 0.76 took the MLM loss
at initialization to 75.1 nats; ``top_k: 10`` gave 6.7). The method keeps the paper's formula and
reports it: ``info["clp"]["max_weight_l1"]`` and ``tokens_weight_l1_over_10``, and the harness flags
every record with such rows (``row_norm``, :mod:`harness.run.sanity`).

Options: ``top_k`` restricts the average to the ``k`` most similar overlap tokens (the reference
code's nearest-neighbour reading, "retrieve NNs for missing tokens"; the weights are renormalized
over them); the default, ``null``, averages over every overlap token as the paper does. A dense
average stores ``|A| x |O|`` weights; past ``max_dense_weights`` the method refuses (naming
``top_k``) instead of allocating gigabytes. Differences from the reference code: it matches
overlap tokens by vocabulary string (here: canonical form, METHODS.md), draws the other rows from
``np.random`` with a fixed seed 42 (here: the harness draws fallback rows with the trial's
generator) and sets only the input embeddings (here: the mapping also sets an untied head and the
MLM bias, METHODS.md "Output side").
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from harness import vocab as _canon
from harness.protocols import InitResult, Need, TransferInputs
from harness.registry import register_method
from methods._anchors import anchor_mapping, helper_vectors, split_tokens
from methods._similarity import DEFAULT_CHUNK_ROWS, chunked_topk_cosine, iter_cosine_chunks

__all__ = ["ClpConfig", "Clp", "clp_weights"]

MIN_SIMILARITY_SUM = 1e-6
"""A token whose cosines to the anchors sum to at most this is not combined (its weights would be unbounded)."""


@dataclass(frozen=True)
class ClpConfig:
    """Configuration of ``clp``. Defaults follow the paper."""

    top_k: int | None = None
    """Average over the ``k`` most similar overlap tokens only (renormalized); ``null``: over all of them (paper)."""

    fuzzy: bool = False
    """Also copy fuzzy overlap matches (symbolic tokens, case and word start ignored) and use them as anchors."""

    max_dense_weights: int = 50_000_000
    """With ``top_k: null``, refuse when new tokens x anchors exceeds this (the mapping would hold that many
    weights: 12 bytes each); set ``top_k`` or raise it."""

    chunk_rows: int = DEFAULT_CHUNK_ROWS
    """New tokens scored at once (memory ~ chunk_rows x anchors x 4 bytes)."""

    def __post_init__(self) -> None:
        if self.top_k is not None and (isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1):
            raise ValueError(f"ClpConfig.top_k must be null or an integer >= 1, got {self.top_k!r}")
        for name in ("max_dense_weights", "chunk_rows"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"ClpConfig.{name} must be an integer >= 1, got {v!r}")
        if not isinstance(self.fuzzy, bool):
            raise ValueError(f"ClpConfig.fuzzy must be a bool, got {self.fuzzy!r}")


def clp_weights(new: np.ndarray, anchors: np.ndarray, *, top_k: int | None = None,
                chunk_rows: int = DEFAULT_CHUNK_ROWS) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """CLP weights of every new token over the anchors: cosines divided by their sum.

    Args:
        new: ``n x d`` helper embeddings of the tokens to initialize.
        anchors: ``m x d`` helper embeddings of the overlap tokens (``m >= 1``).
        top_k: keep only the ``k`` largest cosines per token (``None``: all ``m``).
        chunk_rows: tokens scored at once.

    Returns:
        ``(indptr, anchor indices, weights float64, ok [n] bool)``: CSR rows of the tokens with ``ok``
        (``indptr`` has ``ok.sum() + 1`` entries); a token whose cosines sum to at most
        :data:`MIN_SIMILARITY_SUM` is left out (``ok`` False).

    Example:
        >>> ip, idx, w, ok = clp_weights(np.array([[1.0, 0.0]]), np.array([[1.0, 0.0], [1.0, 1.0]]))
        >>> idx.tolist(), np.round(w, 4).tolist(), ok.tolist()
        ([0, 1], [0.5858, 0.4142], [True])
    """
    n, m = len(new), len(anchors)
    if m == 0:
        raise ValueError("clp_weights needs at least one anchor")
    kk = m if top_k is None else min(int(top_k), m)
    idx = np.empty((n, kk), dtype=np.int64)
    cos = np.empty((n, kk), dtype=np.float64)
    if top_k is None:
        for start, block in iter_cosine_chunks(new, anchors, chunk_rows=chunk_rows):
            cos[start : start + len(block)] = block.numpy()
        idx[:] = np.arange(m)[None, :]
    else:
        vals, ids = chunked_topk_cosine(new, anchors, kk, chunk_rows=chunk_rows)
        cos[:], idx[:] = vals, ids
    total = cos.sum(axis=1)
    ok = total > MIN_SIMILARITY_SUM
    w = cos[ok] / total[ok, None]
    return np.arange(int(ok.sum()) + 1, dtype=np.int64) * kk, idx[ok].ravel(), w.ravel(), ok


@register_method(
    "clp", config=ClpConfig,
    description="CLP-Transfer: copy overlap; new rows = overlap rows weighted by a target-vocabulary helper model's cosines",
)
class Clp:
    """CLP-Transfer (see the module docstring).

    Example:
        >>> from harness.registry import get
        >>> get("method", "clp").make({"top_k": 10}).config.top_k
        10
    """

    combines = True
    """New tokens are combinations of overlap rows: an all-fallback result is flagged (harness.run.sanity)."""
    convex = False
    """Weights sum to 1 but a negative cosine gives a negative weight."""
    needs = (
        Need(("helper_model",), "a small model trained in the target vocabulary: its embedding cosines weight the "
             "overlap rows"),
    )
    """What CLP reads besides the tokenizers and source embeddings: ``tokxfer init`` reads it, and the harness
    pretrains a ``world:`` helper model only for methods that need it (always, here)."""

    def __init__(self, config: ClpConfig) -> None:
        self.config = config

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Copy the overlap; combine it for every other token with the helper's cosine weights (``rng`` unused)."""
        cfg = self.config
        t_start = time.perf_counter()
        if inputs.helper_model is None:
            raise ValueError("clp needs inputs.helper_model: a small model trained in the target vocabulary "
                             "(targets[].helper_model in an experiment, e.g. world:mlm; --helper-model for tokxfer init)")
        src_tok, tgt_tok = inputs.source_tokenizer, inputs.target_tokenizer
        n_source = int(inputs.source_embeddings.shape[0])
        n_target = _canon.vocab_size(tgt_tok)
        ov = _canon.compute_overlap(src_tok, tgt_tok, fuzzy=cfg.fuzzy, n_source=n_source)
        pairs = ov.pairs(fuzzy=cfg.fuzzy)
        t0 = time.perf_counter()
        helper, has, helper_info = helper_vectors(inputs.helper_model, tgt_tok, n_target)
        t_helper = time.perf_counter() - t0
        specials = _canon.special_ids(tgt_tok)
        has[[s for s in specials if s < n_target]] = False
        anchors, new, solve = split_tokens(pairs, has, specials, n_target)
        if cfg.top_k is None and len(solve) * len(anchors) > cfg.max_dense_weights:
            raise ValueError(
                f"clp: {len(solve)} new tokens x {len(anchors)} overlap tokens = {len(solve) * len(anchors):,} weights "
                f"exceed max_dense_weights={cfg.max_dense_weights:,}; set top_k (e.g. 100) or raise max_dense_weights"
            )
        t0 = time.perf_counter()
        if len(solve):
            indptr, idx, w, ok = clp_weights(helper[solve], helper[anchors[:, 0]], top_k=cfg.top_k,
                                             chunk_rows=cfg.chunk_rows)
        else:
            indptr, idx, w, ok = np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0, bool)
        t_weights = time.perf_counter() - t0
        l1 = np.add.reduceat(np.abs(w), indptr[:-1]) if len(w) else np.zeros(0)
        mapping = anchor_mapping(n_target, n_source, specials=ov.specials, copied=pairs, targets=solve[ok],
                                 indptr=indptr, sources=anchors[idx, 1] if len(idx) else idx, weights=w)
        fb = np.array([t for t in mapping.fallback_ids().tolist() if t not in specials], dtype=np.int64)
        no_sum = set(solve[~ok].tolist())
        groups = {
            "not in the helper model's vocabulary: no helper embedding to compare": [t for t in fb if not has[t]],
            ("empty overlap: nothing to average" if len(pairs) == 0 else
             "no overlap token is in the helper model's vocabulary: nothing to average"):
                [t for t in fb if has[t] and len(anchors) == 0],
            f"its cosines to the overlap tokens sum to <= {MIN_SIMILARITY_SUM:g}: CLP's normalization is undefined":
                [t for t in fb if t in no_sum],
        }
        reasons = {why: [int(t) for t in ids] for why, ids in groups.items() if ids}
        info = {
            "overlap": {**ov.report(), "fuzzy_matching": cfg.fuzzy, "used": int(len(pairs))},
            "helper": helper_info,
            "clp": {
                "top_k": cfg.top_k, "anchors": int(len(anchors)), "new_tokens": int(len(new)),
                "combined": int(ok.sum()), "fallback_no_helper_vector": int(np.sum(~has[new])) if len(new) else 0,
                "fallback_similarity_sum": int((~ok).sum()),
                "negative_weight_share": round(float(np.mean(w < 0)), 4) if len(w) else None,
                "max_abs_weight": round(float(np.abs(w).max()), 4) if len(w) else None,
                # sum of |weights| per token: 1 for a convex combination; far above it, the row extrapolates
                # (a cosine sum near zero) and its norm can dwarf every source row's
                "max_weight_l1": round(float(l1.max()), 4) if len(l1) else None,
                "tokens_weight_l1_over_10": int((l1 > 10).sum()),
            },
            "timings": {"helper_s": round(t_helper, 3), "weights_s": round(t_weights, 3),
                        "total_s": round(time.perf_counter() - t_start, 3)},
        }
        return InitResult(mapping=mapping, tokenizer=tgt_tok, info=info, random_reasons=reasons)
