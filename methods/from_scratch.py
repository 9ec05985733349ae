"""``from-scratch`` ("FullRand"): every parameter random with the source architecture."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.protocols import InitResult, TransferInputs
from harness.registry import register_method
from harness.vocab import assemble_mapping, compute_overlap, vocab_size


@dataclass(frozen=True)
class FromScratchConfig:
    """``from-scratch`` has no options."""


@register_method(
    "from-scratch", config=FromScratchConfig, description="all parameters random (FullRand); source weights unused"
)
class FromScratchInit:
    """A model with the source's architecture and nothing pretrained (METHODS.md: FullRand).

    Returns an all-FALLBACK mapping (only its shape matters) and the directive
    ``{"reinitialize_body": True}``: after installing it, the harness re-initializes *every*
    parameter — embeddings, output head and bias included — with the architecture's own
    ``_init_weights`` under the trial seed (:func:`harness.model.surgery.reinitialize_all`). No row is
    drawn from the source's statistics, so the result does not depend on the source weights at
    all, only on its config, the target vocabulary size and the seed. (The directive keeps its
    historical name; it covers the whole model.) In extension mode no original row is kept either.

    The overlap is computed only to be reported.
    """

    def __init__(self, config: FromScratchConfig) -> None:
        self.config = config

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Return an all-FALLBACK mapping over the target vocabulary."""
        n_source = int(inputs.source_embeddings.shape[0])
        ov = compute_overlap(inputs.source_tokenizer, inputs.target_tokenizer, n_source=n_source)
        mapping = assemble_mapping(vocab_size(inputs.target_tokenizer), n_source)
        by_design = "random by design: from-scratch re-initializes every parameter"
        return InitResult(mapping, inputs.target_tokenizer, {"overlap": ov.report()}, {"reinitialize_body": True},
                          random_reasons={by_design: mapping.fallback_ids().tolist()})
