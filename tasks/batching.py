"""Batches of the shared loop (:mod:`tasks.loop`): padding, feature lengths, and the order of an epoch.

:func:`epoch_batches` is the data order of every fine-tuning run (FOCUS: consecutive slices of a
seeded permutation; with ``batching: length``, the permutation regrouped by length);
:func:`length_batches` orders evaluation batches by length. :mod:`tasks.loop` re-exports them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from harness.seeding import torch_generator

IGNORE_INDEX = -100


def pad_collate(pad_token_id: int) -> Callable[[list[dict]], dict[str, torch.Tensor]]:
    """A collate function that right-pads list-valued keys and stacks scalar keys.

    Padding values: ``input_ids`` → ``pad_token_id``, ``labels`` → -100, everything else → 0.

    Example:
        >>> b = pad_collate(1)([{"input_ids": [5, 6], "labels": 2}, {"input_ids": [7], "labels": 0}])
        >>> b["input_ids"].tolist(), b["labels"].tolist()
        ([[5, 6], [7, 1]], [2, 0])
    """

    def collate(features: list[dict]) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for key in features[0]:
            values = [f[key] for f in features]
            if isinstance(values[0], (list, tuple)):
                pad = pad_token_id if key == "input_ids" else IGNORE_INDEX if key == "labels" else 0
                width = max(len(v) for v in values)
                t = torch.full((len(values), width), pad, dtype=torch.long)
                for i, v in enumerate(values):
                    t[i, : len(v)] = torch.as_tensor(v, dtype=torch.long)
                out[key] = t
            else:
                out[key] = torch.as_tensor(values)
        return out

    return collate


def feature_lengths(features: Sequence[dict]) -> list[int]:
    """Tokens per feature (its ``input_ids``), what :attr:`TrainConfig.batching` ``length`` sorts by.

    Raises:
        KeyError: a feature without ``input_ids``.
    """
    try:
        return [len(f["input_ids"]) for f in features]
    except KeyError:
        raise KeyError("batching 'length' needs features with input_ids") from None


def length_batches(lengths: Sequence[int], batch_size: int) -> list[list[int]]:
    """Indices of ``lengths`` in batches of similar length: sorted by length (ties by index), cut every ``batch_size``.

    Evaluation batches built this way carry little padding. A per-example score does not depend
    on which batch the example is in (padded positions are masked out); only float rounding of
    the padded attention products may differ in the last bits.

    Example:
        >>> length_batches([5, 1, 3, 1], 2)
        [[1, 3], [2, 0]]
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    return [order[s : s + batch_size] for s in range(0, len(order), batch_size)]


def epoch_batches(
    n: int, batch_size: int, seed: int, epoch: int, rng_path: tuple[str, ...] = ("task",),
    lengths: Sequence[int] | None = None, pool: int = 50,
) -> list[torch.Tensor]:
    """The batches (index tensors) of one epoch: consecutive slices of a seeded permutation, or with
    ``lengths`` the length-grouped batches of :attr:`TrainConfig.batching` (same count, every batch
    full but the last pool's last).

    Example:
        >>> [b.tolist() for b in epoch_batches(6, 2, 1, 1, lengths=[9, 1, 8, 2, 7, 3], pool=3)]
        [[1, 3], [2, 0], [5, 4]]
    """
    g = torch_generator(seed, *rng_path, "data-order", str(epoch))
    order = torch.randperm(n, generator=g)
    if lengths is None:
        return list(order.split(batch_size))
    batches: list[torch.Tensor] = []
    for chunk in order.split(batch_size * pool):
        idx = sorted(chunk.tolist(), key=lengths.__getitem__)  # stable: ties keep the permutation order
        batches += [torch.tensor(idx[s : s + batch_size]) for s in range(0, len(idx), batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]
