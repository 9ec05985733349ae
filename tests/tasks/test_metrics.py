"""Metric code against hand-computed cases (no network, no model)."""

from __future__ import annotations

import math

import pytest

from tasks import metrics as M


# ---------------------------------------------------------------------------------------- SQuAD
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Eiffel Tower", "eiffel tower"),
        ("  an   apple, a pear; THE end.  ", "apple pear end"),
        ("theatre", "theatre"),  # articles only as whole words
        ("U.S.A.", "usa"),
        ("", ""),
    ],
)
def test_normalize_answer(text, expected):
    assert M.normalize_answer(text) == expected


def test_squad_em_f1_hand_computed():
    # pred "the big red car" -> [big, red, car]; gold "a red car" -> [red, car]
    # common 2: P = 2/3, R = 2/2, F1 = 2*(2/3)/(5/3) = 0.8
    assert M.squad_f1("the big red car", ["a red car"]) == pytest.approx(0.8)
    assert M.squad_exact_match("the big red car", ["a red car"]) == 0.0
    # max over gold answers
    assert M.squad_f1("red car", ["blue bike", "a red car"]) == 1.0
    assert M.squad_exact_match("Red car!", ["blue bike", "a red car"]) == 1.0
    # repeated tokens count with multiplicity: pred [paris, paris], gold [paris]
    # common 1: P = 1/2, R = 1, F1 = 2/3
    assert M.squad_f1("Paris Paris", ["Paris"]) == pytest.approx(2 / 3)
    assert M.squad_f1("", ["Paris"]) == 0.0
    assert M.squad_f1("", []) == 1.0 and M.squad_exact_match("x", []) == 0.0


def test_squad_scores_corpus():
    preds = {"q1": "the red car", "q2": "big red car", "q3": "nothing"}
    refs = {"q1": ["red car"], "q2": ["a red car"], "q3": ["answer"], "q4": ["missing"]}
    # EM: q1 1, q2 0, q3 0, q4 (no prediction) 0 -> 25; F1: 1 + 0.8 + 0 + 0 -> 45
    s = M.squad_scores(preds, refs)
    assert s["exact_match"] == pytest.approx(25.0)
    assert s["f1"] == pytest.approx(45.0)


# -------------------------------------------------------------------------------------- seqeval
def test_seqeval_modes_hand_computed():
    y_true = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    y_pred = [["I-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O"]]
    # default (conlleval): I-PER I-PER is a PER entity -> 3/3 correct
    d = M.seqeval_scores(y_true, y_pred)
    assert d["f1"] == pytest.approx(1.0) and d["mode"] == "default" and d["scheme"] is None
    # strict IOB2: the I-PER-initial span is not an entity -> P = 2/2, R = 2/3, F1 = 0.8
    s = M.seqeval_scores(y_true, y_pred, mode="strict")
    assert s["precision"] == pytest.approx(1.0)
    assert s["recall"] == pytest.approx(2 / 3)
    assert s["f1"] == pytest.approx(0.8)
    assert s["mode"] == "strict" and s["scheme"] == "IOB2"


def test_seqeval_partial_match_and_errors():
    # a boundary error is a miss in both modes: true PER(0..1), pred PER(0..0) -> P 0, R 0
    s = M.seqeval_scores([["B-PER", "I-PER"]], [["B-PER", "O"]])
    assert s["f1"] == 0.0
    with pytest.raises(ValueError, match="mode"):
        M.seqeval_scores([["O"]], [["O"]], mode="lenient")
    with pytest.raises(ValueError, match="shape"):
        M.seqeval_scores([["O", "O"]], [["O"]])


# ------------------------------------------------------------------------------------- accuracy
def test_accuracy():
    assert M.accuracy([1, 0, 2], [1, 1, 2]) == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        M.accuracy([1], [1, 2])


# ----------------------------------------------------------------------------------------- BLEU
def test_bleu_against_hand_computed_value_and_signature():
    # hyp "the cat sat on the mat" vs ref "the cat sat on a mat" (13a tokenization, one segment):
    # clipped n-gram precisions 5/6, 3/5, 2/4, 1/3; equal lengths -> BP = 1
    expected = 100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
    r = M.bleu(["the cat sat on the mat"], ["the cat sat on a mat"])
    assert r["score"] == pytest.approx(expected, abs=1e-6)
    import sacrebleu

    assert r["signature"] == f"nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:{sacrebleu.__version__}"
    # multiple reference streams; identical hypothesis -> 100
    r2 = M.bleu(["a b c d e"], [["x y"], ["a b c d e"]])
    assert r2["score"] == pytest.approx(100.0) and r2["signature"].startswith("nrefs:2|")
    with pytest.raises(ValueError, match="segments"):
        M.bleu(["a", "b"], ["a"])


# ---------------------------------------------------------------------------- perplexity / bytes
def test_perplexity_token_weighted_vs_manual():
    # two examples: 3 tokens with p = 1/2 each, 1 token with p = 1/8
    nll = [3 * math.log(2), math.log(8)]
    counts = [3, 1]
    # manual: exp(mean NLL over 4 tokens) = exp(6 ln2 / 4) = 2 ** 1.5
    assert M.token_weighted_perplexity(nll, counts) == pytest.approx(2**1.5)
    # per-example averaging would give (2 + 8) / 2 = 5: the helper must not do that
    assert M.token_weighted_perplexity(nll, counts) != pytest.approx(5.0)
    assert M.perplexity(0.0, 5) == 1.0
    with pytest.raises(ValueError):
        M.perplexity(1.0, 0)


def test_bits_per_byte():
    text = ["héllo"]  # 6 UTF-8 bytes
    assert M.utf8_bytes(text) == 6
    # 6 tokens with p = 1/2 -> 6 bits over 6 bytes
    assert M.bits_per_byte(6 * math.log(2), M.utf8_bytes(text)) == pytest.approx(1.0)
