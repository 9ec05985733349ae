"""``random-mapping`` (Zoph et al. 2016; FOCUS's "Random"): each target token takes a distinct random source row."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.protocols import InitResult, TransferInputs
from harness.registry import register_method
from harness.vocab import assemble_mapping, canonical_vocab, compute_overlap, special_ids, vocab_size


@dataclass(frozen=True)
class RandomMappingConfig:
    """``random-mapping`` has no options."""


def distinct_rows(pool: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` source ids from ``pool``: a random permutation, no reuse while rows remain.

    When ``n > len(pool)`` further permutations follow, so every id is used ``floor`` or
    ``ceil(n / len(pool))`` times.

    Example:
        >>> rows = distinct_rows(np.arange(5), 7, np.random.default_rng(0))
        >>> len(set(rows[:5].tolist())), len(rows)
        (5, 7)
    """
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if len(pool) == 0:
        raise ValueError("random-mapping: the source vocabulary has no non-special rows to draw from")
    reps = -(-n // len(pool))
    return np.concatenate([rng.permutation(pool) for _ in range(reps)])[:n].astype(np.int64)


@register_method(
    "random-mapping",
    config=RandomMappingConfig,
    description="each target token copies a distinct, randomly chosen source row",
)
class RandomMappingInit:
    """Random mapping: a random permutation of the non-special source rows, one per target token.

    Special tokens are matched by role (SPECIAL); every other target token (in id order) is COPIED
    from the next id of a permutation of the non-special source ids drawn from ``rng``. Rows are
    reused only after all have been used once (a new permutation). Target specials without a source
    counterpart are FALLBACK.
    """

    uninformed = True
    """A control: its rows carry no information about the target tokens, so a loss at init at the
    uniform guess is expected and not flagged (harness.run.sanity)."""

    def __init__(self, config: RandomMappingConfig) -> None:
        self.config = config

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Return the mapping (specials SPECIAL, all other target tokens COPIED from random rows)."""
        src, tgt = inputs.source_tokenizer, inputs.target_tokenizer
        n_source = int(inputs.source_embeddings.shape[0])
        ov = compute_overlap(src, tgt, n_source=n_source)
        s_special = special_ids(src)
        pool = np.array(
            sorted(i for i in set(src.get_vocab().values()) if i < n_source and i not in s_special), dtype=np.int64
        )
        targets = np.array([t for t, c in enumerate(canonical_vocab(tgt)) if c is not None], dtype=np.int64)
        rows = distinct_rows(pool, len(targets), rng)
        copied = np.stack([targets, rows], axis=1) if len(targets) else np.zeros((0, 2), dtype=np.int64)
        mapping = assemble_mapping(vocab_size(tgt), n_source, special=ov.specials, copied=copied)
        info = {"overlap": ov.report(), "pool_size": int(len(pool)), "reused_rows": bool(len(targets) > len(pool))}
        return InitResult(mapping, tgt, info)
