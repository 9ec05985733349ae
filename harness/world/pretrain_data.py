"""Pretraining data of the built-in sources: text lines, token streams, blocks, batch order and MLM masks.

Split out of :mod:`harness.world.pretrain` (which re-exports what its callers use). Every random
draw takes an explicit ``torch.Generator``; nothing here touches the global RNG.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase

from harness.files import text_lines

__all__ = ["batch_indices", "blocks", "language_blocks", "lines", "mask_tokens", "token_stream"]


def lines(path: Path, limit: int | None = None) -> Iterator[str]:
    """The non-blank lines of a world text file, line breaks removed (:func:`harness.files.text_lines`)."""
    return text_lines(path, limit=limit, what="world text file")


def token_stream(tok: PreTrainedTokenizerBase, files: Sequence[Path], chunk_lines: int = 4096) -> torch.Tensor:
    """All non-blank lines, each encoded with the tokenizer's specials (``<s> X </s>``), concatenated."""
    flat: list[int] = []
    for path in files:
        batch: list[str] = []
        for line in lines(path):
            batch.append(line)
            if len(batch) == chunk_lines:
                for ids in tok(batch)["input_ids"]:
                    flat.extend(ids)
                batch = []
        if batch:
            for ids in tok(batch)["input_ids"]:
                flat.extend(ids)
    return torch.tensor(flat, dtype=torch.long)


def blocks(stream: torch.Tensor, max_len: int, what: str) -> torch.Tensor:
    """Cut the stream into ``(n, max_len)`` blocks (remainder dropped), like RoBERTa's FULL-SENTENCES."""
    n = stream.numel() // max_len
    if n == 0:
        raise ValueError(f"the {what} text has only {stream.numel()} tokens, fewer than one block of max_len={max_len}")
    return stream[: n * max_len].view(n, max_len)


def batch_indices(n_blocks: int, batch_size: int, generator: torch.Generator) -> Iterator[torch.Tensor]:
    """Endless batches of block indices: a fresh permutation per epoch, batches may span epochs."""
    buf = torch.zeros(0, dtype=torch.long)
    while True:
        while buf.numel() < batch_size:
            buf = torch.cat([buf, torch.randperm(n_blocks, generator=generator)])
        yield buf[:batch_size]
        buf = buf[batch_size:]


def mask_tokens(
    ids: torch.Tensor,
    *,
    special_ids: torch.Tensor,
    regular_ids: torch.Tensor,
    mask_id: int,
    probability: float,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT/RoBERTa masking with an explicit generator: returns ``(inputs, labels)``.

    ``probability`` of the non-special positions are selected (at least one per batch); of those
    80% become ``mask_id``, 10% a random regular token, 10% stay. Labels are -100 elsewhere.
    """
    is_special = torch.isin(ids, special_ids)
    prob = torch.full(ids.shape, probability)
    prob[is_special] = 0.0
    selected = torch.bernoulli(prob, generator=generator).bool()
    if not selected.any():  # tiny batches: keep the loss defined
        candidates = (~is_special).flatten().nonzero().flatten()
        pick = candidates[torch.randint(candidates.numel(), (1,), generator=generator)]
        selected.view(-1)[pick] = True
    labels = torch.where(selected, ids, torch.full_like(ids, -100))
    inputs = ids.clone()
    to_mask = torch.bernoulli(torch.full(ids.shape, 0.8), generator=generator).bool() & selected
    to_random = torch.bernoulli(torch.full(ids.shape, 0.5), generator=generator).bool() & selected & ~to_mask
    inputs[to_mask] = mask_id
    random_tokens = regular_ids[torch.randint(regular_ids.numel(), ids.shape, generator=generator)]
    inputs[to_random] = random_tokens[to_random]
    return inputs, labels


def language_blocks(
    tok: PreTrainedTokenizerBase, language_files: dict[str, list[Path]], block_len: int
) -> tuple[torch.Tensor, list[str]]:
    """Blocks of ``block_len`` tokens cut from each language's own stream, and each block's language."""
    parts, langs = [], []
    for lang, files in language_files.items():
        b = blocks(token_stream(tok, files), block_len, f"{lang} training")
        parts.append(b)
        langs.extend([lang] * b.shape[0])
    return torch.cat(parts), langs
