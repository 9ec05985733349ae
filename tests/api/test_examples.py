"""Per-example results (harness/examples.py): every reducer reproduces its library's corpus metric, the
file round-trips with its hash, and every task's examples recompute the metrics it reports."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.examples import ExampleScores, ExamplesError, Scores, read_examples, write_examples
from tasks import metrics


def assert_examples_match(result, *, rel: float = 1e-9, counts: bool = True) -> None:
    """Every metric of ``result`` (a TaskResult) that has per-example statistics is recomputed from them.

    Called by the end-to-end task tests, so each task is checked where it runs.
    """
    assert result.examples, "the task returned no per-example statistics"
    for lang, per in result.examples.items():
        assert per, f"no per-example statistics for {lang}"
        for metric, ex in per.items():
            reported = result.metrics[lang][metric]
            assert isinstance(ex, ExampleScores) and ex.n > 0
            assert ex.value() == pytest.approx(reported, rel=rel, abs=1e-12), (lang, metric)
        # test-set counts agree with the rows (one row per test example / sentence / document)
        test_n = (result.counts.get(lang) or {}).get("test")
        if counts and test_n is not None:
            assert {ex.n for ex in per.values()} == {test_n}, (lang, test_n)


def test_accuracy_and_squad_rows_reproduce_the_corpus_metrics():
    rng = np.random.default_rng(0)
    preds, labels = rng.integers(0, 3, 500).tolist(), rng.integers(0, 3, 500).tolist()
    s = metrics.accuracy_with_examples(preds, labels)
    assert s["accuracy"] == metrics.accuracy(preds, labels) == pytest.approx(s.examples["accuracy"].value(), abs=1e-15)
    words = ["paris", "the city", "blue", "a red car", "", "one two three"]
    refs = {f"q{i}": [words[i % 6], words[(i + 1) % 6]] for i in range(60)}
    predictions = {f"q{i}": words[(i * 7) % 6] for i in range(0, 60, 2)}  # half unanswered
    s = metrics.squad_scores_with_examples(predictions, refs)
    assert dict(s) == metrics.squad_scores(predictions, refs)
    for k in ("exact_match", "f1"):
        assert s.examples[k].value() == pytest.approx(s[k], rel=1e-12)


@pytest.mark.parametrize("mode", ["default", "strict"])
def test_per_sentence_entity_counts_give_seqeval_micro_scores(mode):
    rng = np.random.default_rng(1)
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
    y_true = [[tags[t] for t in rng.integers(0, 7, rng.integers(1, 12))] for _ in range(300)]
    y_pred = [[tags[t] if rng.random() < 0.6 else tags[rng.integers(0, 7)] for t in
               [tags.index(x) for x in sent]] for sent in y_true]
    s = metrics.seqeval_scores_with_examples(y_true, y_pred, mode=mode)
    ref = metrics.seqeval_scores(y_true, y_pred, mode=mode)
    for k in ("f1", "precision", "recall"):
        assert s[k] == ref[k]
        assert s.examples[k].value() == pytest.approx(ref[k], rel=1e-12)
    assert s.examples["f1"].n == 300


def test_bleu_segment_statistics_sum_to_sacrebleu_corpus_score():
    rng = np.random.default_rng(2)
    vocab = "the a cat dog sat ran on under mat rug house quickly slowly red".split()
    refs = [" ".join(rng.choice(vocab, rng.integers(3, 12))) for _ in range(120)]
    hyps = [" ".join(w if rng.random() < 0.7 else rng.choice(vocab) for w in r.split()) for r in refs]
    for kw in ({}, {"tokenize": "none"}, {"smooth_method": "floor", "smooth_value": 0.1}):
        ex = metrics.bleu_segment_statistics(hyps, refs, **kw)
        assert ex.value() == pytest.approx(metrics.bleu(hyps, refs, **kw)["score"], rel=1e-12)
    # a resample is a corpus of the drawn segments
    w = np.zeros(120)
    w[:40] = 1
    assert ex.value(w) == pytest.approx(metrics.bleu(hyps[:40], refs[:40], smooth_method="floor",
                                                     smooth_value=0.1)["score"], rel=1e-12)


def test_resampled_is_the_value_of_each_weight_row():
    rng = np.random.default_rng(3)
    ex = ExampleScores("f1", rng.integers(0, 4, (50, 3)).astype(float))
    weights = rng.multinomial(50, np.full(50, 1 / 50), size=20)
    assert np.allclose(ex.resampled(weights), [ex.value(w) for w in weights], rtol=1e-12)
    ppl = ExampleScores("exp_ratio", np.column_stack([rng.random(10) * 5, rng.integers(1, 9, 10)]))
    assert ppl.value() == pytest.approx(math.exp(ppl.rows[:, 0].sum() / ppl.rows[:, 1].sum()))


def test_bad_rows_and_reducers_are_refused():
    with pytest.raises(ExamplesError, match="unknown reducer"):
        ExampleScores("median", np.ones(3))
    with pytest.raises(ExamplesError, match="takes rows of 3"):
        ExampleScores("f1", np.ones((4, 2)))
    with pytest.raises(ExamplesError, match="NaN"):
        ExampleScores("mean", np.array([1.0, np.nan]))
    with pytest.raises(ExamplesError, match="not reported"):
        Scores({"f1": 0.5}, {"recall": ExampleScores("mean", np.ones(2))})


def test_file_round_trip_and_tamper_detection(tmp_path):
    ex = {"near": {"accuracy": ExampleScores("mean", np.array([1.0, 0.0, 1.0])),
                   "bleu": metrics.bleu_segment_statistics(["a b c d"], ["a b c e"])}}
    section = write_examples(tmp_path, "abcdef0123456789", ex)
    assert section["file"] == "abcdef0123456789.examples.npz" and section["metrics"]["near"]["accuracy"]["n"] == 3
    back = read_examples(tmp_path, "abcdef0123456789", section)
    assert np.array_equal(back["near"]["accuracy"].rows, ex["near"]["accuracy"].rows)
    assert back["near"]["bleu"].value() == pytest.approx(ex["near"]["bleu"].value())
    assert read_examples(tmp_path, "x", None) == {}
    assert write_examples(tmp_path, "empty", {}) is None
    path = tmp_path / section["file"]
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(ExamplesError, match="sha256"):
        read_examples(tmp_path, "abcdef0123456789", section)
    with pytest.raises(ExamplesError, match="must be"):
        read_examples(tmp_path, "other", section)
    path.unlink()
    with pytest.raises(ExamplesError, match="cannot read"):
        read_examples(tmp_path, "abcdef0123456789", section)
