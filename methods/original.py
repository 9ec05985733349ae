"""``original``: keep the source tokenizer and its embeddings (off-the-shelf, or with LAPT)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.protocols import COPIED, SPECIAL, InitResult, TokenMapping, TransferInputs
from harness.registry import register_method
from harness.vocab import special_ids


@dataclass(frozen=True)
class OriginalConfig:
    """``original`` has no options."""


@register_method("original", config=OriginalConfig, description="keep the source tokenizer: identity mapping")
class OriginalInit:
    """Identity mapping over the source rows; ``tokenizer = inputs.source_tokenizer``.

    ``inputs.target_tokenizer`` is ignored. Special tokens have provenance SPECIAL, all other rows
    (including padding rows beyond the tokenizer's vocabulary) COPIED.
    """

    def __init__(self, config: OriginalConfig) -> None:
        self.config = config

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Return the identity mapping and the source tokenizer."""
        n = int(inputs.source_embeddings.shape[0])
        prov = np.full(n, COPIED, dtype=np.int8)
        specials = [i for i in special_ids(inputs.source_tokenizer) if i < n]
        prov[specials] = SPECIAL
        mapping = TokenMapping(n, n, np.arange(n + 1), np.arange(n), np.ones(n, dtype=np.float32), prov)
        return InitResult(mapping, inputs.source_tokenizer, {"vocabulary": "source", "n_tokens": n})
