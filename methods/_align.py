"""Word alignment of a parallel corpus: eflomal or a deterministic IBM Model 1, symmetrized, cached.

Used by Tik-to-Tok (``methods/tiktotok.py``). Pure functions on lists of word lists; no tokenizer
and no model is involved here.

Aligners:

* ``"eflomal"`` (default) — the eflomal 2.0 Bayesian HMM+fertility aligner (Östling & Tiedemann
  2016), run through its Python API ``eflomal.Aligner().align(...)`` in both directions.
  **It cannot be seeded**: eflomal 2.0 exposes no seed option (neither ``Aligner`` nor the
  ``eflomal`` binary's flags) and its sampler reads ``/dev/urandom``; two cold runs on a noisy
  corpus differ in a few links. Reproducibility therefore comes from the cache: the links are
  stored under a content hash of (corpus words, aligner options, aligner version, a seed drawn from
  the trial's generator), so re-running a trial reads the same links, and different trial seeds
  get independent alignments. Without a ``cache_dir`` a small in-process memo serves the same key.
* ``"ibm1"`` — IBM Model 1 with EM in numpy, in both directions, Viterbi links. Deterministic
  (no randomness at all), needs no binary; weaker than eflomal on real text (no distortion model),
  fine on monotone or clean corpora and in tests.

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
import os
import re
import tempfile
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ALIGNERS = ("eflomal", "ibm1")
SYMMETRIZATIONS = ("intersection", "union", "grow-diag", "grow-diag-final", "grow-diag-final-and")
CODE_VERSION = 1
"""Part of the alignment cache key; bump when a change here changes the links."""

Link = tuple[int, int]
"""``(source_position, target_position)`` within one sentence pair."""

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
# Aligners
# ------------------------------------------------------------------------------------------------


def _parse_links(lines: Sequence[str]) -> list[list[Link]]:
    out = []
    for line in lines:
        links = []
        for item in line.split():
            i, j = item.split("-")
            links.append((int(i), int(j)))
        out.append(links)
    return out


def eflomal_directional(
    src: Sequence[Sequence[str]],
    tgt: Sequence[Sequence[str]],
    *,
    model: int = 3,
    n_samplers: int = 3,
    rel_iterations: float = 1.0,
    null_prior: float = 0.2,
) -> tuple[list[list[Link]], list[list[Link]]]:
    """Forward and reverse links from eflomal (both as ``(source, target)`` positions).

    eflomal lower-cases words itself; words must not contain whitespace. Not seedable (see the
    module docstring).
    """
    import eflomal

    aligner = eflomal.Aligner(model=model, n_samplers=n_samplers, rel_iterations=rel_iterations, null_prior=null_prior)
    with tempfile.TemporaryDirectory(prefix="tokxfer-eflomal-") as d:
        fwd_path, rev_path = os.path.join(d, "fwd"), os.path.join(d, "rev")
        aligner.align(
            [" ".join(s) for s in src],
            [" ".join(t) for t in tgt],
            links_filename_fwd=fwd_path,
            links_filename_rev=rev_path,
            quiet=True,
        )
        fwd = Path(fwd_path).read_text(encoding="utf-8").splitlines()
        rev = Path(rev_path).read_text(encoding="utf-8").splitlines()
    if len(fwd) != len(src) or len(rev) != len(src):
        raise RuntimeError(f"eflomal returned {len(fwd)}/{len(rev)} link lines for {len(src)} sentence pairs")
    return _parse_links(fwd), _parse_links(rev)


def _encode(sents: Sequence[Sequence[str]]) -> tuple[list[np.ndarray], int]:
    index: dict[str, int] = {}
    out = []
    for s in sents:
        out.append(np.array([index.setdefault(w.lower(), len(index)) for w in s], dtype=np.int64))
    return out, len(index)


def _ibm1_viterbi(
    e_sents: list[np.ndarray], f_sents: list[np.ndarray], n_e: int, iterations: int, null_prob_floor: float = 1e-12
) -> list[list[tuple[int, int]]]:
    """IBM Model 1 ``t(f | e)`` by EM, then for each f position its best e position (or NULL).

    Returns, per sentence, links ``(e_position, f_position)``. All (e, f) co-occurrences (plus NULL,
    coded as e = n_e) are enumerated once as flat arrays, so each EM iteration is a few numpy passes.
    """
    sent_ids, fpos, epos, e_ids, f_ids = [], [], [], [], []
    for k, (e, f) in enumerate(zip(e_sents, f_sents)):
        if not len(e) or not len(f):
            continue
        ee = np.concatenate([e, [n_e]])  # NULL last
        ne, nf = len(ee), len(f)
        sent_ids.append(np.full(ne * nf, k, dtype=np.int64))
        fpos.append(np.repeat(np.arange(nf), ne))
        epos.append(np.tile(np.arange(ne), nf))
        e_ids.append(np.tile(ee, nf))
        f_ids.append(np.repeat(f, ne))
    if not sent_ids:
        return [[] for _ in e_sents]
    sent = np.concatenate(sent_ids)
    fp = np.concatenate(fpos)
    ep = np.concatenate(epos)
    ei = np.concatenate(e_ids)
    fi = np.concatenate(f_ids)
    n_f = int(fi.max()) + 1
    pair, pair_idx = np.unique(ei * n_f + fi, return_inverse=True)
    pair_e = pair // n_f
    # group id of each (sentence, f position): its denominators sum over e
    group = np.unique(sent * (fp.max() + 1) + fp, return_inverse=True)[1]
    t = np.ones(len(pair), dtype=np.float64)  # uniform start; normalized below
    counts_e = np.bincount(pair_e, weights=t, minlength=n_e + 1)
    t /= counts_e[pair_e]
    for _ in range(iterations):
        p = t[pair_idx]
        denom = np.bincount(group, weights=p)
        post = p / denom[group]
        c = np.bincount(pair_idx, weights=post, minlength=len(pair))
        tot = np.bincount(pair_e, weights=c, minlength=n_e + 1)
        t = c / np.maximum(tot[pair_e], null_prob_floor)
    # Viterbi: per group the argmax over e (ties → lowest e position: stable order)
    p = t[pair_idx]
    order = np.lexsort((ep, -p, group))
    first = np.ones(len(order), dtype=bool)
    first[1:] = group[order][1:] != group[order][:-1]
    best = order[first]
    out: list[list[tuple[int, int]]] = [[] for _ in e_sents]
    null_pos = {k: len(e) for k, e in enumerate(e_sents)}
    for k, e_at, f_at in zip(sent[best].tolist(), ep[best].tolist(), fp[best].tolist()):
        if e_at != null_pos[k]:
            out[k].append((e_at, f_at))
    return out


def ibm1_directional(
    src: Sequence[Sequence[str]], tgt: Sequence[Sequence[str]], *, iterations: int = 5
) -> tuple[list[list[Link]], list[list[Link]]]:
    """Forward (each target word → best source word) and reverse links of IBM Model 1; deterministic.

    Example:
        >>> fwd, rev = ibm1_directional([["a", "b"], ["a", "c"]] * 3, [["x", "y"], ["x", "z"]] * 3)
        >>> fwd[0], rev[1]
        ([(0, 0), (1, 1)], [(0, 0), (1, 1)])
    """
    s_enc, n_s = _encode(src)
    t_enc, n_t = _encode(tgt)
    fwd = _ibm1_viterbi(s_enc, t_enc, n_s, iterations)  # (source pos, target pos)
    rev_ts = _ibm1_viterbi(t_enc, s_enc, n_t, iterations)  # (target pos, source pos)
    rev = [sorted((i, j) for j, i in links) for links in rev_ts]
    return [sorted(x) for x in fwd], rev


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


_MEMO: OrderedDict[str, tuple[list[list[Link]], list[list[Link]]]] = OrderedDict()
_MEMO_SIZE = 4


def _aligner_version(aligner: str) -> str:
    if aligner == "eflomal":
        try:
            return "eflomal-" + importlib.metadata.version("eflomal")
        except importlib.metadata.PackageNotFoundError:  # pragma: no cover - eflomal is a dependency
            return "eflomal-unknown"
    return f"ibm1-{CODE_VERSION}"


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


def _save_links(path: Path, fwd: list[list[Link]], rev: list[list[Link]]) -> None:
    arrays = {}
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


def _load_links(path: Path) -> tuple[list[list[Link]], list[list[Link]]]:
    with np.load(path) as z:
        out = []
        for name in ("fwd", "rev"):
            lengths, flat = z[f"{name}_len"], z[f"{name}_links"]
            bounds = np.concatenate([[0], np.cumsum(lengths)])
            pairs = [tuple(p) for p in flat.tolist()]
            out.append([pairs[a:b] for a, b in zip(bounds[:-1], bounds[1:])])
    return out[0], out[1]


def align_corpus(
    src: Sequence[Sequence[str]],
    tgt: Sequence[Sequence[str]],
    *,
    aligner: str = "eflomal",
    symmetrization: str = "grow-diag-final",
    seed: int = 0,
    cache_dir: Path | None = None,
    eflomal_options: dict | None = None,
    ibm1_iterations: int = 5,
) -> Alignment:
    """Word-align sentence pairs in both directions and symmetrize; cached by content hash.

    Args:
        src: source sentences as word lists (no whitespace inside words, no empty sentences).
        tgt: target sentences as word lists, same length as ``src``.
        aligner: ``"eflomal"`` or ``"ibm1"`` (see the module docstring).
        symmetrization: one of :data:`SYMMETRIZATIONS`.
        seed: part of the cache key (eflomal cannot be seeded; see the module docstring). Draw it
            from the trial's generator so different trial seeds get independent alignments.
        cache_dir: directory for ``alignments/<hash>.npz`` (directional links; the symmetrization
            is recomputed, it is cheap). ``None``: only the in-process memo.
        eflomal_options: ``model``, ``n_samplers``, ``rel_iterations``, ``null_prior`` for eflomal.
        ibm1_iterations: EM iterations of the IBM Model 1 aligner.

    Returns:
        An :class:`Alignment`.

    Raises:
        ValueError: for mismatched lengths, empty input, empty sentences or words with whitespace.
    """
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
    options: dict = {"aligner": aligner, "version": _aligner_version(aligner), "code": CODE_VERSION}
    if aligner == "eflomal":
        options.update(
            {"model": 3, "n_samplers": 3, "rel_iterations": 1.0, "null_prior": 0.2, **(eflomal_options or {})}
        )
        options["seed"] = int(seed)
    else:
        options["iterations"] = int(ibm1_iterations)  # deterministic: the seed does not matter
    key = corpus_key(src, tgt, options)
    path = Path(cache_dir) / "alignments" / f"{key[:32]}.npz" if cache_dir is not None else None
    t0 = time.perf_counter()
    source = "computed"
    if key in _MEMO:
        fwd, rev = _MEMO[key]
        _MEMO.move_to_end(key)
        source = "memo"
    elif path is not None and path.is_file():
        fwd, rev = _load_links(path)
        source = "cache"
    else:
        if aligner == "eflomal":
            opts = {k: options[k] for k in ("model", "n_samplers", "rel_iterations", "null_prior")}
            fwd, rev = eflomal_directional(src, tgt, **opts)
        else:
            fwd, rev = ibm1_directional(src, tgt, iterations=options["iterations"])
        if path is not None:
            _save_links(path, fwd, rev)
    _MEMO[key] = (fwd, rev)
    while len(_MEMO) > _MEMO_SIZE:
        _MEMO.popitem(last=False)
    t1 = time.perf_counter()
    links = [symmetrize(f, r, symmetrization) for f, r in zip(fwd, rev)]
    info = {
        "aligner": aligner,
        "options": {k: v for k, v in options.items() if k not in ("code",)},
        "symmetrization": symmetrization,
        "cache_key": key[:32],
        "links_from": source,
        "sentence_pairs": len(src),
        "links": int(sum(len(x) for x in links)),
        "align_s": round(t1 - t0, 4),
        "symmetrize_s": round(time.perf_counter() - t1, 4),
    }
    return Alignment(links=links, info=info)


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
