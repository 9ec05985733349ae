"""Word aligners (methods/_align.py): fast_align's model is deterministic, recovers a known word
correspondence at least as well as IBM Model 1, and every aligner option keys the cache."""

from __future__ import annotations

import random
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from methods import _align, _aligners


def synthetic_corpus(n_pairs: int = 1500, vocab: int = 200, seed: int = 0):
    """A parallel corpus whose gold links are known.

    The target language renames every source word (source word ``s{k}`` is ``t{perm[k]}``), swaps
    adjacent words with probability 0.3 and inserts one of three unaligned function words after a
    word with probability 0.1. Words are Zipf-distributed; sentences have 4-15 words.

    Returns:
        ``(src, tgt, gold_links, perm)`` with gold links ``(source position, target position)``.
    """
    rng = np.random.default_rng(seed)
    zipf = 1.0 / np.arange(1, vocab + 1) ** 0.8
    perm = rng.permutation(vocab)
    src, tgt, gold = [], [], []
    for _ in range(n_pairs):
        ws = rng.choice(vocab, size=int(rng.integers(4, 16)), p=zipf / zipf.sum())
        order = list(range(len(ws)))
        for k in range(len(ws) - 1):
            if rng.random() < 0.3:
                order[k], order[k + 1] = order[k + 1], order[k]
        words, links = [], set()
        for i in order:  # i: the source position of the next target word
            links.add((i, len(words)))
            words.append(f"t{perm[ws[i]]}")
            if rng.random() < 0.1:
                words.append(f"fn{rng.integers(3)}")
        src.append([f"s{w}" for w in ws])
        tgt.append(words)
        gold.append(links)
    return src, tgt, gold, perm


def link_scores(links, gold) -> tuple[float, float]:
    hits = sum(len(set(x) & g) for x, g in zip(links, gold))
    return hits / max(1, sum(len(x) for x in links)), hits / sum(len(g) for g in gold)


def dictionary_precision(src, tgt, links, perm, min_count: int = 5) -> tuple[float, int]:
    """Share of source words (seen >= min_count times) whose most often aligned target word is the gold one."""
    counts: dict[str, dict[str, int]] = {}
    for s, t, ls in zip(src, tgt, links):
        for i, j in ls:
            row = counts.setdefault(s[i], {})
            row[t[j]] = row.get(t[j], 0) + 1
    checked = [w for w, row in counts.items() if sum(row.values()) >= min_count]
    right = sum(max(counts[w].items(), key=lambda kv: (kv[1], kv[0]))[0] == f"t{perm[int(w[1:])]}" for w in checked)
    return right / max(1, len(checked)), len(checked)


@pytest.fixture(scope="module")
def corpus():
    return synthetic_corpus()


def _fresh(src, tgt, **kw) -> _align.Alignment:
    _align._MEMO.clear()
    return _align.align_corpus(src, tgt, **kw)


# ------------------------------------------------------------------------------------------------
# Determinism
# ------------------------------------------------------------------------------------------------


def test_fast_align_is_the_default_and_deterministic(corpus):
    src, tgt, _, _ = corpus
    a = _fresh(src, tgt)
    assert a.info["aligner"] == "fast-align" and a.info["deterministic"] and a.info["links_from"] == "computed"
    random.seed(7)
    np.random.seed(7)
    torch.manual_seed(7)
    _ = random.random(), np.random.rand(5), torch.rand(5)
    b = _fresh(src, tgt, seed=12345)  # the seed is only eflomal's cache key: it changes nothing here
    assert b.info["links_from"] == "computed"
    assert a.links == b.links and a.info["cache_key"] == b.info["cache_key"]
    assert a.info["model"] == b.info["model"]  # tension, likelihood: bit-identical floats
    fwd1, rev1, facts1 = _align.fast_align_directional(src, tgt)
    fwd2, rev2, facts2 = _align.fast_align_directional(src, tgt)
    assert fwd1 == fwd2 and rev1 == rev2 and facts1 == facts2


def test_fast_align_cold_run_equals_cached_run(corpus, tmp_path):
    src, tgt, _, _ = corpus
    a = _fresh(src, tgt, cache_dir=tmp_path)
    b = _fresh(src, tgt, cache_dir=tmp_path)
    assert (a.info["links_from"], b.info["links_from"]) == ("computed", "cache")
    assert a.links == b.links and b.info["model"] == a.info["model"]
    c = _fresh(src, tgt, cache_dir=tmp_path / "elsewhere")
    assert c.info["links_from"] == "computed" and c.links == a.links


# ------------------------------------------------------------------------------------------------
# Quality on a corpus with a known correspondence
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("warmup", [None, 0], ids=["default", "uniform-start"])
@pytest.mark.parametrize("symmetrization", ["intersection", "grow-diag-final", "grow-diag-final-and"])
def test_fast_align_recovers_the_known_correspondence_at_least_as_well_as_ibm1(corpus, symmetrization, warmup):
    """Also with fast_align's own start (``ibm1_warmup: 0``: a uniform table, no IBM Model 1 warm start)."""
    src, tgt, gold, perm = corpus
    options = {} if warmup is None else {"ibm1_warmup": warmup}
    fa = _fresh(src, tgt, aligner="fast-align", symmetrization=symmetrization, fast_align_options=options)
    ibm = _fresh(src, tgt, aligner="ibm1", symmetrization=symmetrization)
    p_fa, r_fa = link_scores(fa.links, gold)
    p_ibm, r_ibm = link_scores(ibm.links, gold)
    assert p_fa >= 0.95 and r_fa >= 0.95, (p_fa, r_fa)
    f1 = lambda p, r: 2 * p * r / (p + r)  # noqa: E731
    assert f1(p_fa, r_fa) >= f1(p_ibm, r_ibm), (p_fa, r_fa, p_ibm, r_ibm)
    d_fa, n_fa = dictionary_precision(src, tgt, fa.links, perm)
    d_ibm, _ = dictionary_precision(src, tgt, ibm.links, perm)
    assert n_fa >= 100 and d_fa >= 0.99 and d_fa >= d_ibm, (d_fa, d_ibm)


def test_fast_align_learns_the_diagonal_tension():
    """Monotone pairs pull the tension up; pairs in reversed order (anti-diagonal) push it to its floor."""
    rng = np.random.default_rng(3)
    src = [[f"s{w}" for w in rng.integers(0, 60, size=int(rng.integers(5, 12)))] for _ in range(400)]
    same = [[w.replace("s", "t") for w in s] for s in src]
    reversed_ = [t[::-1] for t in same]
    _, _, mono = _align.fast_align_directional(src, same)
    _, _, rev = _align.fast_align_directional(src, reversed_)
    fixed = _align.fast_align_directional(src, same, optimize_tension=False)[2]
    assert mono["forward"]["tension"] > 4.0 and rev["forward"]["tension"] == pytest.approx(0.1)
    assert fixed["forward"]["tension"] == 4.0
    # even with the prior against it, the lexical table finds the reversed links
    fwd, _, _ = _align.fast_align_directional(src, reversed_)
    right = sum((i, len(s) - 1 - i) in set(ls) for s, ls in zip(src, fwd) for i in range(len(s)))
    assert right / sum(len(s) for s in src) > 0.9


def test_fast_align_handles_blocks_larger_than_one_chunk(monkeypatch, corpus):
    """Many small blocks and chunks compute the same model; only the order of float sums changes.

    (The layout is fixed by two constants, so a given corpus always gets the same one; a different
    layout can flip a Viterbi choice between two near-equal source words, nothing more.)
    """
    src, tgt, _, _ = corpus
    ref = _align.fast_align_directional(src[:300], tgt[:300])
    monkeypatch.setattr(_aligners, "_BLOCK_ENTRIES", 50)
    monkeypatch.setattr(_aligners, "_CHUNK_ENTRIES", 300)
    small = _align.fast_align_directional(src[:300], tgt[:300])
    for a, b in ((ref[0], small[0]), (ref[1], small[1])):
        same = sum(len(set(x) & set(y)) for x, y in zip(a, b))
        assert same >= 0.995 * sum(map(len, a)) and sum(map(len, a)) == sum(map(len, b))
    for d in ("forward", "reverse"):
        assert small[2][d]["tension"] == pytest.approx(ref[2][d]["tension"], rel=1e-9)
        assert small[2][d]["log_likelihood"] == pytest.approx(ref[2][d]["log_likelihood"], rel=1e-9)


# ------------------------------------------------------------------------------------------------
# Cache keys and options
# ------------------------------------------------------------------------------------------------


def test_cache_key_covers_aligner_and_its_parameters(corpus, tmp_path):
    src, tgt = corpus[0][:200], corpus[1][:200]
    runs = {
        "fast-align": _fresh(src, tgt, cache_dir=tmp_path),
        "fast-align p0": _fresh(src, tgt, cache_dir=tmp_path, fast_align_options={"p0": 0.2}),
        "fast-align fixed": _fresh(src, tgt, cache_dir=tmp_path, fast_align_options={"optimize_tension": False}),
        "fast-align iterations": _fresh(src, tgt, cache_dir=tmp_path, fast_align_options={"iterations": 3}),
        "ibm1": _fresh(src, tgt, cache_dir=tmp_path, aligner="ibm1"),
        "ibm1 iterations": _fresh(src, tgt, cache_dir=tmp_path, aligner="ibm1", ibm1_iterations=2),
    }
    keys = {name: r.info["cache_key"] for name, r in runs.items()}
    assert len(set(keys.values())) == len(keys), keys
    assert all(r.info["links_from"] == "computed" for r in runs.values())  # no run read another's links
    assert len(list((tmp_path / "alignments").glob("*.npz"))) == len(keys)
    for name, r in runs.items():
        assert r.info["options"]["aligner"] == name.split()[0]
    assert runs["fast-align p0"].info["options"]["p0"] == 0.2
    # the eflomal/ibm1/fast-align options of other aligners do not enter a key
    again = _fresh(src, tgt, cache_dir=tmp_path, aligner="ibm1", fast_align_options={"p0": 0.3})
    assert again.info["cache_key"] == keys["ibm1"] and again.info["links_from"] == "cache"
    # symmetrization is recomputed from the cached directional links
    inter = _fresh(src, tgt, cache_dir=tmp_path, symmetrization="intersection")
    assert inter.info["cache_key"] == keys["fast-align"] and inter.info["links_from"] == "cache"
    assert sum(map(len, inter.links)) <= sum(map(len, runs["fast-align"].links))


def test_eflomal_is_marked_nondeterministic_and_keyed_by_seed():
    src = [["a", "b", "c"], ["a", "c"], ["b", "c"]] * 4
    tgt = [["x", "y", "z"], ["x", "z"], ["y", "z"]] * 4
    a = _fresh(src, tgt, aligner="eflomal", seed=1)
    b = _fresh(src, tgt, aligner="eflomal", seed=2)
    assert not a.info["deterministic"] and a.info["cache_key"] != b.info["cache_key"]
    assert _align.NONDETERMINISTIC_ALIGNERS == ("eflomal",)
    assert _fresh(src, tgt, aligner="ibm1").info["deterministic"]


@pytest.mark.parametrize(
    "options, match",
    [
        ({"p0": 0.0}, "p0 must be a number strictly between 0 and 1"),
        ({"p0": 1.5}, "p0"),
        ({"tension": -1.0}, "tension must be a number > 0"),
        ({"alpha": -0.1}, "alpha must be a number >= 0"),
        ({"iterations": 0}, "iterations must be an integer >= 1"),
        ({"optimize_tension": "yes"}, "optimize_tension must be true or false"),
        ({"lambda": 4.0}, r"unknown \['lambda'\]"),
    ],
)
def test_fast_align_options_are_checked(options, match):
    with pytest.raises(ValueError, match=match):
        _align.align_corpus([["a"]], [["b"]], fast_align_options=options)


def test_plain_em_and_ibm1_warmup_options(corpus):
    src, tgt, gold, _ = corpus
    src, tgt, gold = src[:500], tgt[:500], gold[:500]
    for options in ({"alpha": 0.0}, {"ibm1_warmup": 0}, {"ibm1_warmup": 2}):
        a = _fresh(src, tgt, fast_align_options=options)
        p, r = link_scores(a.links, gold)
        assert p > 0.9 and r > 0.9, (options, p, r)


def race_two(monkeypatch, call, module, name: str, wait_s: float = 1.0) -> tuple[list, int]:
    """Run ``call()`` in two threads at once, with the expensive build ``module.name`` slowed down: a
    builder waits up to ``wait_s`` for a second one to start building too, so builders that do not
    lock each other out both build. Returns both results and how many builds ran."""
    real, guard, both, built = getattr(module, name), threading.Lock(), threading.Event(), []

    def slow(*a, **k):
        with guard:
            built.append(name)
            if len(built) >= 2:
                both.set()
        both.wait(wait_s)
        return real(*a, **k)

    monkeypatch.setattr(module, name, slow)
    with ThreadPoolExecutor(2) as pool:
        results = [f.result() for f in [pool.submit(call) for _ in range(2)]]
    return results, len(built)


def test_two_workers_aligning_one_corpus_align_it_once(corpus, tmp_path, monkeypatch):
    """Two workers of a grid asking for the same uncached alignment: one aligns, the other waits on the
    entry's build lock (<cache>/.locks/alignments-*) and reads the stored links."""
    src, tgt = corpus[0][:200], corpus[1][:200]
    _align._MEMO.clear()
    results, built = race_two(monkeypatch, lambda: _align.align_corpus(src, tgt, aligner="ibm1", cache_dir=tmp_path),
                              _align, "_directional_links")
    assert built == 1
    assert sorted(r.info["links_from"] for r in results) in (["cache", "computed"], ["computed", "memo"])
    assert results[0].links == results[1].links
    assert len(list((tmp_path / "alignments").glob("*.npz"))) == 1
    assert list((tmp_path / ".locks").glob("alignments-*.lock"))
