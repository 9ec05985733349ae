"""Vocabulary extension (Wang et al. 2020): add frequent target tokens to the source tokenizer.

The top-N target tokens — by frequency on the target corpus tokenized with the target tokenizer —
that are not in the source vocabulary after canonicalization are merged *into the source
tokenizer's model*, so the extended tokenizer really emits them on text (``add_tokens`` would
instead make them pre-split "added tokens" that break segmentation). Old ids keep their
positions; new tokens take ids ``vocab_size(source), vocab_size(source) + 1, …``.

Supported source models:

* **Unigram** (SentencePiece): pieces are appended to the model vocabulary with the target
  tokenizer's score when the target is Unigram too, otherwise with ``log(count / total)`` from the
  target corpus (the unigram-LM estimate a Unigram trainer would start from).
* **WordPiece**: pieces (``foo`` / ``##foo``) are added to the vocabulary; greedy longest-match then
  prefers them.

Byte-level/SentencePiece **BPE** sources raise :class:`NotImplementedError`: a BPE model only
emits a token reachable through its merge list, and adding merges changes the segmentation of
text that contains no new token.

Example:
    >>> from pathlib import Path  # doctest: +SKIP
    >>> ext, new_ids = extend_tokenizer(src_tok, tgt_tok, Path("target.txt"), top_n=30_000)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from methods._canon import (
    Canon,
    FamilySpec,
    _canonical_detail,
    _surface,
    family_spec,
    vocab_size,
)


@dataclass(frozen=True)
class ExtensionCandidate:
    """One target token chosen for extension.

    Attributes:
        target_id: its id in the target tokenizer.
        canon: its canonical form.
        piece: its spelling in the source tokenizer's model vocabulary.
        count: its frequency on the target corpus.
    """

    target_id: int
    canon: Canon
    piece: str
    count: int


def _lines(corpus: Path, chunk: int = 1000) -> Iterator[list[str]]:
    batch: list[str] = []
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.strip():
                batch.append(line)
            if len(batch) >= chunk:
                yield batch
                batch = []
    if batch:
        yield batch


def token_counts(tok: Any, corpus: Path) -> np.ndarray:
    """Frequency of every token id of ``tok`` on ``corpus`` (one text per line, no specials)."""
    counts = np.zeros(vocab_size(tok), dtype=np.int64)
    backend = tok.backend_tokenizer
    for batch in _lines(Path(corpus)):
        for enc in backend.encode_batch(batch, add_special_tokens=False):
            if enc.ids:
                counts += np.bincount(np.asarray(enc.ids, dtype=np.int64), minlength=len(counts))[: len(counts)]
    return counts


def _reachable(spec: FamilySpec, backend: Any, canon: Canon) -> str | None:
    """The source-model piece for ``canon`` if the source pipeline could ever produce it."""
    try:
        text = canon.text.decode("utf-8")
    except UnicodeDecodeError:
        return None  # partial UTF-8 (byte-level fragments, byte-fallback pieces)
    if not text or text != text.strip() or any(c.isspace() for c in text):
        return None  # pre-tokenizers split at whitespace: a piece with spaces is never emitted
    norm = backend.normalizer
    if norm is not None:
        normalized = norm.normalize_str(text)
        if spec.family == "sentencepiece":  # Llama-style normalizers add the marker themselves
            normalized = normalized.lstrip(spec.marker)
        if normalized != text:
            return None  # the normalizer rewrites it (case, NFKC): the piece could never match
    pre = backend.pre_tokenizer
    if spec.family == "wordpiece" and pre is not None and len(pre.pre_tokenize_str(text)) != 1:
        return None  # e.g. BERT splits punctuation off words
    return _surface(spec, canon)


def extension_candidates(source_tok: Any, target_tok: Any, corpus: Path, top_n: int) -> list[ExtensionCandidate]:
    """The top-``top_n`` target tokens by corpus frequency that the source vocabulary lacks.

    Tokens are skipped when they are special, not valid UTF-8 on their own, contain whitespace,
    would be rewritten by the source normalizer, or already exist in the source vocabulary after
    canonicalization. Ties in frequency go to the lower target id; tokens never seen are not added.
    """
    if top_n < 0:
        raise ValueError(f"top_n must be >= 0, got {top_n}")
    s_canon, _, s_spec = _canonical_detail(source_tok)
    t_canon, _, _ = _canonical_detail(target_tok)
    known = {c for c in s_canon if c is not None}
    counts = token_counts(target_tok, corpus)
    order = np.lexsort((np.arange(len(counts)), -counts))
    backend = source_tok.backend_tokenizer
    out: list[ExtensionCandidate] = []
    seen: set[Canon] = set()
    for t in order:
        if len(out) >= top_n or counts[t] <= 0:
            break
        c = t_canon[t] if t < len(t_canon) else None
        if c is None or c in known or c in seen:
            continue
        piece = _reachable(s_spec, backend, c)
        if piece is None:
            continue
        seen.add(c)
        out.append(ExtensionCandidate(int(t), c, piece, int(counts[t])))
    return out


def _target_scores(target_tok: Any) -> dict[int, float] | None:
    model = json.loads(target_tok.backend_tokenizer.to_str()).get("model") or {}
    if model.get("type") != "Unigram":
        return None
    return {i: float(score) for i, (_, score) in enumerate(model["vocab"])}


def extend_tokenizer(source_tok: Any, target_tok: Any, corpus: Path, top_n: int) -> tuple[Any, list[int]]:
    """Add the top-N target tokens missing from the source vocabulary into the source model.

    Args:
        source_tok: the source fast tokenizer (Unigram or WordPiece model).
        target_tok: the target fast tokenizer that ranks the candidates.
        corpus: target-language text, one text per line, tokenized with ``target_tok`` to count.
        top_n: how many tokens to add at most (the paper: 30k).

    Returns:
        ``(extended, new_ids)``: a ``PreTrainedTokenizerFast`` with the source's special tokens
        whose ids ``< vocab_size(source_tok)`` are unchanged, and the ids of the added tokens in
        the extended tokenizer, in order of decreasing target frequency. Use
        :func:`extension_candidates` for the corresponding target ids.

    Raises:
        NotImplementedError: for BPE (byte-level or SentencePiece) sources.
        ValueError: for unsupported tokenizer types (see :func:`methods._canon.tokenizer_family`).

    Example:
        >>> ext, new_ids = extend_tokenizer(src_tok, tgt_tok, corpus, top_n=100)  # doctest: +SKIP
        >>> new_ids[0] == len(src_tok)  # doctest: +SKIP
        True
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = family_spec(source_tok)
    if spec.model_type not in ("Unigram", "WordPiece"):
        raise NotImplementedError(
            f"vocabulary extension into a {spec.model_type} model ({spec.family} family) is not supported: a BPE model "
            "emits a new token only through new merges, which would also change the segmentation of existing text; "
            "supported source models: Unigram (SentencePiece) and WordPiece"
        )
    cands = extension_candidates(source_tok, target_tok, corpus, top_n)
    cfg = json.loads(source_tok.backend_tokenizer.to_str())
    model = cfg["model"]
    n_old = vocab_size(source_tok)
    added_content = {int(a["id"]): a["content"] for a in cfg.get("added_tokens") or []}
    if spec.model_type == "Unigram":
        vocab = model["vocab"]
        min_score = min((s for _, s in vocab), default=0.0)
        # Added tokens above the model vocabulary (XLM-R's <mask>) keep their ids: fill the gap
        # with their own content so appended pieces start at n_old.
        for i in range(len(vocab), n_old):
            vocab.append([added_content.get(i, f"<extension-pad-{i}>"), min_score])
        t_scores = _target_scores(target_tok)
        total = sum(c.count for c in cands) or 1
        for c in cands:
            score = t_scores[c.target_id] if t_scores is not None else math.log(c.count / total)
            vocab.append([c.piece, float(score)])
    else:  # WordPiece
        vocab = model["vocab"]
        for k, c in enumerate(cands):
            vocab[c.piece] = n_old + k
    backend = Tokenizer.from_str(json.dumps(cfg))
    kwargs = dict(source_tok.special_tokens_map)
    extended = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        model_max_length=source_tok.model_max_length,
        padding_side=source_tok.padding_side,
        truncation_side=getattr(source_tok, "truncation_side", "right"),
        **kwargs,
    )
    new_ids = [extended.convert_tokens_to_ids(c.piece) for c in cands]
    expected = list(range(n_old, n_old + len(cands)))
    if new_ids != expected:  # pragma: no cover - guards the id layout promised above
        raise RuntimeError(f"extension produced unexpected ids {new_ids[:5]}…, expected {expected[:5]}…")
    return extended, new_ids
