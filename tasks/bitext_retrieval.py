"""``bitext-retrieval``: does the transferred model still map a sentence next to its translation? No training.

For ``n`` held-out translation pairs (source-language sentence ``s_i``, target-language sentence
``t_i``), the source sentences are embedded with the *original* model and tokenizer (the trial's
``TaskContext.source_model``; identical for every method, computed once per process) and the target
sentences with the *transferred* model under its new tokenizer, both pooled as the model's card says
(:class:`tasks.sentence_embeddings.SentenceConfig`). With cosine similarities ``S[i, j] = cos(t_i, s_j)``:

* ``accuracy_t2s`` — share of target sentences whose most similar source sentence is their
  translation (strictly above every other: a tie is a miss); ``accuracy_s2t`` the other direction;
  ``accuracy`` their mean (Tatoeba-style, as LASER / XTREME report it);
* ``margin_accuracy_t2s`` / ``_s2t`` / ``margin_accuracy`` — the same with the ratio margin of
  Artetxe & Schwenk (2019), the score BUCC mining and xsim use: ``margin(t, s) = cos(t, s) /
  ((Σ_{z ∈ NN_k(t)} cos(t, z) + Σ_{z ∈ NN_k(s)} cos(s, z)) / 2k)`` with ``k = 4`` nearest neighbours
  in the other language's set; it discounts "hub" sentences close to everything. xsim's error rate
  is ``1 - margin_accuracy``.

Each metric carries its per-example 0/1 rows (:mod:`harness.examples`, reducer ``mean``; the
averages' rows are the mean of both directions). Tokenizer efficiency (tokens per word, bytes per
token of the trial's vs the source's tokenizer on the target sentences, :mod:`harness.efficiency`)
is reported beside them. Random embeddings score ``1/n`` (0.2 % for 500 pairs).

Data: the world's ``translation`` split (pairs target → ``src``), or ``eval_file`` in the same
format, e.g. the real lane's ``real:data/{lang}/test.jsonl`` with ``source_language: en``. The task
runs on any encoder: right after initialization, or after LAPT (the stage then loads the masked LM
and this task reads its body).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from harness.examples import ExampleScores, Scores, attach
from harness.protocols import TaskContext, TaskResult
from harness.registry import register_task
from tasks.sentence_embeddings import (
    SentenceConfig,
    efficiency,
    eval_path,
    read_pairs,
    student_embeddings,
    teacher_embeddings,
    text_digest,
)

__all__ = ["BitextRetrievalConfig", "BitextRetrieval", "retrieval_hits", "MARGIN_K"]

MARGIN_K = 4
"""Neighbours of the ratio margin (BUCC / xsim, Artetxe & Schwenk 2019)."""


@dataclass(frozen=True)
class BitextRetrievalConfig(SentenceConfig):
    """Configuration of :class:`BitextRetrieval` (the fields of :class:`SentenceConfig` plus these)."""

    source_language: str | None = None
    """Key of the source side in ``translation`` (default: the trial's source language, ``src`` on the
    world; the real lane's files use ``en``)."""
    margin_k: int = MARGIN_K
    """Neighbours of the ratio margin."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.margin_k < 1:
            raise ValueError(f"margin_k must be >= 1, got {self.margin_k}")


def _strict_hits(scores: np.ndarray) -> np.ndarray:
    """1 where row ``i``'s own column ``i`` is strictly above every other column of the row."""
    diag = np.diag(scores).copy()
    off = scores.copy()
    np.fill_diagonal(off, -np.inf)
    return (diag > off.max(axis=1)).astype(np.float64)


def retrieval_hits(target: np.ndarray, source: np.ndarray, k: int = MARGIN_K) -> dict[str, np.ndarray]:
    """Per-pair 0/1 hits of cosine and ratio-margin retrieval in both directions.

    Args:
        target / source: L2-normalized embeddings, row ``i`` of each is pair ``i``.
        k: margin neighbours (capped at ``n``).

    Returns:
        ``{"t2s", "s2t", "margin_t2s", "margin_s2t"}`` → arrays of length ``n``.

    Example:
        >>> e = np.eye(3)
        >>> {k: v.tolist() for k, v in retrieval_hits(e, e, k=1).items()}["t2s"]
        [1.0, 1.0, 1.0]
    """
    sim = np.asarray(target, dtype=np.float64) @ np.asarray(source, dtype=np.float64).T
    k = min(k, sim.shape[0])
    knn_t = -np.sort(-sim, axis=1)[:, :k].mean(axis=1)  # each target sentence's k nearest source sentences
    knn_s = -np.sort(-sim, axis=0)[:k, :].mean(axis=0)  # each source sentence's k nearest target sentences
    denom = (knn_t[:, None] + knn_s[None, :]) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):  # a non-positive neighbourhood (anti-aligned vectors) ranks last
        margin = np.where(denom > 0, sim / denom, -np.inf)
    return {"t2s": _strict_hits(sim), "s2t": _strict_hits(sim.T), "margin_t2s": _strict_hits(margin),
            "margin_s2t": _strict_hits(margin.T)}


@register_task(
    "bitext-retrieval",
    config=BitextRetrievalConfig,
    description="translation retrieval: target sentences (transferred model) vs source (original model), no training",
)
class BitextRetrieval:
    """Accuracy@1 and margin accuracy of finding each sentence's translation, at init or after LAPT."""

    model_kind = "encoder"
    metrics = ("accuracy", "accuracy_t2s", "accuracy_s2t", "margin_accuracy", "margin_accuracy_t2s",
               "margin_accuracy_s2t")
    """Metrics every language of a complete record carries (the efficiency metrics ride along)."""

    def __init__(self, config: BitextRetrievalConfig) -> None:
        self.config = config

    def run(self, ctx: TaskContext) -> TaskResult:
        """Evaluate every language of ``ctx.languages``."""
        cfg = self.config
        src_lang = cfg.source_language or ctx.source_language
        if src_lang is None:
            raise ValueError("bitext-retrieval: set config 'source_language' (the key of the source side in "
                             "'translation'; the trial has no world source language)")
        metrics, counts, examples, files = {}, {}, {}, {}
        for lang in ctx.languages:
            path = eval_path("bitext-retrieval", cfg, ctx, lang, "translation")
            pairs = read_pairs("bitext-retrieval", path, src_lang, lang, cfg.max_eval_examples)
            sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
            src = teacher_embeddings("bitext-retrieval", ctx, sources, cfg, description=f"bitext {src_lang} (original)")
            tgt = student_embeddings(ctx, targets, cfg, lang, description=f"bitext {lang}")
            hits = retrieval_hits(tgt, src, cfg.margin_k)
            rows = {
                "accuracy_t2s": hits["t2s"], "accuracy_s2t": hits["s2t"],
                "accuracy": (hits["t2s"] + hits["s2t"]) / 2,
                "margin_accuracy_t2s": hits["margin_t2s"], "margin_accuracy_s2t": hits["margin_s2t"],
                "margin_accuracy": (hits["margin_t2s"] + hits["margin_s2t"]) / 2,
            }
            eff = efficiency(ctx, targets)
            scores = Scores({**{k: float(v.mean()) for k, v in rows.items()}, **eff},
                            {**{k: ExampleScores("mean", v) for k, v in rows.items()}, **eff.examples})
            metrics[lang] = attach(examples, lang, scores)
            counts[lang] = {"test": len(pairs)}
            files[lang] = {"file": str(path), "pairs_sha256": text_digest([f"{s}\t{t}" for s, t in pairs])}
        return TaskResult(metrics=metrics, counts=counts, examples=examples, info={
            "eval_files": files, "source_language": src_lang, "margin_k": cfg.margin_k, **cfg.pooling_facts(),
            "source_side": {"model": ctx.source_model, "note": "source sentences embedded with the original model and tokenizer"},
        })
