"""Bag-of-words baselines that check the world's NLI data for label leaks.

An NLI set leaks its labels when words alone, without their relation to the premise, predict them
(a negation word only in contradictions, longer hypotheses only in neutrals …). Each baseline here
is an L2-regularized multinomial logistic regression on word counts, fitted on the train split
with the regularization chosen on dev, and scored on test:

* ``hypothesis-minus-premise``: counts in the hypothesis minus counts in the premise (what an edit
  added and removed, with its sign);
* ``hypothesis-only``: counts in the hypothesis (the classic hypothesis-only artefact test);
* ``premise-and-hypothesis``: both count vectors side by side.

On a leak-free set all three stay near chance (1/3); a fine-tuned model must beat them by far.

:func:`edit_lookup` is not a leak test but the memorization reference of a set built by controlled
edits: it reads each pair's edit (the words that differ, with their positions' order) and answers
the label the training pairs with the same edit carry most often, chance for an edit never seen. It
says how much of the test set a model can get right by remembering edits from the task data alone;
what lies above it needs the relations themselves (from pretraining, for the world's NLI).

Example:
    >>> train = [{"premise": "a b", "hypothesis": "a c", "label": i % 3} for i in range(30)]
    >>> r = bow_baselines(train, train[:9], train[:9])
    >>> sorted(r)
    ['hypothesis-minus-premise', 'hypothesis-only', 'premise-and-hypothesis']
"""

from __future__ import annotations

import difflib
import re
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np
import scipy.optimize
import scipy.sparse as sp

__all__ = ["FEATURES", "L2_GRID", "bow_baselines", "bow_features", "edit_lookup", "fit_logistic", "pair_edit"]

FEATURES = ("hypothesis-minus-premise", "hypothesis-only", "premise-and-hypothesis")
_WORD = re.compile(r"\w+", re.UNICODE)
L2_GRID = (0.01, 0.1, 1.0, 10.0)
"""L2 strengths tried by default."""


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _counts(texts: Sequence[str], vocab: dict[str, int]) -> sp.csr_matrix:
    rows, cols = [], []
    for i, t in enumerate(texts):
        for w in _tokens(t):
            j = vocab.get(w)
            if j is not None:
                rows.append(i)
                cols.append(j)
    data = np.ones(len(rows), dtype=np.float64)
    return sp.csr_matrix((data, (rows, cols)), shape=(len(texts), len(vocab)))


def bow_features(records: Sequence[dict], vocab: dict[str, int], kind: str) -> sp.csr_matrix:
    """Feature matrix of XNLI-style ``records`` (``premise``, ``hypothesis``) for baseline ``kind``."""
    if kind not in FEATURES:
        raise ValueError(f"unknown bag-of-words feature kind {kind!r}; expected one of {FEATURES}")
    p = _counts([r["premise"] for r in records], vocab)
    h = _counts([r["hypothesis"] for r in records], vocab)
    if kind == "hypothesis-minus-premise":
        return (h - p).tocsr()
    if kind == "hypothesis-only":
        return h
    return sp.hstack([p, h], format="csr")


def fit_logistic(x: sp.csr_matrix, y: np.ndarray, n_classes: int, l2: float) -> np.ndarray:
    """Weights ``(features + 1, classes)`` of a multinomial logistic regression (L-BFGS, bias unpenalized).

    The loss is the mean cross-entropy plus ``l2 / n * ||W||^2 / 2``; deterministic.
    """
    n, d = x.shape
    xb = sp.hstack([x, sp.csr_matrix(np.ones((n, 1)))], format="csr")
    onehot = np.zeros((n, n_classes))
    onehot[np.arange(n), y] = 1.0
    penal = np.ones((d + 1, 1))
    penal[-1] = 0.0

    def loss(w_flat: np.ndarray) -> tuple[float, np.ndarray]:
        w = w_flat.reshape(d + 1, n_classes)
        z = xb @ w
        z -= z.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        value = -(onehot * logp).sum() / n + 0.5 * l2 / n * float((penal * w * w).sum())
        grad = xb.T @ (np.exp(logp) - onehot) / n + l2 / n * penal * w
        return value, np.asarray(grad).ravel()

    res = scipy.optimize.minimize(loss, np.zeros((d + 1) * n_classes), jac=True, method="L-BFGS-B",
                                  options={"maxiter": 500})
    return res.x.reshape(d + 1, n_classes)


def _accuracy(w: np.ndarray, x: sp.csr_matrix, y: np.ndarray) -> float:
    z = x @ w[:-1] + w[-1]
    return float((np.asarray(z).argmax(axis=1) == y).mean())


def bow_baselines(
    train: Sequence[dict],
    dev: Sequence[dict],
    test: Sequence[dict],
    n_classes: int = 3,
    min_count: int = 1,
    l2_grid: Sequence[float] = L2_GRID,
) -> dict[str, dict[str, float]]:
    """Fit every :data:`FEATURES` baseline; per kind ``{"dev", "test", "train", "l2"}`` accuracies.

    Args:
        train, dev, test: XNLI-style records (``premise``, ``hypothesis``, integer ``label``).
        n_classes: number of labels.
        min_count: words seen fewer times in train are dropped.
        l2_grid: L2 strengths tried; the one with the best dev accuracy is kept.
    """
    counts: dict[str, int] = {}
    for r in train:
        for w in _tokens(r["premise"]) + _tokens(r["hypothesis"]):
            counts[w] = counts.get(w, 0) + 1
    vocab = {w: i for i, w in enumerate(sorted(w for w, c in counts.items() if c >= min_count))}
    ys = [np.array([int(r["label"]) for r in split]) for split in (train, dev, test)]
    out: dict[str, dict[str, float]] = {}
    for kind in FEATURES:
        xs = [bow_features(split, vocab, kind) for split in (train, dev, test)]
        best: tuple[float, float, np.ndarray] | None = None
        for l2 in l2_grid:
            w = fit_logistic(xs[0], ys[0], n_classes, l2)
            acc = _accuracy(w, xs[1], ys[1])
            if best is None or acc > best[0]:
                best = (acc, l2, w)
        acc_dev, l2, w = best
        out[kind] = {
            "train": round(_accuracy(w, xs[0], ys[0]), 4),
            "dev": round(acc_dev, 4),
            "test": round(_accuracy(w, xs[2], ys[2]), 4),
            "l2": l2,
        }
    return out


def pair_edit(record: dict) -> tuple[tuple[str, str, str], ...]:
    """The edit that turns the premise into the hypothesis: ``(operation, premise words,
    hypothesis words)`` for every differing span of whitespace tokens, in order.

    Example:
        >>> pair_edit({"premise": "the cat is big .", "hypothesis": "the cat is not small ."})
        (('replace', 'big', 'not small'),)
    """
    p, h = record["premise"].split(), record["hypothesis"].split()
    ops = difflib.SequenceMatcher(a=p, b=h, autojunk=False).get_opcodes()
    return tuple((op, " ".join(p[a1:a2]), " ".join(h[b1:b2])) for op, a1, a2, b1, b2 in ops if op != "equal")


def edit_lookup(train: Sequence[dict], test: Sequence[dict], n_classes: int = 3) -> dict[str, float]:
    """The memorization reference: each test pair gets the majority training label of its edit
    (:func:`pair_edit`; ties to the lowest label), or chance (1/``n_classes`` expected) when the
    edit was never seen in training.

    Returns:
        ``{"coverage", "seen_accuracy", "accuracy", "distinct_train_edits", "ambiguous_train_edits"}``:
        the share of test pairs whose edit occurs in train, the accuracy on those, the expected
        accuracy over all test pairs, and how many training edits there are and carry more than one
        label.

    Example:
        >>> tr = [{"premise": "a b", "hypothesis": "a c", "label": 0}, {"premise": "a b", "hypothesis": "a d", "label": 2}]
        >>> te = [{"premise": "x b", "hypothesis": "x c", "label": 0}, {"premise": "a b", "hypothesis": "a e", "label": 1}]
        >>> r = edit_lookup(tr, te)
        >>> r["coverage"], r["seen_accuracy"], round(r["accuracy"], 4)
        (0.5, 1.0, 0.6667)
    """
    labels: defaultdict[tuple, Counter] = defaultdict(Counter)
    for r in train:
        labels[pair_edit(r)][int(r["label"])] += 1
    seen = correct = 0
    for r in test:
        c = labels.get(pair_edit(r))
        if c is None:
            continue
        seen += 1
        top = max(c.values())
        correct += min(k for k, v in c.items() if v == top) == int(r["label"])
    n = len(test)
    return {
        "coverage": round(seen / n, 4) if n else 0.0,
        "seen_accuracy": round(correct / seen, 4) if seen else 0.0,
        "accuracy": round((correct + (n - seen) / n_classes) / n, 4) if n else 0.0,
        "distinct_train_edits": len(labels),
        "ambiguous_train_edits": sum(1 for c in labels.values() if len(c) > 1),
    }
