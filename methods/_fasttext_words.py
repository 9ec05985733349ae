"""Corpus pre-tokenization for token-level fastText, and the fastText word of every token.

:func:`pretokenize` writes each line as whitespace-joined fastText "words", one per token. By default a token's word is its vocabulary string, escaped by
:func:`escape_token` so that tokens containing whitespace, the empty string and fastText's own
``</s>`` stay distinct single words (``token_format="string"``, like the FOCUS reference code,
which keeps fastText's character n-grams meaningful); ``token_format="id"`` writes token ids
instead (no n-gram sharing between unrelated tokens, at the cost of any subword signal);
``token_format="raw"`` writes the vocabulary strings unescaped, exactly as the reference code
(``deepfocus``: ``" ".join(tokenizer.tokenize(line))``) does, so that a model trained by it can be
used as given: a token containing whitespace then splits into several fastText words, a literal
``</s>`` is fastText's line end, and tokens containing a backslash are looked up as they are.

Example:
    >>> escape_token("▁a b"), escape_token(""), escape_token("</s>")
    ('▁a\\\\sb', '\\\\e', '\\\\_</s>')
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np

from harness import progress as _progress

__all__ = ["TokenFormat", "CACHE_VERSION", "escape_token", "fasttext_words", "tokenizer_fingerprint", "file_sha256", "pretokenize",
           "pretokenize_cached"]

TokenFormat = Literal["string", "id", "raw"]

CACHE_VERSION = 1
"""Bumped when the training call or pre-tokenization format changes, invalidating cached models."""

_FASTTEXT_SPACE = {" ": "\\s", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f", "\r": "\\r", "\0": "\\0"}
_CHUNK = 1 << 20


def escape_token(token: str) -> str:
    """Injective map from a token string to a single fastText word.

    fastText splits on ``' ' \\t \\n \\v \\f \\r \\0``, reserves ``</s>`` for line ends and treats
    words starting with ``__label__`` as labels. Backslashes are doubled, those whitespace
    characters become two-character escapes, the empty string becomes ``\\e``, and ``</s>`` /
    ``__label__…`` get a ``\\_`` prefix (which no other escaped string starts with).

    Args:
        token: the token as it appears in the tokenizer's vocabulary.

    Returns:
        A non-empty string without fastText whitespace.

    Example:
        >>> escape_token("a\\\\b")
        'a\\\\\\\\b'
    """
    s = token.replace("\\", "\\\\")
    for ch, esc in _FASTTEXT_SPACE.items():
        if ch in s:
            s = s.replace(ch, esc)
    if not s:
        return "\\e"
    if s == "</s>" or s.startswith("__label__"):
        return "\\_" + s
    return s


def fasttext_words(tokenizer: Any, token_format: TokenFormat = "string") -> list[str]:
    """The fastText word for every token id of ``tokenizer`` (index = token id).

    Args:
        tokenizer: a Hugging Face tokenizer (``len(tokenizer)`` ids, ``convert_ids_to_tokens``).
        token_format: ``"string"`` (escaped vocabulary strings), ``"id"`` (decimal ids) or ``"raw"``
            (vocabulary strings as they are, like the FOCUS reference code).

    Returns:
        A list of ``len(tokenizer)`` words, distinct except with ``"raw"``.
    """
    n = len(tokenizer)
    if token_format == "id":
        return [str(i) for i in range(n)]
    if token_format not in ("string", "raw"):
        raise ValueError(f"token_format must be 'string', 'id' or 'raw', got {token_format!r}")
    toks = tokenizer.convert_ids_to_tokens(list(range(n)))
    if token_format == "raw":
        return [t if t is not None else "" for t in toks]
    words = [escape_token(t if t is not None else "") for t in toks]
    if len(set(words)) != n:  # two ids with one string (rare: duplicated added tokens); keep them apart
        seen: set[str] = set()
        for i, w in enumerate(words):
            if w in seen:
                words[i] = f"\\#{i}"
            seen.add(words[i])
    return words


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """A sha256 identifying a tokenizer's behaviour (its serialized backend, or its vocabulary).

    Args:
        tokenizer: a Hugging Face tokenizer.

    Returns:
        64 hex characters.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        payload = backend.to_str()
    else:
        payload = json.dumps(sorted(tokenizer.get_vocab().items()), ensure_ascii=False)
    extra = json.dumps({"cls": type(tokenizer).__name__, "n": len(tokenizer)}, sort_keys=True)
    return hashlib.sha256((payload + "\0" + extra).encode("utf-8")).hexdigest()


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, streamed in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _batches(path: Path, n: int) -> Iterator[list[str]]:
    batch: list[str] = []
    with open(path, encoding="utf-8", newline="\n") as f:  # split on '\n' only, like fastText
        for line in f:
            line = line.rstrip("\n")
            if line.strip():
                batch.append(line)
                if len(batch) >= n:
                    yield batch
                    batch = []
    if batch:
        yield batch


def _encode_batch(tokenizer: Any, lines: list[str]) -> list[list[int]]:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:  # Rust batch encoding (parallel); no BatchEncoding overhead
        return [e.ids for e in backend.encode_batch(lines, add_special_tokens=False)]
    return tokenizer(lines, add_special_tokens=False)["input_ids"]


def pretokenize(
    corpus: Path,
    tokenizer: Any,
    out: Path,
    *,
    token_format: TokenFormat = "string",
    batch_lines: int = 4096,
) -> Path:
    """Write ``corpus`` tokenized with ``tokenizer`` as whitespace-joined fastText words.

    One output line per non-blank input line (lines are split on ``\\n`` only); special tokens
    are not added. Written to a temporary file next to ``out`` and renamed (atomic).

    Args:
        corpus: UTF-8 text, one sentence/document per line.
        tokenizer: the (target) tokenizer.
        out: output path.
        token_format: see :func:`fasttext_words`.
        batch_lines: lines encoded per batch.

    Returns:
        ``out``.

    Example:
        >>> # pretokenize(Path("de.txt"), target_tok, Path("de.tok.txt"))
    """
    words = np.array(fasttext_words(tokenizer, token_format), dtype=object)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    bar = _progress.counter(f"pre-tokenizing {Path(corpus).name} (MB)", round(Path(corpus).stat().st_size / 1e6, 1))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            for batch in _batches(Path(corpus), batch_lines):
                for ids in _encode_batch(tokenizer, batch):
                    if ids:
                        f.write(" ".join(words[np.asarray(ids, dtype=np.int64)].tolist()))
                        f.write("\n")
                bar.update(sum(len(x.encode("utf-8")) + 1 for x in batch) / 1e6)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        bar.close()
    return out


def pretokenize_cached(
    corpus: Path, tokenizer: Any, cache: Path | None, tmp: Path, *, token_format: TokenFormat = "string"
) -> Path:
    """:func:`pretokenize` ``corpus`` once per (corpus content, tokenizer, format) under ``cache``.

    The result is ``<cache>/fasttext/pretok-<key>.txt`` and is reused by every method and trial
    that pre-tokenizes the same text with the same tokenizer; with ``cache=None`` it is written
    into the scratch folder ``tmp`` instead.
    """
    if cache is None:
        return pretokenize(corpus, tokenizer, Path(tmp) / "pretokenized.txt", token_format=token_format)
    key = hashlib.sha256(
        "\0".join([file_sha256(corpus), tokenizer_fingerprint(tokenizer), token_format, str(CACHE_VERSION)]).encode()
    ).hexdigest()
    out = Path(cache) / "fasttext" / f"pretok-{key[:24]}.txt"
    from harness.cache import build_once

    # two workers pre-tokenizing one corpus do it once: the second waits on the entry's lock, then reads the file
    return build_once(Path(cache), "pretok", key, lambda: out if out.is_file() else None,
                      lambda: pretokenize(corpus, tokenizer, out, token_format=token_format))
