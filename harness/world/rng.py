"""Random streams of the world generator, one per component, derived from the world seed.

Every component (the source lexicon, each language, each text corpus, each task split) draws from
its own :class:`random.Random`, seeded from ``(seed, *path)``; nothing touches the global RNGs, and
adding a language or a task never changes the draws of another component.

:func:`derive` computes the same numbers as :func:`harness.seeding.derive` (a test pins that). It
is repeated here so that building a world does not import torch (≈2 s on two cores), which would
on its own break the "tiny world in under 2 s" budget.

Example:
    >>> stream(0, "lexicon").random() == stream(0, "lexicon").random()
    True
    >>> derive(0, "a") != derive(0, "b")
    True
"""

from __future__ import annotations

import hashlib
import random

import numpy as np


def derive(seed: int, *path: str) -> int:
    """A 63-bit seed for the component named by ``path`` under world seed ``seed``."""
    key = [int(seed)] + [int.from_bytes(hashlib.sha256(p.encode()).digest()[:8], "little") for p in path]
    state = np.random.SeedSequence(key).generate_state(2, dtype=np.uint32).astype(np.uint64)
    return int(state @ np.array([1, 2**31], dtype=np.uint64)) & (2**63 - 1)


def stream(seed: int, *path: str) -> random.Random:
    """A fresh :class:`random.Random` for the component named by ``path``."""
    return random.Random(derive(seed, *path))


def stable_fraction(*parts: str) -> float:
    """A deterministic number in [0, 1) from strings (for per-item decisions independent of order)."""
    h = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(h[:8], "little") / 2**64
