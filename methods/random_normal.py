"""``random``: every non-special row drawn from N(mean, std) of the source matrix (METHODS.md, Baselines)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.protocols import InitResult, TransferInputs
from harness.registry import register_method
from harness.vocab import assemble_mapping, compute_overlap, vocab_size


def _check_bool(obj: Any, name: str) -> None:
    value = getattr(obj, name)
    if not isinstance(value, bool):
        raise ValueError(f"{type(obj).__name__}.{name} must be a bool, got {value!r}")


@dataclass(frozen=True)
class RandomConfig:
    """Configuration of the ``random`` baseline."""

    copy_specials: bool = True
    """Copy special tokens (matched by role) from the source; ``False`` draws them at random too."""

    def __post_init__(self) -> None:
        _check_bool(self, "copy_specials")


def _random_result(inputs: TransferInputs, copy_specials: bool, directives: dict | None = None) -> InitResult:
    """The ``random`` mapping: specials by role (optional), every other row FALLBACK.

    The overlap is still computed, only to be reported (``info["overlap"]``).
    """
    n_source = int(inputs.source_embeddings.shape[0])
    ov = compute_overlap(inputs.source_tokenizer, inputs.target_tokenizer, n_source=n_source)
    mapping = assemble_mapping(
        vocab_size(inputs.target_tokenizer), n_source, special=ov.specials if copy_specials else None
    )
    by_design = "random by design: the method draws every row it does not copy from N(mean, std) of the source rows"
    return InitResult(mapping, inputs.target_tokenizer, {"overlap": ov.report()}, dict(directives or {}),
                      random_reasons={by_design: mapping.fallback_ids().tolist()})


@register_method(
    "random", config=RandomConfig, description="every non-special row ~ N(mean, std) of the source embeddings"
)
class RandomInit:
    """Random initialization: rows drawn per dimension from N(mean(Es), std(Es)) by the harness.

    The method only marks rows FALLBACK; the harness draws them with the trial's generator, so
    ``rng`` is unused here. Special tokens are copied by role unless ``copy_specials=False``.

    Example:
        >>> from harness.registry import get
        >>> get("method", "random").make({"copy_specials": False}).config.copy_specials
        False
    """

    def __init__(self, config: RandomConfig) -> None:
        self.config = config

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Return the mapping (specials SPECIAL, everything else FALLBACK)."""
        return _random_result(inputs, self.config.copy_specials)
