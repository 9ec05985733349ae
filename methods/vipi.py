"""VIPI — Vocabulary Initialization with Partial Inheritance (Mosin et al., "Fine-tuning
transformers: vocabulary transfer"; METHODS.md, "VIPI").

For every target token:

1. its canonical form exists in the source vocabulary → copy that row (``COPIED``);
2. otherwise enumerate the *partitions* of its canonical bytes into source tokens, respecting the
   word-start marker: the first piece is a word-start source token iff the target token is
   word-start, all following pieces are continuation tokens (a word-start target may also begin with
   the bare marker token ``▁``/``Ġ`` when the source has one, followed by continuation pieces —
   exactly how a SentencePiece tokenizer may spell ``▁foo`` as ``▁`` + ``foo``). Keep the
   partitions with the fewest pieces, then among those the ones containing the longest piece —
   longest in *characters*, as the paper compares strings (``"éab"`` = ``"é"+"ab"`` and
   ``"éa"+"b"`` tie; counting UTF-8 bytes would keep only the second). Each kept partition gives the average of its pieces' rows; the token's row is the average over the
   kept partitions (``COMBINED``; ``COPIED`` in the rare case that this is one source row, e.g.
   ``aa`` = ``a`` + ``a`` — the convention of :func:`harness.vocab.assemble_mapping`);
3. no partition → ``FALLBACK`` (a random row drawn by the harness).

The paper's pseudo-code enumerates all partitions recursively, which is exponential in the token
length. Here dynamic programming over string positions computes the minimum number of pieces, the
longest piece among minimal partitions, and — by counting paths forwards and backwards through the
DAG of optimal pieces — the *exact* average over all kept partitions without listing them. The cost
is ``O(|Vs|)`` to index the source plus ``O(n · min(n, ℓmax))`` dictionary look-ups for a target
token of ``n`` bytes (``ℓmax`` = the longest source token), so the whole method is linear in
``|Vt|``. Setting ``max_partitions`` switches to the behaviour of a capped enumerator (the first
``max_partitions`` kept partitions in a fixed order); the info records how often the cap bit.

The code is factored so that the core, :func:`vipi_mapping`, works on canonical vocabulary lists
(``list[Canon | None]``, see :mod:`harness.vocab`) and needs no tokenizer; ``VIPI.initialize`` only
canonicalizes the two tokenizers and computes the overlap.

Example:
    >>> from harness.vocab import Canon
    >>> src = [None, Canon(b"un", True), Canon(b"do", False), Canon(b"undo", False)]
    >>> tgt = [None, Canon(b"undo", True)]
    >>> index = SourcePieceIndex(src)
    >>> optimal_partitions(b"undo", True, index).partitions
    [(1, 2)]
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness import progress as _progress
from harness import vocab as _canon
from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL, InitResult, TokenMapping, TransferInputs
from harness.registry import register_method

VARIANTS = ("all", "one-random", "match-shuffle")
RANDOM_REASONS = {
    "special-without-source-role": "special token with no source special of the same role",
    "empty-token": "empty once the word-start marker is removed",
    "no-partition": "no partition of its string into source tokens (a character the source vocabulary lacks)",
}
"""Why a VIPI row is random, by the code counted in ``info["fallback_reasons"]`` (``info["random_ids"]`` of
:func:`vipi_mapping` lists the ids; the registered method hands them over as ``random_reasons``)."""
_BYTE_PIECE = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")


@dataclass(frozen=True)
class VipiConfig:
    """Configuration of :class:`VIPI`."""

    variant: str = "all"
    """``"all"`` (the paper's VIPI: average over all kept partitions), ``"one-random"`` (paper
    Table 4, "VIPI over one random partition": one kept partition drawn uniformly with the trial's
    generator) or ``"match-shuffle"`` (paper Table 4, "Matching plus Shuffle", a control: copy
    matches; for a splittable token average as many *random* source rows as its partition has
    pieces)."""

    max_partitions: int | None = None
    """``None`` (default): the average over *all* kept partitions, computed exactly by counting
    (no enumeration, no cap needed). An integer ``k``: average only over the first ``k`` kept
    partitions in a fixed order (longer leading pieces first), i.e. the behaviour of a capped
    enumerator; ``info["partitions"]["capped_tokens"]`` counts the tokens where the cap bit."""

    n_examples: int = 10
    """How many splittable tokens and their kept partitions to list in the info (for reading
    records; no effect on the mapping)."""

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"VipiConfig.variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.max_partitions is not None and (isinstance(self.max_partitions, bool) or int(self.max_partitions) < 1):
            raise ValueError(f"VipiConfig.max_partitions must be None or an integer >= 1, got {self.max_partitions!r}")
        if self.n_examples < 0:
            raise ValueError(f"VipiConfig.n_examples must be >= 0, got {self.n_examples!r}")


# --------------------------------------------------------------------------------------------
# Source index and the partition DP
# --------------------------------------------------------------------------------------------


class SourcePieceIndex:
    """Source tokens indexed by canonical bytes, separately for word-start and continuation tokens.

    When several source ids share one canonical form, the smallest id represents it, except that ids
    in ``demote`` (SentencePiece byte-fallback pieces ``<0xNN>``) yield to any regular piece — the
    rule :func:`harness.vocab.compute_overlap` uses for exact matches. Continuation tokens with empty
    text are ignored (a zero-length piece would admit infinitely many partitions); a word-start token
    with empty text is the bare marker (``▁``, ``Ġ``) and may open a word-start partition.

    Attributes:
        word_start: canonical bytes → source id, for word-start tokens with non-empty text.
        continuation: canonical bytes → source id, for continuation tokens with non-empty text.
        marker: source id of the bare word-start marker, or ``None``.
        max_len: length in bytes of the longest indexed piece.
    """

    def __init__(
        self, source: Sequence[_canon.Canon | None], n_source: int | None = None, *, demote: Collection[int] = ()
    ) -> None:
        self.word_start: dict[bytes, int] = {}
        self.continuation: dict[bytes, int] = {}
        self.marker: int | None = None
        limit = len(source) if n_source is None else min(len(source), n_source)
        demoted = set(demote)
        order = [s for s in range(limit) if s not in demoted] + sorted(s for s in demoted if s < limit)
        for sid in order:
            c = source[sid]
            if c is None:
                continue
            if not c.text:
                if c.word_start and self.marker is None:
                    self.marker = sid
                continue
            table = self.word_start if c.word_start else self.continuation
            table.setdefault(c.text, sid)
        lengths = [len(t) for t in self.word_start] + [len(t) for t in self.continuation]
        self.max_len = max(lengths, default=0)


@dataclass
class PartitionSet:
    """The kept partitions of one target token (fewest pieces, then containing the longest piece).

    Attributes:
        n_pieces: number of pieces of every kept partition (0 when there is none).
        longest: length in characters of the longest piece (the same in every kept partition; see
            :func:`_char_len`).
        count: number of kept partitions (a Python int; may be large).
        weights: source id → weight such that the token's row is ``Σ weights[s] · Es[s]`` — the
            average over kept partitions of the average of their pieces (sums to 1).
        partitions: the kept partitions as tuples of source ids, only when enumeration was asked
            for (at most ``limit`` of them, in a fixed order: longer leading pieces first).
        capped: whether enumeration stopped at ``limit`` before listing all ``count`` partitions.
    """

    n_pieces: int = 0
    longest: int = 0
    count: int = 0
    weights: dict[int, float] = field(default_factory=dict)
    partitions: list[tuple[int, ...]] | None = None
    capped: bool = False


def _char_len(piece: bytes) -> int:
    """Length of a piece in characters: its UTF-8 characters, each maximal invalid byte sequence
    (a byte-level piece that cuts a character) counting as one, as in ``decode(errors="replace")``.

    Example:
        >>> _char_len("éa".encode()), _char_len(b"ab"), _char_len(b"\\xc3")
        (2, 2, 1)
    """
    if piece.isascii():
        return len(piece)
    return len(piece.decode("utf-8", errors="replace"))


class _DAG:
    """The DAG of optimal pieces of one target token, with path counts (internal).

    Nodes are byte positions ``0..n`` in "continuation mode" plus the virtual start. ``edges[i]``
    lists ``(j, source_id, length)`` for continuation pieces ``text[i:j]`` that lie on a
    minimal-piece path to ``n``; ``start`` lists ``(j, source_id, length)`` for the admissible first
    pieces (for a word-start token: word-start pieces ``text[0:j]`` and the bare marker with
    ``j = 0``; for a continuation token: a single virtual edge ``(0, -1, 0)`` that is not a piece).
    ``length`` is the piece's length in characters (:func:`_char_len`), not bytes: the paper
    compares token strings, and ``"éa"`` is as long as ``"ab"``. Path counts distinguish whether
    a piece of length ``longest`` has been used (``h``).
    """

    def __init__(self, text: bytes, word_start: bool, index: SourcePieceIndex) -> None:
        n = len(text)
        self.n = n
        self.ok = False
        if n == 0:
            return
        inf = n + 2
        cont = index.continuation
        lmax = index.max_len
        # f[i]: minimal number of continuation pieces covering text[i:]
        f = [inf] * (n + 1)
        f[n] = 0
        raw: list[list[tuple[int, int, int]]] = [[] for _ in range(n + 1)]
        for i in range(n - 1, -1, -1):
            best = inf
            row = raw[i]
            for j in range(i + 1, min(n, i + lmax) + 1):
                sid = cont.get(text[i:j])
                if sid is not None and f[j] < inf:
                    row.append((j, sid, _char_len(text[i:j])))
                    if f[j] + 1 < best:
                        best = f[j] + 1
            f[i] = best
        # first pieces
        cand: list[tuple[int, int, int]] = []  # (j, sid, piece length in characters)
        if word_start:
            ws = index.word_start
            for j in range(1, min(n, lmax) + 1):
                sid = ws.get(text[:j])
                if sid is not None and f[j] < inf:
                    cand.append((j, sid, _char_len(text[:j])))
            if index.marker is not None and f[0] < inf:
                cand.append((0, index.marker, 0))
            total = min((1 + f[j] for j, _, _ in cand), default=inf)
            self.start = [(j, s, ln) for j, s, ln in cand if 1 + f[j] == total]
        else:
            total = f[0]
            self.start = [(0, -1, 0)] if total < inf else []
        if total >= inf:
            return
        self.ok = True
        self.n_pieces = int(total)
        # keep only edges on minimal paths
        self.edges = [[(j, s, ln) for j, s, ln in raw[i] if f[i] == f[j] + 1] for i in range(n + 1)]
        # reachable positions from the start along optimal edges, and the longest piece among them
        reach = [False] * (n + 1)
        longest = 0
        for j, _, ln in self.start:
            reach[j] = True
            longest = max(longest, ln)
        for i in range(n + 1):
            if reach[i]:
                for j, _, ln in self.edges[i]:
                    reach[j] = True
                    longest = max(longest, ln)
        self.longest = longest
        # backward counts: A[i] all optimal completions; H[i] completions containing a longest piece
        A = [0] * (n + 1)
        H = [0] * (n + 1)
        A[n] = 1
        for i in range(n - 1, -1, -1):
            a = h = 0
            for j, _, ln in self.edges[i]:
                a += A[j]
                h += A[j] if ln == longest else H[j]
            A[i], H[i] = a, h
        self.A, self.H = A, H
        # B(j, used): completions from j that end with a longest piece used
        self.count = sum(self._b(j, ln == longest) for j, _, ln in self.start)

    def _b(self, j: int, used: bool) -> int:
        return self.A[j] if used else self.H[j]

    def exact_weights(self) -> dict[int, float]:
        """Σ over kept partitions of (occurrences of s / n_pieces), divided by the number of them."""
        n, longest = self.n, self.longest
        usage: Counter[int] = Counter()
        # forward counts F[i][h] of optimal prefixes reaching i (continuation mode) with flag h
        F0 = [0] * (n + 1)
        F1 = [0] * (n + 1)
        for j, sid, ln in self.start:
            used = ln == longest
            if sid >= 0:
                usage[sid] += self._b(j, used)
            if used:
                F1[j] += 1
            else:
                F0[j] += 1
        for i in range(n + 1):
            f0, f1 = F0[i], F1[i]
            if not (f0 or f1):
                continue
            for j, sid, ln in self.edges[i]:
                if ln == longest:
                    k = f0 + f1
                    usage[sid] += k * self.A[j]
                    F1[j] += k
                else:
                    usage[sid] += f0 * self.H[j] + f1 * self.A[j]
                    F0[j] += f0
                    F1[j] += f1
        denom = self.count * self.n_pieces
        return {s: u / denom for s, u in sorted(usage.items()) if u}

    def enumerate(self, limit: int | None) -> Iterator[tuple[int, ...]]:
        """Kept partitions in a fixed order (longer leading pieces first), at most ``limit``."""
        n, longest = self.n, self.longest
        emitted = 0

        def walk(i: int, used: bool, prefix: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
            if i == n:
                if used:
                    yield prefix
                return
            for j, sid, ln in sorted(self.edges[i], key=lambda e: -e[0]):
                u = used or ln == longest
                if self._b(j, u):
                    yield from walk(j, u, prefix + (sid,))

        for j, sid, ln in sorted(self.start, key=lambda e: (-e[2], e[1])):
            u = ln == longest
            if not self._b(j, u):
                continue
            for p in walk(j, u, (sid,) if sid >= 0 else ()):
                yield p
                emitted += 1
                if limit is not None and emitted >= limit:
                    return

    def sample(self, rng: np.random.Generator) -> tuple[int, ...]:
        """One kept partition drawn uniformly at random."""
        longest = self.longest
        opts = [(j, sid, ln == longest) for j, sid, ln in self.start]
        j, sid, used = opts[_choose(rng, [self._b(j, u) for j, _, u in opts])]
        out = [sid] if sid >= 0 else []
        i = j
        while i < self.n:
            opts = [(j, sid, used or ln == longest) for j, sid, ln in self.edges[i]]
            j, sid, used = opts[_choose(rng, [self._b(j, u) for j, _, u in opts])]
            out.append(sid)
            i = j
        return tuple(out)


def _randbelow(rng: np.random.Generator, n: int) -> int:
    """A uniform integer in ``[0, n)`` for arbitrarily large Python ints ``n``."""
    if n <= 2**62:
        return int(rng.integers(0, n))
    k = n.bit_length()
    while True:
        words = -(-k // 32)
        r = 0
        for w in rng.integers(0, 2**32, size=words, dtype=np.uint64):
            r = (r << 32) | int(w)
        r >>= words * 32 - k
        if r < n:
            return r


def _choose(rng: np.random.Generator, counts: list[int]) -> int:
    """Index ``i`` drawn with probability ``counts[i] / sum(counts)`` (exact for big ints)."""
    r = _randbelow(rng, sum(counts))
    for i, c in enumerate(counts):
        if r < c:
            return i
        r -= c
    raise AssertionError("unreachable")


def optimal_partitions(
    text: bytes, word_start: bool, index: SourcePieceIndex, *, limit: int | None = None, enumerate_all: bool = True
) -> PartitionSet:
    """The kept VIPI partitions of one token: fewest pieces, then containing the longest piece.

    Args:
        text: the target token's canonical bytes (marker removed).
        word_start: whether the target token begins a word.
        index: the source vocabulary, see :class:`SourcePieceIndex`.
        limit: enumerate at most this many partitions (``None``: all of them).
        enumerate_all: list the partitions (``False``: only count them and compute the exact
            weights, which costs ``O(n · ℓmax)`` however many partitions there are).

    Returns:
        A :class:`PartitionSet`; ``count == 0`` when the token cannot be split into source tokens.
        When partitions are listed, ``weights`` is their average (over at most ``limit`` of them);
        otherwise it is the exact average over all kept partitions.

    Example:
        >>> from harness.vocab import Canon
        >>> idx = SourcePieceIndex([Canon(b"ab", True), Canon(b"a", True), Canon(b"b", False),
        ...                         Canon(b"c", False), Canon(b"bc", False)])
        >>> optimal_partitions(b"abc", True, idx).partitions  # ab+c and a+bc both have 2 pieces of max length 2
        [(0, 3), (1, 4)]
    """
    dag = _DAG(text, word_start, index)
    listing = enumerate_all or limit is not None
    if not dag.ok:
        return PartitionSet(partitions=[] if listing else None)
    out = PartitionSet(n_pieces=dag.n_pieces, longest=dag.longest, count=dag.count)
    if listing:
        parts = list(dag.enumerate(limit))
        out.partitions = parts
        out.capped = len(parts) < dag.count
        if out.capped:
            out.weights = _average(parts)
        else:
            out.weights = dag.exact_weights()
    else:
        out.weights = dag.exact_weights()
    return out


def _average(parts: Sequence[tuple[int, ...]]) -> dict[int, float]:
    acc: Counter[int] = Counter()
    for p in parts:
        for s in p:
            acc[s] += 1.0 / len(p)
    return {s: w / len(parts) for s, w in sorted(acc.items())}


# --------------------------------------------------------------------------------------------
# The core on canonical vocabularies
# --------------------------------------------------------------------------------------------


def vipi_mapping(
    target: Sequence[_canon.Canon | None],
    source: Sequence[_canon.Canon | None],
    *,
    n_source: int,
    exact: np.ndarray,
    specials: np.ndarray,
    config: VipiConfig,
    rng: np.random.Generator,
    demote: Collection[int] = (),
) -> tuple[TokenMapping, dict]:
    """VIPI on canonical vocabularies.

    Args:
        target: canonical target vocabulary (index = token id, ``None`` for specials).
        source: canonical source vocabulary.
        n_source: rows of the source embedding matrix (ids ``>= n_source`` are never used).
        exact: ``(n, 2)`` int array of ``[target_id, source_id]`` exact canonical matches.
        specials: ``(k, 2)`` int array of ``[target_id, source_id]`` special tokens matched by role.
        config: the method's configuration.
        rng: the trial's generator (used only by the ``one-random`` and ``match-shuffle`` variants).
        demote: source ids used as pieces only when no other id has the same canonical form
            (byte-fallback pieces), see :class:`SourcePieceIndex`.

    Returns:
        The mapping and an info dict (counts, random rows by reason code: ``fallback_reasons`` counts,
        ``random_ids`` the ids; partition statistics, examples, timings).

    Example:
        >>> from harness.vocab import Canon
        >>> src = [None, Canon(b"un", True), Canon(b"do", False)]
        >>> tgt = [None, Canon(b"undo", True), Canon(b"do", False)]
        >>> m, info = vipi_mapping(tgt, src, n_source=3, exact=np.array([[2, 2]]),
        ...                        specials=np.array([[0, 0]]), config=VipiConfig(),
        ...                        rng=np.random.default_rng(0))
        >>> m.row(1)
        (array([1, 2]), array([0.5, 0.5], dtype=float32))
        >>> m.counts()
        {'special': 1, 'copied': 1, 'combined': 1, 'fallback': 0}
    """
    # Long on purpose: the paper's steps (exact copy, partition, combination, variants) in their order,
    # sharing the piece index.
    t0 = time.perf_counter()
    n_target = len(target)
    provenance = np.full(n_target, FALLBACK, dtype=np.int8)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    random_ids: dict[str, list[int]] = {}

    def put(t: int, weights: dict[int, float], code: int) -> None:
        provenance[t] = code
        for s, w in weights.items():
            rows.append(t)
            cols.append(s)
            vals.append(w)

    for t, s in np.asarray(specials, dtype=np.int64).reshape(-1, 2):
        if 0 <= s < n_source:
            put(int(t), {int(s): 1.0}, SPECIAL)
    for t, s in np.asarray(exact, dtype=np.int64).reshape(-1, 2):
        if provenance[t] == FALLBACK and 0 <= s < n_source:
            put(int(t), {int(s): 1.0}, COPIED)
    t1 = time.perf_counter()

    index = SourcePieceIndex(source, n_source, demote=demote)
    pool = np.array([s for s in range(min(len(source), n_source)) if source[s] is not None], dtype=np.int64)
    n_pieces_hist: Counter[int] = Counter()
    multi = capped = 0
    max_count = 0
    examples: list[dict] = []
    for t in _progress.iterate(range(n_target), "VIPI partitions (target tokens)"):
        if provenance[t] != FALLBACK:
            continue
        c = target[t]
        why = "special-without-source-role" if c is None else "empty-token" if not c.text else None
        dag = _DAG(c.text, c.word_start, index) if why is None else None
        if dag is not None and not dag.ok:
            why = "no-partition"
        if why is not None:
            random_ids.setdefault(why, []).append(t)
            continue
        assert dag is not None
        n_pieces_hist[dag.n_pieces] += 1
        multi += dag.count > 1
        max_count = max(max_count, dag.count)
        if config.variant == "all":
            if config.max_partitions is not None and dag.count > config.max_partitions:
                weights = _average(list(dag.enumerate(config.max_partitions)))
                capped += 1
            else:
                weights = dag.exact_weights()
        elif config.variant == "one-random":
            weights = _average([dag.sample(rng)])
        else:  # match-shuffle: as many random (distinct) source rows as the partition has pieces
            picks = rng.choice(pool, size=min(dag.n_pieces, len(pool)), replace=False)
            weights = _average([tuple(int(p) for p in picks)])
        put(t, weights, COPIED if len(weights) == 1 else COMBINED)  # one row (e.g. a+a): a copy
        if len(examples) < config.n_examples:
            examples.append(
                {
                    "target_id": t,
                    "token": _show(c),
                    "n_pieces": dag.n_pieces,
                    "n_partitions": _jsonable_int(dag.count),
                    "partitions": [[_show(source[s]) for s in p] for p in dag.enumerate(3)],
                }
            )
    t2 = time.perf_counter()

    mapping = TokenMapping.from_coo(n_target, n_source, rows, cols, vals, provenance)
    info = {
        "variant": config.variant,
        "counts": mapping.counts(),
        "fallback_reasons": {k: len(v) for k, v in sorted(random_ids.items())},
        "random_ids": random_ids,
        "partitions": {
            "split_tokens": int(sum(n_pieces_hist.values())),
            "pieces_histogram": {str(k): v for k, v in sorted(n_pieces_hist.items())},
            "tokens_with_several_partitions": multi,
            "max_partitions_of_a_token": _jsonable_int(max_count),
            "max_partitions": config.max_partitions,
            "capped_tokens": capped,
        },
        "examples": examples,
        "timings": {"match_s": round(t1 - t0, 4), "partition_s": round(t2 - t1, 4)},
    }
    return mapping, info


def byte_fallback_ids(tok: Any) -> list[int]:
    """Ids of SentencePiece byte-fallback pieces (``<0xNN>``) of a tokenizer with byte fallback."""
    spec = _canon.family_spec(tok)
    if spec.family != "sentencepiece" or not spec.byte_fallback:
        return []
    return sorted(i for p, i in tok.get_vocab().items() if _BYTE_PIECE.match(p))


def _show(c: _canon.Canon | None) -> str:
    return "<special>" if c is None else _canon.show_canon(c)


def _jsonable_int(x: int) -> int | float:
    return x if x < 2**53 else float(x)


# --------------------------------------------------------------------------------------------
# The registered method
# --------------------------------------------------------------------------------------------


@register_method(
    "vipi",
    config=VipiConfig,
    description="VIPI: copy matches, average the fewest-piece/longest-piece partitions into source tokens",
)
class VIPI:
    """VIPI (Mosin et al. 2023): copy exact matches, average minimal partitions into source tokens.

    Exact canonical matches are copied, special tokens are matched by role, every other target
    token averages its kept partitions (fewest pieces, then containing the longest piece), and
    tokens with no partition fall back to random rows. Variants from the paper's Table 4:
    ``one-random`` and ``match-shuffle`` (see :class:`VipiConfig`). Only exact canonical matches
    are copied (fuzzy matching is FOCUS's addition); both overlap sizes are reported in the info.

    Example:
        >>> from harness.registry import get
        >>> method = get("method", "vipi").make({"variant": "one-random"})
        >>> method.config.variant
        'one-random'
    """

    combines = True
    """Rows of non-overlap tokens are combinations of source rows (read by :mod:`harness.run.sanity`)."""

    def __init__(self, config: VipiConfig) -> None:
        self.config = config

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Build the target → source mapping. See the module docstring for the rules."""
        t0 = time.perf_counter()
        source = _canon.canonical_vocab(inputs.source_tokenizer)
        target = _canon.canonical_vocab(inputs.target_tokenizer)
        n_source = int(inputs.source_embeddings.shape[0])
        overlap = _canon.compute_overlap(
            inputs.source_tokenizer, inputs.target_tokenizer, fuzzy=True, n_source=n_source
        )
        t1 = time.perf_counter()
        mapping, info = vipi_mapping(
            target,
            source,
            n_source=n_source,
            exact=overlap.exact,
            specials=overlap.specials,
            config=self.config,
            rng=rng,
            demote=byte_fallback_ids(inputs.source_tokenizer),
        )
        info["overlap"] = overlap.report()
        info["timings"]["canonicalize_s"] = round(t1 - t0, 4)
        reasons = {RANDOM_REASONS[k]: ids for k, ids in info.pop("random_ids").items()}
        return InitResult(mapping=mapping, tokenizer=inputs.target_tokenizer, info=info, random_reasons=reasons)
