"""Word alignment of a parallel corpus: fast_align's model, eflomal or IBM Model 1, symmetrized, cached.

Used by Tik-to-Tok (``methods/tiktotok.py``). Pure functions on lists of word lists; no tokenizer
and no model is involved here.

Aligners:

* ``"fast-align"`` (default) — fast_align's reparameterized IBM Model 2 (Dyer, Chahuneau & Smith
  2013): a lexical translation table and a diagonal alignment prior
  ``p(a_i = j) ∝ exp(-λ |i/m - j/n|)`` with a NULL probability ``p0``, trained by EM with the
  flags fast_align recommends (``-d -o -v``: diagonal prior, tension λ re-estimated, Dirichlet
  prior on the table), Viterbi links, in both directions (:func:`fast_align_directional`).
  Implemented here in numpy, vectorized over blocks of equally long sentence pairs; **fully
  deterministic** (no randomness, a fixed order of every sum): two cold runs give identical
  links, so a cold run reproduces a cached one. It is the aligner family of the Tik-to-Tok
  reference code (which runs the fast_align binary).
* ``"eflomal"`` — the eflomal 2.0 Bayesian HMM+fertility aligner (Östling & Tiedemann
  2016), run through its Python API ``eflomal.Aligner().align(...)`` in both directions.
  **It cannot be seeded**: eflomal 2.0 exposes no seed option (neither ``Aligner`` nor the
  ``eflomal`` binary's flags) and its sampler reads ``/dev/urandom``; two cold runs on a noisy
  corpus differ in a few links. Reproducibility therefore comes from the cache only: the links are
  stored under a content hash of (corpus words, aligner options, aligner version, a seed drawn from
  the trial's generator), so re-running a trial reads the same links, and different trial seeds
  get independent alignments. Without a ``cache_dir`` a small in-process memo serves the same key.
  :data:`NONDETERMINISTIC_ALIGNERS` lists it; ``Alignment.info["deterministic"]`` is ``False``.
* ``"ibm1"`` — IBM Model 1 with EM in numpy, in both directions, Viterbi links. Deterministic
  (no randomness at all), needs no binary; weaker on real text (no distortion model), fine on
  monotone or clean corpora and in tests.

All aligners lower-case the words. The cache key covers the aligner's name, version and every
parameter that changes the directional links (:func:`align_corpus`).

Symmetrization (Koehn et al. 2003): ``intersection``, ``union``, ``grow-diag``,
``grow-diag-final`` and ``grow-diag-final-and``.

Example:
    >>> src = [["the", "house"], ["the", "book"], ["a", "book"]] * 5
    >>> tgt = [["das", "haus"], ["das", "buch"], ["ein", "buch"]] * 5
    >>> links = align_corpus(src, tgt, aligner="ibm1", symmetrization="intersection").links
    >>> links[0]
    [(0, 0), (1, 1)]
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import re
import tempfile
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from harness import progress as _progress
from harness.cache import build_once
from methods._aligners import (
    FAST_ALIGN_DEFAULTS,
    Link,
    checked_fast_align_options,
    eflomal_directional,
    fast_align_directional,
    ibm1_directional,
)

ALIGNERS = ("fast-align", "eflomal", "ibm1")
NONDETERMINISTIC_ALIGNERS = ("eflomal",)
"""Aligners whose links cannot be reproduced from a seed (a result built on them says so)."""
SYMMETRIZATIONS = ("intersection", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and")
CODE_VERSION = 1
"""Part of the alignment cache key; bump when a change here changes the links."""


_WORD_RE = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def word_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of the words of ``text``: runs of word characters, or single punctuation marks.

    Example:
        >>> t = "Hello, world!"
        >>> [t[a:b] for a, b in word_spans(t)]
        ['Hello', ',', 'world', '!']
    """
    return [m.span() for m in _WORD_RE.finditer(text)]


# ------------------------------------------------------------------------------------------------
# Symmetrization
# ------------------------------------------------------------------------------------------------

_NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def symmetrize(fwd: Iterable[Link], rev: Iterable[Link], method: str = "grow-diag-final") -> list[Link]:
    """Combine two directional alignments of one sentence pair (Koehn et al. 2003).

    Args:
        fwd: links ``(i, j)`` (source position, target position) of the source→target direction.
        rev: links of the target→source direction, in the same ``(i, j)`` orientation.
        method: one of :data:`SYMMETRIZATIONS`.

    Returns:
        Sorted ``(i, j)`` links.

    Example:
        >>> symmetrize([(0, 0), (1, 1)], [(0, 0), (1, 1), (2, 1)], "intersection")
        [(0, 0), (1, 1)]
        >>> symmetrize([(0, 0), (1, 1)], [(0, 0), (1, 1), (2, 1)], "grow-diag-final")
        [(0, 0), (1, 1), (2, 1)]
    """
    if method not in SYMMETRIZATIONS:
        raise ValueError(f"symmetrization must be one of {SYMMETRIZATIONS}, got {method!r}")
    f, r = set(fwd), set(rev)
    if method == "intersection":
        return sorted(f & r)
    union = f | r
    if method == "union":
        return sorted(union)
    alignment = f & r
    aligned_s = {i for i, _ in alignment}
    aligned_t = {j for _, j in alignment}
    added = True
    while added:  # grow-diag
        added = False
        for i, j in sorted(alignment):
            for di, dj in _NEIGHBOURS:
                p = (i + di, j + dj)
                if p in union and p not in alignment and (p[0] not in aligned_s or p[1] not in aligned_t):
                    alignment.add(p)
                    aligned_s.add(p[0])
                    aligned_t.add(p[1])
                    added = True
    if method == "grow-diag":
        return sorted(alignment)
    both = method == "grow-diag-final-and"
    for direction in (f, r):  # final(-and)
        for i, j in sorted(direction):
            if (i, j) in alignment:
                continue
            free_s, free_t = i not in aligned_s, j not in aligned_t
            if (free_s and free_t) if both else (free_s or free_t):
                alignment.add((i, j))
                aligned_s.add(i)
                aligned_t.add(j)
    return sorted(alignment)


# ------------------------------------------------------------------------------------------------
# The cached entry point
# ------------------------------------------------------------------------------------------------


@dataclass
class Alignment:
    """Symmetrized links per sentence pair, and how they were obtained.

    Attributes:
        links: per sentence pair, sorted ``(source_position, target_position)`` links.
        info: JSON-serializable facts (aligner, options, cache key and whether it was a cache hit,
            seconds spent aligning).
    """

    links: list[list[Link]]
    info: dict = field(default_factory=dict)


_MEMO: OrderedDict[str, tuple[list[list[Link]], list[list[Link]], dict]] = OrderedDict()
_MEMO_SIZE = 4


def _aligner_version(aligner: str) -> str:
    if aligner == "eflomal":
        try:
            return "eflomal-" + importlib.metadata.version("eflomal")
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover - eflomal is a dependency
            return "eflomal-unknown"
    return f"{aligner}-{CODE_VERSION}"


def corpus_key(src: Sequence[Sequence[str]], tgt: Sequence[Sequence[str]], options: dict) -> str:
    """sha256 of the word sequences of both sides and the aligner options (the cache key)."""
    h = hashlib.sha256()
    h.update(repr(sorted(options.items())).encode("utf-8"))
    for side in (src, tgt):
        h.update(b"\x01")
        for s in side:
            h.update(" ".join(s).encode("utf-8"))
            h.update(b"\n")
    return h.hexdigest()


def _save_links(path: Path, fwd: list[list[Link]], rev: list[list[Link]], facts: dict | None = None) -> None:
    arrays: dict[str, np.ndarray] = {"facts": np.array(json.dumps(facts or {}, sort_keys=True))}
    for name, links in (("fwd", fwd), ("rev", rev)):
        lengths = np.array([len(x) for x in links], dtype=np.int64)
        flat = np.array([p for x in links for p in x], dtype=np.int32).reshape(-1, 2)
        arrays[f"{name}_len"], arrays[f"{name}_links"] = lengths, flat
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp.npz", dir=path.parent)
    os.close(fd)
    try:
        np.savez_compressed(tmp, **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _load_links(path: Path) -> tuple[list[list[Link]], list[list[Link]], dict]:
    with np.load(path) as z:
        facts = json.loads(str(z["facts"])) if "facts" in z.files else {}
        out = []
        for name in ("fwd", "rev"):
            lengths, flat = z[f"{name}_len"], z[f"{name}_links"]
            bounds = np.concatenate([[0], np.cumsum(lengths)])
            pairs = [tuple(p) for p in flat.tolist()]
            out.append([pairs[a:b] for a, b in zip(bounds[:-1], bounds[1:])])
    return out[0], out[1], facts


def align_corpus(
    src: Sequence[Sequence[str]],
    tgt: Sequence[Sequence[str]],
    *,
    aligner: str = "fast-align",
    symmetrization: str = "grow-diag-final",
    seed: int = 0,
    cache_dir: Path | None = None,
    eflomal_options: dict | None = None,
    ibm1_iterations: int = 5,
    fast_align_options: dict | None = None,
) -> Alignment:
    """Word-align sentence pairs in both directions and symmetrize; cached by content hash.

    The cache key is a hash of both sides' words and of every option that changes the directional
    links: the aligner's name, its version, its parameters (and, for eflomal only, ``seed``), so
    switching aligners or parameters never reads another's links. The symmetrization is not part
    of the key (it is recomputed from the cached directional links).

    Args:
        src: source sentences as word lists (no whitespace inside words, no empty sentences).
        tgt: target sentences as word lists, same length as ``src``.
        aligner: ``"fast-align"`` (default), ``"eflomal"`` or ``"ibm1"`` (see the module docstring).
        symmetrization: one of :data:`SYMMETRIZATIONS`.
        seed: part of the cache key of eflomal, which cannot be seeded (see the module docstring).
            Draw it from the trial's generator so different trial seeds get independent eflomal
            alignments. The deterministic aligners ignore it (their links depend on the corpus only).
        cache_dir: directory for ``alignments/<hash>.npz`` (directional links; the symmetrization
            is recomputed, it is cheap). ``None``: only the in-process memo.
        eflomal_options: ``model``, ``n_samplers``, ``rel_iterations``, ``null_prior`` for eflomal.
        ibm1_iterations: EM iterations of the IBM Model 1 aligner.
        fast_align_options: options of :func:`fast_align_directional` (defaults:
            :data:`FAST_ALIGN_DEFAULTS`).

    Returns:
        An :class:`Alignment`; its ``info["deterministic"]`` is ``False`` for eflomal.

    Raises:
        ValueError: for an unknown aligner or option, mismatched lengths, empty input, empty
            sentences or words with whitespace.
    """
    _check_corpus(src, tgt, aligner, symmetrization)
    options = _aligner_options(aligner, seed, eflomal_options, ibm1_iterations, fast_align_options)
    key = corpus_key(src, tgt, options)
    path = Path(cache_dir) / "alignments" / f"{key[:32]}.npz" if cache_dir is not None else None
    t0 = time.perf_counter()
    source = "computed"
    facts: dict = {}
    if key in _MEMO:
        fwd, rev, facts = _MEMO[key]
        _MEMO.move_to_end(key)
        source = "memo"
    elif path is None:
        fwd, rev, facts = _directional_links(src, tgt, aligner, options)
    else:
        fwd, rev, facts, source = _cached_links(path, key, src, tgt, aligner, options)
    _MEMO[key] = (fwd, rev, facts)
    while len(_MEMO) > _MEMO_SIZE:
        _MEMO.popitem(last=False)
    t1 = time.perf_counter()
    links = [symmetrize(f, r, symmetrization)
             for f, r in _progress.iterate(zip(fwd, rev), f"{symmetrization} (sentence pairs)", total=len(fwd))]
    info = {
        "aligner": aligner,
        "deterministic": aligner not in NONDETERMINISTIC_ALIGNERS,
        "options": {k: v for k, v in options.items() if k not in ("code",)},
        "symmetrization": symmetrization,
        "cache_key": key[:32],
        "links_from": source,
        "sentence_pairs": len(src),
        "links": int(sum(len(x) for x in links)),
        "align_s": round(t1 - t0, 4),
        "symmetrize_s": round(time.perf_counter() - t1, 4),
    }
    if facts:
        info["model"] = facts
    return Alignment(links=links, info=info)


def _cached_links(path: Path, key: str, src: Sequence[Sequence[str]], tgt: Sequence[Sequence[str]], aligner: str,
                  options: dict) -> tuple[list[list[Link]], list[list[Link]], dict, str]:
    """The directional links stored at ``path``, or computed and stored there (``source`` is ``"cache"`` or ``"computed"``).

    Built under the cache's build lock (``<cache>/.locks/alignments-<key>.lock``, as :func:`harness.cache.cached_dir`
    builds): two workers aligning the same corpus align it once; the second waits, then reads the first's file.
    """
    def build() -> tuple[list[list[Link]], list[list[Link]], dict, str]:
        fwd, rev, facts = _directional_links(src, tgt, aligner, options)
        _save_links(path, fwd, rev, facts)
        return fwd, rev, facts, "computed"

    return build_once(path.parent.parent, "alignments", key,
                      lambda: (*_load_links(path), "cache") if path.is_file() else None, build)


def _check_corpus(src: Sequence[Sequence[str]], tgt: Sequence[Sequence[str]], aligner: str, symmetrization: str) -> None:
    """The errors :func:`align_corpus` raises for its arguments, each naming what is wrong (and the sentence)."""
    if aligner not in ALIGNERS:
        raise ValueError(f"aligner must be one of {ALIGNERS}, got {aligner!r}")
    if symmetrization not in SYMMETRIZATIONS:
        raise ValueError(f"symmetrization must be one of {SYMMETRIZATIONS}, got {symmetrization!r}")
    if len(src) != len(tgt):
        raise ValueError(f"align_corpus: {len(src)} source sentences but {len(tgt)} target sentences")
    if not len(src):
        raise ValueError("align_corpus: no sentence pairs to align")
    for side, sents in (("source", src), ("target", tgt)):
        for k, s in enumerate(sents):
            if not s:
                raise ValueError(f"align_corpus: {side} sentence {k} is empty")
            if any(not w or any(ch.isspace() for ch in w) for w in s):
                raise ValueError(f"align_corpus: {side} sentence {k} has an empty word or a word containing whitespace")


def _aligner_options(aligner: str, seed: int, eflomal_options: dict | None, ibm1_iterations: int,
                     fast_align_options: dict | None) -> dict:
    """Every option that changes the directional links (part of the cache key): name, versions, parameters."""
    options: dict = {"aligner": aligner, "version": _aligner_version(aligner), "code": CODE_VERSION}
    if aligner == "eflomal":
        options.update(
            {"model": 3, "n_samplers": 3, "rel_iterations": 1.0, "null_prior": 0.2, **(eflomal_options or {})}
        )
        options["seed"] = int(seed)
    elif aligner == "fast-align":
        options.update(checked_fast_align_options(fast_align_options))
    else:
        options["iterations"] = int(ibm1_iterations)  # deterministic: the seed does not matter
    return options


def _directional_links(src: Sequence[Sequence[str]], tgt: Sequence[Sequence[str]], aligner: str,
                       options: dict) -> tuple[list[list[Link]], list[list[Link]], dict]:
    """Forward and reverse links computed by ``aligner`` with ``options``, and the aligner's facts."""
    if aligner == "eflomal":
        opts = {k: options[k] for k in ("model", "n_samplers", "rel_iterations", "null_prior")}
        fwd, rev = eflomal_directional(src, tgt, **opts)
        return fwd, rev, {}
    if aligner == "fast-align":
        return fast_align_directional(src, tgt, **{k: options[k] for k in FAST_ALIGN_DEFAULTS})
    fwd, rev = ibm1_directional(src, tgt, iterations=options["iterations"])
    return fwd, rev, {}


def count_pairs(
    src_units: Sequence[Sequence[object]], tgt_units: Sequence[Sequence[object]], links: Sequence[Sequence[Link]]
) -> Counter:
    """Count aligned unit pairs ``(target_unit, source_unit)`` over all links.

    Args:
        src_units / tgt_units: per sentence, the hashable unit at each position (e.g. a word's
            token-id tuple).
        links: per sentence, ``(source_position, target_position)`` links.

    Example:
        >>> count_pairs([["a", "b"]], [["x", "y"]], [[(0, 0), (1, 1), (1, 0)]])
        Counter({('x', 'a'): 1, ('y', 'b'): 1, ('x', 'b'): 1})
    """
    c: Counter = Counter()
    for s, t, ls in zip(src_units, tgt_units, links):
        for i, j in ls:
            c[(t[j], s[i])] += 1
    return c
