"""End-to-end parity of FOCUS with the reference package ``deepfocus`` on the same inputs.

``deepfocus.FOCUS(...)`` runs whole (its canonicalization, overlap, fastText lookups, sparsemax) on
SentencePiece-Unigram tokenizers and a cbow fastText model trained on target text tokenized the way
``deepfocus`` tokenizes it; :class:`methods.focus.Focus` with :meth:`FocusConfig.reference` and that
model must give the same rows, except rows that both initialize randomly (different generators).
Each option that departs from the reference (the paper's specials, tokxfer's escaped fastText words)
is shown to change exactly the rows it explains. ``benchmarks/bench_focus.py --end-to-end`` runs the
same comparison at scale through ``tokxfer init``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from harness.model.surgery import materialize
from harness.protocols import COMBINED, FALLBACK, TransferInputs
from methods import _fasttext
from methods.focus import Focus, FocusConfig
from tests.conftest import reference_module

reference_module("deepfocus")
reference_module("fastdist")

ATOL = 1e-5


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from benchmarks._synthetic import SOURCE_LETTERS, TARGET_LETTERS, make_lexicon, write_corpus
    from harness.tokenizers import train_tokenizer

    d = tmp_path_factory.mktemp("focus-parity")
    src_lex = make_lexicon(3000, 0, SOURCE_LETTERS)
    tgt_lex = make_lexicon(2500, 2, TARGET_LETTERS, shared=src_lex[200:260])
    src_text = write_corpus(d / "source.txt", src_lex, 8000, 3)
    tgt_text = write_corpus(d / "target.txt", tgt_lex, 20000, 4)
    src = train_tokenizer([src_text], "unigram", vocab_size=600, cache_dir=d / "cache")
    tgt = train_tokenizer([tgt_text], "unigram", vocab_size=400, cache_dir=d / "cache")
    tok_text = d / "target.tokenized.txt"  # as deepfocus writes it: " ".join(tokenizer.tokenize(line))
    with open(tgt_text, encoding="utf-8") as f, open(tok_text, "w", encoding="utf-8") as out:
        for line in f:
            out.write(" ".join(tgt.tokenize(line.rstrip("\n"))) + "\n")
    aux = d / "aux.bin"
    _fasttext.train_fasttext(tok_text, dim=100, epoch=3, min_count=10, model="cbow", neg=10, bucket=200_000,
                             seed=0, threads=1).save_model(str(aux))
    E = torch.randn(len(src), 32, generator=torch.Generator().manual_seed(0)) * 0.05
    return {"src": src, "tgt": tgt, "aux": aux, "E": E}


@pytest.fixture(scope="module")
def deepfocus_rows(files):
    import deepfocus.focus as dfm

    seen = {}
    combine = dfm.focus_additional_token_initialization

    def observe(anchors, new_tokens, *a, **k):  # records which rows deepfocus combines; changes nothing
        seen["combined"] = sorted(int(v.target.id) for v in new_tokens.values())
        return combine(anchors, new_tokens, *a, **k)

    mp = pytest.MonkeyPatch()
    mp.setattr(dfm, "focus_additional_token_initialization", observe)
    try:
        rows = dfm.FOCUS(target_tokenizer=files["tgt"], source_tokenizer=files["src"], source_embeddings=files["E"],
                         fasttext_model_path=str(files["aux"]), verbosity="silent")
    finally:
        mp.undo()
    return rows.numpy(), seen["combined"]


def _result(files, **overrides):
    cfg = FocusConfig.reference(aux_model_path=str(files["aux"]), **overrides)
    return Focus(cfg).initialize(TransferInputs(files["src"], files["tgt"], files["E"]), np.random.default_rng(0))


def _tokxfer(files, **overrides):
    res = _result(files, **overrides)
    rows = materialize(res.mapping, files["E"], torch.Generator().manual_seed(0)).numpy()
    return rows, res.mapping


def _differing(a: np.ndarray, b: np.ndarray, keep: np.ndarray) -> np.ndarray:
    return np.flatnonzero(keep & (np.abs(a.astype(np.float64) - b).max(axis=1) > ATOL))


def test_reference_preset_matches_deepfocus_on_every_non_random_row(files, deepfocus_rows):
    df_rows, df_combined = deepfocus_rows
    rows, m = _tokxfer(files)
    assert sorted(np.flatnonzero(m.provenance == COMBINED).tolist()) == df_combined
    assert len(df_combined) > 100
    not_random = m.provenance != FALLBACK  # deepfocus's random rows are the others: same set (above)
    assert _differing(rows, df_rows, not_random).tolist() == []
    assert np.abs(rows[not_random] - df_rows[not_random]).max() < 1e-6


def test_each_departure_from_the_reference_changes_only_the_rows_it_explains(files, deepfocus_rows):
    df_rows, _ = deepfocus_rows
    ref_rows, ref = _tokxfer(files)
    eos = files["src"].eos_token_id
    keep = ref.provenance != FALLBACK
    # the paper's specials: only rows where the reference gives </s> weight differ from deepfocus
    paper_rows, _ = _tokxfer(files, special_anchors=False)
    differ = _differing(paper_rows, df_rows, keep)
    uses_eos = [t for t in np.flatnonzero(ref.provenance == COMBINED) if eos in ref.row(t)[0]]
    assert len(differ) > 0 and differ.tolist() == uses_eos
    # tokxfer's escaped fastText words miss the backslash tokens of a model the reference trained
    tokens = files["tgt"].convert_ids_to_tokens(list(range(len(files["tgt"]))))
    assert any("\\" in t for t in tokens)
    esc_rows, esc = _tokxfer(files, aux_token_format="string")
    ref_res = _result(files)
    esc_res = _result(files, aux_token_format="string")
    assert esc_res.info["focus"]["anchors"] < ref_res.info["focus"]["anchors"]
    src_tokens = files["src"].convert_ids_to_tokens(list(range(len(files["src"]))))
    uses_backslash = {int(t) for t in np.flatnonzero(ref.provenance == COMBINED)
                      if any("\\" in src_tokens[s] for s in ref.row(t)[0])}
    backslash_rows = {i for i, t in enumerate(tokens) if "\\" in t}
    changed = _differing(esc_rows, df_rows, keep & (esc.provenance != FALLBACK))
    assert set(changed.tolist()) <= uses_backslash | backslash_rows
