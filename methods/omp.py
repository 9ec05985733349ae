"""``omp``: orthogonal matching pursuit over shared anchor tokens (mergekit-tokensurgeon; Goddard &
Fernandes Neto 2025, "Training-Free Tokenizer Transplantation via Orthogonal Matching Pursuit").

1. Anchors ``O``: the canonical overlap (exact matches; fuzzy ones with ``fuzzy=True``) — copied
   (COPIED); special tokens by role (SPECIAL).
2. A *donor* space holds the anchors and the new tokens: ``donor="fasttext"`` (default; on our data)
   the auxiliary token-level fastText vectors in the target vocabulary exactly as FOCUS trains them
   (the same :mod:`methods._fasttext` cache; settings ``aux_*`` with FOCUS's names and defaults), or
   ``donor="helper"`` the input embeddings of a helper model trained in the target vocabulary
   (``inputs.helper_model``; tokensurgeon's "donor model").
3. For each new token ``a`` with a donor vector ``x``, OMP picks at most ``k`` anchors ``J`` greedily
   (each step the anchor with the largest ``|<r, donor[o]>|`` for the current residual ``r``, see
   ``selection``) and least-squares coefficients ``c = argmin ||x - sum_j c_j donor[o_j]||`` on the
   anchors picked so far; then ``Et[a] = sum_j c_j Es[o_j]`` (COMBINED). The coefficients are not
   normalized and may be negative (unlike FOCUS's convex sparsemax weights).
4. New tokens without a donor vector (fastText: rarer than ``aux_min_count``; helper: not in its
   vocabulary), or when no anchor has one, are FALLBACK rows: N(mean, std) of the source.

Differences from the public code (tokensurgeon's ``batch_omp``, read for understanding only), as options:

* ``selection``: tokensurgeon scores anchors by the raw inner product ``|<r, d_j>|`` (default);
  ``"normalized"`` divides by ``||d_j||`` — the textbook OMP choice on an unnormalized dictionary.
* tokensurgeon always takes exactly ``k`` anchors; here a token stops early when its residual is
  (numerically) zero (``||r|| <= 1e-6 ||x||``) — the same approximation with fewer, non-degenerate
  terms — or when fewer than ``k`` anchors exist.
* tokensurgeon runs OMP a second time on the donor's *output* embeddings for an untied LM head; the
  harness applies one mapping to every matrix (METHODS.md "Output side": same weights unless a
  method says otherwise), so an untied head gets the input side's coefficients.
* ``k`` defaults to tokensurgeon's command-line default, 8. The paper's own ``k`` was not checked
  (its text was not available here).

Cost: ``k`` passes of ``|A| x |O| x d'`` float32 products (selection) plus a float64 least-squares
solve of at most ``k`` columns per token (normal equations, Cholesky), in chunks of ``chunk_rows``
tokens; memory ``chunk_rows x |O|`` floats.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from harness import progress
from harness import vocab as _canon
from harness.protocols import InitResult, Need, TransferInputs
from harness.registry import register_method
from methods._anchors import anchor_mapping, helper_vectors, split_tokens
from methods.focus import Focus, FocusConfig

__all__ = ["OmpConfig", "Omp", "omp_select"]

AUX_FIELDS = ("aux_model_path", "aux_dim", "aux_epochs", "aux_min_count", "aux_model", "aux_neg", "aux_minn", "aux_maxn",
              "aux_bucket", "aux_threads", "aux_seed", "aux_token_format", "extension_aux")
"""Fields shared with :class:`~methods.focus.FocusConfig` (same names, meanings and defaults): the
donor fastText is FOCUS's auxiliary fastText."""
GRAM_PIVOT_TOL = 1e-8
"""A least-squares solve whose Gram matrix has a Cholesky pivot below this share of its largest
diagonal entry (condition number beyond ~1e8) is redone by ``lstsq`` (see :func:`_least_squares`)."""
RESIDUAL_TOL = 1e-6
"""A token stops picking anchors once ``||r|| <= RESIDUAL_TOL * ||x||``."""


@dataclass(frozen=True)
class OmpConfig:
    """Configuration of ``omp``."""

    k: int = 8
    """Most anchors per new token (sparsity; tokensurgeon's default ``--k 8``)."""

    donor: Literal["fasttext", "helper"] = "fasttext"
    """Donor space: FOCUS's token-level fastText in the target vocabulary (trained on the target corpus),
    or the input embeddings of ``inputs.helper_model`` (a model trained in the target vocabulary)."""

    selection: Literal["inner-product", "normalized"] = "inner-product"
    """Anchor choice per step: largest ``|<residual, donor[o]>|`` (tokensurgeon), or divided by ``||donor[o]||``."""

    fuzzy: bool = False
    """Also use fuzzy overlap matches (symbolic tokens, case and word start ignored) as anchors and copies."""

    chunk_rows: int = 1024
    """New tokens solved at once (memory ~ chunk_rows x anchors x 4 bytes)."""

    aux_model_path: str | None = None
    """As FOCUS: a trained token-level fastText ``.bin`` instead of training one (``donor: fasttext``)."""
    aux_dim: int = 300
    """As FOCUS: fastText dimension (paper 300)."""
    aux_epochs: int = 3
    """As FOCUS: fastText epochs."""
    aux_min_count: int = 10
    """As FOCUS: tokens seen fewer times have no donor vector (random rows)."""
    aux_model: Literal["skipgram", "cbow"] = "skipgram"
    """As FOCUS: fastText model."""
    aux_neg: int = 5
    """As FOCUS: negative samples."""
    aux_minn: int = 3
    """As FOCUS: shortest character n-gram."""
    aux_maxn: int = 6
    """As FOCUS: longest character n-gram."""
    aux_bucket: int = 2_000_000
    """As FOCUS: n-gram hash buckets."""
    aux_threads: int = 1
    """As FOCUS: fastText threads (1 is reproducible)."""
    aux_seed: int | None = None
    """As FOCUS: fastText seed; ``None`` draws it from the trial's generator. Fix it (and the other ``aux_*``
    settings) to FOCUS's to make both methods read one cached fastText model."""
    aux_token_format: Literal["string", "id", "raw"] = "string"
    """As FOCUS: how tokens are written for fastText."""
    extension_aux: Literal["language", "extended"] = "language"
    """As FOCUS: extension mode trains the donor fastText with the language-specific tokenizer (anchors: original
    tokens in its vocabulary) or with the extended tokenizer."""

    def __post_init__(self) -> None:
        for name in ("k", "chunk_rows"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"OmpConfig.{name} must be an integer >= 1, got {v!r}")
        if self.donor not in ("fasttext", "helper"):
            raise ValueError(f"OmpConfig.donor must be 'fasttext' or 'helper', got {self.donor!r}")
        if self.selection not in ("inner-product", "normalized"):
            raise ValueError(f"OmpConfig.selection must be 'inner-product' or 'normalized', got {self.selection!r}")
        if not isinstance(self.fuzzy, bool):
            raise ValueError(f"OmpConfig.fuzzy must be a bool, got {self.fuzzy!r}")
        try:
            self.focus_config()  # validates the aux_* fields with FOCUS's own checks
        except ValueError as e:
            raise ValueError(str(e).replace("FocusConfig", "OmpConfig")) from None

    def focus_config(self) -> FocusConfig:
        """The FOCUS configuration whose auxiliary fastText is this method's donor space."""
        return FocusConfig(**{f: getattr(self, f) for f in AUX_FIELDS})


# ----------------------------------------------------------------------------------------------
# Pure core


def omp_select(targets: np.ndarray, atoms: np.ndarray, k: int, *, selection: str = "inner-product",
               chunk_rows: int = 1024) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Batched orthogonal matching pursuit: at most ``k`` atoms and least-squares coefficients per target.

    Args:
        targets: ``n x d`` vectors to approximate.
        atoms: ``m x d`` dictionary (the anchors' donor vectors), ``m >= 1``.
        k: most atoms per target (clipped to ``m``).
        selection: ``"inner-product"`` (largest ``|<r, a_j>|``) or ``"normalized"`` (divided by ``||a_j||``).
        chunk_rows: targets solved at once.

    Returns:
        ``(indices n x k int64, coefficients n x k float64, used n int64)``: row ``i`` uses its first
        ``used[i]`` entries (the rest are ``-1`` / 0), in the order picked.

    Example:
        >>> idx, coef, used = omp_select(np.array([[2.0, 1.0]]), np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), 2)
        >>> idx.tolist(), np.round(coef, 6).tolist(), used.tolist()
        ([[2, 0]], [[1.0, 1.0]], [2])
    """
    n, d = targets.shape
    m = atoms.shape[0]
    if m == 0:
        raise ValueError("omp_select needs at least one atom")
    kk = min(int(k), m)
    D64 = torch.as_tensor(np.asarray(atoms, dtype=np.float64))
    Dt = D64.to(torch.float32).T.contiguous()
    norms = torch.linalg.vector_norm(D64, dim=1).to(torch.float32)
    usable = norms > 0  # a zero atom can never reduce the residual
    scale = torch.where(usable, 1.0 / norms.clamp(min=1e-30), torch.zeros_like(norms)) if selection == "normalized" else None
    idx = np.full((n, kk), -1, dtype=np.int64)
    coef = np.zeros((n, kk), dtype=np.float64)
    used = np.zeros(n, dtype=np.int64)
    X_all = torch.as_tensor(np.asarray(targets, dtype=np.float64))
    bar = progress.counter(f"orthogonal matching pursuit, k={kk} over {m:,} anchors (new tokens)", n)
    with torch.no_grad():
        for a in range(0, n, chunk_rows):
            X = X_all[a : a + chunk_rows]
            B = X.shape[0]
            r = X.clone()
            picked = torch.zeros(B, m, dtype=torch.bool)
            S = torch.full((B, kk), -1, dtype=torch.long)
            C = torch.zeros(B, kk, dtype=torch.float64)
            active = torch.linalg.vector_norm(X, dim=1) > 0
            tol = RESIDUAL_TOL * torch.linalg.vector_norm(X, dim=1)
            shown = 0  # the chunk's tokens shown done: a share per pursuit step (a chunk can take seconds)
            for t in range(kk):
                bar.update(B * t // kk - shown)
                shown = B * t // kk
                rows = torch.nonzero(active).flatten()
                if rows.numel() == 0:
                    break
                corr = (r[rows].to(torch.float32) @ Dt).abs_()
                if scale is not None:
                    corr *= scale
                corr[picked[rows] | ~usable] = -1.0
                best = corr.argmax(dim=1)
                ok = corr.gather(1, best[:, None]).squeeze(1) > 0  # an atom orthogonal to r reduces nothing
                rows, best = rows[ok], best[ok]
                if rows.numel() == 0:
                    break
                S[rows, t] = best
                picked[rows, best] = True
                A = D64[S[rows, : t + 1]]  # (b, t+1, d)
                sol = _least_squares(A, X[rows])  # (b, t+1)
                C[rows, : t + 1] = sol
                r[rows] = X[rows] - (sol.unsqueeze(1) @ A).squeeze(1)
                done = torch.linalg.vector_norm(r[rows], dim=1) <= tol[rows]
                stopped = torch.ones(B, dtype=torch.bool)
                stopped[rows] = done
                active &= ~stopped
            counts = (S >= 0).sum(1)
            idx[a : a + B], coef[a : a + B], used[a : a + B] = S.numpy(), C.numpy(), counts.numpy()
            bar.update(B - shown)
    bar.close()
    return idx, coef, used


def _least_squares(A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``argmin_c ||x - c @ A||`` per batch row (``A``: ``b x t x d``, ``x``: ``b x d``), float64.

    Normal equations through a batched Cholesky factorization of the ``t x t`` Gram matrices (a
    batched QR/``lstsq`` of ``d x t`` matrices costs ~100x more on CPU); rows whose Gram matrix is
    singular or ill-conditioned (an atom in or near the span of the others: a pivot below
    ``GRAM_PIVOT_TOL`` of the largest diagonal entry, where the normal equations would lose more than
    ~8 digits) are solved by ``lstsq`` (SVD driver ``gelsd``), which gives the minimum-norm solution.
    """
    G = A @ A.transpose(1, 2)
    rhs = (A @ x.unsqueeze(-1))
    L, info = torch.linalg.cholesky_ex(G)
    sol = torch.cholesky_solve(rhs, L)
    pivots = torch.diagonal(L, dim1=1, dim2=2) ** 2
    bad = (info != 0) | (pivots.min(dim=1).values <= GRAM_PIVOT_TOL * torch.diagonal(G, dim1=1, dim2=2).max(dim=1).values)
    if bool(bad.any()):
        # gelsd (SVD): LAPACK's default gelsy returned one of two answers at random on an exactly
        # rank-deficient matrix here (torch 2.13 CPU), one of them not even a least-squares solution
        sol[bad] = torch.linalg.lstsq(A[bad].transpose(1, 2).contiguous(), x[bad].unsqueeze(-1), driver="gelsd").solution
    return sol.squeeze(-1)


# ----------------------------------------------------------------------------------------------
# The method


@register_method(
    "omp", config=OmpConfig,
    description="copy overlap; new rows = OMP's sparse least-squares mix of <= k anchors in a donor space (tokensurgeon)",
)
class Omp:
    """Orthogonal matching pursuit over anchor tokens (see the module docstring).

    Example:
        >>> from harness.registry import get
        >>> get("method", "omp").make({"k": 4, "donor": "helper"}).config.k
        4
    """

    combines = True
    """New tokens are combinations of anchors: an all-fallback result is flagged (harness.run.sanity)."""
    convex = False
    """Coefficients are least-squares solutions: not normalized, possibly negative."""
    needs = (
        Need(("target_corpus", "aux_model_path"), "text to train the donor space, FOCUS's token-level fastText, on "
             "(or a trained one)", (("donor", "fasttext"),)),
        Need(("helper_model",), "a model trained in the target vocabulary: its embeddings are the donor space",
             (("donor", "helper"),)),
    )
    """What OMP reads besides the tokenizers and source embeddings: ``tokxfer init`` reads it, and the harness
    pretrains a ``world:`` helper model only for trials that need it (``donor: helper``)."""

    def __init__(self, config: OmpConfig) -> None:
        self.config = config

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Copy the overlap and approximate every other token by OMP over the anchors in the donor space.

        ``rng`` draws the fastText seed (``donor: fasttext`` with ``aux_seed: null``), as FOCUS does.
        """
        cfg = self.config
        t_start = time.perf_counter()
        src_tok, tgt_tok = inputs.source_tokenizer, inputs.target_tokenizer
        n_source = int(inputs.source_embeddings.shape[0])
        n_target = _canon.vocab_size(tgt_tok)
        aux_seed = int(rng.integers(0, 2**31 - 1)) if cfg.aux_seed is None else int(cfg.aux_seed)
        ov = _canon.compute_overlap(src_tok, tgt_tok, fuzzy=cfg.fuzzy, n_source=n_source)
        pairs = ov.pairs(fuzzy=cfg.fuzzy)

        t0 = time.perf_counter()
        donor, has, donor_info = self._donor(inputs, n_target, aux_seed)
        t_donor = time.perf_counter() - t0
        specials = _canon.special_ids(tgt_tok)
        has = has & (np.linalg.norm(donor, axis=1) > 0)
        has[[s for s in specials if s < n_target]] = False
        anchors, new, solve = split_tokens(pairs, has, specials, n_target)

        t0 = time.perf_counter()
        idx, coef, used = omp_select(donor[solve], donor[anchors[:, 0]], cfg.k, selection=cfg.selection,
                                     chunk_rows=cfg.chunk_rows) if len(solve) else (
            np.zeros((0, 1), np.int64), np.zeros((0, 1)), np.zeros(0, np.int64))
        t_omp = time.perf_counter() - t0
        keep = np.arange(idx.shape[1])[None, :] < used[:, None]  # row-major: entries in token order
        mapping = anchor_mapping(n_target, n_source, specials=ov.specials, copied=pairs, targets=solve[used > 0],
                                 indptr=np.concatenate([[0], np.cumsum(used[used > 0])]),
                                 sources=anchors[idx[keep], 1], weights=coef[keep])
        residual = _relative_residuals(donor[solve], donor[anchors[:, 0]] if len(anchors) else donor[:0], idx, coef, used)
        reasons = self._random_reasons(mapping, has, specials, len(pairs), len(anchors), donor_info)
        info = {
            "overlap": {**ov.report(), "fuzzy_matching": cfg.fuzzy, "used": int(len(pairs))},
            "donor": donor_info,
            "omp": {
                "k": cfg.k, "selection": cfg.selection, "anchors": int(len(anchors)), "new_tokens": int(len(new)),
                "combined": int(np.sum(used > 0)), "fallback_no_donor_vector": int(np.sum(~has[new])),
                "support_mean": round(float(used[used > 0].mean()), 3) if np.any(used > 0) else None,
                "relative_residual_median": round(float(np.median(residual)), 4) if len(residual) else None,
                "max_abs_coefficient": round(float(np.abs(coef[keep]).max()), 4) if keep.any() else None,
            },
            "timings": {"donor_s": round(t_donor, 3), "omp_s": round(t_omp, 3),
                        "total_s": round(time.perf_counter() - t_start, 3)},
        }
        if "nondeterministic" in donor_info:
            info["nondeterministic"] = donor_info.pop("nondeterministic")
        return InitResult(mapping=mapping, tokenizer=tgt_tok, info=info, random_reasons=reasons)

    def _donor(self, inputs: TransferInputs, n_target: int, seed: int) -> tuple[np.ndarray, np.ndarray, dict]:
        """Donor vectors for every target id, the has-vector mask, and how they were obtained."""
        cfg = self.config
        if cfg.donor == "helper":
            if inputs.helper_model is None:
                raise ValueError("omp with donor=helper needs inputs.helper_model: a model trained in the target "
                                 "vocabulary (or use donor=fasttext)")
            vecs, has, info = helper_vectors(inputs.helper_model, inputs.target_tokenizer, n_target)
            return vecs, has, {**info, "kind": "helper"}
        if inputs.target_corpus is None and cfg.aux_model_path is None:
            raise ValueError("omp with donor=fasttext needs inputs.target_corpus to train the donor fastText "
                             "(or aux_model_path, or donor=helper with inputs.helper_model)")
        # FOCUS's auxiliary vectors, exactly (extension mode included): one implementation, one cache
        focus = Focus(dataclasses.replace(self.config.focus_config(), aux_seed=seed))
        vecs, has, info = focus._aux_vectors(inputs, n_target, seed)
        return vecs, has, {**info, "kind": "fasttext"}

    def _random_reasons(self, mapping: Any, has: np.ndarray, specials: set[int], n_pairs: int, n_anchors: int,
                        donor_info: dict) -> dict:
        cfg = self.config
        fb = np.array([t for t in mapping.fallback_ids().tolist() if t not in specials], dtype=np.int64)
        if cfg.donor == "helper":
            no_vec = "not in the helper model's vocabulary: no donor vector to approximate"
        else:
            no_vec = (f"no donor vector (seen fewer than aux_min_count={cfg.aux_min_count} times in the target "
                      "corpus, so the donor fastText has none)")
        no_anchor = ("empty overlap: no anchors to combine" if n_pairs == 0 else
                     "no overlap token has a donor vector: no anchors to combine")
        groups = {no_vec: fb[~has[fb]] if len(fb) else fb,
                  no_anchor if n_anchors == 0 else "no anchor correlates with its donor vector": fb[has[fb]] if len(fb) else fb}
        return {why: ids.tolist() for why, ids in groups.items() if len(ids)}


def _relative_residuals(x: np.ndarray, atoms: np.ndarray, idx: np.ndarray, coef: np.ndarray, used: np.ndarray) -> np.ndarray:
    """``||x - sum_j c_j atoms[j]|| / ||x||`` per solved token (for the record)."""
    if len(x) == 0 or len(atoms) == 0:
        return np.zeros(0)
    out = np.full(len(x), np.nan)
    for a in range(0, len(x), 4096):  # n x k x d at once would be gigabytes for 50k tokens
        i, c = idx[a : a + 4096], coef[a : a + 4096]
        approx = np.einsum("nk,nkd->nd", np.where(i >= 0, c, 0.0), atoms[np.where(i >= 0, i, 0)].astype(np.float64))
        out[a : a + 4096] = np.linalg.norm(x[a : a + 4096] - approx, axis=1) / np.maximum(
            np.linalg.norm(x[a : a + 4096], axis=1), 1e-30)
    return out[used > 0]
