"""The one metrics module of tokxfer. Nothing here touches the network.

Scales follow each metric's reference implementation, so our numbers read like the papers':

=====================  ==========  ==========================================
metric                 scale       reference
=====================  ==========  ==========================================
accuracy               [0, 1]      —
SQuAD exact match, F1  [0, 100]    official SQuAD v1.1 ``evaluate-v1.1.py``
seqeval entity F1      [0, 1]      ``seqeval.metrics`` (mode recorded)
BLEU                   [0, 100]    ``sacrebleu.BLEU`` (signature recorded)
perplexity             >= 1        token-weighted: ``exp(sum NLL / #tokens)``
bits per byte          >= 0        ``sum NLL (nats) / (#UTF-8 bytes * ln 2)``
=====================  ==========  ==========================================

``evaluate.load(...)`` is deliberately not used: it needs the hub even for these metrics
(FACTS.md); SQuAD EM/F1 is reimplemented here from the official definition.
"""

from __future__ import annotations

import collections
import math
import re
import string
from collections.abc import Mapping, Sequence

import numpy as np

from harness.examples import ExampleScores, Scores

METRICS_VERSION = 1
"""Bumped whenever a definition below changes the numbers it produces."""

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


# --------------------------------------------------------------------------------------- SQuAD


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 answer normalization: lowercase, drop punctuation, articles and extra spaces.

    The order is the official one: lowercase, remove punctuation, remove the English articles
    ``a``/``an``/``the``, collapse whitespace. Punctuation is ASCII ``string.punctuation``.

    Example:
        >>> normalize_answer("The  Eiffel-Tower!")
        'eiffeltower'
    """
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def squad_exact_match(prediction: str, gold_answers: Sequence[str]) -> float:
    """1.0 if the normalized prediction equals any normalized gold answer, else 0.0.

    An empty gold list is treated as ``[""]`` (unanswerable: only the empty prediction matches).

    Example:
        >>> squad_exact_match("the Eiffel Tower", ["Eiffel Tower", "tower"])
        1.0
    """
    golds = list(gold_answers) or [""]
    pred = normalize_answer(prediction)
    return float(max(pred == normalize_answer(g) for g in golds))


def _f1_single(prediction: str, gold: str) -> float:
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:  # SQuAD v2 rule: both empty -> 1, one empty -> 0 (v1.1 has no empty golds)
        return float(pred_tokens == gold_tokens)
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    n_same = sum(common.values())
    if n_same == 0:
        return 0.0
    precision = n_same / len(pred_tokens)
    recall = n_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def squad_f1(prediction: str, gold_answers: Sequence[str]) -> float:
    """Token-overlap F1 of the normalized strings, maximized over the gold answers (in [0, 1]).

    Example:
        >>> squad_f1("the city of Paris", ["Paris", "London"])
        0.5
    """
    golds = list(gold_answers) or [""]
    return max(_f1_single(prediction, g) for g in golds)


def squad_scores(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]]) -> dict[str, float]:
    """Corpus SQuAD exact match and F1 in [0, 100], averaged over the questions in ``references``.

    A question without a prediction scores 0 (as in the official script).

    Args:
        predictions: question id -> predicted answer text.
        references: question id -> gold answer texts.

    Returns:
        ``{"exact_match": ..., "f1": ...}``.

    Example:
        >>> squad_scores({"q1": "Paris", "q2": "blue"}, {"q1": ["Paris"], "q2": ["red"]})
        {'exact_match': 50.0, 'f1': 50.0}
    """
    return dict(squad_scores_with_examples(predictions, references))


def squad_scores_with_examples(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]]) -> Scores:
    """:func:`squad_scores` with the per-question EM and F1 behind them (``Scores.examples``).

    Example:
        >>> s = squad_scores_with_examples({"q1": "Paris", "q2": "blue"}, {"q1": ["Paris"], "q2": ["red"]})
        >>> dict(s), s.examples["f1"].value()
        ({'exact_match': 50.0, 'f1': 50.0}, 50.0)
    """
    if not references:
        raise ValueError("squad_scores: no reference questions")
    em = [squad_exact_match(predictions[q], g) if q in predictions else 0.0 for q, g in references.items()]
    f1 = [squad_f1(predictions[q], g) if q in predictions else 0.0 for q, g in references.items()]
    n = len(references)
    return Scores({"exact_match": 100.0 * sum(em) / n, "f1": 100.0 * sum(f1) / n},
                  {"exact_match": ExampleScores("mean", np.array(em), scale=100.0),
                   "f1": ExampleScores("mean", np.array(f1), scale=100.0)})


# -------------------------------------------------------------------------------------- seqeval

SEQEVAL_MODES = ("default", "strict")


def seqeval_scores(y_true: Sequence[Sequence[str]], y_pred: Sequence[Sequence[str]], mode: str = "default") -> dict:
    """Micro-averaged entity-level precision/recall/F1 with seqeval, recording the mode.

    ``default`` is seqeval's conlleval-compatible mode (an ``I-X`` without a preceding ``B-X``
    starts an entity); ``strict`` uses ``mode="strict"`` with the IOB2 scheme (such an entity is
    invalid and does not count). The two differ on ill-formed predictions, which are common in
    early fine-tuning, so the mode belongs in every record.

    Returns:
        ``{"f1", "precision", "recall"}`` in [0, 1], ``"mode"`` and ``"scheme"`` (``None`` in
        default mode, ``"IOB2"`` in strict mode).

    Example:
        >>> s = seqeval_scores([["B-PER", "I-PER", "O"]], [["I-PER", "I-PER", "O"]], mode="strict")
        >>> s["f1"], s["mode"], s["scheme"]
        (0.0, 'strict', 'IOB2')
    """
    from seqeval.metrics import f1_score, precision_score, recall_score
    from seqeval.scheme import IOB2

    if mode not in SEQEVAL_MODES:
        raise ValueError(f"seqeval mode must be one of {SEQEVAL_MODES}, got {mode!r}")
    if len(y_true) != len(y_pred) or any(len(t) != len(p) for t, p in zip(y_true, y_pred)):
        raise ValueError("seqeval_scores: y_true and y_pred must have the same shape (sentences x tokens)")
    kw = {"mode": "strict", "scheme": IOB2} if mode == "strict" else {}
    y_true, y_pred = [list(s) for s in y_true], [list(s) for s in y_pred]
    return {
        "f1": float(f1_score(y_true, y_pred, zero_division=0, **kw)),
        "precision": float(precision_score(y_true, y_pred, zero_division=0, **kw)),
        "recall": float(recall_score(y_true, y_pred, zero_division=0, **kw)),
        "mode": mode,
        "scheme": "IOB2" if mode == "strict" else None,
    }


def seqeval_sentence_counts(y_true: Sequence[Sequence[str]], y_pred: Sequence[Sequence[str]], mode: str = "default") -> np.ndarray:
    """Per sentence: ``[true positives, predicted entities, gold entities]`` as seqeval counts them.

    seqeval never lets an entity cross a sentence boundary (in default mode it joins sentences with
    ``O``; strict mode keeps a sentence index), so the column sums give its micro precision, recall
    and F1 exactly (tested against :func:`seqeval_scores`).

    Example:
        >>> seqeval_sentence_counts([["B-PER", "I-PER", "O"], ["B-LOC"]], [["B-PER", "I-PER", "O"], ["O"]]).tolist()
        [[1.0, 1.0, 1.0], [0.0, 0.0, 1.0]]
    """
    if mode not in SEQEVAL_MODES:
        raise ValueError(f"seqeval mode must be one of {SEQEVAL_MODES}, got {mode!r}")
    if mode == "strict":
        from seqeval.scheme import IOB2, Entities

        def entities(sent: Sequence[str]) -> set:
            return {e.to_tuple()[1:] for e in Entities([list(sent)], IOB2).entities[0]}
    else:
        from seqeval.metrics.sequence_labeling import get_entities

        def entities(sent: Sequence[str]) -> set:
            return set(get_entities(list(sent)))

    rows = np.zeros((len(y_true), 3))
    for i, (t, p) in enumerate(zip(y_true, y_pred)):
        gold, pred = entities(t), entities(p)
        rows[i] = (len(gold & pred), len(pred), len(gold))
    return rows


def seqeval_scores_with_examples(y_true: Sequence[Sequence[str]], y_pred: Sequence[Sequence[str]], mode: str = "default") -> Scores:
    """:func:`seqeval_scores` (F1, precision, recall) with the per-sentence entity counts behind them."""
    scores = seqeval_scores(y_true, y_pred, mode=mode)
    rows = seqeval_sentence_counts(y_true, y_pred, mode=mode)
    return Scores({k: scores[k] for k in ("f1", "precision", "recall")}, {
        "f1": ExampleScores("f1", rows),
        "precision": ExampleScores("ratio", rows[:, [0, 1]]),
        "recall": ExampleScores("ratio", rows[:, [0, 2]]),
    })


# ------------------------------------------------------------------------------------- accuracy


def accuracy(predictions: Sequence[int], labels: Sequence[int]) -> float:
    """Fraction of equal pairs, in [0, 1].

    Example:
        >>> accuracy([0, 1, 2, 2], [0, 1, 1, 2])
        0.75
    """
    if len(predictions) != len(labels):
        raise ValueError(f"accuracy: {len(predictions)} predictions for {len(labels)} labels")
    if not labels:
        raise ValueError("accuracy: no labels")
    return sum(int(p) == int(t) for p, t in zip(predictions, labels)) / len(labels)


def accuracy_with_examples(predictions: Sequence[int], labels: Sequence[int]) -> Scores:
    """``{"accuracy": …}`` with the per-example 0/1 correctness behind it.

    Example:
        >>> s = accuracy_with_examples([0, 1, 2, 2], [0, 1, 1, 2]); dict(s), s.examples["accuracy"].n
        ({'accuracy': 0.75}, 4)
    """
    value = accuracy(predictions, labels)
    correct = np.array([float(int(p) == int(t)) for p, t in zip(predictions, labels)])
    return Scores({"accuracy": value}, {"accuracy": ExampleScores("mean", correct)})


# ----------------------------------------------------------------------------------------- BLEU


def bleu(hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]], **bleu_kwargs) -> dict:
    """sacreBLEU corpus BLEU with its signature.

    Args:
        hypotheses: one system output per segment.
        references: one reference per segment (``list[str]``), or several reference streams
            (``list[list[str]]``, each as long as ``hypotheses``), as in ``sacrebleu``.
        **bleu_kwargs: passed to :class:`sacrebleu.metrics.BLEU` (``tokenize``, ``lowercase`` …).

    Returns:
        ``{"score": float in [0, 100], "signature": "nrefs:1|case:mixed|eff:no|tok:13a|..."}``.

    Example:
        >>> round(bleu(["the cat sat on the mat"], ["the cat sat on a mat"])["score"], 2)
        53.73
    """
    from sacrebleu.metrics import BLEU

    if references and isinstance(references[0], str):
        streams = [list(references)]
    else:
        streams = [list(r) for r in references]
    for s in streams:
        if len(s) != len(hypotheses):
            raise ValueError(f"bleu: a reference stream has {len(s)} segments for {len(hypotheses)} hypotheses")
    metric = BLEU(**bleu_kwargs)
    result = metric.corpus_score(list(hypotheses), streams)
    return {"score": float(result.score), "signature": str(metric.get_signature())}


def bleu_segment_statistics(hypotheses: Sequence[str], references: Sequence[str], **bleu_kwargs) -> ExampleScores:
    """Per segment sacreBLEU's sufficient statistics ``[sys_len, ref_len, correct₁…₄, total₁…₄]``,
    as an :class:`~harness.examples.ExampleScores` whose value is :func:`bleu`'s corpus score.

    Uses sacreBLEU's own statistics extraction (``BLEU._extract_corpus_statistics``: one reference
    stream); the corpus score from their sums equals ``corpus_score`` (tested).

    Example:
        >>> ex = bleu_segment_statistics(["the cat sat on the mat"], ["the cat sat on a mat"])
        >>> round(ex.value(), 2)
        53.73
    """
    from sacrebleu.metrics import BLEU

    metric = BLEU(**bleu_kwargs)
    stats = metric._extract_corpus_statistics(list(hypotheses), [list(references)])
    params = {"smooth_method": metric.smooth_method, "smooth_value": metric.smooth_value,
              "effective_order": bool(metric.effective_order)}
    return ExampleScores("bleu", np.asarray(stats, dtype=np.float64), params=params)


# ------------------------------------------------------------------------- perplexity and bytes


def perplexity(total_nll: float, n_tokens: int) -> float:
    """Token-weighted perplexity ``exp(total_nll / n_tokens)`` (NLL in nats, summed over tokens).

    Averaging per-example perplexities instead (as some reference code does) over-weights short
    examples; always pass the corpus sums.

    Example:
        >>> round(perplexity(2 * math.log(4) + math.log(2), 3), 4)
        3.1748
    """
    if n_tokens <= 0:
        raise ValueError(f"perplexity: n_tokens must be > 0, got {n_tokens}")
    mean = total_nll / n_tokens
    return math.exp(mean) if mean < 700 else float("inf")


def token_weighted_perplexity(nll_sums: Sequence[float], token_counts: Sequence[int]) -> float:
    """Perplexity over several examples/batches: ``exp(sum(nll_sums) / sum(token_counts))``."""
    if len(nll_sums) != len(token_counts):
        raise ValueError("token_weighted_perplexity: nll_sums and token_counts differ in length")
    return perplexity(float(sum(nll_sums)), int(sum(token_counts)))


def bits_per_byte(total_nll: float, n_bytes: int) -> float:
    """Bits per UTF-8 byte of the text: ``total_nll / (n_bytes * ln 2)``; comparable across tokenizers.

    Args:
        total_nll: summed negative log-likelihood in nats over all predicted tokens of the text.
        n_bytes: number of UTF-8 bytes of that text (``len(text.encode("utf-8"))`` summed).

    Example:
        >>> bits_per_byte(4 * math.log(2), 2)
        2.0
    """
    if n_bytes <= 0:
        raise ValueError(f"bits_per_byte: n_bytes must be > 0, got {n_bytes}")
    return total_nll / (n_bytes * math.log(2))


def utf8_bytes(texts: Sequence[str]) -> int:
    """Total UTF-8 byte count of ``texts`` (the denominator of :func:`bits_per_byte`)."""
    return sum(len(t.encode("utf-8")) for t in texts)
