"""The directional word aligners behind :func:`methods._align.align_corpus`: fast_align's model, eflomal, IBM Model 1.

Each takes sentence pairs as word lists and returns forward and reverse links (``(source, target)``
positions per sentence); :mod:`methods._align` symmetrizes and caches them. fast_align's model and IBM
Model 1 are numpy EM implementations here, deterministic (no randomness, a fixed order of every sum);
eflomal runs through its Python API and cannot be seeded (see :mod:`methods._align`).

Example:
    >>> fwd, rev = ibm1_directional([["a", "b"], ["a", "c"]] * 3, [["x", "y"], ["x", "z"]] * 3, iterations=5)
    >>> fwd[0]
    [(0, 0), (1, 1)]
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness import progress as _progress

__all__ = ["Link", "FAST_ALIGN_DEFAULTS", "eflomal_directional", "ibm1_directional", "fast_align_directional",
           "checked_fast_align_options"]

Link = tuple[int, int]
"""``(source_position, target_position)`` within one sentence pair."""




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
# fast_align: IBM Model 2 with a diagonal prior (Dyer, Chahuneau & Smith 2013), vectorized EM
# ------------------------------------------------------------------------------------------------

FAST_ALIGN_DEFAULTS: dict[str, float | int | bool] = {
    "iterations": 5,
    "p0": 0.08,
    "tension": 4.0,
    "optimize_tension": True,
    "alpha": 0.01,
    "ibm1_warmup": 5,
}
"""fast_align's defaults with its recommended flags ``-d -o -v`` (favor the diagonal, optimize the
tension, Dirichlet prior ``alpha`` on the translation tables), after 5 IBM Model 1 iterations that
warm-start the translation table (``ibm1_warmup``; 0 is fast_align's own uniform start); see
:func:`fast_align_directional`."""

_BLOCK_ENTRIES = 1 << 20
"""At most this many (target word, source word) cells per block of equally long sentence pairs."""
_CHUNK_ENTRIES = 1 << 22
"""Blocks are grouped into chunks of about this many cells; one ``bincount`` per chunk gathers the counts."""
_TENSION_STEPS, _TENSION_RATE, _TENSION_MIN, _TENSION_MAX = 8, 20.0, 0.1, 14.0
"""fast_align's tension update: 8 gradient steps of rate 20 per EM iteration, clipped to [0.1, 14]."""


def _diagonal_feature(m: int, n: int) -> np.ndarray:
    """``h[i, j] = -|(i+1)/m - (j+1)/n|`` for target positions ``i < m`` and source positions ``j < n``."""
    return -np.abs(np.arange(1, m + 1)[:, None] / m - np.arange(1, n + 1)[None, :] / n)


def _flat(sents: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lengths = np.array([len(s) for s in sents], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    flat = np.concatenate(sents).astype(np.int64) if len(sents) else np.zeros(0, np.int64)
    return flat, offsets, lengths


@dataclass
class _Chunk:
    """Blocks of one chunk: the distinct pair codes (then their global table rows) and each cell's row in them."""

    table: np.ndarray
    index: np.ndarray
    members: list[tuple[int, int, np.ndarray, np.ndarray, int]]


def _unique_inverse(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values of ``codes`` and, per element, its int32 row in them (one stable sort)."""
    order = np.argsort(codes, kind="stable")
    ordered = codes[order]
    new = np.empty(len(ordered), dtype=bool)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    inverse = np.empty(len(codes), dtype=np.int32)
    inverse[order] = np.cumsum(new, dtype=np.int64) - 1
    return ordered[new], inverse


def _em_layout(
    e_sents: list[np.ndarray], f_sents: list[np.ndarray], n_f: int
) -> tuple[list[tuple[int, int, np.ndarray]], list[_Chunk], np.ndarray]:
    """The data layout of :func:`_fast_align_viterbi`: blocks of sentence pairs of one shape
    ``(m, n)``, chunks of blocks with each cell's row in the sorted global table of distinct
    ``(e, f)`` codes, and that table."""
    e_flat, e_off, e_len = _flat(e_sents)
    f_flat, f_off, f_len = _flat(f_sents)
    usable = np.flatnonzero((e_len > 0) & (f_len > 0))
    order = usable[np.lexsort((usable, e_len[usable], f_len[usable]))]  # by (m, n), then sentence index
    # blocks: (m, n, sentence ids) with at most _BLOCK_ENTRIES cells (at least one sentence)
    blocks: list[tuple[int, int, np.ndarray]] = []
    if len(order):
        shape_m, shape_n = f_len[order], e_len[order]
        change = np.flatnonzero((np.diff(shape_m) != 0) | (np.diff(shape_n) != 0)) + 1
        for sel in np.split(order, change):
            m, n = int(f_len[sel[0]]), int(e_len[sel[0]])
            per = max(1, _BLOCK_ENTRIES // (m * n))
            blocks.extend((m, n, sel[a : a + per]) for a in range(0, len(sel), per))

    def gather(flat: np.ndarray, off: np.ndarray, sel: np.ndarray, length: int) -> np.ndarray:
        return flat[off[sel][:, None] + np.arange(length)[None, :]]

    def codes(m: int, n: int, sel: np.ndarray) -> np.ndarray:
        e = gather(e_flat, e_off, sel, n)
        f = gather(f_flat, f_off, sel, m)
        return (e[:, None, :] * n_f + f[:, :, None]).ravel()

    # chunks of blocks, each with its own table of distinct (e, f) codes and every cell's index into it
    groups: list[list[tuple[int, int, np.ndarray]]] = [[]]
    size = 0
    for blk in blocks:
        if size >= _CHUNK_ENTRIES:
            groups.append([])
            size = 0
        groups[-1].append(blk)
        size += blk[0] * blk[1] * len(blk[2])
    chunks: list[_Chunk] = []
    for group in groups:
        if not group:
            continue
        local, inverse = _unique_inverse(np.concatenate([codes(m, n, sel) for m, n, sel in group]))
        members, at = [], 0
        for m, n, sel in group:
            members.append((m, n, sel, gather(f_flat, f_off, sel, m), at))
            at += m * n * len(sel)
        chunks.append(_Chunk(local, inverse, members))
    table = np.sort(np.concatenate([np.zeros(0, np.int64)] + [c.table for c in chunks]))
    table = (
        table[np.concatenate([[True], table[1:] != table[:-1]])] if len(table) else table
    )  # (np.unique hashes: slower)
    for c in chunks:  # chunk table → global table (distinct within a chunk, so `+=` through it is safe)
        c.table = np.searchsorted(table, c.table)
    return blocks, chunks, table


def _fast_align_viterbi(
    e_sents: list[np.ndarray],
    f_sents: list[np.ndarray],
    n_e: int,
    n_f: int,
    *,
    iterations: int,
    p0: float,
    tension: float,
    optimize_tension: bool,
    alpha: float,
    ibm1_warmup: int = 0,
) -> tuple[list[list[Link]], dict]:
    """One direction of fast_align: each f word is aligned to one e word or to NULL.

    Sentence pairs are grouped into blocks of one shape ``(m, n)`` (f length, e length), so a block
    is a dense ``S x m x n`` array: the alignment prior of a shape is one ``m x n`` matrix, the
    translation probabilities are gathered with a precomputed int32 index into the table of
    co-occurring ``(e, f)`` pairs, and the expected counts of a chunk of blocks are summed with one
    ``bincount``. Memory: 4 bytes per co-occurring (f word, e word) cell of the corpus for the
    index, plus one chunk of float64 posteriors. No randomness; the order of every sum is fixed.

    Returns:
        Per sentence, links ``(e_position, f_position)``; and facts (final tension, pairs in the
        table, log-likelihood and posterior NULL rate of the last EM iteration).
    """
    # The EM loop is one piece on purpose: its E step, the tension M step and the t update share the
    # counts of one iteration; the data layout and the links are built by the helpers around it.
    from scipy.special import digamma

    n_sent = len(e_sents)
    blocks, chunks, table = _em_layout(e_sents, f_sents, n_f)
    pair_e = table // n_f
    shapes = sorted({(m, n) for m, n, _ in blocks})
    features = {s: _diagonal_feature(*s) for s in shapes}
    tokens = float(sum(m * len(sel) for m, _, sel in blocks))

    t = np.ones(len(table))  # uniform start (fast_align: every t equal before the first normalization)
    t_null = np.ones(n_f)
    lam = float(tension)
    links_e: list[np.ndarray] = []
    links_f: list[np.ndarray] = []
    links_s: list[np.ndarray] = []
    facts: dict = {}
    schedule = ["ibm1"] * int(ibm1_warmup) + ["diagonal"] * int(iterations)
    for it, kind in enumerate(_progress.iterate(schedule, "fast_align (EM iterations, one direction)")):
        final = it == len(schedule) - 1
        diagonal_it = it - int(ibm1_warmup)
        if kind == "diagonal":
            priors = {}
            for s, h in features.items():
                w = np.exp(lam * h)
                priors[s] = (1.0 - p0) * w / w.sum(axis=1, keepdims=True)
        counts = np.zeros(len(table))
        null_counts = np.zeros(n_f)
        emp_feat = 0.0
        loglik = 0.0
        non_null: dict[tuple[int, int], np.ndarray] = {s: np.zeros(s[0]) for s in shapes}
        for chunk in chunks:
            t_local = t[chunk.table]
            post_buf = None if final else np.empty(len(chunk.index))
            for m, n, sel, f_ids, at in chunk.members:
                cells = len(sel) * m * n
                if kind == "diagonal":
                    prior, prior_null = priors[(m, n)], p0
                else:  # IBM Model 1: uniform over the n words and NULL
                    prior, prior_null = np.full((m, n), 1.0 / (n + 1)), 1.0 / (n + 1)
                p = t_local[chunk.index[at : at + cells]].reshape(len(sel), m, n) * prior
                p_null = t_null[f_ids] * prior_null
                if final:
                    best = np.argmax(p, axis=2)  # ties: the lowest e position
                    best_p = np.take_along_axis(p, best[:, :, None], axis=2)[:, :, 0]
                    keep = best_p > p_null  # NULL wins ties (fast_align checks it first)
                    s_at, f_at = np.nonzero(keep)
                    links_s.append(sel[s_at])
                    links_e.append(best[s_at, f_at])
                    links_f.append(f_at)
                    continue
                total = p.sum(axis=2) + p_null
                loglik += float(np.log(total).sum())
                post = p / total[:, :, None]
                post_buf[at : at + cells] = post.ravel()
                post_null = p_null / total
                null_counts += np.bincount(f_ids.ravel(), weights=post_null.ravel(), minlength=n_f)
                if kind == "diagonal":
                    emp_feat += float(np.einsum("smn,mn->", post, features[(m, n)]))
                    non_null[(m, n)] += (1.0 - post_null).sum(axis=0)
            if not final:
                counts[chunk.table] += np.bincount(chunk.index, weights=post_buf, minlength=len(chunk.table))
        if final:
            break
        facts = {"log_likelihood": round(loglik, 4), "posterior_p0": round(float(null_counts.sum()) / tokens, 6)}
        if kind == "diagonal" and optimize_tension and diagonal_it > 0:
            # M-step for the tension: gradient ascent on sum_tokens [sum_j post_j h_j - (1 - post_0) dlogZ/dlam]
            for _ in range(_TENSION_STEPS):
                model_feat = 0.0
                for s, h in features.items():
                    w = np.exp(lam * h)
                    model_feat += float(non_null[s] @ ((h * w).sum(axis=1) / w.sum(axis=1)))
                lam = min(_TENSION_MAX, max(_TENSION_MIN, lam + _TENSION_RATE * (emp_feat - model_feat) / tokens))
        if alpha > 0:  # variational Bayes (fast_align -v): exp(digamma(c + a) - digamma(sum(c + a)))
            tot = np.bincount(pair_e, weights=counts + alpha, minlength=n_e)
            t = np.exp(digamma(counts + alpha) - digamma(tot[pair_e]))
            t_null = np.exp(digamma(null_counts + alpha) - digamma(float((null_counts + alpha).sum())))
        else:
            tot = np.bincount(pair_e, weights=counts, minlength=n_e)
            t = counts / np.where(tot > 0, tot, 1.0)[pair_e]
            t_null = null_counts / (float(null_counts.sum()) or 1.0)
    facts.update({"tension": round(lam, 6), "table_pairs": int(len(table)), "sentence_pairs": n_sent})
    return _links_per_sentence(n_sent, links_s, links_e, links_f), facts


def _links_per_sentence(n_sent: int, links_s: list, links_e: list, links_f: list) -> list[list[Link]]:
    """Each sentence's links ``(e_position, f_position)`` in f order, from the blocks' link arrays."""
    out: list[list[Link]] = [[] for _ in range(n_sent)]
    if links_s:
        s_all, e_all, f_all = (np.concatenate(x) for x in (links_s, links_e, links_f))
        o = np.lexsort((f_all, s_all))
        s_all, e_all, f_all = s_all[o], e_all[o], f_all[o]
        bounds = np.searchsorted(s_all, np.arange(n_sent + 1))
        pairs = list(zip(e_all.tolist(), f_all.tolist()))
        for k in np.flatnonzero(np.diff(bounds)).tolist():
            out[k] = pairs[bounds[k] : bounds[k + 1]]
    return out


def fast_align_directional(
    src: Sequence[Sequence[str]], tgt: Sequence[Sequence[str]], **options: float | int | bool
) -> tuple[list[list[Link]], list[list[Link]], dict]:
    """Forward and reverse links of fast_align's model (both as ``(source, target)`` positions).

    The model (Dyer, Chahuneau & Smith 2013, "A Simple, Fast, and Effective Reparameterization of
    IBM Model 2"): a target word at position ``i`` of ``m`` is generated by NULL with probability
    ``p0``, otherwise by the source word at position ``j`` of ``n`` with probability
    ``(1 - p0) exp(-λ |i/m - j/n|) / Z_λ(i, m, n)``, times the lexical translation probability
    ``t(f | e)``. EM as in fast_align with ``-d -o -v``: every ``t`` equal at the start (the first
    E-step is the diagonal prior alone), ``iterations - 1`` EM iterations, then one Viterbi pass
    (the last EM parameters; NULL wins ties, then the leftmost source word); from the second
    iteration on, the tension ``λ`` (start ``tension``) takes 8 gradient steps of rate 20 per
    iteration, clipped to [0.1, 14]; the table is normalized with a Dirichlet prior ``alpha``
    (``exp(ψ(c + α) - ψ(Σ(c + α)))``; ``alpha = 0``: plain relative frequencies). Differences from
    fast_align's code, all deliberate: the tension gradient weighs the model side by each token's
    posterior non-NULL mass and uses the 1-based target position on both sides (fast_align's
    empirical side uses the 0-based one); and ``ibm1_warmup`` (default 5; ``0`` is fast_align's
    start) IBM Model 1 EM iterations (uniform prior over the words and NULL) train the translation
    table first, the customary Model-1-first schedule of GIZA++-style pipelines. From a uniform
    table, the first E-step is the diagonal prior alone, which on languages with another word order
    locks in links to diagonal neighbours: on the built-in world's ``far`` language (18k pairs,
    ``grow-diag-final``, pairs seen >= 10 times), 95.6 % of the kept word-pair types are gold without
    the warm start and 99.6 % with it (IBM Model 1 alone: 98.7 %, eflomal: 98.9 %; ``near``: 99.9 %
    either way).
    Words are lower-cased, as for the other aligners. Deterministic: no randomness, fixed summation
    order.

    Args:
        src / tgt: sentences as word lists.
        **options: ``iterations``, ``p0``, ``tension``, ``optimize_tension``, ``alpha``,
            ``ibm1_warmup`` (defaults: :data:`FAST_ALIGN_DEFAULTS`).

    Returns:
        ``(fwd, rev, facts)``: forward (each target word → a source word) and reverse links, and
        per direction the final tension, table size, log-likelihood and posterior NULL rate.

    Example:
        >>> fwd, rev, _ = fast_align_directional([["a", "b"], ["a", "c"]] * 3, [["x", "y"], ["x", "z"]] * 3)
        >>> fwd[0], rev[1]
        ([(0, 0), (1, 1)], [(0, 0), (1, 1)])
    """
    opts = checked_fast_align_options(options)
    s_enc, n_s = _encode(src)
    t_enc, n_t = _encode(tgt)
    fwd, f_facts = _fast_align_viterbi(s_enc, t_enc, n_s, n_t, **opts)  # (source pos, target pos)
    rev_ts, r_facts = _fast_align_viterbi(t_enc, s_enc, n_t, n_s, **opts)  # (target pos, source pos)
    rev = [sorted((i, j) for j, i in links) for links in rev_ts]
    return [sorted(x) for x in fwd], rev, {"forward": f_facts, "reverse": r_facts}


def checked_fast_align_options(given: Mapping | None) -> dict:
    """fast_align options with defaults filled in, type-checked (errors name the option)."""
    given = dict(given or {})
    unknown = sorted(set(given) - set(FAST_ALIGN_DEFAULTS))
    if unknown:
        raise ValueError(f"fast_align options: unknown {unknown}; expected some of {sorted(FAST_ALIGN_DEFAULTS)}")
    out = {**FAST_ALIGN_DEFAULTS, **given}
    for name in ("iterations", "ibm1_warmup"):
        v = out[name]
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "iterations" else 0):
            raise ValueError(
                f"fast_align option {name} must be an integer >= {1 if name == 'iterations' else 0}, got {v!r}"
            )
    if not isinstance(out["optimize_tension"], bool):
        raise ValueError(f"fast_align option optimize_tension must be true or false, got {out['optimize_tension']!r}")
    for name, ok, bound in (
        ("p0", lambda v: 0.0 < v < 1.0, "strictly between 0 and 1"),
        ("tension", lambda v: v > 0.0, "> 0"),
        ("alpha", lambda v: v >= 0.0, ">= 0"),
    ):
        v = out[name]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v) or not ok(v):
            raise ValueError(f"fast_align option {name} must be a number {bound}, got {v!r}")
        out[name] = float(v)
    return out
