"""The long steps of the methods report progress through :mod:`harness.progress` (one bar per step,
advanced to its total and closed), and reporting never changes what a method computes."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
import torch

from harness import progress
from harness.protocols import TransferInputs
from harness.registry import get
from harness.vocab import vocab_size
from methods import _align
from methods.focus import focus_mapping
from tests._tokfixtures import TARGET_TEXT, unigram
from tests.methods.test_tiktotok_fallback import FAST_FT, KnnWorld


class Recorder:
    """A bar factory that keeps every bar it made."""

    def __init__(self) -> None:
        self.bars: list[Recorder.Bar] = []

    class Bar:
        def __init__(self, desc: str, total: int | None) -> None:
            self.desc, self.total, self.done, self.closed = desc, total, 0, False

        def update(self, n: int = 1) -> None:
            self.done += n

        def close(self) -> None:
            self.closed = True

    def __call__(self, desc: str, total: int | None) -> Bar:
        bar = Recorder.Bar(desc, total)
        self.bars.append(bar)
        return bar

    def named(self, desc: str) -> list[Bar]:
        return [b for b in self.bars if b.desc == desc]


def _same_mapping(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("indptr", "indices", "weights", "provenance"))


def _run_both(method: str, inputs: TransferInputs, config: dict | None = None):
    """The method's result while reporting and silent, and the bars it showed."""
    rec = Recorder()
    with progress.reporting(rec):
        shown = get("method", method).make(config).initialize(inputs, np.random.default_rng(3))
    silent = get("method", method).make(config).initialize(inputs, np.random.default_rng(3))
    assert _same_mapping(silent.mapping, shown.mapping)
    assert rec.bars and all(b.closed for b in rec.bars)
    return rec


@pytest.mark.parametrize(("method", "desc"), [("vipi", "VIPI partitions (target tokens)"),
                                              ("mean-of-pieces", "mean of pieces (target tokens)")])  # fmt: skip
def test_per_token_loops_show_a_bar_over_the_target_vocabulary(method, desc):
    src, tgt = unigram(), unigram(TARGET_TEXT)
    emb = torch.randn(vocab_size(src), 8, generator=torch.Generator().manual_seed(0))
    rec = _run_both(method, TransferInputs(src, tgt, emb))
    (bar,) = rec.named(desc)
    assert bar.total == vocab_size(tgt) and bar.done == bar.total


def test_tiktotok_shows_every_long_step(tmp_path, monkeypatch):
    monkeypatch.setattr(_align, "_MEMO", OrderedDict())  # the aligner runs (not an in-process memo hit)
    world = KnnWorld(tmp_path)
    cfg = {**FAST_FT, "min_count": 3, "aligner": "fast-align", "fallback": "fasttext-knn", "smoothing": "none"}
    rec = _run_both("tiktotok", world.inputs(), cfg)
    n_pairs = sum(1 for line in world.corpus.read_text(encoding="utf-8").splitlines() if line.strip())
    words = rec.named("words tokenized in context (sentences)")
    assert [b.total for b in words] == [n_pairs, n_pairs] and all(b.done == n_pairs for b in words)
    assert len(rec.named("fast_align (EM iterations, one direction)")) == 2
    (sym,) = rec.named("grow-diag-final (sentence pairs)")
    assert sym.total == sym.done == n_pairs
    lookups = rec.named("fastText token vectors (vocabulary lookups)")
    assert sorted(b.total for b in lookups) == sorted([len(world.tgt_vocab), len(world.src_vocab)])
    assert rec.named("fastText token vectors (n-gram means, by position)")  # the target side's rare tokens
    for side in ("target", "source"):
        (pre,) = rec.named(f"pre-tokenizing {side}.txt (MB)")
        assert pre.done > 0 and pre.closed
    search = rec.named("similarity search (query rows)")
    assert search and all(b.done == b.total for b in search)


def test_focus_combination_shows_its_similarity_search():
    rng = np.random.default_rng(0)
    aux = rng.standard_normal((300, 8)).astype(np.float32)
    overlap = np.stack([np.arange(100), np.arange(100)], axis=1)
    rec = Recorder()
    kw = {"specials": np.zeros((0, 2), int), "overlap": overlap, "aux": aux, "has_aux": np.ones(300, bool), "chunk_rows": 64}
    silent = focus_mapping(300, 100, **kw)
    with progress.reporting(rec):
        shown = focus_mapping(300, 100, **kw)
    assert _same_mapping(silent.mapping, shown.mapping)
    (bar,) = rec.named("sparsemax over cosine similarities (query rows)")
    assert bar.total == bar.done == 200 and bar.closed


def test_a_step_bar_completes_only_when_the_step_does():
    rec = Recorder()
    with progress.reporting(rec):
        with progress.step("loading"):
            pass
        with pytest.raises(RuntimeError), progress.step("failing"):
            raise RuntimeError("boom")
    (ok,), (bad,) = rec.named("loading"), rec.named("failing")
    assert (ok.total, ok.done, ok.closed) == (1, 1, True) and (bad.done, bad.closed) == (0, True)


def test_canonicalization_shows_a_bar_over_the_vocabulary():
    import copy

    from harness import families
    from harness.vocab import canonical_vocab

    tok = copy.deepcopy(unigram())  # a fresh object: not canonicalized (memoized) yet
    families._CONTENT_MEMO.clear()  # nor by content: another test of this process may have canonicalized its twin
    rec = Recorder()
    with progress.reporting(rec):
        canonical_vocab(tok)
    (bar,) = rec.named("canonical token forms")
    assert bar.total == len(tok.get_vocab()) == bar.done and bar.closed


@pytest.mark.parametrize("method", ["random", "from-scratch"])
def test_initialize_shows_the_model_load_and_the_install(tmp_path, method):
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM

    from harness.model.initialize import InitRequest, initialize
    from harness.protocols import TransferResources

    src, tgt = unigram(), unigram(TARGET_TEXT)
    cfg = XLMRobertaConfig(vocab_size=len(src), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=64, pad_token_id=src.pad_token_id)
    XLMRobertaForMaskedLM(cfg).save_pretrained(tmp_path / "src")
    src.save_pretrained(tmp_path / "src")
    rec = Recorder()
    with progress.reporting(rec):
        init = initialize(InitRequest(source_model=str(tmp_path / "src"), target_tokenizer=tgt, method=method,
                                      method_config=None, seed=1, model_kind="mlm", resources=TransferResources()))
    names = [b.desc for b in rec.bars if b.total == 1]
    want = [f"loading the source model {tmp_path / 'src'}", f"installing the new embeddings ({len(tgt)} rows)"]
    if method == "from-scratch":
        want.append("re-initializing every parameter (from-scratch)")
    assert names == want and all(b.done == 1 and b.closed for b in rec.bars if b.total == 1)
    assert init.model.get_input_embeddings().weight.shape[0] == len(tgt)


def test_terminal_bar_is_the_one_bar_of_grids_pretraining_and_tasks():
    """Grid trials, source pretraining and task batches draw through harness.progress.terminal_bar:
    its title, count, fields and description reach the console; disabled, nothing is drawn."""
    import io
    import pathlib

    from rich.console import Console

    from harness import progress

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=160)
    with progress.terminal_bar("pretraining mlm source", 4, fields=("loss",), console=console) as bar:
        bar.describe("seed 3")
        for _ in range(4):
            bar.advance(1, loss="2.500")
    text = out.getvalue()
    assert "pretraining mlm source" in text and "4/4" in text and "loss 2.500" in text and "seed 3" in text
    quiet = io.StringIO()
    with progress.terminal_bar("x", 2, enabled=False, console=Console(file=quiet, force_terminal=True)) as bar:
        bar.advance(2, loss="1")
    assert quiet.getvalue() == ""
    assert list(progress.terminal_iterate(iter(range(3)), "t", enabled=False)) == [0, 1, 2]
    # no second bar implementation left in the rooms that draw one
    root = pathlib.Path(__file__).resolve().parents[2]
    for rel in ("harness/run/executors.py", "harness/world/pretrain.py", "harness/world/pretrain_model.py", "tasks/loop.py"):
        assert "rich.progress" not in (root / rel).read_text(), rel


def test_watchdog_speaks_after_first_silence_then_every_interval_and_not_after_a_line():
    import time

    from harness.progress import Watchdog

    out: list[str] = []
    with Watchdog(out.append, every=30, what="importing libraries", first=0.05) as dog:
        time.sleep(0.4)
        assert len(out) == 1 and out[0].startswith("still importing libraries (")  # once, then the 30 s interval
        dog.touch("reading the corpus")
        time.sleep(0.2)
    assert len(out) == 1  # a line was written: the full interval applies again
    out.clear()
    with Watchdog(out.append, every=0.05) as dog:
        for _ in range(6):
            dog.touch("busy but talking")
            time.sleep(0.02)
    assert out == []
