"""The text side of :mod:`tasks.lapt`: training lines, FULL-SENTENCES blocks and the MLM/CLM collate.

Split from ``tasks/lapt.py`` to keep that file readable; ``tasks.lapt`` re-exports these names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from harness.files import text_lines
from harness.seeding import derive
from tasks.mlm_at_init import mask_example


def read_train_lines(path: Path, limit: int | None) -> list[str]:
    """Non-empty stripped lines of a UTF-8 text file (the first ``limit``); errors name the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"lapt: training text file not found: {path}")
    lines = list(text_lines(path, strip=True, limit=limit, what="lapt: training text file"))
    if not lines:
        raise ValueError(f"lapt: {path} contains no non-empty line")
    return lines


def build_blocks(tokenizer: Any, lines: Sequence[str], block_size: int, chunk: int = 2048) -> list[list[int]]:
    """Tokenize ``lines`` (with the tokenizer's specials), concatenate, cut into full blocks.

    Example:
        >>> class Tok:
        ...     def __call__(self, lines, **kw): return {"input_ids": [[0, 5, 2]] * len(lines)}
        >>> build_blocks(Tok(), ["a", "b", "c"], 4)
        [[0, 5, 2, 0], [5, 2, 0, 5]]
    """
    flat: list[int] = []
    for start in range(0, len(lines), chunk):
        for ids in tokenizer(list(lines[start : start + chunk]), verbose=False)["input_ids"]:
            flat.extend(ids)
    return [flat[i : i + block_size] for i in range(0, len(flat) - block_size + 1, block_size)]


class _LaptCollate:
    """Stacks blocks; for MLM applies 80/10/10 masking with a fresh seed per batch.

    The seed of batch ``b`` is ``derive(seed, *path, "mask", rank, b)``: the masks depend only on
    the trial seed and the position of the batch in the run, not on the global RNG.
    """

    def __init__(self, kind: str, tokenizer: Any, *, seed: int, path: tuple[str, ...], mlm_probability: float,
                 prepare: Callable | None = None, languages: Sequence[str] = ()) -> None:  # fmt: skip
        from tasks.loop import dist_info

        self.kind, self.seed, self.path, self.p = kind, seed, path, mlm_probability
        self.rank = dist_info()[0]
        self.calls = 0
        self.prepare, self.languages = prepare, list(languages)
        specials = set(tokenizer.all_special_ids)
        self.special_ids = specials
        self.mask_id = tokenizer.mask_token_id
        if kind == "mlm" and self.mask_id is None:
            raise ValueError("lapt: masked-LM training needs a tokenizer with a mask token")
        self.replacement_ids = torch.tensor(sorted(set(range(len(tokenizer))) - specials), dtype=torch.long)

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        ids = [f["input_ids"] for f in features]
        if self.kind == "mlm":
            pairs = [
                mask_example(
                    x,
                    [int(t in self.special_ids) for t in x],
                    seed=derive(self.seed, *self.path, "mask", str(self.rank), str(self.calls), str(i)),
                    mask_token_id=self.mask_id,
                    replacement_ids=self.replacement_ids,
                    mlm_probability=self.p,
                )
                for i, x in enumerate(ids)
            ]
            inputs = torch.tensor([p[0] for p in pairs], dtype=torch.long)
            labels = torch.tensor([p[1] for p in pairs], dtype=torch.long)
        else:
            inputs = torch.tensor(ids, dtype=torch.long)
            labels = inputs.clone()
        self.calls += 1
        batch = {"input_ids": inputs, "attention_mask": torch.ones_like(inputs), "labels": labels}
        if self.prepare is not None:
            batch = self.prepare(batch, [self.languages[f["lang"]] for f in features])
        return batch
