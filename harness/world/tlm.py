"""Translation language modelling (TLM) for the built-in multilingual sources.

XLM (Lample & Conneau 2019; XLM15, the model the XLP paper builds on, was pretrained with MLM and
TLM) concatenates a sentence and its translation, masks tokens on both sides and gives every token
the language of its side, so a masked word can be predicted from its translation: the signal that
puts the languages into one representation space. Here (``PretrainConfig.tlm_fraction``):

- **pairs**: ``World.parallel(lang)`` of each extra language, its first lines — the same lines
  whose target side is that language's MLM text — as (source sentence, translation);
- **sequences**: each side is encoded as a line of the MLM stream is (``<s> X </s>``); the order of
  the two sides is drawn per pair; pairs are packed greedily (in an order drawn once) into sequences
  of at most ``max_len`` positions, counting one more position per side for ``attached``'s language
  token, so every encoding sees the same sequences and the same masks; a pair too long to fit alone
  is dropped (counted in ``pretrain_info.json``);
- **batches**: ``batch_size`` sequences, right-padded, with an attention mask, masked by the MLM rule
  (pads and specials never); every token carries its side's language (``language_ids`` of shape
  ``[batch, length]``, read per token by :class:`harness.language_encoding.LanguageTable`);
  ``attached`` gets its language token after each side's ``<s>``, labelled -100.

Two styles (``PretrainConfig.tlm_style``): ``packed`` (the default) packs pairs greedily into
sequences of ``max_len`` positions and numbers positions from the input ids (RoBERTa's way), so they
run on across the sides; ``xlm`` follows XLM: one pair per sequence, the positions restarting at the
second side (a word and its translation then sit at similar positions, a cue attention can learn
from), and each batch holds as many pairs as fill ``batch_size x max_len`` positions (about the pairs a
packed batch holds). Every random draw comes from explicit generators of the pretraining seed.

Example:
    >>> seqs = pack_pairs(tok, {"near": [("Ka mu.", "Ke mu.")]}, "src", 32, generator)  # doctest: +SKIP
    >>> seqs.languages                                                                 # doctest: +SKIP
    ('src', 'near')
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness import seeding
from harness.world import pretrain_data as pdata
from harness.world import pretrain_model as pmodel
from harness.world.pretrain_config import TLM_STYLES

__all__ = ["TLM_STYLES", "TlmBatches", "TlmSequences", "is_tlm_step", "pack_pairs", "read_pairs", "restarted_positions", "side_spans", "tlm_loss"]


@dataclass(frozen=True)
class TlmSequences:
    """Packed TLM sequences.

    Attributes:
        ids: token ids of each sequence (its sides concatenated).
        sides: per sequence, ``(start, language index)`` of each side, in order.
        languages: language names; a side's language index points here (the source language first).
        pairs: pairs read per extra language.
        dropped: pairs too long for one sequence.
    """

    ids: list[list[int]]
    sides: list[list[tuple[int, int]]]
    languages: tuple[str, ...]
    pairs: dict[str, int]
    dropped: int
    style: str = "packed"
    """``packed`` or ``xlm`` (module docstring)."""

    def info(self) -> dict[str, Any]:
        """Facts for ``pretrain_info.json`` (the style only when it is not the default)."""
        return {"pairs": dict(self.pairs), "sequences": len(self.ids), "dropped_pairs": self.dropped,
                "tokens": sum(len(s) for s in self.ids), **({"style": self.style} if self.style != "packed" else {})}  # fmt: skip

    def rows_per_batch(self, batch_size: int, max_len: int) -> int:
        """Sequences per batch: ``batch_size`` when packed; with ``xlm``, as many single pairs as fill
        ``batch_size x max_len`` positions on average (at least ``batch_size``)."""
        if self.style != "xlm":
            return batch_size
        mean = sum(len(s) + len(sides) for s, sides in zip(self.ids, self.sides, strict=True)) / len(self.ids)
        return max(batch_size, round(batch_size * max_len / mean))



def is_tlm_step(step: int, fraction: float) -> bool:
    """Whether optimizer step ``step`` (1-based) trains on TLM: evenly spaced, ``fraction`` of the steps.

    Example:
        >>> [s for s in range(1, 9) if is_tlm_step(s, 0.5)], [s for s in range(1, 9) if is_tlm_step(s, 0.0)]
        ([2, 4, 6, 8], [])
    """
    return int(step * fraction) > int((step - 1) * fraction)


def read_pairs(path: Path, limit: int) -> list[tuple[str, str]]:
    """The first ``limit`` pairs of a world's ``parallel.jsonl`` (``{"source", "target"}`` per line).

    Raises:
        ValueError: a line that is not such an object, naming the file and line.
    """
    out: list[tuple[str, str]] = []
    for n, line in enumerate(pdata.lines(path, limit=limit), 1):
        try:
            row = json.loads(line)
            out.append((str(row["source"]), str(row["target"])))
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"{path}: line {n} is not a JSON object with 'source' and 'target'") from None
    return out


def _encode(tok: Any, texts: list[str], chunk: int = 4096) -> list[list[int]]:
    out: list[list[int]] = []
    for i in range(0, len(texts), chunk):
        out.extend(tok(texts[i : i + chunk])["input_ids"])
    return out


def pack_pairs(tok: Any, pairs: dict[str, list[tuple[str, str]]], source_language: str, max_len: int,
               generator: torch.Generator, style: str = "packed") -> TlmSequences:  # fmt: skip
    """Pack ``{language: [(source sentence, translation), ...]}`` into TLM sequences (see the module
    docstring; ``style="xlm"``: one pair per sequence, the same order and side flips)."""
    if style not in TLM_STYLES:
        raise ValueError(f"TLM style must be one of {TLM_STYLES}, got {style!r}")
    languages = (source_language, *pairs)
    items: list[tuple[list[int], int, list[int], int]] = []
    for li, rows in enumerate(pairs.values(), 1):
        sources, targets = _encode(tok, [s for s, _ in rows]), _encode(tok, [t for _, t in rows])
        items.extend((a, 0, b, li) for a, b in zip(sources, targets, strict=True))
    order = torch.randperm(len(items), generator=generator).tolist()
    flips = (torch.rand(len(items), generator=generator) < 0.5).tolist()
    ids: list[list[int]] = []
    sides: list[list[tuple[int, int]]] = []
    cur: list[int] = []
    cur_sides: list[tuple[int, int]] = []
    dropped = 0
    for i in order:
        a, la, b, lb = items[i]
        if flips[i]:
            a, la, b, lb = b, lb, a, la
        need = len(a) + len(b) + 2  # one position per side for attached's language token
        if need > max_len:
            dropped += 1
            continue
        if cur and (style == "xlm" or len(cur) + len(cur_sides) + need > max_len):
            ids.append(cur)
            sides.append(cur_sides)
            cur, cur_sides = [], []
        cur_sides.append((len(cur), la))
        cur = cur + a
        cur_sides.append((len(cur), lb))
        cur = cur + b
    if cur:
        ids.append(cur)
        sides.append(cur_sides)
    if not ids:
        raise ValueError(f"no parallel pair fits a TLM sequence of max_len={max_len} positions")
    return TlmSequences(ids, sides, languages, {lang: len(rows) for lang, rows in pairs.items()}, dropped, style)


class TlmBatches:
    """Endless masked TLM batches from :class:`TlmSequences` (order and masks from the pretraining seed)."""

    def __init__(self, seqs: TlmSequences, batch_size: int, seed: int, pad_id: int, mask_kwargs: dict[str, Any],
                 max_len: int | None = None) -> None:  # fmt: skip
        self.seqs = seqs
        self.pad_id = pad_id
        self.mask_kwargs = mask_kwargs
        rows = batch_size if max_len is None else seqs.rows_per_batch(batch_size, max_len)
        self._order: Iterator[torch.Tensor] = pdata.batch_indices(
            len(seqs.ids), rows, seeding.torch_generator(seed, "pretrain", "tlm-data"))
        self._mask_gen = seeding.torch_generator(seed, "pretrain", "tlm-mask")

    def next(self) -> dict[str, Any]:
        """``{input_ids, labels, attention_mask, languages, sides, pad_id}``: masked ids, labels (-100 where
        not masked), the mask, each token's language index, each row's sides and the padding id; with the
        ``xlm`` style also ``position_ids`` (RoBERTa's numbering, ``pad_id + 1`` onwards, restarting at each side)."""
        idx = next(self._order).tolist()
        rows = [self.seqs.ids[i] for i in idx]
        length = max(len(r) for r in rows)
        ids = torch.full((len(rows), length), self.pad_id, dtype=torch.long)
        langs = torch.zeros((len(rows), length), dtype=torch.long)
        attn = torch.zeros((len(rows), length), dtype=torch.long)
        sides = [self.seqs.sides[i] for i in idx]
        for r, (row, row_sides) in enumerate(zip(rows, sides, strict=True)):
            ids[r, : len(row)] = torch.tensor(row, dtype=torch.long)
            attn[r, : len(row)] = 1
            for start, end, lang in side_spans(row_sides, len(row)):
                langs[r, start:end] = lang
        inputs, labels = pdata.mask_tokens(ids, generator=self._mask_gen, **self.mask_kwargs)
        out = {"input_ids": inputs, "labels": labels, "attention_mask": attn, "languages": langs, "sides": sides,
               "pad_id": self.pad_id}
        if self.seqs.style == "xlm":
            out["position_ids"] = restarted_positions(sides, [len(r) for r in rows], length, self.pad_id)
        return out


def restarted_positions(sides: list[list[tuple[int, int]]], lengths: list[int], width: int, pad_id: int) -> torch.Tensor:
    """RoBERTa position ids that restart at every side: ``pad_id + 1 + offset in the side``; pads get ``pad_id``.

    Example:
        >>> restarted_positions([[(0, 0), (3, 1)]], [5], 6, 1).tolist()
        [[2, 3, 4, 2, 3, 1]]
    """
    pos = torch.full((len(sides), width), pad_id, dtype=torch.long)
    for r, (row_sides, n) in enumerate(zip(sides, lengths, strict=True)):
        for start, end, _ in side_spans(row_sides, n):
            pos[r, start:end] = torch.arange(pad_id + 1, pad_id + 1 + end - start)
    return pos


def side_spans(row_sides: list[tuple[int, int]], length: int) -> list[tuple[int, int, int]]:
    """``(start, end, language index)`` of each side of a row of ``length`` tokens (a side ends where the next begins).

    Example:
        >>> side_spans([(0, 0), (3, 2)], 5)
        [(0, 3, 0), (3, 5, 2)]
    """
    ends = [start for start, _ in row_sides[1:]] + [length]
    return [(start, end, lang) for (start, lang), end in zip(row_sides, ends, strict=True)]


def _insert_language_tokens(batch: dict[str, Any], table_ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """``attached``: one position after each side's first token (its ``<s>``), holding the side's
    language; its input id repeats that token's (the hook replaces the embedding), its label is -100."""
    inputs, labels, attn, sides = batch["input_ids"], batch["labels"], batch["attention_mask"], batch["sides"]
    n, length = inputs.shape
    width = length + max(len(s) for s in sides)
    out_ids = torch.full((n, width), int(batch["pad_id"]), dtype=torch.long)
    out_labels = torch.full((n, width), -100, dtype=torch.long)
    out_attn = torch.zeros((n, width), dtype=torch.long)
    out_langs = torch.zeros((n, width), dtype=torch.long)
    positions = batch.get("position_ids")
    out_pos = None if positions is None else torch.full((n, width), int(batch["pad_id"]), dtype=torch.long)
    added = torch.zeros((n, width), dtype=torch.bool)
    for r, row_sides in enumerate(sides):
        cols: list[int] = []
        slots: list[int] = []
        starts = {start for start, _ in row_sides}
        for c in range(length):
            cols.append(c)
            if c in starts:
                slots.append(len(cols))
                cols.append(c)  # the slot repeats the side's <s>
        src = torch.tensor(cols)
        out_ids[r, : len(cols)] = inputs[r, src]
        out_labels[r, : len(cols)] = labels[r, src]
        out_attn[r, : len(cols)] = attn[r, src]
        out_langs[r, : len(cols)] = table_ids[r, src]
        if out_pos is not None:  # the slot takes its <s>'s position; the side's tokens keep theirs
            out_pos[r, : len(cols)] = positions[r, src]
        out_labels[r, slots] = -100
        added[r, slots] = True
    return {"input_ids": out_ids, "labels": out_labels, "attention_mask": out_attn, "language_ids": out_langs,
            "added_positions": added, **({"position_ids": out_pos} if out_pos is not None else {})}  # fmt: skip


def tlm_loss(model: Any, wrapped: Any, batch: dict[str, Any], languages: tuple[str, ...]) -> torch.Tensor:
    """Mean masked-token loss of a TLM batch: the plain masked LM (``wrapped`` None) or the
    language-encoded one, every token with its side's language."""
    positions = batch.get("position_ids")
    if wrapped is None:
        return pmodel.token_loss(model, "mlm", batch["input_ids"], batch["labels"], batch["attention_mask"],
                                 position_ids=positions)  # fmt: skip
    table_ids = wrapped.language_index(list(languages))[batch["languages"]]
    if wrapped.encoding == "attached":
        return wrapped(**_insert_language_tokens(batch, table_ids))
    return wrapped(input_ids=batch["input_ids"], labels=batch["labels"], attention_mask=batch["attention_mask"],
                   language_ids=table_ids, **({"position_ids": positions} if positions is not None else {}))  # fmt: skip
