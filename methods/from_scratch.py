"""``from-scratch`` ("FullRand"): every parameter random with the source architecture."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.protocols import InitResult, TransferInputs
from harness.registry import register_method
from methods._canon import assemble_mapping, compute_overlap, vocab_size


@dataclass(frozen=True)
class FromScratchConfig:
    """``from-scratch`` has no options."""


@register_method(
    "from-scratch", config=FromScratchConfig, description="all parameters random (FullRand); source weights unused"
)
class FromScratchInit:
    """All embedding rows FALLBACK — specials too, since nothing pretrained may leak in — and
    ``directives={"reinitialize_body": True}`` so the harness re-initializes the transformer body.

    The overlap is computed only to be reported.
    """

    def __init__(self, config: FromScratchConfig) -> None:
        self.config = config

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Return an all-FALLBACK mapping over the target vocabulary."""
        n_source = int(inputs.source_embeddings.shape[0])
        ov = compute_overlap(inputs.source_tokenizer, inputs.target_tokenizer, n_source=n_source)
        mapping = assemble_mapping(vocab_size(inputs.target_tokenizer), n_source)
        return InitResult(mapping, inputs.target_tokenizer, {"overlap": ov.report()}, {"reinitialize_body": True})
