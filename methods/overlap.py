"""``overlap`` ("match old tokens", VIPI Table 4): copy overlapping rows, random for the rest."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.protocols import InitResult, TransferInputs
from harness.registry import register_method
from harness.vocab import assemble_mapping, compute_overlap, special_ids, vocab_size


@dataclass(frozen=True)
class OverlapConfig:
    """Configuration of the ``overlap`` baseline."""

    fuzzy: bool = True
    """Also copy fuzzy matches: symbolic tokens (digits/punctuation/whitespace) matched ignoring
    case and word start, where exact matching failed (FOCUS)."""

    def __post_init__(self) -> None:
        if not isinstance(self.fuzzy, bool):
            raise ValueError(f"OverlapConfig.fuzzy must be a bool, got {self.fuzzy!r}")


@register_method("overlap", config=OverlapConfig, description="copy rows of overlapping tokens; random for the rest")
class OverlapInit:
    """Copy the source row of every target token in the canonical overlap; FALLBACK otherwise.

    ``info["overlap"]`` reports exact and fuzzy sizes whatever ``fuzzy`` says; ``info["fuzzy_used"]``
    says whether the fuzzy pairs were copied.

    Example:
        >>> from harness.registry import get
        >>> get("method", "overlap").make({"fuzzy": False}).config
        OverlapConfig(fuzzy=False)
    """

    def __init__(self, config: OverlapConfig) -> None:
        self.config = config

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Return the mapping: specials SPECIAL, overlap COPIED, the rest FALLBACK."""
        n_source = int(inputs.source_embeddings.shape[0])
        ov = compute_overlap(inputs.source_tokenizer, inputs.target_tokenizer, n_source=n_source)
        mapping = assemble_mapping(
            vocab_size(inputs.target_tokenizer), n_source, special=ov.specials, copied=ov.pairs(fuzzy=self.config.fuzzy)
        )
        outside = "not in the source vocabulary: overlap copies shared tokens and draws the rest at random"
        specials = special_ids(inputs.target_tokenizer)  # a special without a source role: the harness says so
        not_special = [t for t in mapping.fallback_ids().tolist() if t not in specials]
        return InitResult(mapping, inputs.target_tokenizer, {"overlap": ov.report(), "fuzzy_used": self.config.fuzzy},
                          random_reasons={outside: not_special})
