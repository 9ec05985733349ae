"""Tokenizer families and canonical token forms: which spelling convention a tokenizer follows.

The lowest layer of :mod:`harness.vocab` (which re-exports every public name here): the
:class:`Canon` form (real bytes + word-start flag), GPT-2's byte stand-ins, and the detection of a
fast tokenizer's family (``sentencepiece``, ``bytelevel``, ``wordpiece``) from its ``tokenizers``
backend, memoized per tokenizer object. See :mod:`harness.vocab` for the conventions.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import string
import unicodedata
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from harness.cache import ProcessMemo

FAMILIES = ("sentencepiece", "bytelevel", "wordpiece")
"""The tokenizer families this module understands."""

ALGORITHMS: tuple[str, ...] = ("unigram", "bpe", "bytelevel-bpe", "wordpiece")
"""The subword algorithms ``harness.tokenizers.train_tokenizer`` trains (here, free of transformers, for the
command line's choices; ``harness.tokenizers.ALGORITHMS`` is the same tuple)."""

ROLES = ("bos", "eos", "unk", "pad", "mask", "cls", "sep")
"""Special-token roles, in the order they are tried when matching."""

# RoBERTa/XLM-R use <s> both as bos and cls and </s> both as eos and sep; BERT has only cls/sep.
# A role that a tokenizer leaves unset is filled from its counterpart so the two styles match.
_ROLE_ALIASES = {"cls": "bos", "bos": "cls", "sep": "eos", "eos": "sep"}

_BYTE_PIECE = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


class Canon(NamedTuple):
    """Canonical form of one token.

    A named tuple (immutable, hashable): overlap computation hashes one per vocabulary piece, and a
    tuple's hash and equality run in C (a frozen dataclass's ran in Python, a third of the time of
    an overlap of two 30k vocabularies).

    Attributes:
        text: the token's bytes with the word-start/continuation marker removed.
        word_start: whether the token begins a word (SentencePiece ``▁``, byte-level ``Ġ``,
            WordPiece: no ``##``).
    """

    text: bytes
    word_start: bool


@functools.lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from the 256 byte values to printable unicode characters.

    Example:
        >>> bytes_to_unicode()[ord(" ")]
        'Ġ'
    """
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


@functools.lru_cache(maxsize=1)
def unicode_to_bytes() -> dict[str, int]:
    """Inverse of :func:`bytes_to_unicode` (printable stand-in character -> byte value)."""
    return {c: b for b, c in bytes_to_unicode().items()}


# ----------------------------------------------------------------------------------------------
# Family detection
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FamilySpec:
    """What :func:`canonical_vocab` needs to know about a tokenizer's spelling conventions.

    Attributes:
        family: one of :data:`FAMILIES`.
        model_type: the backend model type (``"Unigram"``, ``"BPE"``, ``"WordPiece"``).
        marker: the word-start marker (``"▁"`` for SentencePiece, ``"Ġ"`` for byte-level) or the
            continuation prefix (``"##"`` for WordPiece).
        byte_fallback: whether ``<0xNN>`` pieces are byte-fallback pieces.
        metaspace_split: SentencePiece only: whether the pre-tokenizer splits at ``▁``.
    """

    family: str
    model_type: str
    marker: str
    byte_fallback: bool = False
    metaspace_split: bool = True


def _backend(tok: Any) -> Any:
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "to_str"):
        raise ValueError(
            f"unsupported tokenizer type {type(tok).__name__}: only fast tokenizers (a `tokenizers` backend, "
            f"PreTrainedTokenizerFast / TokenizersBackend) of the families {', '.join(FAMILIES)} are supported; "
            "load it with use_fast=True or build it with the `tokenizers` library"
        )
    return backend


def _components(node: Any) -> list[dict]:
    """Flatten a (possibly ``Sequence``) normalizer/pre-tokenizer/decoder JSON node."""
    if not node:
        return []
    if node.get("type") == "Sequence":
        out = []
        for key in ("pretokenizers", "normalizers", "decoders"):
            for child in node.get(key) or []:
                out.extend(_components(child))
        return out
    return [node]


_SPEC_CACHE: weakref.WeakKeyDictionary[Any, tuple[tuple[int, int], FamilySpec]] = weakref.WeakKeyDictionary()


def tokenizer_key(tok: Any) -> str | None:
    """A sha256 of what decides how a fast tokenizer encodes text and spells its vocabulary, cheap
    enough to compute per call (~0.05 s for XLM-R's 250k pieces, where
    :func:`harness.tokenizers.tokenizer_state`'s JSON round trip takes ~1 s): the serialized backend
    from its ``added_tokens`` on (``tokenizers`` writes ``truncation`` and ``padding`` before it;
    a layout without that field hashes everything, which is only more specific), the class, the
    length, the special ids and the truncation side. ``None`` without a ``tokenizers`` backend.

    Two tokenizer objects loaded from the same files get the same key, so per-process memos of
    what is derived from a tokenizer's content hold across the fresh objects each trial loads.

    Example:
        >>> from tokenizers import Tokenizer, models
        >>> from transformers import PreTrainedTokenizerFast
        >>> a = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]")))
        >>> b = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(a.backend_tokenizer.to_str()))
        >>> b.backend_tokenizer.enable_truncation(8)
        >>> tokenizer_key(a) == tokenizer_key(b), tokenizer_key(object())
        (True, None)
    """
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "to_str"):
        return None
    raw = backend.to_str()
    at = raw.find('"added_tokens":')
    facts = json.dumps([type(tok).__name__, len(tok), sorted(tok.all_special_ids), getattr(tok, "truncation_side", None)])
    return hashlib.sha256((facts + "\0" + raw[max(at, 0):]).encode("utf-8")).hexdigest()


_CONTENT_MEMO = ProcessMemo(16)
"""Results of :func:`_per_tokenizer` and :func:`harness.vocab.compute_overlap`'s source-side lookup
tables by :func:`tokenizer_key`: each trial loads its source tokenizer afresh (its backend's truncation
state is mutable, so objects are not shared), and canonicalizing and indexing XLM-R's 250k pieces again
for each would cost ~4 s of CPU a trial. Values are shared: callers copy what they change."""


def _per_tokenizer(memo: weakref.WeakKeyDictionary, tok: Any, key: Any, compute: Callable[[], Any]) -> Any:
    """``compute()``, memoized per tokenizer object while ``key`` stays the same, and per process by the
    tokenizer's content (:func:`tokenizer_key`) for other objects with the same content (computed every
    time for objects that can be neither weakly referenced nor keyed)."""
    try:
        hit = memo.get(tok)
    except TypeError:
        return compute()
    if hit is not None and hit[0] == key:
        return hit[1]
    content = tokenizer_key(tok)
    value = _CONTENT_MEMO.get(None if content is None else (id(memo), content), compute)
    memo[tok] = (key, value)
    return value


def family_spec(tok: Any) -> FamilySpec:
    """Detect a fast tokenizer's family and spelling conventions from its backend.

    The result is cached per tokenizer object (keyed on its backend and length), because parsing
    the backend JSON of a 250k vocabulary takes tens of milliseconds.

    Raises:
        ValueError: for slow tokenizers and for model/pre-tokenizer combinations outside
            :data:`FAMILIES`, naming the type found and what is supported.
    """
    backend = _backend(tok)
    return _per_tokenizer(_SPEC_CACHE, tok, (id(backend), len(tok)),
                          lambda: _family_spec_from_json(json.loads(backend.to_str()), type(tok).__name__))


def _family_spec_from_json(cfg: dict, type_name: str) -> FamilySpec:
    model = cfg.get("model") or {}
    mtype = model.get("type", "?")
    pre = _components(cfg.get("pre_tokenizer"))
    dec = _components(cfg.get("decoder"))
    norm = _components(cfg.get("normalizer"))
    types = {c.get("type") for c in pre + dec}
    byte_fallback = bool(model.get("byte_fallback")) or "ByteFallback" in {c.get("type") for c in dec}
    if mtype == "WordPiece":
        return FamilySpec("wordpiece", mtype, model.get("continuing_subword_prefix") or "##")
    if mtype not in ("BPE", "Unigram", "WordLevel"):
        raise ValueError(_unsupported(type_name, mtype, pre, dec))
    if "ByteLevel" in types:
        return FamilySpec("bytelevel", mtype, "Ġ", byte_fallback=False)
    meta = [c for c in pre + dec if c.get("type") == "Metaspace"]
    if meta:
        split = all(c.get("split", True) for c in pre if c.get("type") == "Metaspace")
        return FamilySpec("sentencepiece", mtype, meta[0].get("replacement", "▁"), byte_fallback, split)
    # Llama/Gemma style: no pre-tokenizer; the normalizer replaces " " with "▁" and the decoder undoes it.
    for c in norm + dec:
        if c.get("type") == "Replace":
            pattern = (c.get("pattern") or {}).get("String")
            content = c.get("content")
            if (pattern == " " and content and len(content) == 1 and content != " ") or (
                content == " " and pattern and len(pattern) == 1
            ):
                marker = content if pattern == " " else pattern
                return FamilySpec("sentencepiece", mtype, marker, byte_fallback, metaspace_split=False)
    if mtype == "BPE" and model.get("continuing_subword_prefix") and not model.get("end_of_word_suffix"):
        return FamilySpec("wordpiece", mtype, model["continuing_subword_prefix"])
    raise ValueError(_unsupported(type_name, mtype, pre, dec))


def _unsupported(type_name: str, mtype: str, pre: list[dict], dec: list[dict]) -> str:
    pre_t = "+".join(str(c.get("type")) for c in pre) or "none"
    dec_t = "+".join(str(c.get("type")) for c in dec) or "none"
    return (
        f"unsupported tokenizer {type_name} (model {mtype}, pre-tokenizer {pre_t}, decoder {dec_t}); supported families: "
        "sentencepiece (Unigram/BPE with Metaspace or a '▁' Replace normalizer), bytelevel (ByteLevel pre-tokenizer or "
        "decoder), wordpiece (WordPiece model, or BPE with a continuing_subword_prefix)"
    )


def tokenizer_family(tok: Any) -> str:
    """``"sentencepiece"``, ``"bytelevel"`` or ``"wordpiece"``.

    Raises:
        ValueError: naming the tokenizer/model/pre-tokenizer type when it is none of these.

    Example:
        >>> tokenizer_family(object())  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ValueError: unsupported tokenizer type object: only fast tokenizers ...
    """
    return family_spec(tok).family


SYMBOLIC_RULES = ("reference", "wide")
"""Rules of :func:`is_symbolic` (the FOCUS "symbolic overlap" ablation and fuzzy matching)."""

DEFAULT_SYMBOLIC_RULE = "reference"
"""The default rule: the FOCUS reference code's (``deepfocus.vocab_helper.is_numerical_symbol_etc``)."""


def is_symbolic(canon: Canon, rule: str = DEFAULT_SYMBOLIC_RULE) -> bool:
    """Whether a token counts as "symbolic" (numbers, punctuation, whitespace) under ``rule``.

    Rules (:data:`SYMBOLIC_RULES`):

    - ``"reference"`` (default) — the FOCUS reference code's rule: the token's text (marker
      removed) is *all numeric* (``str.isnumeric``: digits of any script, ``½``, ``三``), or *all
      ASCII punctuation* (``string.punctuation``, which includes ``$ + < = > ^ ` | ~``), or *all
      whitespace*. Mixed tokens (``1,5``), other symbols (``€``, emoji) and non-ASCII punctuation
      (``…``, ``«``) are not symbolic. The bare word-start marker (empty text, a space) is.
    - ``"wide"`` — every character is a decimal digit, whitespace, or in a Unicode punctuation or
      symbol category (``P*``, ``S*``), mixing allowed: also ``1,5``, ``€``, ``😀``, ``…``.

    Bytes that are not valid UTF-8 are never symbolic.

    Args:
        canon: the canonical token.
        rule: one of :data:`SYMBOLIC_RULES`.

    Raises:
        ValueError: unknown ``rule``.

    Example:
        >>> is_symbolic(Canon(b"1,5", True)), is_symbolic(Canon(b"1,5", True), "wide")
        (False, True)
        >>> is_symbolic(Canon(b"...", False)), is_symbolic(Canon(b"a1", False), "wide")
        (True, False)
    """
    try:
        s = canon.text.decode("utf-8")
    except UnicodeDecodeError:
        if rule not in SYMBOLIC_RULES:
            raise ValueError(f"is_symbolic: rule must be one of {SYMBOLIC_RULES}, got {rule!r}") from None
        return False
    if rule == "reference":  # all ASCII punctuation: nothing left once it is stripped from both ends
        return s.isnumeric() or not s.strip(string.punctuation) or s.isspace()
    if rule == "wide":
        return all(c.isdigit() or c.isspace() or unicodedata.category(c)[0] in "PS" for c in s)
    raise ValueError(f"is_symbolic: rule must be one of {SYMBOLIC_RULES}, got {rule!r}")
