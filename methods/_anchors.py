"""Shared pieces of the anchor methods (``omp``, ``clp``): vectors of a helper model in the target
vocabulary, and a vectorized mapping assembly for "copy the overlap, combine anchors for the rest".

* :func:`helper_vectors` — the input embeddings of a helper model (a small model trained in the
  target language), carried to the target tokenizer's ids by canonical form (identical vocabularies
  map id to id; a helper with another tokenizer covers the tokens the two share).
* :func:`anchor_mapping` — a :class:`~harness.protocols.TokenMapping` from specials, copied pairs
  and per-target combinations of anchors given as CSR arrays (duplicate source ids merged), built
  with numpy only (a 50k x 15k dense CLP map has 750M entries: no Python loop per entry).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from harness import vocab as _canon
from harness.protocols import COMBINED, COPIED, SPECIAL, TokenMapping

__all__ = ["helper_vectors", "split_tokens", "anchor_mapping"]


def helper_vectors(path: Path | str, target_tok: Any, n_target: int) -> tuple[np.ndarray, np.ndarray, dict]:
    """Input embeddings of the helper model at ``path``, one row per target id.

    The helper's tokenizer is loaded from the same directory; a target token gets the row of the
    helper token with the same canonical form (:func:`harness.vocab.canonical_vocab`; special
    tokens have none and get no vector).

    Returns:
        ``(vectors n_target x d float32, has_vector bool [n_target], info)``; ``info`` names the
        path, the helper's architecture and vocabulary size, and how many target tokens it covers.

    Raises:
        ValueError: the directory holds no loadable model or tokenizer (naming the path).
    """
    import torch
    from transformers import AutoConfig, AutoModel
    from transformers.utils import logging as hf_logging

    from harness.tokenizers import load_tokenizer

    t0 = time.perf_counter()
    path = Path(path)
    level, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # the body of an MLM/CLM checkpoint: its head is "unexpected", by design
    hf_logging.disable_progress_bar()
    try:
        tok = load_tokenizer(path)
        model = AutoModel.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise ValueError(f"inputs.helper_model {path}: cannot load a model with its tokenizer ({e})") from None
    finally:
        hf_logging.set_verbosity(level)
        if bars:
            hf_logging.enable_progress_bar()
    with torch.no_grad():
        emb = model.get_input_embeddings().weight.detach().to(torch.float32).cpu().numpy()
    arch = (AutoConfig.from_pretrained(path).architectures or [type(model).__name__])[0]
    index: dict = {}
    for i, c in enumerate(_canon.canonical_vocab(tok)[: len(emb)]):
        if c is not None:
            index.setdefault(c, i)
    pairs = np.array([(t, index[c]) for t, c in enumerate(_canon.canonical_vocab(target_tok)[:n_target])
                      if c is not None and c in index], dtype=np.int64).reshape(-1, 2)
    vecs = np.zeros((n_target, emb.shape[1]), dtype=np.float32)
    has = np.zeros(n_target, dtype=bool)
    vecs[pairs[:, 0]] = emb[pairs[:, 1]]
    has[pairs[:, 0]] = True
    same = tok.get_vocab() == target_tok.get_vocab()
    info = {"path": str(path), "architecture": arch, "dim": int(emb.shape[1]), "helper_vocab": len(tok),
            "matched_target_tokens": int(len(pairs)), "same_vocabulary": bool(same),
            "load_s": round(time.perf_counter() - t0, 3)}
    return vecs, has, info


def split_tokens(pairs: np.ndarray, has: np.ndarray, specials: set[int], n_target: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(anchors, new, solve)`` of an anchor method.

    ``anchors``: the overlap pairs ``[target, source]`` whose target token has a vector (``has``;
    special tokens never count); ``new``: target ids neither in the overlap nor special; ``solve``:
    the new tokens that have a vector — none when there is no anchor to combine.

    Example:
        >>> a, n, s = split_tokens(np.array([[1, 7], [2, 8]]), np.array([1, 1, 0, 1, 0], bool), {0}, 5)
        >>> a.tolist(), n.tolist(), s.tolist()
        ([[1, 7]], [3, 4], [3])
    """
    has = has.copy()
    has[[t for t in specials if t < n_target]] = False
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    anchors = pairs[has[pairs[:, 0]]]
    taken = np.zeros(n_target, dtype=bool)
    taken[pairs[:, 0]] = True
    taken[[t for t in specials if t < n_target]] = True
    new = np.flatnonzero(~taken).astype(np.int64)
    return anchors, new, new[has[new]] if len(anchors) else new[:0]


def anchor_mapping(n_target: int, n_source: int, *, specials: np.ndarray, copied: np.ndarray, targets: np.ndarray,
                   indptr: np.ndarray, sources: np.ndarray, weights: np.ndarray) -> TokenMapping:
    """Specials SPECIAL, ``copied`` pairs COPIED (weight 1), each ``targets[i]`` COMBINED from
    ``sources[indptr[i]:indptr[i+1]]`` with ``weights[...]``; every other row FALLBACK.

    Entries of one row that name the same source id are merged (weights summed). A target named
    more than once keeps the first of SPECIAL, COPIED, COMBINED.

    Example:
        >>> m = anchor_mapping(4, 5, specials=np.array([[0, 0]]), copied=np.array([[1, 3]]),
        ...                    targets=np.array([2]), indptr=np.array([0, 3]), sources=np.array([3, 4, 3]),
        ...                    weights=np.array([0.5, 0.25, 0.25]))
        >>> m.row(2), m.counts()["fallback"]
        ((array([3, 4]), array([0.75, 0.25], dtype=float32)), 1)
    """
    from harness.protocols import FALLBACK

    specials = np.asarray(specials, dtype=np.int64).reshape(-1, 2)
    copied = np.asarray(copied, dtype=np.int64).reshape(-1, 2)
    targets = np.asarray(targets, dtype=np.int64)
    prov = np.full(n_target, FALLBACK, dtype=np.int8)
    prov[targets] = COMBINED
    prov[copied[:, 0]] = COPIED
    prov[specials[:, 0]] = SPECIAL
    lengths = np.diff(np.asarray(indptr, dtype=np.int64))
    rows = np.repeat(targets, lengths)
    keep = prov[rows] == COMBINED
    rows, cols, w = rows[keep], np.asarray(sources, dtype=np.int64)[keep], np.asarray(weights, dtype=np.float64)[keep]
    # merge duplicate (row, source) entries
    key = rows * n_source + cols
    uniq, inv = np.unique(key, return_inverse=True)
    merged = np.zeros(len(uniq), dtype=np.float64)
    np.add.at(merged, inv, w)
    c_rows, c_cols = uniq // n_source, uniq % n_source
    single = [(pairs, prov[pairs[:, 0]] == code) for code, pairs in ((COPIED, copied), (SPECIAL, specials))]
    s_rows = np.concatenate([p[ok, 0] for p, ok in single])
    s_cols = np.concatenate([p[ok, 1] for p, ok in single])
    all_rows = np.concatenate([c_rows, s_rows])
    all_cols = np.concatenate([c_cols, s_cols])
    all_w = np.concatenate([merged, np.ones(len(s_rows))])
    # a COMBINED row whose entries were all cancelled by merging has none left: it cannot be combined
    empty = (prov == COMBINED) & (np.bincount(c_rows, minlength=n_target) == 0)
    prov[empty] = FALLBACK
    return TokenMapping.from_coo(n_target, n_source, all_rows, all_cols, all_w, prov)
