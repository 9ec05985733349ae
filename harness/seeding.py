"""Seeding: per-component seeds derived from the trial seed, explicit generators everywhere.

Nothing in tokxfer draws from the global RNGs (``random``, ``numpy.random``, ``torch``'s default
generator) to produce a number that ends up in a record. Components ask for their own generator:

Example:
    >>> a = numpy_rng(1, "init", "focus").normal()
    >>> b = numpy_rng(1, "init", "focus").normal()
    >>> a == b
    True
    >>> derive(1, "init") != derive(1, "task")
    True
"""

from __future__ import annotations

import contextlib
import hashlib
import random

import numpy as np
import torch


def derive(seed: int, *path: str) -> int:
    """A 63-bit seed for the component named by ``path`` under trial seed ``seed``.

    Uses :class:`numpy.random.SeedSequence` with the path hashed to integers, so derived seeds
    are independent across components and stable across processes and platforms.
    """
    key = [int(seed)] + [int.from_bytes(hashlib.sha256(p.encode()).digest()[:8], "little") for p in path]
    return int(np.random.SeedSequence(key).generate_state(2, dtype=np.uint32).astype(np.uint64) @ np.array([1, 2**31], dtype=np.uint64)) & (2**63 - 1)


def numpy_rng(seed: int, *path: str) -> np.random.Generator:
    """A fresh ``numpy.random.Generator`` for a component."""
    return np.random.default_rng(derive(seed, *path))


def torch_generator(seed: int, *path: str, device: str = "cpu") -> torch.Generator:
    """A fresh ``torch.Generator`` for a component."""
    g = torch.Generator(device=device)
    g.manual_seed(derive(seed, *path))
    return g


@contextlib.contextmanager
def seeded_globals(seed: int, *path: str):
    """Seed the global RNGs for code we do not control (HF model construction, dropout).

    Model ``__init__`` in transformers draws from torch's global generator; dropout masks do too.
    We seed it from the derived seed for the duration and restore the previous global state
    afterwards, so the caller's RNG is left as it was.
    """
    s = derive(seed, *path)
    py_state, np_state, torch_state = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    random.seed(s)
    np.random.seed(s % 2**32)
    torch.manual_seed(s)
    try:
        yield s
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
        torch.random.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)
