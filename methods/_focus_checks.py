"""FOCUS's check before the long work (its ``preflight`` hook, run by ``tokxfer init``).

:func:`focus_forecast` tells, before fastText is trained, how many of the additional tokens will get
random rows because they occur fewer than ``aux_min_count`` times in the target corpus.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from harness import progress
from harness import vocab as _canon
from harness.cache import ensure_root
from methods import _fasttext


def focus_forecast(cfg: Any, paths: dict, source_tok: Any, target_tok: Any, n_source: int, notes: Any) -> dict | None:
    """Before training: how many of FOCUS's additional tokens occur too rarely to get an auxiliary vector.

    Pre-tokenizes ``--target-corpus`` exactly as FOCUS does (the result is cached and reused by the
    method), counts every token, and applies FOCUS's overlap rules to find the additional tokens. A
    token gets an auxiliary vector iff it occurs at least ``aux_min_count`` times (fastText's
    ``minCount``), so the forecast equals the method's ``fallback_no_aux`` count.
    """
    if cfg.aux != "token-fasttext" or cfg.aux_model_path or paths.get("target_corpus") is None:
        return None

    ov = _canon.compute_overlap(source_tok, target_tok, fuzzy=cfg.fuzzy, n_source=n_source, symbolic_rule=cfg.symbolic_rule)
    pairs = ov.pairs(fuzzy=cfg.fuzzy)
    if cfg.overlap == "symbolic" and len(pairs):
        canon = _canon.canonical_vocab(target_tok)
        pairs = pairs[[canon[t] is not None and _canon.is_symbolic(canon[t], cfg.symbolic_rule) for t in pairs[:, 0]]]
    n_target = _canon.vocab_size(target_tok)
    additional = np.ones(n_target, dtype=bool)
    additional[pairs[:, 0] if len(pairs) else []] = False
    additional[ov.specials[:, 0] if len(ov.specials) else []] = False
    with tempfile.TemporaryDirectory(prefix="tokxfer-init-") as tmp:
        pretok = _fasttext.pretokenize_cached(paths["target_corpus"], target_tok, ensure_root(), Path(tmp),
                                              token_format=cfg.aux_token_format)  # a progress bar of its own
        counts: Counter = Counter()
        with open(pretok, encoding="utf-8", newline="\n") as f, progress.heartbeat("FOCUS forecast: counting tokens"):
            for line in f:
                counts.update(line.split())
    words = _fasttext.fasttext_words(target_tok, cfg.aux_token_format)
    freq = np.array([counts.get(w, 0) for w in words[:n_target]] + [0] * max(0, n_target - len(words)), dtype=np.int64)
    add_ids = np.flatnonzero(additional)
    f_add = freq[add_ids]
    total = int(len(add_ids))
    thresholds = sorted({1, 2, 3, 5, cfg.aux_min_count})
    table = {m: int((f_add < m).sum()) for m in thresholds}
    fb = table[cfg.aux_min_count]
    share = fb / max(total, 1)
    lower = [m for m in thresholds if m < cfg.aux_min_count]
    alt = ", ".join(f"aux_min_count={m}: {table[m]:,} ({table[m] / max(total, 1):.0%})" for m in lower)
    msg = (f"FOCUS forecast: {fb:,} of {total:,} new (non-overlap) tokens ({share:.0%}) occur fewer than aux_min_count="
           f"{cfg.aux_min_count} times in --target-corpus and will get random rows"
           + (f"; {alt} (--config aux_min_count=N; fewer occurrences give noisier vectors), or more text" if alt else ""))
    # a note, not a warning: the random rows are counted from the result and warned about once, at the end
    # (tokxfer init's --max-random-rows); this says early what to change
    notes.note(msg)
    return {"additional": total, "fallback_forecast": fb, "share": round(share, 4), "by_aux_min_count": table,
            "low_coverage": bool(total and share >= 1 - cfg.min_aux_coverage)}
