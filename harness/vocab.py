"""Canonical token forms, special-token roles and vocabulary overlap (shared by every method).

Tokens from different tokenizer families spell the same string differently (METHODS.md,
"Canonicalization"): SentencePiece marks a word start with ``▁`` and may fall back to byte pieces
``<0x41>``; byte-level BPE marks it with ``Ġ`` and spells every byte with a printable stand-in
(GPT-2's ``bytes_to_unicode``); WordPiece marks a *continuation* with ``##``. Every token is mapped
to one :class:`Canon` — its real bytes plus a word-start flag — and overlap is exact on that form.

Supported are *fast* tokenizers (``PreTrainedTokenizerFast`` / transformers 5 ``TokenizersBackend``)
of three families, detected from the ``tokenizers`` backend:

* ``"sentencepiece"``: Unigram or BPE model with a ``Metaspace`` pre-tokenizer/decoder, or the
  Llama-style normalizer/decoder that replaces ``" "`` with ``▁``; byte fallback honoured.
* ``"bytelevel"``: a ``ByteLevel`` pre-tokenizer or decoder (GPT-2, RoBERTa, Llama 3 …).
* ``"wordpiece"``: a WordPiece model (BERT), or a BPE model with a ``continuing_subword_prefix``
  and no other marker.

Special tokens are never canonicalized: they are matched by *role* (bos, eos, unk, pad, mask, cls,
sep), with RoBERTa's ``<s>``/``</s>`` standing in for ``[CLS]``/``[SEP]`` and vice versa.

Example:
    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> from transformers import PreTrainedTokenizerFast
    >>> bk = Tokenizer(models.WordPiece({"[UNK]": 0, "foo": 1, "##foo": 2}, unk_token="[UNK]"))
    >>> bk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    >>> tok = PreTrainedTokenizerFast(tokenizer_object=bk, unk_token="[UNK]")
    >>> tokenizer_family(tok)
    'wordpiece'
    >>> canonical_vocab(tok)
    [None, Canon(text=b'foo', word_start=True), Canon(text=b'foo', word_start=False)]
"""

from __future__ import annotations

import contextlib
import functools
import gc
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness import families as _families
from harness import progress as _progress
from harness.families import (  # noqa: F401  (re-exported: harness.vocab is the public import path)
    _BYTE_PIECE,
    _ROLE_ALIASES,
    DEFAULT_SYMBOLIC_RULE,
    FAMILIES,
    ROLES,
    SYMBOLIC_RULES,
    Canon,
    FamilySpec,
    _backend,
    _per_tokenizer,
    bytes_to_unicode,
    family_spec,
    is_symbolic,
    tokenizer_family,
    tokenizer_key,
    unicode_to_bytes,
)
from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL, TokenMapping
from harness.words import WORD_PATTERN, read_dictionary, word_tokenize  # noqa: F401  (re-exported)

# ----------------------------------------------------------------------------------------------
# Vocabulary
# ----------------------------------------------------------------------------------------------


def vocab_size(tok: Any, vocab: dict[str, int] | None = None) -> int:
    """Number of rows a tokenizer's embedding matrix needs: ``max(len(tok), max id + 1)``.

    ``vocab`` may pass ``tok.get_vocab()`` when the caller already has it.
    """
    vocab = tok.get_vocab() if vocab is None else vocab
    return max(len(tok), (max(vocab.values()) + 1) if vocab else 0)


def special_ids(tok: Any) -> set[int]:
    """Ids of special tokens: ``all_special_ids`` plus added tokens flagged ``special``."""
    ids = {int(i) for i in (tok.all_special_ids or []) if i is not None}
    for i, added in (getattr(tok, "added_tokens_decoder", None) or {}).items():
        if getattr(added, "special", False):
            ids.add(int(i))
    return ids


@functools.lru_cache(maxsize=1)
def _byte_table() -> dict[int, str]:
    """``str.translate`` table of byte-level pieces: stand-ins (:func:`unicode_to_bytes`) to their byte's Latin-1
    character, every other character below 256 to U+FFFF: ``piece.translate(table).encode("latin-1")`` is the
    piece's bytes, and fails exactly where a character is no stand-in (as a lookup of each would)."""
    table = {cp: "\uffff" for cp in range(256)}
    table.update({ord(c): chr(b) for c, b in unicode_to_bytes().items()})
    return table


def _canon_one(piece: str, spec: FamilySpec, table: dict[int, str]) -> tuple[Canon, bool]:
    """Canonical form of a model piece, and whether it is a byte-fallback piece (``table``: :func:`_byte_table`)."""
    fam = spec.family
    if fam == "sentencepiece":
        if spec.byte_fallback and piece.startswith("<0x"):
            m = _BYTE_PIECE.match(piece)
            if m:
                return Canon(bytes([int(m.group(1), 16)]), False), True
        ws = piece.startswith(spec.marker)
        body = piece[len(spec.marker) :] if ws else piece
        return Canon(body.replace(spec.marker, " ").encode("utf-8"), ws), False
    if fam == "bytelevel":
        try:
            raw = piece.translate(table).encode("latin-1")
        except UnicodeEncodeError:  # not byte-level encoded (e.g. a literal added token): take its UTF-8
            raw = piece.encode("utf-8")
        if raw.startswith(b" "):
            return Canon(raw[1:], True), False
        return Canon(raw, False), False
    # wordpiece
    if piece.startswith(spec.marker) and len(piece) > len(spec.marker):
        return Canon(piece[len(spec.marker) :].encode("utf-8"), False), False
    return Canon(piece.encode("utf-8"), True), False


def _added_canon(content: str) -> Canon:
    """A non-special added token: its literal text; word start if it begins with a space/marker."""
    for marker in (" ", "▁", "Ġ"):
        if content.startswith(marker) and len(content) > len(marker):
            return Canon(content[len(marker) :].encode("utf-8"), True)
    return Canon(content.encode("utf-8"), False)


_DETAIL_MEMO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Per tokenizer object: ``(size key, result)`` of :func:`_canonical_detail`. One initialization asks
for a vocabulary's canonical forms several times (overlap, the method, diagnostics); a tokenizer that
gains tokens gets a new size key and is canonicalized again."""


def _canonical_detail(tok: Any) -> tuple[list[Canon | None], np.ndarray, FamilySpec]:
    """Canonical vocab, a byte-fallback-piece mask, and the family spec (copies of the memoized ones)."""
    try:
        key = (len(tok), len(getattr(tok, "added_tokens_decoder", None) or {}))
    except TypeError:  # no length: an unsupported type, which the computation rejects by name
        return _canonical_detail_uncached(tok)
    out, is_byte, spec = _per_tokenizer(_DETAIL_MEMO, tok, key, lambda: _canonical_detail_uncached(tok))
    return list(out), is_byte.copy(), spec


_PROGRESS_EVERY = 8192
"""Pieces canonicalized between two updates of the progress bar (one update per piece cost a tenth of the loop)."""


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector (restored as it was on exit).

    Canonicalizing a vocabulary allocates one :class:`Canon` per piece and nothing that can form a cycle;
    with torch and transformers imported, the collections these allocations trigger walk millions of
    long-lived objects and took three quarters of the loop (250k pieces: seconds). Reference counting
    still frees everything; only the cycle search waits.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _canonical_detail_uncached(tok: Any) -> tuple[list[Canon | None], np.ndarray, FamilySpec]:
    spec = family_spec(tok)
    vocab = tok.get_vocab()
    n = vocab_size(tok, vocab)
    out: list[Canon | None] = [None] * n
    is_byte = np.zeros(n, dtype=bool)
    specials = special_ids(tok)
    added = {int(i): a for i, a in (getattr(tok, "added_tokens_decoder", None) or {}).items()}
    skip = specials | added.keys()
    table = _byte_table()
    byte_ids = []
    bar = _progress.counter("canonical token forms", len(vocab))
    with _gc_paused():
        for k, (piece, i) in enumerate(vocab.items(), 1):
            if k % _PROGRESS_EVERY == 0:
                bar.update(_PROGRESS_EVERY)
            if i in skip:  # one lookup for the ordinary pieces
                if i not in specials:
                    out[i] = _added_canon(str(getattr(added[i], "content", piece)))
                continue
            out[i], byte = _canon_one(piece, spec, table)
            if byte:
                byte_ids.append(i)
    bar.update(len(vocab) % _PROGRESS_EVERY)
    bar.close()
    is_byte[byte_ids] = True
    return out, is_byte, spec


def canonical_vocab(tok: Any) -> list[Canon | None]:
    """Canonical form of every token; index = token id, ``None`` for special tokens and unused ids.

    One pass with dict lookups (the byte map is computed once), fine for 250k-token vocabularies.

    Example:
        >>> from tokenizers import Tokenizer, models, pre_tokenizers
        >>> from transformers import PreTrainedTokenizerFast
        >>> bk = Tokenizer(models.BPE({"Ġfoo": 0, "Ã©": 1}, []))
        >>> bk.pre_tokenizer = pre_tokenizers.ByteLevel()
        >>> canonical_vocab(PreTrainedTokenizerFast(tokenizer_object=bk))
        [Canon(text=b'foo', word_start=True), Canon(text=b'\\xc3\\xa9', word_start=False)]
    """
    return _canonical_detail(tok)[0]


def canonical_forms(tok: Any, ids: Iterable[int]) -> list[Canon | None]:
    """``[canonical_vocab(tok)[i] for i in ids]`` (``None`` for ids outside it), canonicalizing only those ids
    unless the whole vocabulary already was (for a few thousand rows of a large vocabulary). Asked for a
    quarter of the vocabulary or more, it canonicalizes the whole (:func:`canonical_vocab`, kept per process
    by the tokenizer's content: the next trial's fresh tokenizer object finds it).

    Example:
        >>> from tokenizers import Tokenizer, models
        >>> from transformers import PreTrainedTokenizerFast
        >>> tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordPiece(
        ...     {"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]")), unk_token="[UNK]")
        >>> canonical_forms(tok, [2, 0, 7])
        [Canon(text=b'b', word_start=False), None, None]
    """
    ids = [int(i) for i in ids]
    try:
        hit = _DETAIL_MEMO.get(tok)
    except TypeError:
        hit = None
    if hit is not None and hit[0] == (len(tok), len(getattr(tok, "added_tokens_decoder", None) or {})):
        full = hit[1][0]
        return [full[i] if 0 <= i < len(full) else None for i in ids]
    n = vocab_size(tok)
    if 4 * len(ids) >= n:  # a good part of the vocabulary: canonicalize all of it once per process (by content)
        full = canonical_vocab(tok)
        return [full[i] if 0 <= i < len(full) else None for i in ids]
    specials = special_ids(tok)
    added = {int(i): a for i, a in (getattr(tok, "added_tokens_decoder", None) or {}).items()}
    spec, table = family_spec(tok), _byte_table()
    pieces = tok.convert_ids_to_tokens([i if 0 <= i < n else 0 for i in ids])
    out: list[Canon | None] = []
    for i, piece in zip(ids, pieces):
        if not 0 <= i < n or i in specials or piece is None:
            out.append(None)
        elif i in added:
            out.append(_added_canon(str(getattr(added[i], "content", piece))))
        else:
            out.append(_canon_one(piece, spec, table)[0])
    return out


def special_roles(tok: Any) -> dict[str, int]:
    """Role -> id of a tokenizer's special tokens.

    Roles come from the ``{role}_token_id`` attributes. A missing ``cls`` is filled from ``bos`` and
    vice versa, likewise ``sep``/``eos``, so RoBERTa's ``<s>``/``</s>`` and BERT's ``[CLS]``/``[SEP]``
    answer the same roles.

    Example:
        >>> from tokenizers import Tokenizer, models
        >>> from transformers import PreTrainedTokenizerFast
        >>> bk = Tokenizer(models.WordPiece({"[UNK]": 0, "[CLS]": 1, "[SEP]": 2}, unk_token="[UNK]"))
        >>> tok = PreTrainedTokenizerFast(tokenizer_object=bk, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]")
        >>> special_roles(tok) == {"unk": 0, "cls": 1, "sep": 2, "bos": 1, "eos": 2}
        True
    """
    roles: dict[str, int] = {}
    for role in ROLES:
        i = getattr(tok, f"{role}_token_id", None)
        if isinstance(i, int) and i >= 0:
            roles[role] = i
    for role, alias in _ROLE_ALIASES.items():
        if role not in roles and alias in roles:
            roles[role] = roles[alias]
    return {r: roles[r] for r in ROLES if r in roles}


def token_string(tok: Any, token_id: int) -> str:
    """The token's text as it appears inside words: marker removed, bytes decoded.

    Returns ``''`` when the token's bytes are not valid UTF-8 on their own (a lone byte-fallback
    piece, part of a multi-byte character). Special tokens return their literal content.

    Example:
        >>> from tokenizers import Tokenizer, models, pre_tokenizers
        >>> from transformers import PreTrainedTokenizerFast
        >>> bk = Tokenizer(models.BPE({"Ġcaf": 0, "Ã©": 1, "Ã": 2}, []))
        >>> bk.pre_tokenizer = pre_tokenizers.ByteLevel()
        >>> tok = PreTrainedTokenizerFast(tokenizer_object=bk)
        >>> [token_string(tok, i) for i in range(3)]
        ['caf', 'é', '']
    """
    token_id = int(token_id)
    if token_id in special_ids(tok):
        return str(tok.convert_ids_to_tokens(token_id))
    piece = tok.convert_ids_to_tokens(token_id)
    if piece is None:
        return ""
    added = (getattr(tok, "added_tokens_decoder", None) or {}).get(token_id)
    canon = (
        _added_canon(str(added.content))
        if added is not None
        else _canon_one(piece, family_spec(tok), _byte_table())[0]
    )
    return decode_canon(canon)


def token_strings(tok: Any) -> list[str]:
    """:func:`token_string` of every id below ``len(tok)``, in one pass over the canonical vocabulary.

    The same strings as ``[token_string(tok, i) for i in range(len(tok))]``, which rebuilds the
    special ids and the added-token table for every id (~50 µs a token: 13 s for a 250k vocabulary).

    Example:
        >>> from tokenizers import Tokenizer, models, pre_tokenizers
        >>> from transformers import PreTrainedTokenizerFast
        >>> bk = Tokenizer(models.BPE({"Ġcaf": 0, "Ã©": 1, "Ã": 2, "<s>": 3}, []))
        >>> bk.pre_tokenizer = pre_tokenizers.ByteLevel()
        >>> token_strings(PreTrainedTokenizerFast(tokenizer_object=bk, bos_token="<s>"))
        ['caf', 'é', '', '<s>']
    """
    n = len(tok)
    canon = canonical_vocab(tok)
    out = [decode_canon(c) if c is not None else "" for c in canon[:n]]
    out += [""] * (n - len(out))
    for i in special_ids(tok):
        if 0 <= i < n:
            out[i] = str(tok.convert_ids_to_tokens(i))
    return out


def decode_canon(canon: Canon) -> str:
    """``canon.text`` as a string, ``''`` when it is not valid UTF-8."""
    try:
        return canon.text.decode("utf-8")
    except UnicodeDecodeError:
        return ""


def show_bytes(text: bytes) -> str:
    """Bytes as a person reads them: printable characters as they are, every other byte as ``<0xNN>``.

    Bytes that are not valid UTF-8 (a lone byte-fallback piece, part of a multi-byte character) and
    characters that are not printable (controls, line breaks) are shown as SentencePiece writes byte
    pieces; nothing is ever shown as a Python ``b'...'`` literal.

    Example:
        >>> show_bytes("Ŋa".encode()), show_bytes(b"\\xc5"), show_bytes(b"a\\nb")
        ('Ŋa', '<0xC5>', 'a<0x0A>b')
    """
    out: list[str] = []
    i = 0
    while i < len(text):
        for j in range(min(len(text), i + 4), i, -1):  # the longest valid UTF-8 prefix of at most 4 bytes
            try:
                chars = text[i:j].decode("utf-8")
            except UnicodeDecodeError:
                continue
            out.extend(c if c.isprintable() else "".join(f"<0x{b:02X}>" for b in c.encode("utf-8")) for c in chars)
            i = j
            break
        else:
            out.append(f"<0x{text[i]:02X}>")
            i += 1
    return "".join(out)


def show_canon(canon: Canon) -> str:
    """A canonical token as a person reads it: ``▁`` before a word start, then :func:`show_bytes` of its text.

    Example:
        >>> show_canon(Canon("Ŋ".encode(), True)), show_canon(Canon(b"\\xc5", False))
        ('▁Ŋ', '<0xC5>')
    """
    return ("▁" if canon.word_start else "") + show_bytes(canon.text)


def show_token(tok: Any, token_id: int) -> str:
    """Token ``token_id`` of ``tok`` as a person reads it (:func:`show_canon`; a special token as written).

    The same spelling for every tokenizer family: a byte-level ``ĠÃ©t`` reads ``▁ét``.
    """
    canons = canonical_vocab(tok)
    c = canons[token_id] if 0 <= token_id < len(canons) else None
    if c is not None:
        return show_canon(c)
    piece = tok.convert_ids_to_tokens(int(token_id))
    return show_bytes(str(piece).encode("utf-8")) if piece is not None else f"<id {int(token_id)}>"


# ----------------------------------------------------------------------------------------------
# Overlap
# ----------------------------------------------------------------------------------------------


def _pairs(rows: Iterable[tuple[int, int]]) -> np.ndarray:
    arr = np.asarray(list(rows), dtype=np.int64)
    return arr.reshape(-1, 2)


@dataclass
class Overlap:
    """Matches between a target and a source vocabulary.

    Attributes:
        exact: ``(n, 2)`` int64 ``[target_id, source_id]``, exact canonical matches (specials excluded).
        fuzzy: ``(m, 2)`` extra pairs from fuzzy matching (only symbolic tokens — numbers,
            punctuation, whitespace, see :func:`is_symbolic` — ignoring case and word start),
            disjoint from ``exact``'s target ids.
        specials: ``(k, 2)`` ``[target_id, source_id]`` matched by role (or, for role-less specials,
            by identical content).
        n_target / n_source: vocabulary sizes (rows).
        target_family / source_family: the families of the two tokenizers.
        unmatched_specials: contents of target special tokens with no source counterpart.
    """

    exact: np.ndarray
    fuzzy: np.ndarray
    specials: np.ndarray
    n_target: int = 0
    n_source: int = 0
    target_family: str = ""
    source_family: str = ""
    unmatched_specials: list[str] = field(default_factory=list)

    def pairs(self, *, fuzzy: bool = True) -> np.ndarray:
        """Exact (plus fuzzy) pairs as one ``(n, 2)`` array, specials excluded."""
        return np.concatenate([self.exact, self.fuzzy]) if fuzzy else self.exact

    def report(self) -> dict:
        """JSON-serializable summary: counts and fractions of the target vocabulary."""
        n_regular = max(self.n_target - len(self.specials) - len(self.unmatched_specials), 0)
        return {
            "exact": int(len(self.exact)),
            "fuzzy": int(len(self.fuzzy)),
            "specials": int(len(self.specials)),
            "unmatched_specials": list(self.unmatched_specials),
            "n_target": int(self.n_target),
            "n_source": int(self.n_source),
            "target_family": self.target_family,
            "source_family": self.source_family,
            "exact_fraction": round(len(self.exact) / n_regular, 6) if n_regular else 0.0,
            "exact_plus_fuzzy_fraction": round((len(self.exact) + len(self.fuzzy)) / n_regular, 6)
            if n_regular
            else 0.0,
        }


def _index(canons: list[Canon | None], is_byte: np.ndarray, limit: int) -> dict[Canon, int]:
    """Canon -> source id; on collisions a regular piece wins over a byte-fallback piece, then the lower id."""
    index: dict[Canon, int] = {}
    for i, c in enumerate(canons[:limit]):
        if c is None:
            continue
        j = index.get(c)
        if j is None or (is_byte[j] and not is_byte[i]):
            index[c] = i
    return index


def _fuzzy_index(index: dict[Canon, int], symbolic_rule: str) -> dict[bytes, dict[bool, int]]:
    """Lower-cased text of each symbolic source piece -> {word start: source id} (the first id per key)."""
    fz: dict[bytes, dict[bool, int]] = {}
    for c, s in index.items():
        if is_symbolic(c, symbolic_rule):
            fz.setdefault(c.text.decode("utf-8").lower().encode("utf-8"), {}).setdefault(c.word_start, s)
    return fz


def match_specials(source_tok: Any, target_tok: Any) -> tuple[np.ndarray, list[str]]:
    """Pairs ``[target_id, source_id]`` of special tokens matched by role, and unmatched contents.

    A target special with several roles (``<s>`` is bos and cls) tries them in :data:`ROLES` order.
    Specials without a role (``additional_special_tokens``) match a source special with identical
    content.
    """
    s_roles = special_roles(source_tok)
    t_roles = special_roles(target_tok)
    by_id: dict[int, list[str]] = {}
    for role, i in t_roles.items():
        by_id.setdefault(i, []).append(role)
    s_special = special_ids(source_tok)
    s_content = {str(source_tok.convert_ids_to_tokens(i)): i for i in sorted(s_special)}
    pairs, unmatched = [], []
    for t in sorted(special_ids(target_tok)):
        src = next((s_roles[r] for r in by_id.get(t, []) if r in s_roles), None)
        if src is None:
            src = s_content.get(str(target_tok.convert_ids_to_tokens(t)))
        if src is None:
            unmatched.append(str(target_tok.convert_ids_to_tokens(t)))
        else:
            pairs.append((t, src))
    return _pairs(pairs), unmatched


def _one_to_one(spec: FamilySpec, pieces: list[str]) -> bool:
    """Whether :func:`_canon_one` maps distinct ``pieces`` (none a byte-fallback piece) to distinct canonical forms.

    WordPiece always: a continuation piece's text never starts a word-start piece's. SentencePiece when no
    piece holds a space (the marker becomes a space). Byte-level when every character is one of the 256 byte
    characters (a piece with others is read as its UTF-8, which can equal another piece's bytes).
    """
    if spec.family == "wordpiece":
        return True
    joined = "".join(pieces)
    if spec.family == "sentencepiece":
        return " " not in joined
    return set(joined) <= unicode_to_bytes().keys()


def _overlap_by_string(source_tok: Any, target_tok: Any, n_source: int | None) -> Overlap | None:
    """The exact overlap (no fuzzy pairs) by equal piece strings, when that is the same as equal canonical forms.

    It is when both tokenizers spell pieces one way (same family and marker), neither has byte-fallback pieces
    or added tokens besides its specials, and pieces map one-to-one to canonical forms (:func:`_one_to_one`):
    then a target piece's only canonical match is the source piece with the same string. The result equals
    :func:`compute_overlap`'s (``tests/api/test_canon.py`` compares them) without canonicalizing two
    vocabularies piece by piece (a third of FOCUS's time on 32k/16k vocabularies). ``None`` when a condition
    fails or either tokenizer is unsupported (the caller canonicalizes, and raises what it raises).
    """
    try:
        s_spec, t_spec = family_spec(source_tok), family_spec(target_tok)
    except ValueError:
        return None
    if (s_spec.family, s_spec.marker) != (t_spec.family, t_spec.marker) or s_spec.byte_fallback or t_spec.byte_fallback:
        return None
    s_special, t_special = special_ids(source_tok), special_ids(target_tok)
    for tok, special in ((source_tok, s_special), (target_tok, t_special)):
        if not set(getattr(tok, "added_tokens_decoder", None) or {}) <= special:
            return None
    s_vocab, t_vocab = source_tok.get_vocab(), target_tok.get_vocab()
    if not (_one_to_one(s_spec, list(s_vocab)) and _one_to_one(t_spec, list(t_vocab))):
        return None
    n_src = vocab_size(source_tok, s_vocab)
    limit = n_src if n_source is None else min(int(n_source), n_src)
    exact = sorted((t, s) for piece, t in t_vocab.items()
                   if (s := s_vocab.get(piece)) is not None and s < limit and t not in t_special and s not in s_special)
    specials, unmatched = match_specials(source_tok, target_tok)
    if len(specials):
        specials = specials[specials[:, 1] < limit]
    return Overlap(exact=_pairs(exact), fuzzy=_pairs([]), specials=specials, n_target=vocab_size(target_tok, t_vocab),
                   n_source=limit, target_family=t_spec.family, source_family=s_spec.family, unmatched_specials=unmatched)


def compute_overlap(
    source_tok: Any,
    target_tok: Any,
    *,
    fuzzy: bool = True,
    n_source: int | None = None,
    symbolic_rule: str = DEFAULT_SYMBOLIC_RULE,
) -> Overlap:
    """Exact, fuzzy and special-token matches between two tokenizers.

    Args:
        source_tok: the source tokenizer.
        target_tok: the target tokenizer.
        fuzzy: also match symbolic tokens ignoring case and word start (FOCUS), where exact failed.
        n_source: only source ids below this are matched (rows of the source embedding matrix);
            default: the source vocabulary size.
        symbolic_rule: which tokens fuzzy matching considers symbolic (see :func:`is_symbolic`).

    Example:
        >>> from tokenizers import Tokenizer, models
        >>> from transformers import PreTrainedTokenizerFast
        >>> def wp(v):
        ...     return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordPiece(
        ...         {t: i for i, t in enumerate(v)}, unk_token="[UNK]")), unk_token="[UNK]")
        >>> ov = compute_overlap(wp(["[UNK]", "a", "##1"]), wp(["[UNK]", "1", "a"]))
        >>> ov.exact.tolist(), ov.fuzzy.tolist(), ov.specials.tolist()
        ([[2, 1]], [[1, 2]], [[0, 0]])
    """
    if symbolic_rule not in SYMBOLIC_RULES:
        raise ValueError(f"compute_overlap: symbolic_rule must be one of {SYMBOLIC_RULES}, got {symbolic_rule!r}")
    if not fuzzy:
        by_string = _overlap_by_string(source_tok, target_tok, n_source)
        if by_string is not None:
            return by_string
    s_canon, s_byte, s_spec = _canonical_detail(source_tok)
    t_canon, _, t_spec = _canonical_detail(target_tok)
    limit = len(s_canon) if n_source is None else min(int(n_source), len(s_canon))
    content = tokenizer_key(source_tok)
    index = _families._CONTENT_MEMO.get(None if content is None else ("index", content, limit),
                                        lambda: _index(s_canon, s_byte, limit))
    exact, missing = [], []
    for t, c in enumerate(t_canon):
        if c is None:
            continue
        s = index.get(c)
        if s is not None:
            exact.append((t, s))
        elif fuzzy and is_symbolic(c, symbolic_rule):
            missing.append((t, c))
    fuzzy_pairs = []
    if missing:
        # Fuzzy key: lower-cased text, word start ignored; prefer the same word-start flag.
        fz = _families._CONTENT_MEMO.get(None if content is None else ("fuzzy", content, limit, symbolic_rule),
                                         lambda: _fuzzy_index(index, symbolic_rule))
        for t, c in missing:
            cands = fz.get(c.text.decode("utf-8").lower().encode("utf-8"))
            if cands:
                fuzzy_pairs.append((t, cands.get(c.word_start, cands.get(not c.word_start))))
    specials, unmatched = match_specials(source_tok, target_tok)
    if len(specials):
        specials = specials[specials[:, 1] < limit]
    return Overlap(
        exact=_pairs(exact),
        fuzzy=_pairs(fuzzy_pairs),
        specials=specials,
        n_target=len(t_canon),
        n_source=limit,
        target_family=t_spec.family,
        source_family=s_spec.family,
        unmatched_specials=unmatched,
    )


# ----------------------------------------------------------------------------------------------
# Tokenizing a canonical form with another tokenizer; assembling mappings
# ----------------------------------------------------------------------------------------------


def surface_form(tok: Any, canon: Canon) -> str | None:
    """The model-vocabulary spelling of ``canon`` in ``tok``'s family, or ``None`` if not UTF-8.

    ``Canon(b"foo", True)`` is ``"▁foo"`` (SentencePiece), ``"Ġfoo"`` (byte-level), ``"foo"``
    (WordPiece); ``Canon(b"foo", False)`` is ``"foo"``, ``"foo"``, ``"##foo"``.
    """
    spec = family_spec(tok)
    return _surface(spec, canon)


def _surface(spec: FamilySpec, canon: Canon) -> str | None:
    if spec.family == "bytelevel":
        b2u = bytes_to_unicode()
        return "".join(b2u[b] for b in ((b" " if canon.word_start else b"") + canon.text))
    s = decode_canon(canon)
    if not s and canon.text:
        return None
    if spec.family == "sentencepiece":
        s = s.replace(" ", spec.marker)
        return spec.marker + s if canon.word_start else s
    return s if canon.word_start else spec.marker + s


def encode_canon(tok: Any, canon: Canon, *, spec: FamilySpec | None = None) -> list[int]:
    """Token ids that ``tok``'s model gives the string of ``canon``, respecting its word-start flag.

    Runs the tokenizer's normalizer (for WordPiece also its pre-tokenizer) and then its *model* on
    the marked form, so a continuation token is segmented into continuation pieces (a plain
    ``tok.encode`` would treat it as a word start) — except where a WordPiece pre-tokenizer would
    split it off a preceding word anyway (punctuation). Byte-level strings are split at spaces only.
    Returns ``[]`` for text that is not valid UTF-8 (except in byte-level tokenizers) or empty.

    Example:
        >>> from tokenizers import Tokenizer, models
        >>> from transformers import PreTrainedTokenizerFast
        >>> v = {"[UNK]": 0, "foo": 1, "##foo": 2, "##bar": 3}
        >>> tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordPiece(v, unk_token="[UNK]")))
        >>> encode_canon(tok, Canon(b"foobar", True)), encode_canon(tok, Canon(b"foobar", False))
        ([1, 3], [2, 3])
    """
    spec = spec or family_spec(tok)
    backend = _backend(tok)
    model, normalizer = backend.model, backend.normalizer
    if not canon.text:
        return []
    if spec.family == "bytelevel":
        raw = canon.text
        try:
            s = raw.decode("utf-8")
            if normalizer is not None:
                raw = normalizer.normalize_str(s).encode("utf-8")
        except UnicodeDecodeError:
            pass
        words = raw.split(b" ")
        ids: list[int] = []
        for k, w in enumerate(words):
            if not w:
                continue
            ws = canon.word_start or k > 0
            ids.extend(t.id for t in model.tokenize(_surface(spec, Canon(w, ws))))
        return ids
    s = decode_canon(canon)
    if not s:
        return []
    if spec.family == "sentencepiece":
        if normalizer is not None:
            s = normalizer.normalize_str(s)
            # Llama-style normalizers prepend the marker and replace spaces themselves.
            s = s.replace(spec.marker, " ")
            if s.startswith(" ") and not canon.text.startswith(b" "):
                s = s[1:]
        words = s.split(" ") if spec.metaspace_split else [s]
        ids = []
        for k, w in enumerate(words):
            if not w:
                continue
            ws = canon.word_start or k > 0
            ids.extend(t.id for t in model.tokenize(_surface(spec, Canon(w.encode("utf-8"), ws))))
        return ids
    # wordpiece: normalize, pre-tokenize (BERT splits punctuation), then greedy longest match
    if normalizer is not None:
        s = normalizer.normalize_str(s)
    pre = backend.pre_tokenizer
    words = [w for w, _ in pre.pre_tokenize_str(s)] if pre is not None else s.split()
    # A continuation token stays a continuation only if the pre-tokenizer would glue it to a
    # preceding letter; BERT isolates punctuation, so a continuation "." is a word of its own.
    glued = not canon.word_start and (pre is None or pre.pre_tokenize_str("a" + s)[0][0] != "a")
    ids = []
    for k, w in enumerate(words):
        ws = k > 0 or not glued
        ids.extend(t.id for t in model.tokenize(_surface(spec, Canon(w.encode("utf-8"), ws))))
    return ids


def assemble_mapping(
    n_target: int,
    n_source: int,
    *,
    special: np.ndarray | None = None,
    copied: np.ndarray | None = None,
    combined: dict[int, tuple[list[int], list[float]]] | None = None,
) -> Any:
    """Build a :class:`~harness.protocols.TokenMapping`; every target row not named is FALLBACK.

    Args:
        n_target: number of target rows.
        n_source: number of source rows.
        special: ``(k, 2)`` ``[target, source]`` pairs, provenance SPECIAL.
        copied: ``(n, 2)`` ``[target, source]`` pairs, provenance COPIED.
        combined: ``target -> (source ids, weights)``; provenance COMBINED, or COPIED when the
            combination has exactly one source id.

    When a target id is named more than once, specials win over copied pairs, which win over
    combinations.

    Example:
        >>> m = assemble_mapping(3, 4, special=np.array([[0, 0]]), combined={1: ([2, 3], [0.5, 0.5])})
        >>> m.counts()
        {'special': 1, 'copied': 0, 'combined': 1, 'fallback': 1}
    """
    prov = np.full(n_target, FALLBACK, dtype=np.int8)
    entries: dict[int, tuple[list[int], list[float]]] = {}
    for t, (ids, ws) in (combined or {}).items():
        if len(ids):
            entries[int(t)] = (list(ids), list(ws))
            prov[int(t)] = COMBINED if len(ids) > 1 else COPIED
    for code, pairs in ((COPIED, copied), (SPECIAL, special)):
        if pairs is None or not len(pairs):
            continue
        for t, s in np.asarray(pairs, dtype=np.int64).reshape(-1, 2):
            entries[int(t)] = ([int(s)], [1.0])
            prov[int(t)] = code
    rows, cols, weights = [], [], []
    for t, (ids, ws) in entries.items():
        rows.extend([t] * len(ids))
        cols.extend(ids)
        weights.extend(ws)
    return TokenMapping.from_coo(n_target, n_source, rows, cols, weights, prov)

__all__ = [
    "WORD_PATTERN",
    "word_tokenize",
    "read_dictionary",
    "show_bytes",
    "show_canon",
    "show_token",
    "Canon",
    "FAMILIES",
    "FamilySpec",
    "Overlap",
    "DEFAULT_SYMBOLIC_RULE",
    "ROLES",
    "SYMBOLIC_RULES",
    "assemble_mapping",
    "bytes_to_unicode",
    "canonical_vocab",
    "compute_overlap",
    "decode_canon",
    "encode_canon",
    "family_spec",
    "is_symbolic",
    "match_specials",
    "special_ids",
    "special_roles",
    "surface_form",
    "token_string",
    "token_strings",
    "tokenizer_family",
    "tokenizer_key",
    "unicode_to_bytes",
    "vocab_size",
]
