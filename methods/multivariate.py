"""``multivariate`` (Hewitt 2021, "Initializing new word embeddings for pretrained language models").

Every new row is drawn from N(mu, Sigma), mu and Sigma the mean and covariance (divided by
``|Vs|``) of *all* source rows (METHODS.md, "Newer methods"). New rows are the target tokens
outside the canonical overlap: overlap rows are copied (COPIED), special tokens matched by role
(SPECIAL), the rest are FALLBACK rows that the harness draws with the trial's generator from the
full-covariance normal this method asks for (``InitResult.random_rows``; the sampler is
:mod:`harness.random_rows`). Each matrix uses its own statistics: untied output embeddings are drawn
from *their* mean and covariance, as transformers does for an untied LM head; a vocabulary bias's
new entries are its mean (METHODS.md "Output side"; transformers draws them from
N(mean(b), 1e-9 * std(b)), which equals the mean to float32 precision unless the mean is ~1e-9
times smaller than the std).

Variants (``variant``):

* ``hewitt`` (default, the paper): N(mu, covariance_scale * Sigma) with ``covariance_scale = 1``;
  statistics in float64, accumulated over row chunks (a 250k x d source is never copied whole);
  a singular Sigma (fewer source rows than dimensions, collinear rows) is sampled exactly in its
  range through its eigendecomposition.
* ``transformers``: ``resize_token_embeddings(..., mean_resizing=True)`` of transformers 5
  (``PreTrainedModel._init_added_embeddings_weights_with_mean``): float32 statistics, N(mu, 1e-9 *
  Sigma) when torch's positive-definiteness check of 1e-9 * Sigma passes, every new row exactly mu
  when it fails. In effect every new row is the mean. :meth:`MultivariateConfig.reference` is this
  variant (the public implementation most users get).

Which factorization the input matrix gets (``cholesky``, ``eigh`` or ``mean`` — the transformers
fallback) is recorded in ``info["random_rows"]["factor"]``.

``copy_overlap=False`` draws every non-special row (the full-covariance counterpart of ``random``);
the default copies the overlap (the counterpart of ``overlap``), since "new rows" are those of
tokens the source does not have. In extension mode the harness keeps every original row and only
the added tokens are drawn.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from harness import progress
from harness.protocols import InitResult, RandomRows, TransferInputs
from harness.random_rows import covariance_factor
from harness.registry import register_method
from harness.vocab import assemble_mapping, compute_overlap, special_ids, vocab_size

VARIANTS = ("hewitt", "transformers")
DEFAULT_SCALE = {"hewitt": 1.0, "transformers": 1e-9}
"""The covariance scale of each variant (transformers' ``epsilon = 1e-9``)."""


@dataclass(frozen=True)
class MultivariateConfig:
    """Configuration of ``multivariate``. Defaults follow Hewitt (2021); see :meth:`reference`."""

    variant: Literal["hewitt", "transformers"] = "hewitt"
    """``hewitt``: N(mu, Sigma) in float64, a singular Sigma sampled in its range. ``transformers``:
    ``resize_token_embeddings(mean_resizing=True)``: float32, N(mu, 1e-9 Sigma) if torch's
    positive-definiteness check passes, else every new row mu."""

    covariance_scale: float | None = None
    """Factor on Sigma; ``None`` takes the variant's (hewitt 1.0, transformers 1e-9)."""

    copy_overlap: bool = True
    """Copy the rows of tokens in the canonical overlap and draw only the others (default); ``False``
    draws every non-special row."""

    fuzzy: bool = True
    """With ``copy_overlap``, also copy fuzzy matches (symbolic tokens, case and word start ignored),
    as the ``overlap`` baseline does."""

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"MultivariateConfig.variant must be one of {VARIANTS}, got {self.variant!r}")
        for name in ("copy_overlap", "fuzzy"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"MultivariateConfig.{name} must be a bool, got {getattr(self, name)!r}")
        if self.covariance_scale is not None:
            s = self.covariance_scale
            if isinstance(s, bool) or not isinstance(s, (int, float)) or not (0 < float(s) < float("inf")):
                raise ValueError(f"MultivariateConfig.covariance_scale must be a finite number > 0 or null, got {s!r}")

    @property
    def scale(self) -> float:
        """The covariance scale in effect."""
        return float(DEFAULT_SCALE[self.variant] if self.covariance_scale is None else self.covariance_scale)

    def random_rows(self) -> RandomRows:
        """The distribution the harness draws the new rows from."""
        return RandomRows("full" if self.variant == "hewitt" else "transformers", self.scale)

    @classmethod
    def reference(cls, **overrides: Any) -> MultivariateConfig:
        """transformers' ``resize_token_embeddings(mean_resizing=True)`` (float32, 1e-9 * Sigma, mu if not positive definite).

        Example:
            >>> MultivariateConfig.reference().scale
            1e-09
        """
        return cls(**{"variant": "transformers", **overrides})


@register_method(
    "multivariate", config=MultivariateConfig,
    description="copy overlap; new rows ~ N(mean, covariance) of the source rows (Hewitt 2021; transformers' mean_resizing)",
)
class MultivariateInit:
    """Full-covariance random rows for new tokens (see the module docstring).

    The method only marks rows FALLBACK and names the distribution; the harness draws them with the
    trial's generator (``rng`` is unused here).

    Example:
        >>> from harness.registry import get
        >>> get("method", "multivariate").make({"variant": "transformers"}).config.random_rows()
        RandomRows(distribution='transformers', covariance_scale=1e-09)
    """

    def __init__(self, config: MultivariateConfig) -> None:
        self.config = config

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Return the mapping (specials SPECIAL, overlap COPIED unless ``copy_overlap=False``, the rest FALLBACK)."""
        cfg = self.config
        t0 = time.perf_counter()
        src = torch.as_tensor(inputs.source_embeddings)
        n_source = int(src.shape[0])
        ov = compute_overlap(inputs.source_tokenizer, inputs.target_tokenizer, n_source=n_source)
        copied = ov.pairs(fuzzy=cfg.fuzzy) if cfg.copy_overlap else None
        mapping = assemble_mapping(vocab_size(inputs.target_tokenizer), n_source, special=ov.specials, copied=copied)
        spec = cfg.random_rows()
        t1 = time.perf_counter()
        with progress.step(f"covariance of the source rows ({n_source:,} x {int(src.shape[1])})"):
            factor = covariance_factor(src, spec)  # what the harness will do with the input matrix, for the record
        t2 = time.perf_counter()
        dist = (f"N(mean, {spec.covariance_scale:g} * covariance) of the source rows"
                + (" (transformers' mean_resizing)" if cfg.variant == "transformers" else " (Hewitt 2021)"))
        if factor.how == "mean":
            dist = ("the source mean: 1e-9-scaled covariance failed transformers' positive-definiteness check, "
                    "so every new row is the mean (transformers' mean_resizing fallback)")
        why = (f"not in the source vocabulary: drawn from {dist}" if cfg.copy_overlap
               else f"random by design: every non-special row is drawn from {dist}")
        specials = special_ids(inputs.target_tokenizer)  # a special without a source role: the harness says so
        ids = [t for t in mapping.fallback_ids().tolist() if t not in specials]
        info = {
            "overlap": ov.report(), "copy_overlap": cfg.copy_overlap, "fuzzy_used": cfg.copy_overlap and cfg.fuzzy,
            "random_rows": {"distribution": spec.distribution, "covariance_scale": spec.covariance_scale,
                            "factor": factor.how, "dim": int(src.shape[1]), "source_rows": n_source,
                            "new_rows": len(ids)},
            "timings": {"overlap_s": round(t1 - t0, 3), "covariance_s": round(t2 - t1, 3),
                        "total_s": round(time.perf_counter() - t0, 3)},
        }
        return InitResult(mapping, inputs.target_tokenizer, info, random_reasons={why: ids} if ids else {},
                          random_rows=spec)
