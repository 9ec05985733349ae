"""``transinner`` (de Vries & Nissim 2021): random embeddings, then embeddings-only training first."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.protocols import InitResult, TransferInputs
from harness.registry import register_method
from harness.vocab import assemble_mapping, compute_overlap, vocab_size

SCHEDULES = ("fraction", "extra")
INITS = ("random", "random-mapping")


@dataclass(frozen=True)
class TransInnerConfig:
    """Configuration of ``transinner``.

    Two published setups (METHODS.md, Baselines):

    * WECHSEL's (the default): ``schedule="fraction", embeddings_only_fraction=0.1`` — the first
      10% of the LAPT steps train only the embeddings, the remaining 90% train everything.
    * FOCUS's: ``schedule="extra", embeddings_only_fraction=0.2`` — an *extra* 20% of the LAPT
      steps train only the embeddings before the full LAPT run (total 1.2x steps), starting from a
      random *mapping* (``init="random-mapping"``: FOCUS's "Random + LAPT†", footnote 9).
    """

    embeddings_only_fraction: float = 0.1
    """Share of LAPT steps that train only the embeddings (see ``schedule``)."""

    schedule: str = "fraction"
    """``"fraction"``: that share is taken from the LAPT steps (0 < f <= 1); ``"extra"``: that
    share of steps is added before the LAPT steps (f > 0)."""

    copy_specials: bool = True
    """Copy special tokens (matched by role) from the source, as in ``random``."""

    init: str = "random"
    """Starting rows: ``"random"`` (N(mean, std), as ``random``) or ``"random-mapping"`` (each target
    token copies a distinct random source row, as ``random-mapping``)."""

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"TransInnerConfig.schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        f = self.embeddings_only_fraction
        if isinstance(f, bool) or not isinstance(f, (int, float)):
            raise ValueError(f"TransInnerConfig.embeddings_only_fraction must be a number, got {f!r}")
        if self.schedule == "fraction" and not 0 < f <= 1:
            raise ValueError(
                f"TransInnerConfig.embeddings_only_fraction must be in (0, 1] with schedule='fraction', got {f}"
            )
        if self.schedule == "extra" and not f > 0:
            raise ValueError(f"TransInnerConfig.embeddings_only_fraction must be > 0 with schedule='extra', got {f}")
        if self.init not in INITS:
            raise ValueError(f"TransInnerConfig.init must be one of {INITS}, got {self.init!r}")
        if not isinstance(self.copy_specials, bool):
            raise ValueError(f"TransInnerConfig.copy_specials must be a bool, got {self.copy_specials!r}")


@register_method(
    "transinner",
    config=TransInnerConfig,
    description="random embeddings, then train only the embeddings for the first share of LAPT",
)
class TransInnerInit:
    """TransInner: the ``random`` mapping plus a directive for the LAPT stage.

    ``directives = {"embeddings_only_fraction": f, "embeddings_only_schedule": schedule}``; the
    LAPT stage freezes everything except the embeddings for those steps, then unfreezes all.

    Example:
        >>> from harness.registry import get
        >>> get("method", "transinner").make({"schedule": "extra", "embeddings_only_fraction": 0.2}).config.schedule
        'extra'
    """

    def __init__(self, config: TransInnerConfig) -> None:
        self.config = config

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Return the ``random`` (or ``random-mapping``) mapping with the directives."""
        directives = {
            "embeddings_only_fraction": float(self.config.embeddings_only_fraction),
            "embeddings_only_schedule": self.config.schedule,
        }
        if self.config.init == "random-mapping":
            from methods.random_mapping import RandomMappingConfig, RandomMappingInit

            res = RandomMappingInit(RandomMappingConfig()).initialize(inputs, rng)
            return InitResult(res.mapping, res.tokenizer, {**res.info, "init": "random-mapping"}, directives)
        n_source = int(inputs.source_embeddings.shape[0])
        ov = compute_overlap(inputs.source_tokenizer, inputs.target_tokenizer, n_source=n_source)
        special = ov.specials if self.config.copy_specials else None
        mapping = assemble_mapping(vocab_size(inputs.target_tokenizer), n_source, special=special)
        by_design = "random by design (TransInner starts from random embeddings and trains them first)"
        return InitResult(mapping, inputs.target_tokenizer, {"overlap": ov.report()}, directives,
                          random_reasons={by_design: mapping.fallback_ids().tolist()})
