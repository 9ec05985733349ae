"""Tik-to-Tok's input side: the parallel corpus read and every word tokenized in context.

Step 1 of :mod:`methods.tiktotok` before the aligner: both sides of ``inputs.parallel_corpus``
(JSON lines ``{"source": …, "target": …}``) are split into words (runs of word characters, single
punctuation marks; :func:`methods._align.word_spans`) and each word gets the token ids its own
tokenizer produced for it in context.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness import progress as _progress
from methods import _align

__all__ = ["read_parallel_corpus", "words_with_tokens"]


def read_parallel_corpus(path: Path | None, *, limit: int | None = None) -> list[tuple[str, str]]:
    """Read JSON lines ``{"source": …, "target": …}``; blank lines are skipped.

    Raises:
        ValueError: when ``path`` is ``None`` (naming ``parallel_corpus``), when a line is not such
            an object, or when the file holds no sentence pair.
        FileNotFoundError: when the file does not exist.

    Example:
        >>> read_parallel_corpus(None)
        Traceback (most recent call last):
        ValueError: tiktotok needs inputs.parallel_corpus (JSON lines {"source": ..., "target": ...}), but it is None
    """
    if path is None:
        raise ValueError(
            'tiktotok needs inputs.parallel_corpus (JSON lines {"source": ..., "target": ...}), but it is None'
        )
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"inputs.parallel_corpus: file not found: {path}")
    pairs: list[tuple[str, str]] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"inputs.parallel_corpus {path}:{lineno}: not valid JSON ({e.msg})") from None
            if (
                not isinstance(obj, dict)
                or not isinstance(obj.get("source"), str)
                or not isinstance(obj.get("target"), str)
            ):
                raise ValueError(
                    f'inputs.parallel_corpus {path}:{lineno}: expected an object with string fields "source" and "target"'
                )
            pairs.append((obj["source"], obj["target"]))
            if limit is not None and len(pairs) >= limit:
                break
    if not pairs:
        raise ValueError(f"inputs.parallel_corpus {path}: contains no sentence pairs")
    return pairs


def words_with_tokens(
    tok: Any, texts: Sequence[str], *, batch_size: int = 1000
) -> list[list[tuple[str, tuple[int, ...]]]]:
    """Split each text into words and give each word the token ids the tokenizer produced for it.

    Each text is tokenized once, in context, with character offsets; a token belongs to the first
    word that ends after the token starts (so a bare marker token joins the following word). Words
    that received no token are dropped.

    Args:
        tok: a fast tokenizer (offsets are required).
        texts: the sentences.
        batch_size: sentences per tokenizer call.

    Returns:
        Per text, ``(word, token ids)`` pairs in order.
    """
    out: list[list[tuple[str, tuple[int, ...]]]] = []
    bar = _progress.counter("words tokenized in context (sentences)", len(texts))
    for a in range(0, len(texts), batch_size):
        chunk = list(texts[a : a + batch_size])
        try:
            enc = tok(chunk, add_special_tokens=False, return_offsets_mapping=True)
        except NotImplementedError as e:  # slow tokenizers have no offsets
            raise ValueError(
                f"tiktotok needs a fast tokenizer (character offsets); {type(tok).__name__} has none: {e}"
            ) from None
        for text, ids, offsets in zip(chunk, enc["input_ids"], enc["offset_mapping"]):
            spans = _align.word_spans(text)
            ends = [b for _, b in spans]
            groups: list[list[int]] = [[] for _ in spans]
            for tid, (s, _e) in zip(ids, offsets):
                w = bisect.bisect_right(ends, s)
                if w < len(spans):
                    groups[w].append(int(tid))
            out.append([(text[sa:sb], tuple(g)) for (sa, sb), g in zip(spans, groups) if g])
        bar.update(len(chunk))
    bar.close()
    return out
