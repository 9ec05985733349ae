"""VIPI: partitions against brute force, averages, variants, determinism, real tokenizers."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
import torch

from harness import vocab as _canon
from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL, TransferInputs
from harness.registry import get
from harness.vocab import Canon
from methods.vipi import VIPI, SourcePieceIndex, VipiConfig, optimal_partitions, vipi_mapping
from tests._tokfixtures import TARGET_TEXT, bytelevel, from_vocab, unigram, wordpiece


def chars(piece: bytes) -> int:
    """Length in characters (a broken UTF-8 sequence counts as one, like ``errors="replace"``)."""
    return len(piece.decode("utf-8", errors="replace"))


def brute_force(text: bytes, word_start: bool, source: list[Canon | None]) -> list[tuple[int, ...]]:
    """All kept partitions by plain recursion (exponential; short strings only)."""
    ws: dict[bytes, int] = {}
    cont: dict[bytes, int] = {}
    marker = None
    for i, c in enumerate(source):
        if c is None:
            continue
        if not c.text:
            if c.word_start and marker is None:
                marker = i
            continue
        (ws if c.word_start else cont).setdefault(c.text, i)
    found: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def rec(i: int, ids: list[int], lens: list[int]) -> None:
        if i == len(text):
            found.append((tuple(ids), tuple(lens)))
            return
        for j in range(i + 1, len(text) + 1):
            s = cont.get(text[i:j])
            if s is not None:
                rec(j, ids + [s], lens + [chars(text[i:j])])

    if word_start:
        for j in range(1, len(text) + 1):
            s = ws.get(text[:j])
            if s is not None:
                rec(j, [s], [chars(text[:j])])
        if marker is not None:
            rec(0, [marker], [0])
    else:
        rec(0, [], [])
    if not found:
        return []
    k = min(len(p) for p, _ in found)
    found = [f for f in found if len(f[0]) == k]
    longest = max(max(lens) for _, lens in found)
    return sorted(p for p, lens in found if max(lens) == longest)


def average(parts: list[tuple[int, ...]]) -> dict[int, float]:
    acc: Counter[int] = Counter()
    for p in parts:
        for s in p:
            acc[s] += 1.0 / len(p) / len(parts)
    return dict(acc)


def random_vocab(r: random.Random, alphabet: str) -> list[Canon | None]:
    vocab: list[Canon | None] = [None]
    for _ in range(r.randint(1, 16)):
        text = "".join(r.choice(alphabet) for _ in range(r.randint(0, 3)))
        vocab.append(Canon(text.encode(), r.random() < 0.5))
    return vocab


def test_partitions_match_brute_force_on_random_vocabularies():
    r = random.Random(1234)
    n_split = n_multi = 0
    for case in range(1500):
        alphabet = ("ab", "abc", "aé", "aé€")[case % 4]  # multibyte letters: lengths count characters
        source = random_vocab(r, alphabet)
        text = "".join(r.choice(alphabet) for _ in range(r.randint(1, 9))).encode()
        word_start = r.random() < 0.5
        index = SourcePieceIndex(source)
        got = optimal_partitions(text, word_start, index)
        want = brute_force(text, word_start, source)
        assert sorted(got.partitions) == want, (text, word_start, source)
        assert got.count == len(want)
        if want:
            n_split += 1
            n_multi += len(want) > 1
            assert got.n_pieces == len(want[0])
            exact = optimal_partitions(text, word_start, index, enumerate_all=False)
            assert exact.partitions is None and exact.count == len(want)
            ref = average(want)
            assert set(exact.weights) == set(ref)
            for s, w in exact.weights.items():
                assert w == pytest.approx(ref[s], abs=1e-12)
            assert sum(exact.weights.values()) == pytest.approx(1.0)
    assert n_split > 300 and n_multi > 25  # the generator exercises both cases


def test_fewest_pieces_then_longest_piece():
    src = [Canon(b"ab", True), Canon(b"a", True), Canon(b"b", False), Canon(b"c", False), Canon(b"bc", False),
           Canon(b"abc", False), Canon(b"d", False)]  # fmt: skip
    idx = SourcePieceIndex(src)
    # "abcd": ab+c+d (3), a+bc+d (3), a+b+c+d (4); "abc" is a continuation token, not allowed first
    ps = optimal_partitions(b"abcd", True, idx)
    assert ps.partitions == [(0, 3, 6), (1, 4, 6)] and ps.n_pieces == 3 and ps.longest == 2
    # as a continuation token, "abc"+"d" has 2 pieces and wins
    assert optimal_partitions(b"abcd", False, idx).partitions == [(5, 6)]
    # fewest pieces first, then longest: x+yyy (2, longest 3) beats xy+yy (2, longest 2)
    src2 = [Canon(b"x", True), Canon(b"xy", True), Canon(b"yyy", False), Canon(b"yy", False), Canon(b"y", False)]
    assert optimal_partitions(b"xyyy", True, SourcePieceIndex(src2)).partitions == [(0, 2)]


def test_longest_piece_is_measured_in_characters():
    # "éab": é+ab and éa+b both have 2 pieces whose longest piece has 2 characters, so both are kept
    # (in UTF-8 bytes "éa" has 3 and "ab" 2, which would keep only éa+b)
    src = [None, Canon("é".encode(), True), Canon(b"ab", False), Canon("éa".encode(), True), Canon(b"b", False)]
    ps = optimal_partitions("éab".encode(), True, SourcePieceIndex(src))
    assert sorted(ps.partitions) == [(1, 2), (3, 4)] and ps.longest == 2 and ps.count == 2
    exact = optimal_partitions("éab".encode(), True, SourcePieceIndex(src), enumerate_all=False)
    assert exact.weights == pytest.approx({1: 0.25, 2: 0.25, 3: 0.25, 4: 0.25})
    m, _ = vipi_mapping(
        [None, Canon("éab".encode(), True)], src, n_source=len(src), exact=np.zeros((0, 2)), specials=np.zeros((0, 2)),
        config=VipiConfig(), rng=np.random.default_rng(0),
    )  # fmt: skip
    ids, ws = m.row(1)
    assert ids.tolist() == [1, 2, 3, 4] and np.allclose(ws, 0.25)
    # "€x"+"y" and "€"+"xy" tie at 2 characters (in bytes "€x" has 4 and "xy" 2)
    src2 = [Canon("€x".encode(), True), Canon(b"y", False), Canon("€".encode(), True), Canon(b"xy", False)]
    assert sorted(optimal_partitions("€xy".encode(), True, SourcePieceIndex(src2)).partitions) == [(0, 1), (2, 3)]


def test_bare_marker_may_open_a_word_start_partition():
    src = [None, Canon(b"", True), Canon(b"foo", False), Canon(b"fo", True), Canon(b"o", False)]
    ps = optimal_partitions(b"foo", True, SourcePieceIndex(src))
    # ▁+foo and ▁fo+o both have 2 pieces; ▁+foo holds the longest piece (3)
    assert ps.partitions == [(1, 2)]
    # an empty continuation token is never a piece (it would allow endless partitions)
    assert optimal_partitions(b"o", False, SourcePieceIndex([Canon(b"", False), Canon(b"o", False)])).partitions == [
        (1,)
    ]


def test_no_partition_is_fallback():
    target = [None, Canon(b"zz", True), Canon(b"ab", False), Canon(b"", True)]
    source = [None, Canon(b"a", True), Canon(b"b", False)]
    m, info = vipi_mapping(
        target, source, n_source=3, exact=np.zeros((0, 2)), specials=np.array([[0, 0]]), config=VipiConfig(),
        rng=np.random.default_rng(0),
    )  # fmt: skip
    assert m.provenance.tolist() == [SPECIAL, FALLBACK, FALLBACK, FALLBACK]
    assert info["fallback_reasons"] == {"empty-token": 1, "no-partition": 2}


def test_rows_are_averages_of_partition_averages():
    source = [None, Canon(b"ab", True), Canon(b"a", True), Canon(b"c", False), Canon(b"bc", False), Canon(b"d", False)]
    target = [None, Canon(b"abcd", True), Canon(b"d", False), Canon(b"abc", True)]
    E = torch.randn(len(source), 4, generator=torch.Generator().manual_seed(0))
    m, info = vipi_mapping(
        target, source, n_source=len(source), exact=np.array([[2, 5]]), specials=np.array([[0, 0]]),
        config=VipiConfig(), rng=np.random.default_rng(0),
    )  # fmt: skip
    dense = torch.zeros(len(target), len(source))
    for t in range(len(target)):
        ids, ws = m.row(t)
        dense[t, torch.as_tensor(ids)] = torch.as_tensor(ws)
    out = dense @ E
    # abcd: (ab+c+d)/3 and (a+bc+d)/3, averaged
    want = ((E[1] + E[3] + E[5]) / 3 + (E[2] + E[4] + E[5]) / 3) / 2
    assert torch.allclose(out[1], want, atol=1e-6)
    assert torch.allclose(out[2], E[5]) and m.provenance[2] == COPIED
    assert torch.allclose(out[3], ((E[1] + E[3]) / 2 + (E[2] + E[4]) / 2) / 2, atol=1e-6)
    assert m.provenance[1] == COMBINED
    assert info["partitions"]["tokens_with_several_partitions"] == 2


def test_max_partitions_caps_enumeration_and_is_recorded():
    source = [Canon(b"a", True), Canon(b"a", False), Canon(b"aa", False), Canon(b"aa", True)]
    # "aaaaaa" word-start: 3 pieces (aa+aa+aa, or a+aa+... no: fewest is 3 with longest 2)
    full = optimal_partitions(b"aaaaaaa", True, SourcePieceIndex(source))
    assert full.count > 2
    target = [Canon(b"aaaaaaa", True)]
    kw = dict(n_source=4, exact=np.zeros((0, 2)), specials=np.zeros((0, 2)), rng=np.random.default_rng(0))
    m_all, info_all = vipi_mapping(target, source, config=VipiConfig(), **kw)
    m_cap, info_cap = vipi_mapping(target, source, config=VipiConfig(max_partitions=2), **kw)
    assert info_all["partitions"]["capped_tokens"] == 0 and info_cap["partitions"]["capped_tokens"] == 1
    capped = optimal_partitions(b"aaaaaaa", True, SourcePieceIndex(source), limit=2)
    assert capped.capped and len(capped.partitions) == 2
    ids, ws = m_cap.row(0)
    assert dict(zip(ids.tolist(), ws.tolist())) == pytest.approx(average(capped.partitions))
    ids, ws = m_all.row(0)
    assert dict(zip(ids.tolist(), ws.tolist())) == pytest.approx(average(full.partitions))


def test_huge_partition_counts_stay_polynomial():
    # each "abc" block splits as ab+c or a+bc (2 pieces, longest 2): 2^100 kept partitions
    source = [Canon(s, False) for s in (b"ab", b"c", b"a", b"bc")] + [Canon(b"x", True)]
    ps = optimal_partitions(b"abc" * 100, False, SourcePieceIndex(source), enumerate_all=False)
    assert ps.n_pieces == 200 and ps.count == 2**100
    assert ps.weights == pytest.approx({0: 0.25, 1: 0.25, 2: 0.25, 3: 0.25})
    assert optimal_partitions(b"abc" * 100, False, SourcePieceIndex(source), limit=5).capped
    # word start: only "x" is a word-start piece, so there is no partition at all
    assert optimal_partitions(b"abc" * 100, True, SourcePieceIndex(source), enumerate_all=False).count == 0
    # one-random draws uniformly among 2^100 partitions with exact big-integer arithmetic
    m, info = vipi_mapping(
        [Canon(b"abc" * 100, False)], source, n_source=5, exact=np.zeros((0, 2)), specials=np.zeros((0, 2)),
        config=VipiConfig(variant="one-random"), rng=np.random.default_rng(0),
    )  # fmt: skip
    ids, ws = m.row(0)
    assert ws.sum() == pytest.approx(1.0) and info["partitions"]["max_partitions_of_a_token"] == float(2**100)


def _vipi(src_tok, tgt_tok, variant="all", seed=0, **cfg):
    method = get("method", "vipi").make({"variant": variant, **cfg})
    E = torch.randn(len(src_tok), 8, generator=torch.Generator().manual_seed(1))
    return method.initialize(TransferInputs(src_tok, tgt_tok, E), np.random.default_rng(seed))


def test_one_random_picks_one_kept_partition():
    source = [None, Canon(b"ab", True), Canon(b"a", True), Canon(b"c", False), Canon(b"bc", False)]
    target = [None, Canon(b"abc", True)]
    kept = optimal_partitions(b"abc", True, SourcePieceIndex(source)).partitions
    seen = set()
    for seed in range(20):
        m, _ = vipi_mapping(
            target, source, n_source=5, exact=np.zeros((0, 2)), specials=np.array([[0, 0]]),
            config=VipiConfig(variant="one-random"), rng=np.random.default_rng(seed),
        )  # fmt: skip
        ids, ws = m.row(1)
        assert np.allclose(ws, 0.5)
        seen.add(tuple(ids.tolist()))
    assert seen == {tuple(sorted(p)) for p in kept}  # both kept partitions occur, nothing else


def test_variants_on_real_tokenizers():
    src, tgt = unigram(), unigram(TARGET_TEXT)
    full = _vipi(src, tgt, "all")
    one = _vipi(src, tgt, "one-random")
    shuffle = _vipi(src, tgt, "match-shuffle")
    for r in (one, shuffle):
        assert np.array_equal(r.mapping.provenance != FALLBACK, full.mapping.provenance != FALLBACK)
    exact = _canon.compute_overlap(src, tgt).exact
    assert len(exact) > 100
    for r in (one, shuffle):
        for t, s in exact:
            assert r.mapping.provenance[t] == COPIED and r.mapping.row(t)[0].tolist() == [s]
    # match-shuffle: as many distinct random rows as the partition has pieces, uniform weights
    canon_t = _canon.canonical_vocab(tgt)
    idx = SourcePieceIndex(_canon.canonical_vocab(src), len(src))
    different = 0
    split = np.setdiff1d(
        np.flatnonzero(full.mapping.provenance != FALLBACK), np.concatenate([exact[:, 0], np.arange(5)])
    )
    for t in split:
        ps = optimal_partitions(canon_t[t].text, canon_t[t].word_start, idx, enumerate_all=False)
        ids, ws = shuffle.mapping.row(t)
        assert len(ids) == ps.n_pieces and np.allclose(ws, 1.0 / ps.n_pieces)
        different += set(ids.tolist()) != set(full.mapping.row(t)[0].tolist())
    assert different > 0


@pytest.mark.parametrize("variant", ["all", "one-random", "match-shuffle"])
def test_determinism_under_disturbed_global_rng(variant):
    src, tgt = unigram(), bytelevel(TARGET_TEXT)
    a = _vipi(src, tgt, variant, seed=7)
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    _ = np.random.rand(10), torch.rand(10), random.random()
    b = _vipi(src, tgt, variant, seed=7)
    for field in ("indptr", "indices", "weights", "provenance"):
        assert np.array_equal(getattr(a.mapping, field), getattr(b.mapping, field))
    assert a.info["counts"] == b.info["counts"]


@pytest.mark.parametrize("families", [(unigram, bytelevel), (bytelevel, wordpiece), (wordpiece, unigram)])
def test_real_tokenizers_copy_overlap_and_specials(families):
    src_f, tgt_f = families
    src, tgt = src_f(), tgt_f(TARGET_TEXT)
    res = _vipi(src, tgt)
    ov = _canon.compute_overlap(src, tgt, n_source=len(src))
    m = res.mapping
    assert m.n_target == len(tgt) and m.n_source == len(src)
    for t, s in ov.exact:
        assert m.provenance[t] == COPIED and m.row(t)[0].tolist() == [s]
    for t, s in ov.specials:
        assert m.provenance[t] == SPECIAL and m.row(t)[0].tolist() == [s]
    assert res.info["counts"]["combined"] > 0
    assert res.info["overlap"]["exact"] == len(ov.exact)
    for t in np.flatnonzero(m.provenance == COMBINED):
        assert m.row(t)[1].sum() == pytest.approx(1.0, abs=1e-5)


def test_byte_fallback_pieces_yield_to_regular_pieces():
    pieces = ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "<0x61>", "<0x62>", "▁x", "a", "b"]
    src = from_vocab("sentencepiece", pieces)
    tgt = from_vocab("sentencepiece", ["<s>", "<pad>", "</s>", "<unk>", "<mask>", "▁xab"])
    res = _vipi(src, tgt)
    assert res.mapping.row(5)[0].tolist() == [7, 8, 9]  # ▁x + a + b, not the <0x61> <0x62> byte pieces


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="variant"):
        VipiConfig(variant="some")
    with pytest.raises(ValueError, match="max_partitions"):
        VipiConfig(max_partitions=0)
    assert isinstance(get("method", "vipi").make(), VIPI)
