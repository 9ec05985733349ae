"""Vocabulary extension (Wang et al. 2020): add frequent target tokens to the source tokenizer.

The top-N target tokens — by frequency on the target corpus tokenized with the target tokenizer —
that are not in the source vocabulary after canonicalization are merged *into the source
tokenizer's model*, so the extended tokenizer really emits them on text (``add_tokens`` would
instead make them pre-split "added tokens" that break segmentation). Old ids keep their
positions; new tokens take ids ``vocab_size(source), vocab_size(source) + 1, …``.

Supported source models:

* **Unigram** (SentencePiece): pieces are appended to the model vocabulary with the target
  tokenizer's score when the target is Unigram too, otherwise with ``log(count / total)`` from the
  target corpus (the unigram-LM estimate a Unigram trainer would start from).
* **WordPiece**: pieces (``foo`` / ``##foo``) are added to the vocabulary; greedy longest-match then
  prefers them.
* **BPE** (byte-level as in GPT-2/RoBERTa/Llama 3, or SentencePiece-style with ``▁`` and byte
  fallback as in Llama 2): a BPE model only emits a token that its merge list builds, so each new
  token ``t`` gets a vocabulary entry *and* one merge ``(a, b) -> t`` appended at the end of the
  merge list (lowest priority). ``t`` is added only when the model built so far (old merges plus
  the merges added before it) splits ``t``'s piece into exactly the two pieces ``a``, ``b``; a
  candidate that needs more pieces may become reachable once a shorter candidate is added, and is
  skipped (and counted in :attr:`Extension.skipped`) if it never does. Because every new merge
  ranks below every old one, the old merges run to completion first: a word is segmented exactly
  as before and then adjacent pieces are joined where a new merge fires, so text in which no new
  merge fires keeps its segmentation. BPE models with a ``continuing_subword_prefix`` or an
  ``end_of_word_suffix`` raise :class:`NotImplementedError`.

:func:`extend_tokenizer` returns the tokenizer and the new ids; :func:`build_extension` also
returns which candidates were added, in id order (for BPE this is not simply the first ``top_n``
of :func:`extension_candidates`).

Example:
    >>> from pathlib import Path  # doctest: +SKIP
    >>> ext, new_ids = extend_tokenizer(src_tok, tgt_tok, Path("target.txt"), top_n=30_000)  # doctest: +SKIP
    >>> result = build_extension(src_tok, tgt_tok, Path("target.txt"), top_n=30_000)  # doctest: +SKIP
    >>> pairs = [(new_id, c.target_id) for new_id, c in zip(result.new_ids, result.added)]  # doctest: +SKIP
"""

from __future__ import annotations

import heapq
import json
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.files import text_lines
from harness.vocab import (
    Canon,
    FamilySpec,
    _canonical_detail,
    _surface,
    family_spec,
    vocab_size,
)

DEFAULT_EXTEND_TOP_N = 30_000
"""How many target tokens extension mode adds when a config or flag does not say (the FOCUS paper's
30k); the one place this default is spelled (configs, ``tokxfer init --extend-top-n``, the API)."""

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExtensionCandidate:
    """One target token chosen for extension.

    Attributes:
        target_id: its id in the target tokenizer.
        canon: its canonical form.
        piece: its spelling in the source tokenizer's model vocabulary.
        count: its frequency on the target corpus.
    """

    target_id: int
    canon: Canon
    piece: str
    count: int


def _lines(corpus: Path, chunk: int = 1000) -> Iterator[list[str]]:
    batch: list[str] = []
    for line in text_lines(corpus, what="corpus"):
        batch.append(line)
        if len(batch) >= chunk:
            yield batch
            batch = []
    if batch:
        yield batch


def token_counts(tok: Any, corpus: Path) -> np.ndarray:
    """Frequency of every token id of ``tok`` on ``corpus`` (one text per line, no specials)."""
    counts = np.zeros(vocab_size(tok), dtype=np.int64)
    backend = tok.backend_tokenizer
    for batch in _lines(Path(corpus)):
        for enc in backend.encode_batch(batch, add_special_tokens=False):
            if enc.ids:
                counts += np.bincount(np.asarray(enc.ids, dtype=np.int64), minlength=len(counts))[: len(counts)]
    return counts


def _reachable(spec: FamilySpec, backend: Any, canon: Canon) -> str | None:
    """The source-model piece for ``canon`` if the source pipeline could ever produce it."""
    try:
        text = canon.text.decode("utf-8")
    except UnicodeDecodeError:
        return None  # partial UTF-8 (byte-level fragments, byte-fallback pieces)
    if not text or text != text.strip() or any(c.isspace() for c in text):
        return None  # pre-tokenizers split at whitespace: a piece with spaces is never emitted
    norm = backend.normalizer
    if norm is not None:
        normalized = norm.normalize_str(text)
        if spec.family == "sentencepiece":  # Llama-style normalizers add the marker themselves
            normalized = normalized.lstrip(spec.marker)
        if normalized != text:
            return None  # the normalizer rewrites it (case, NFKC): the piece could never match
    pre = backend.pre_tokenizer
    if spec.family == "wordpiece" and pre is not None and len(pre.pre_tokenize_str(text)) != 1:
        return None  # e.g. BERT splits punctuation off words
    return _surface(spec, canon)


def extension_candidates(source_tok: Any, target_tok: Any, corpus: Path, top_n: int) -> list[ExtensionCandidate]:
    """The top-``top_n`` target tokens by corpus frequency that the source vocabulary lacks.

    Tokens are skipped when they are special, not valid UTF-8 on their own, contain whitespace,
    would be rewritten by the source normalizer, or already exist in the source vocabulary after
    canonicalization. Ties in frequency go to the lower target id; tokens never seen are not added.
    """
    if top_n < 0:
        raise ValueError(f"top_n must be >= 0, got {top_n}")
    s_canon, _, s_spec = _canonical_detail(source_tok)
    t_canon, _, _ = _canonical_detail(target_tok)
    known = {c for c in s_canon if c is not None}
    counts = token_counts(target_tok, corpus)
    order = np.lexsort((np.arange(len(counts)), -counts))
    backend = source_tok.backend_tokenizer
    out: list[ExtensionCandidate] = []
    seen: set[Canon] = set()
    for t in order:
        if len(out) >= top_n or counts[t] <= 0:
            break
        c = t_canon[t] if t < len(t_canon) else None
        if c is None or c in known or c in seen:
            continue
        piece = _reachable(s_spec, backend, c)
        if piece is None:
            continue
        seen.add(c)
        out.append(ExtensionCandidate(int(t), c, piece, int(counts[t])))
    return out


def _keep_added_ids(vocab: dict[str, int], cfg: dict, n_old: int) -> None:
    """Enter added tokens that the model vocabulary lacks (ids above it) into it, with their ids.

    On loading, ``tokenizers`` gives such an added token the id the *model* has for its content,
    or else the model's vocabulary size — which, once pieces were added to a dict vocabulary
    (WordPiece, BPE), is an id of a new piece. Entered in the model vocabulary, it keeps its id.
    """
    ids = set(vocab.values())
    for a in cfg.get("added_tokens") or []:
        i = int(a["id"])
        if i < n_old and i not in ids and a["content"] not in vocab:
            vocab[a["content"]] = i


def _target_scores(target_tok: Any) -> dict[int, float] | None:
    model = json.loads(target_tok.backend_tokenizer.to_str()).get("model") or {}
    if model.get("type") != "Unigram":
        return None
    return {i: float(score) for i, (_, score) in enumerate(model["vocab"])}


@dataclass(frozen=True)
class Extension:
    """The result of :func:`build_extension`.

    Attributes:
        tokenizer: the extended ``PreTrainedTokenizerFast``.
        new_ids: ids of the added tokens, ``vocab_size(source), vocab_size(source) + 1, …``.
        added: the candidate behind each new id (``added[k]`` has id ``new_ids[k]``); its
            ``target_id`` is the paired target token.
        skipped: candidates ranked among those considered that could not be added because the
            source model can never emit them (BPE only: not reachable with one merge, or split by
            the pre-tokenizer); empty for Unigram and WordPiece.
    """

    tokenizer: Any
    new_ids: list[int]
    added: list[ExtensionCandidate]
    skipped: list[ExtensionCandidate]


def extend_tokenizer(source_tok: Any, target_tok: Any, corpus: Path, top_n: int) -> tuple[Any, list[int]]:
    """Add the top-N target tokens missing from the source vocabulary into the source model.

    Args:
        source_tok: the source fast tokenizer (Unigram, WordPiece or BPE model).
        target_tok: the target fast tokenizer that ranks the candidates.
        corpus: target-language text, one text per line, tokenized with ``target_tok`` to count.
        top_n: how many tokens to add at most (the paper: 30k).

    Returns:
        ``(extended, new_ids)``: a ``PreTrainedTokenizerFast`` with the source's special tokens
        whose ids ``< vocab_size(source_tok)`` are unchanged, and the ids of the added tokens in
        the extended tokenizer, ``vocab_size(source_tok), vocab_size(source_tok) + 1, …``.

        For Unigram and WordPiece sources exactly the first ``top_n`` candidates of
        :func:`extension_candidates` are added, in that order (decreasing target frequency), so
        ``extension_candidates(source_tok, target_tok, corpus, top_n)[k]`` is the target token of
        ``new_ids[k]``.

        For BPE sources a candidate is added only if one new merge ``(a, b)`` appended at the end
        of the merge list makes the model emit it: the model built so far must split its piece
        into exactly two pieces. Candidates are taken most-frequent-first among those currently
        reachable; adding one may make longer candidates reachable, and when the considered
        candidates are exhausted before ``top_n`` tokens were added, the next most frequent ones
        are considered. So fewer than ``top_n`` tokens may be added, not all of the first
        ``top_n`` candidates are, and ids follow the order of addition: use
        :func:`build_extension` to get the candidate (target id) behind each new id. Since new
        merges rank below all old ones, text is segmented as before except that adjacent pieces
        are joined where a new merge fires; text in which none fires is unchanged.

    Raises:
        NotImplementedError: for BPE models with a ``continuing_subword_prefix`` or an
            ``end_of_word_suffix``.
        ValueError: for unsupported tokenizer types (see :func:`harness.vocab.tokenizer_family`).

    Example:
        >>> ext, new_ids = extend_tokenizer(src_tok, tgt_tok, corpus, top_n=100)  # doctest: +SKIP
        >>> new_ids[0] == len(src_tok)  # doctest: +SKIP
        True
    """
    result = build_extension(source_tok, target_tok, corpus, top_n)
    return result.tokenizer, result.new_ids


def build_extension(source_tok: Any, target_tok: Any, corpus: Path, top_n: int) -> Extension:
    """:func:`extend_tokenizer`, also returning which candidates were added and which skipped.

    ``result.added[k]`` is the candidate (target token) of ``result.new_ids[k]``.
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = family_spec(source_tok)
    if spec.model_type not in ("Unigram", "WordPiece", "BPE"):
        raise NotImplementedError(
            f"vocabulary extension into a {spec.model_type} model ({spec.family} family) is not supported; "
            "supported source models: Unigram (SentencePiece), WordPiece and BPE"
        )
    cfg = json.loads(source_tok.backend_tokenizer.to_str())
    model = cfg["model"]
    n_old = vocab_size(source_tok)
    skipped: list[ExtensionCandidate] = []
    if spec.model_type == "BPE":
        if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
            raise NotImplementedError(
                "vocabulary extension into a BPE model with a continuing_subword_prefix or end_of_word_suffix "
                f"({model.get('continuing_subword_prefix')!r}, {model.get('end_of_word_suffix')!r}) is not supported"
            )
        if top_n < 0:
            raise ValueError(f"top_n must be >= 0, got {top_n}")
        _keep_added_ids(model["vocab"], cfg, n_old)
        pool = extension_candidates(source_tok, target_tok, corpus, vocab_size(target_tok))
        cands, skipped = _extend_bpe(spec, source_tok.backend_tokenizer, cfg, pool, top_n, n_old)
        logger.info(
            "BPE extension: added %d of top_n=%d tokens; skipped %d candidates not reachable with one merge",
            len(cands),
            top_n,
            len(skipped),
        )
    else:
        cands = extension_candidates(source_tok, target_tok, corpus, top_n)
        added_content = {int(a["id"]): a["content"] for a in cfg.get("added_tokens") or []}
        if spec.model_type == "Unigram":
            vocab = model["vocab"]
            min_score = min((s for _, s in vocab), default=0.0)
            # Added tokens above the model vocabulary (XLM-R's <mask>) keep their ids: fill the gap
            # with their own content so appended pieces start at n_old.
            for i in range(len(vocab), n_old):
                vocab.append([added_content.get(i, f"<extension-pad-{i}>"), min_score])
            t_scores = _target_scores(target_tok)
            total = sum(c.count for c in cands) or 1
            for c in cands:
                score = t_scores[c.target_id] if t_scores is not None else math.log(c.count / total)
                vocab.append([c.piece, float(score)])
        else:  # WordPiece
            vocab = model["vocab"]
            _keep_added_ids(vocab, cfg, n_old)
            for k, c in enumerate(cands):
                vocab[c.piece] = n_old + k
    backend = Tokenizer.from_str(json.dumps(cfg))
    if spec.model_type == "BPE":
        _verify_bpe(cfg, backend, cands, n_old)
    kwargs = dict(source_tok.special_tokens_map)
    extended = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        model_max_length=source_tok.model_max_length,
        padding_side=source_tok.padding_side,
        truncation_side=getattr(source_tok, "truncation_side", "right"),
        **kwargs,
    )
    new_ids = [extended.convert_tokens_to_ids(c.piece) for c in cands]
    expected = list(range(n_old, n_old + len(cands)))
    if new_ids != expected:  # pragma: no cover - guards the id layout promised above
        raise RuntimeError(f"extension produced unexpected ids {new_ids[:5]}…, expected {expected[:5]}…")
    return Extension(extended, new_ids, list(cands), skipped)


# ---------------------------------------------------------------------------------------------- BPE


def _merge_pair(seg: list[str], a: str, b: str) -> list[str]:
    """``seg`` with every adjacent ``(a, b)`` joined, leftmost first (how BPE applies one merge)."""
    out: list[str] = []
    i, n = 0, len(seg)
    while i < n:
        if i + 1 < n and seg[i] == a and seg[i + 1] == b:
            out.append(a + b)
            i += 2
        else:
            out.append(seg[i])
            i += 1
    return out


def _apply_merges(seg: list[str], ranks: dict[tuple[str, str], int]) -> list[str]:
    """BPE on ``seg``: join the adjacent pair of lowest rank (leftmost on ties) until none has one."""
    while len(seg) > 1:
        best, at = None, -1
        for k, p in enumerate(zip(seg, seg[1:])):
            r = ranks.get(p)
            if r is not None and (best is None or r < best):
                best, at = r, k
        if best is None:
            break
        seg = seg[:at] + [seg[at] + seg[at + 1]] + seg[at + 2 :]
    return seg


def _append_merges(model: dict, pairs: list[tuple[str, str]]) -> None:
    """Append ``pairs`` to ``model["merges"]`` in the format already used there.

    tokenizer.json stores merges as ``"a b"`` strings (older files) or ``[a, b]`` lists; an empty
    list and a pair with a space in a part (not expressible as a string) use lists.
    """
    merges = model.setdefault("merges", [])
    as_str = bool(merges) and isinstance(merges[0], str)
    if as_str and any(" " in a or " " in b for a, b in pairs):
        merges[:] = [m.split(" ", 1) for m in merges]
        as_str = False
    merges.extend(f"{a} {b}" if as_str else [a, b] for a, b in pairs)


def _single_pretoken(spec: FamilySpec, backend: Any, c: ExtensionCandidate) -> bool:
    """Whether the source pre-tokenizer keeps the candidate's text in one pre-token.

    A token that the pre-tokenizer always splits (GPT-2's regex separates ``e,`` into ``e`` and
    ``,``; Llama 3 splits digits in threes) can never be emitted, whatever the merges.
    """
    pre = backend.pre_tokenizer
    if pre is None:
        return True
    text = c.canon.text.decode("utf-8")
    if c.canon.word_start and spec.family == "bytelevel":
        text = " " + text
    return len(pre.pre_tokenize_str(text)) == 1


def _plain_model(cfg: dict, backend: Any) -> Any:
    """The backend's model, rebuilt without BPE dropout when it has one (tokenize is then exact)."""
    from tokenizers import Tokenizer

    if not cfg["model"].get("dropout"):
        return backend.model
    plain = json.loads(json.dumps(cfg))
    plain["model"]["dropout"] = None
    return Tokenizer.from_str(json.dumps(plain)).model


def _extend_bpe(
    spec: FamilySpec, backend: Any, cfg: dict, pool: list[ExtensionCandidate], top_n: int, n_old: int
) -> tuple[list[ExtensionCandidate], list[ExtensionCandidate]]:
    """Choose the BPE candidates to add and write their vocab entries and merges into ``cfg``.

    The segmentation under the old merges is the source model's own (``model.tokenize``); the
    new merges rank below all old ones, so they act on that segmentation, and each only on the
    result of the earlier new merges (a new merge cannot create a pair an older one joins). So a
    candidate's current split is kept and updated by each added merge through an index from
    adjacent pairs to candidates; a candidate considered late starts from its old split with the
    merges added so far applied. The most frequent candidate with a two-piece split is added next;
    ``pool`` is considered ``top_n`` candidates at a time and widened by the shortfall whenever no
    considered candidate is reachable.

    Returns:
        ``(added, skipped)``: the added candidates in id order, and the considered candidates that
        never became reachable.
    """
    # Stays whole: one pass that picks candidates and re-segments them under the merges chosen so far; its state
    # (segmentations, merges, stuck candidates) would have to be threaded through every piece.
    model = cfg["model"]
    vocab: dict[str, int] = model["vocab"]
    old_model = _plain_model(cfg, backend)
    seg: dict[int, list[str]] = {}  # considered, not yet added, reachable in principle
    pair_index: dict[tuple[str, str], set[int]] = {}
    ready: list[int] = []  # heap of pool indices whose split has two pieces
    unreachable: set[int] = set()
    considered = 0
    added: list[int] = []
    new_merges: list[tuple[str, str]] = []
    new_ranks: dict[tuple[str, str], int] = {}

    def consider(k: int) -> None:
        nonlocal considered
        for i in range(considered, min(considered + k, len(pool))):
            c = pool[i]
            if c.piece in vocab or not _single_pretoken(spec, backend, c):
                unreachable.add(i)
                continue
            parts = [t.value for t in old_model.tokenize(c.piece)]
            if "".join(parts) != c.piece or len(parts) < 2:  # unknown chars (unk / byte fallback)
                unreachable.add(i)
                continue
            if new_ranks:  # considered late: the merges added so far act on the old split
                parts = _apply_merges(parts, new_ranks)
            seg[i] = parts
            if len(parts) == 2:
                heapq.heappush(ready, i)
            else:
                for p in zip(parts, parts[1:]):
                    pair_index.setdefault(p, set()).add(i)
        considered = min(considered + k, len(pool))

    consider(top_n)
    while len(added) < top_n:
        if not ready:
            if considered >= len(pool):
                break
            consider(top_n - len(added))
            continue
        i = heapq.heappop(ready)
        parts = seg.pop(i)
        piece = pool[i].piece
        if piece in vocab:  # a duplicate spelling added already
            unreachable.add(i)
            continue
        a, b = parts
        vocab[piece] = n_old + len(added)
        added.append(i)
        new_ranks[(a, b)] = len(new_merges)
        new_merges.append((a, b))
        for j in pair_index.pop((a, b), ()):
            if j not in seg:
                continue
            old = seg[j]
            new = _merge_pair(old, a, b)
            seg[j] = new
            old_pairs, new_pairs = set(zip(old, old[1:])), set(zip(new, new[1:]))
            if len(new) <= 2:
                new_pairs = set()
            for p in old_pairs - new_pairs:
                if p != (a, b) and p in pair_index:
                    pair_index[p].discard(j)
            for p in new_pairs - old_pairs:
                pair_index.setdefault(p, set()).add(j)
            if len(new) == 2:
                heapq.heappush(ready, j)
            elif len(new) == 1:  # pragma: no cover - its piece was just added under another spelling
                del seg[j]
                unreachable.add(j)
    _append_merges(model, new_merges)
    stuck = unreachable | {i for i, s in seg.items() if len(s) != 2}
    return [pool[i] for i in added], [pool[i] for i in sorted(stuck)]


def _verify_bpe(cfg: dict, backend: Any, added: list[ExtensionCandidate], n_old: int) -> None:
    """Every added piece must be one token of the rebuilt model (else the bookkeeping above is wrong)."""
    model = _plain_model(cfg, backend)
    for k, c in enumerate(added):
        toks = model.tokenize(c.piece)
        if len(toks) != 1 or toks[0].id != n_old + k:
            raise RuntimeError(
                f"BPE extension bug: added piece {c.piece!r} (id {n_old + k}) is segmented by the rebuilt model "
                f"as {[t.value for t in toks]}"
            )


# ------------------------------------------------------------------------------ original rows


def keep_original_rows(mapping: Any, n_original: int, special: set[int] | frozenset[int] = frozenset()) -> tuple[Any, dict]:
    """Force target rows ``0 .. n_original - 1`` of an extension mapping to the identity.

    In extension mode the target tokenizer is the source tokenizer with new tokens appended, so
    old token ``i`` has id ``i`` on both sides and its row must stay the source's row bit-exactly,
    whatever a method computed for it: ``random`` / ``transinner`` would draw it at random,
    ``random-mapping`` would scramble it, a method restricted to part of the overlap (FOCUS or
    WECHSEL with ``overlap: symbolic``) would recombine it, and canonical matching would give the
    byte-fallback piece ``<0x41>`` the row of its regular twin ``A``. Only the new rows (ids
    ``>= n_original``) come from the method (Wang et al. 2020: "initialize only the new rows").

    Args:
        mapping: the method's :class:`~harness.protocols.TokenMapping` over the extended vocabulary.
        n_original: the source tokenizer's vocabulary size (old ids are ``0 .. n_original - 1``).
        special: source special-token ids; their rows get provenance SPECIAL, the others COPIED.

    Returns:
        ``(mapping, info)`` where ``info`` has ``n_original``, ``n_added`` (rows from the method),
        ``method_rows_overridden`` (old rows where the method's mapping was not the identity — a
        count to report, not an error) and ``added_counts`` (provenance counts of the new rows).

    Example:
        >>> from harness.protocols import TokenMapping, FALLBACK, COMBINED
        >>> m = TokenMapping.from_coo(4, 3, [1, 3, 3], [0, 0, 2], [1.0, 0.5, 0.5], [FALLBACK, 1, FALLBACK, COMBINED])
        >>> kept, info = keep_original_rows(m, 3, {0})
        >>> kept.indices.tolist(), kept.provenance.tolist(), info["method_rows_overridden"]
        ([0, 1, 2, 0, 2], [0, 1, 1, 2], 3)
    """
    from harness.protocols import COPIED, FALLBACK, PROVENANCE_NAMES, SPECIAL, TokenMapping

    n = int(n_original)
    if not 0 <= n <= min(mapping.n_target, mapping.n_source):
        raise ValueError(
            f"keep_original_rows: n_original={n} must be within the mapping's {mapping.n_target} target and "
            f"{mapping.n_source} source rows"
        )
    counts = np.diff(mapping.indptr)
    # a method's row t < n is already the identity when it is one entry (t, weight 1) that is not random
    single = counts[:n] == 1
    first = mapping.indices[np.minimum(mapping.indptr[:n], max(len(mapping.indices) - 1, 0))] if n else np.zeros(0)
    wfirst = mapping.weights[np.minimum(mapping.indptr[:n], max(len(mapping.weights) - 1, 0))] if n else np.zeros(0)
    identity = single & (first == np.arange(n)) & (wfirst == 1.0) & (mapping.provenance[:n] != FALLBACK)
    prov_old = np.full(n, COPIED, dtype=np.int8)
    sp = np.array(sorted(i for i in special if 0 <= i < n), dtype=np.int64)
    prov_old[sp] = SPECIAL
    lo = mapping.indptr[n]
    indptr = np.concatenate([np.arange(n + 1, dtype=np.int64), n + (mapping.indptr[n + 1 :] - lo)])
    indices = np.concatenate([np.arange(n, dtype=np.int64), mapping.indices[lo:]])
    weights = np.concatenate([np.ones(n, dtype=np.float32), mapping.weights[lo:]])
    provenance = np.concatenate([prov_old, mapping.provenance[n:]])
    kept = TokenMapping(mapping.n_target, mapping.n_source, indptr, indices, weights, provenance)
    new_prov = mapping.provenance[n:]
    info = {
        "n_original": n,
        "n_added": int(mapping.n_target - n),
        "method_rows_overridden": int(n - identity.sum()),
        "added_counts": {name: int(np.sum(new_prov == code)) for code, name in PROVENANCE_NAMES.items()},
    }
    return kept, info
