"""Tokenizer efficiency on evaluation text: tokens per word and bytes per token, target vs source.

The reason users change tokenizers at all is a shorter, less fragmented encoding of their language,
so every record that has a source tokenizer can carry these numbers beside its task metrics. One
function, :func:`tokenizer_efficiency`, computes them from the text a task evaluates on; a task (or
the runner, for every trial) calls it with the trial's tokenizer and the source model's.

Definitions (per text, without special tokens; summed over the texts, so the values are
token-weighted ratios, and each comes with per-example rows for :mod:`harness.examples`):

* ``tokens_per_word`` = Σ tokens / Σ words (words: whitespace-separated; a language written
  without spaces gets large values, which is why the lane's languages are spaced);
* ``bytes_per_token`` = Σ UTF-8 bytes / Σ tokens (whitespace-separated text bytes, spaces excluded);
* with a source tokenizer also ``source_tokens_per_word``, ``source_bytes_per_token`` and
  ``token_ratio`` = Σ target tokens / Σ source tokens (below 1: the target tokenizer is shorter).

Example:
    >>> class Chars:  # a tokenizer with one token per character
    ...     def __call__(self, texts, add_special_tokens=False):
    ...         return {"input_ids": [list(t.replace(" ", "")) for t in texts]}
    >>> eff = tokenizer_efficiency(["ab cd", "efg"], Chars())
    >>> eff["tokens_per_word"], eff["bytes_per_token"]
    (2.3333333333333335, 1.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.examples import ExampleScores, Scores

__all__ = ["tokenizer_efficiency", "EFFICIENCY_METRICS"]

EFFICIENCY_METRICS = ("tokens_per_word", "bytes_per_token", "source_tokens_per_word", "source_bytes_per_token",
                      "token_ratio")
"""The metric names :func:`tokenizer_efficiency` can return."""


def _counts(tokenizer: Any, texts: Sequence[str], batch: int = 512) -> np.ndarray:
    out = np.zeros(len(texts))
    for i in range(0, len(texts), batch):
        ids = tokenizer(list(texts[i:i + batch]), add_special_tokens=False)["input_ids"]
        out[i:i + batch] = [len(x) for x in ids]
    return out


def tokenizer_efficiency(texts: Sequence[str], tokenizer: Any, source_tokenizer: Any = None) -> Scores:
    """Tokens per word and bytes per token of ``tokenizer`` (and of ``source_tokenizer``) on ``texts``.

    Args:
        texts: the evaluation text, one example per item (empty items count nothing).
        tokenizer: the trial's tokenizer (anything called as ``tok(texts, add_special_tokens=False)``).
        source_tokenizer: the source model's tokenizer, or ``None``.

    Returns:
        :class:`harness.examples.Scores` with the metrics of the module docstring and, for each, the
        per-example rows (``ratio`` reducer) that recompute it.

    Raises:
        ValueError: the texts hold no word.
    """
    texts = list(texts)
    words = np.array([len(t.split()) for t in texts], dtype=np.float64)
    nbytes = np.array([len("".join(t.split()).encode("utf-8")) for t in texts], dtype=np.float64)
    if words.sum() == 0:
        raise ValueError("tokenizer efficiency: the evaluation texts hold no word")
    tokens = _counts(tokenizer, texts)
    values = {"tokens_per_word": tokens.sum() / words.sum(), "bytes_per_token": nbytes.sum() / max(tokens.sum(), 1.0)}
    examples = {"tokens_per_word": ExampleScores("ratio", np.stack([tokens, words], 1)),
                "bytes_per_token": ExampleScores("ratio", np.stack([nbytes, tokens], 1))}
    if source_tokenizer is not None:
        src = _counts(source_tokenizer, texts)
        values.update(source_tokens_per_word=src.sum() / words.sum(), source_bytes_per_token=nbytes.sum() / max(src.sum(), 1.0),
                      token_ratio=tokens.sum() / max(src.sum(), 1.0))
        examples.update(source_tokens_per_word=ExampleScores("ratio", np.stack([src, words], 1)),
                        source_bytes_per_token=ExampleScores("ratio", np.stack([nbytes, src], 1)),
                        token_ratio=ExampleScores("ratio", np.stack([tokens, src], 1)))
    return Scores({k: float(v) for k, v in values.items()}, examples)
