"""Gold diagnostics of an initialization on the built-in world (WORLD.md, "Gold diagnostics").

The world knows, for every target word form, the source word form it realizes. Where both forms
are single whole-word tokens of their tokenizers, that pair is a *gold token pair*. For each such
pair we ask whether the initialized target row's nearest source embedding (cosine) is the gold
source row (top-1 / top-5), and report the mean cosine to the gold row. Pairs are also reported
separately for target tokens that are *not* trivially copied (spelled differently from their gold
source token), which is where methods differ.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.cache import ProcessMemo

_PAIRS_MEMO = ProcessMemo(8)
"""Gold pair sets kept per process: every trial of a grid with the same tokenizers and target
language scores against the same pairs (a quickstart grid has two)."""


def gold_token_pairs(word_map: Path, source_tok, target_tok) -> np.ndarray:
    """``(n, 2)`` int64 array of ``[target_id, source_id]`` gold pairs, most frequent source per target."""
    from harness.vocab import Canon, canonical_vocab

    def index(tok) -> dict:
        out = {}
        for i, c in enumerate(canonical_vocab(tok)):
            if c is not None and c.word_start:
                out.setdefault(c.text, i)
        return out

    t_index, s_index = index(target_tok), index(source_tok)
    best: dict[int, tuple[int, int]] = {}
    with open(word_map, encoding="utf-8") as f:
        for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            if len(row) < 2:
                continue
            tform, sform = row[0], row[1]
            count = int(row[2]) if len(row) > 2 and row[2].isdigit() else 1
            t = t_index.get(Canon(tform.encode(), True).text)
            s = s_index.get(Canon(sform.encode(), True).text)
            if t is None or s is None:
                continue
            if t not in best or count > best[t][1]:
                best[t] = (s, count)
    if not best:
        return np.zeros((0, 2), dtype=np.int64)
    return np.array([[t, s] for t, (s, _) in sorted(best.items())], dtype=np.int64)


def gold_alignment(new_emb: torch.Tensor, source_emb: torch.Tensor, pairs: np.ndarray, *, copied: np.ndarray | None = None, chunk: int = 4096) -> dict:
    """Top-1/top-5 accuracy and mean cosine of initialized rows against their gold source rows.

    Args:
        new_emb: ``|Vt| x d`` initialized target embeddings.
        source_emb: ``|Vs| x d`` source embeddings.
        pairs: gold ``[target_id, source_id]`` pairs.
        copied: optional boolean mask over ``pairs`` of pairs whose target token is spelled like
            its gold source token; metrics over the rest are reported with the suffix ``_new``.
    """
    if len(pairs) == 0:
        return {"gold_pairs": 0, "gold_top1": None, "gold_top5": None, "gold_cosine": None}
    S = torch.nn.functional.normalize(source_emb.detach().float(), dim=1)
    T = torch.nn.functional.normalize(new_emb.detach().float()[torch.from_numpy(pairs[:, 0])], dim=1)
    gold = torch.from_numpy(pairs[:, 1])
    top1, top5, cos = [], [], []
    for a in range(0, len(pairs), chunk):
        sims = T[a : a + chunk] @ S.T
        g = gold[a : a + chunk]
        top = sims.topk(min(5, S.shape[0]), dim=1).indices
        top1.append(top[:, 0] == g)
        top5.append((top == g[:, None]).any(1))
        cos.append(sims.gather(1, g[:, None])[:, 0])
    top1, top5, cos = torch.cat(top1), torch.cat(top5), torch.cat(cos)
    out = {
        "gold_pairs": int(len(pairs)),
        "gold_top1": float(top1.float().mean()),
        "gold_top5": float(top5.float().mean()),
        "gold_cosine": float(cos.mean()),
    }
    if copied is not None:
        new = torch.from_numpy(~copied)
        n = int(new.sum())
        out["gold_pairs_new"] = n
        out["gold_top1_new"] = float(top1[new].float().mean()) if n else None
        out["gold_top5_new"] = float(top5[new].float().mean()) if n else None
        out["gold_cosine_new"] = float(cos[new].mean()) if n else None
    return out


NORM_BOUND = 10.0
"""An initialized row whose norm exceeds this many times the largest source row's is counted (and the
trial flagged, :mod:`harness.run.sanity`): no copy, average or convex combination of source rows gets
there, and a random draw at the source's scale does not either."""


def row_norm_diagnostics(source_emb: torch.Tensor, new_emb: torch.Tensor) -> dict:
    """The largest row norm of the source and of the initialized embeddings, and how many initialized
    rows are over :data:`NORM_BOUND` times the source's largest or not finite. For every method, world or
    not: a row of extreme norm dominates every softmax over a tied head (a loss of tens of nats at init).

    Example:
        >>> d = row_norm_diagnostics(torch.eye(3), torch.tensor([[1.0, 0, 0], [0, 30.0, 0], [float("nan"), 0, 0]]))
        >>> d["row_norm_max"], d["rows_over_norm_bound"], d["rows_nonfinite"]
        (30.0, 1, 1)
    """
    src = source_emb.detach().float().norm(dim=1)
    new = new_emb.detach().float().norm(dim=1)
    finite = torch.isfinite(new)
    src_max = float(src[torch.isfinite(src)].max()) if len(src) else 0.0
    return {
        "row_norm_source_max": src_max,
        "row_norm_max": float(new[finite].max()) if bool(finite.any()) else None,
        "rows_over_norm_bound": int((new[finite] > NORM_BOUND * src_max).sum()),
        "rows_nonfinite": int((~finite).sum()),
    }


def world_diagnostics(world, language: str, source_tok, target_tok, source_emb: torch.Tensor, new_emb: torch.Tensor) -> dict:
    """Gold diagnostics for a world target language (empty dict for the source language)."""
    if world is None or language == world.source_language or language not in world.languages:
        return {}
    pairs, copied = _gold_pairs(Path(world.word_map(language)), source_tok, target_tok)
    if len(pairs) == 0:
        return {"gold_pairs": 0}
    return gold_alignment(new_emb, source_emb, pairs, copied=copied)


def _gold_pairs(word_map: Path, source_tok: Any, target_tok: Any) -> tuple[np.ndarray, np.ndarray]:
    """:func:`gold_token_pairs` and the mask of pairs spelled alike, memoized per process by the
    word map's path, size and mtime and both tokenizers' serialized state (the same arrays as
    computing them again; only the trials' own embeddings are scored per trial)."""
    from harness.tokenizers import tokenizer_state
    from harness.vocab import canonical_vocab

    keys = (tokenizer_state(source_tok), tokenizer_state(target_tok))
    stat = word_map.stat()
    key = (str(word_map.resolve()), stat.st_size, stat.st_mtime_ns, *keys) if None not in keys else None

    def compute() -> tuple[np.ndarray, np.ndarray]:
        pairs = gold_token_pairs(word_map, source_tok, target_tok)
        tv, sv = canonical_vocab(target_tok), canonical_vocab(source_tok)
        return pairs, np.array([tv[t] == sv[s] for t, s in pairs], dtype=bool)

    return _PAIRS_MEMO.get(key, compute)
