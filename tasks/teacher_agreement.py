"""``teacher-agreement``: how close is the transferred model to the original on the same text? No labels, no training.

For ``n`` target-language texts, the *teacher* is the original source model reading each text with
the original tokenizer (``TaskContext.source_model`` / ``source_tokenizer``; computed once per
process), the *student* the transferred model reading it with its new tokenizer; both pooled as the
model's card says (:class:`tasks.sentence_embeddings.SentenceConfig`). Metrics:

* ``cosine`` — mean over texts of ``cos(student_i, teacher_i)``;
* ``nn_accuracy`` — share of texts whose nearest teacher embedding (cosine, strictly above every
  other) is their own teacher embedding: the student places the text where the teacher did,
  relative to the other texts.

This is the signal distillation-based transfers optimize (ZeTT, TokAlign): it needs neither labels
nor parallel text. Each metric carries per-example rows (:mod:`harness.examples`, reducer ``mean``);
tokenizer efficiency on the same texts rides along (:mod:`harness.efficiency`). The ``original``
method (the source tokenizer itself) scores 1 on both: the ceiling.

Data: the target side of the world's held-out translation pairs (``split``; the sentences
``bitext-retrieval`` reads, so a trial's two tasks share the student's embeddings), or ``eval_file``:
plain text, or translation JSON lines whose target side is read (the real lane:
``real:data/{lang}/test.txt``, the target side of its ``test.jsonl``).
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
    read_texts,
    student_embeddings,
    teacher_embeddings,
    text_digest,
)

__all__ = ["TeacherAgreementConfig", "TeacherAgreement", "agreement"]


@dataclass(frozen=True)
class TeacherAgreementConfig(SentenceConfig):
    """Configuration of :class:`TeacherAgreement` (the fields of :class:`SentenceConfig`)."""


def agreement(student: np.ndarray, teacher: np.ndarray) -> dict[str, np.ndarray]:
    """Per-text cosine with its own teacher embedding and 0/1 nearest-neighbour hits.

    Args:
        student / teacher: L2-normalized embeddings of the same texts, row by row.

    Example:
        >>> t = np.eye(3); s = np.array([[1.0, 0, 0], [0, 0, 1], [0, 0, 1]])
        >>> {k: v.tolist() for k, v in agreement(s, t).items()}
        {'cosine': [1.0, 0.0, 1.0], 'nn': [1.0, 0.0, 1.0]}
    """
    sim = np.asarray(student, dtype=np.float64) @ np.asarray(teacher, dtype=np.float64).T
    own = np.diag(sim).copy()
    off = sim.copy()
    np.fill_diagonal(off, -np.inf)
    return {"cosine": own, "nn": (own > off.max(axis=1)).astype(np.float64)}


@register_task(
    "teacher-agreement",
    config=TeacherAgreementConfig,
    description="cosine / nearest-neighbour agreement of the transferred model with the original on target text",
)
class TeacherAgreement:
    """Mean cosine and NN agreement between the transferred model's sentence embeddings and the original's."""

    model_kind = "encoder"
    metrics = ("cosine", "nn_accuracy")
    """Metrics every language of a complete record carries (the efficiency metrics ride along)."""

    def __init__(self, config: TeacherAgreementConfig) -> None:
        self.config = config

    def run(self, ctx: TaskContext) -> TaskResult:
        """Evaluate every language of ``ctx.languages``."""
        cfg = self.config
        metrics, counts, examples, files = {}, {}, {}, {}
        for lang in ctx.languages:
            path = eval_path("teacher-agreement", cfg, ctx, lang, "translation")
            texts = read_texts("teacher-agreement", path, lang, cfg.max_eval_examples)
            teacher = teacher_embeddings("teacher-agreement", ctx, texts, cfg, description=f"teacher {lang}")
            student = student_embeddings(ctx, texts, cfg, lang, description=f"student {lang}")
            agree = agreement(student, teacher)
            eff = efficiency(ctx, texts)
            scores = Scores({"cosine": float(agree["cosine"].mean()), "nn_accuracy": float(agree["nn"].mean()), **eff},
                            {"cosine": ExampleScores("mean", agree["cosine"]), "nn_accuracy": ExampleScores("mean", agree["nn"]),
                             **eff.examples})
            metrics[lang] = attach(examples, lang, scores)
            counts[lang] = {"test": len(texts)}
            files[lang] = {"file": str(path), "texts_sha256": text_digest(texts)}
        return TaskResult(metrics=metrics, counts=counts, examples=examples, info={
            "eval_files": files, **cfg.pooling_facts(),
            "teacher": {"model": ctx.source_model, "note": "the original model and tokenizer on the same texts"},
        })
