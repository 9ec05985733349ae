"""Train and load subword tokenizers for source models and transfer targets.

Four algorithm families cover the tokenizers vocabulary-transfer papers meet in practice:

============== ============================================= ======================================
algorithm      built like                                    specials (ids 0..4)
============== ============================================= ======================================
unigram        SentencePiece Unigram + ``▁`` (XLM-R, mT5)     ``<s> <pad> </s> <unk> <mask>``
bpe            SentencePiece BPE + ``▁`` (Llama-style, no    ``<s> <pad> </s> <unk> <mask>``
               byte fallback)
bytelevel-bpe  byte-level BPE + ``Ġ`` (GPT-2, RoBERTa)       ``<s> <pad> </s> <unk> <mask>``
wordpiece      WordPiece + ``##``, BERT pre-tokenizer (BERT)  ``[PAD] [UNK] [CLS] [SEP] [MASK]``
============== ============================================= ======================================

All are served by the ``tokenizers`` library (Unigram pieces are *trained* by ``sentencepiece``,
whose trainer is reproducible where ``tokenizers``' is not; see :func:`_train_unigram`) and wrapped in
:class:`transformers.PreTrainedTokenizerFast` (never ``XLMRobertaTokenizer(vocab_file=...)``, which
silently ignores the file in transformers 5; see FACTS.md). Post-processors add
``<s> X </s>`` (pairs ``<s> A </s></s> B </s>``) or ``[CLS] X [SEP]`` (pairs ``[CLS] A [SEP] B [SEP]``).

Trained tokenizers are cached under ``<cache>/tokenizers/<hash>`` where the hash covers the corpus
file *contents*, the algorithm, the vocabulary size, the options and :data:`CODE_VERSION`. What was
requested and achieved is recorded in ``tokenizer.init_kwargs["tokxfer"]`` (see :func:`tokenizer_info`)
and survives ``save_pretrained`` / ``AutoTokenizer.from_pretrained``.

Example:
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = (d / "c.txt").write_text("the cat sat on the mat\\n" * 50 + "a dog ran in the park\\n" * 50)
    >>> tok = train_tokenizer([d / "c.txt"], "wordpiece", vocab_size=50, cache_dir=d / "cache")
    >>> tok.convert_ids_to_tokens(tok("the cat")["input_ids"])
    ['[CLS]', 'the', 'cat', '[SEP]']
    >>> tokenizer_info(tok)["vocab_size"]
    50
"""

from __future__ import annotations

import codecs
import copy
import hashlib
import io
import json
import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

import tokenizers as hf_tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from harness import progress as _progress
from harness.cache import ProcessMemo, cached_dir, file_hash
from harness.errors import TokxferError
from harness.families import ALGORITHMS
from harness.files import text_lines

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "CODE_VERSION",
    "MIN_VOCAB_FRACTION",
    "ROBERTA_SPECIALS",
    "WORDPIECE_SPECIALS",
    "load_tokenizer",
    "tokenizer_info",
    "tokenizer_state",
    "train_tokenizer",
]

Algorithm = Literal["unigram", "bpe", "bytelevel-bpe", "wordpiece"]
"""The accepted values of ``algorithm``."""

CODE_VERSION = 1
"""Part of every cache key: bump when a change here changes what a trained tokenizer contains."""

ROBERTA_SPECIALS: tuple[str, ...] = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")
"""Specials of the SentencePiece and byte-level families, in id order (as RoBERTa / XLM-R)."""
WORDPIECE_SPECIALS: tuple[str, ...] = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
"""Specials of the WordPiece family, in id order."""

MIN_VOCAB_FRACTION = 0.9
"""Trainers silently return fewer tokens when the corpus cannot support the requested size; below
this fraction of the request we raise, at or above it we accept and record the achieved size."""

_MIN_VOCAB_SIZE = 16
_INFO_KEY = "tokxfer"
_UTF8_CHUNK = 1 << 20


# ----------------------------------------------------------------------------------------------
# Input validation
# ----------------------------------------------------------------------------------------------



class TokenizerNotFoundError(TokxferError, OSError):
    """A tokenizer named by path or hub id cannot be found here (its message says where it looked)."""

def _check_corpus_paths(corpus: Sequence[Path | str]) -> list[Path]:
    """Cheap checks that need no reading: a non-empty list of existing, non-empty files."""
    if isinstance(corpus, (str, Path)):
        raise TypeError(f"corpus must be a list of paths, got a single path {str(corpus)!r}; wrap it in a list")
    paths = [Path(p) for p in corpus]
    if not paths:
        raise ValueError("corpus is empty: pass at least one text file")
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"corpus file {str(p)!r} does not exist")
        if not p.is_file():
            raise ValueError(f"corpus file {str(p)!r} is not a regular file")
        if p.stat().st_size == 0:
            raise ValueError(f"corpus file {str(p)!r} is empty")
    return paths


def _check_utf8_text(path: Path) -> None:
    """Stream ``path`` and raise if it is not UTF-8 (naming byte offset and line) or holds only whitespace."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    offset = 0  # bytes fed to the decoder so far
    has_text = False
    with open(path, "rb") as f:
        while True:
            chunk = f.read(_UTF8_CHUNK)
            final = not chunk
            pending = decoder.getstate()[0]  # bytes of an incomplete sequence held from the last chunk
            try:
                text = decoder.decode(chunk, final=final)
            except UnicodeDecodeError as e:
                # e.start is relative to pending + chunk
                bad = offset - len(pending) + e.start
                with open(path, "rb") as g:
                    line = g.read(bad).count(b"\n") + 1
                raise ValueError(
                    f"corpus file {str(path)!r} is not valid UTF-8: {e.reason} at byte offset {bad} (line {line}); "
                    "re-encode it as UTF-8"
                ) from None
            has_text = has_text or bool(text.strip())
            offset += len(chunk)
            if final:
                break
    if not has_text:
        raise ValueError(f"corpus file {str(path)!r} contains only whitespace")


def _check_vocab_size(vocab_size: int) -> None:
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TypeError(f"vocab_size must be an int, got {vocab_size!r}")
    if vocab_size < _MIN_VOCAB_SIZE:
        raise ValueError(f"vocab_size must be at least {_MIN_VOCAB_SIZE}, got {vocab_size}")


def _check_algorithm(algorithm: str) -> None:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown tokenizer algorithm {algorithm!r}; allowed: {', '.join(ALGORITHMS)}")


# ----------------------------------------------------------------------------------------------
# Building
# ----------------------------------------------------------------------------------------------


def _iter_lines(paths: Sequence[Path]) -> Iterator[str]:
    """The corpus's non-blank lines without their line breaks, file by file.

    (``Tokenizer.train(files)`` would keep the ``\\n`` of every line, which then becomes the most
    frequent "character" of the vocabulary; feeding stripped lines avoids that.) Counts the characters
    read in :data:`_READ` for the training heartbeat.
    """
    for p in paths:
        for line in text_lines(p, what="tokenizer training corpus"):
            _READ[0] += len(line) + 1
            yield line


_READ = [0]
"""Characters :func:`_iter_lines` has read in this process (read by the training heartbeat's status)."""


def _training_status(total_chars: int) -> Callable[[], str]:
    """Status of a tokenizer training for :func:`harness.progress.heartbeat`: reading (percent), then training."""
    start = _READ[0]

    def status() -> str:
        done = (_READ[0] - start) / max(total_chars, 1)
        return f"reading the text, {done:.0%}" if done < 1 else "the text is read; the trainer is computing"

    return status


def _normalizer(algorithm: str, lowercase: bool) -> normalizers.Normalizer | None:
    if algorithm == "wordpiece":
        # strip_accents=False: the world's target languages carry diacritics that must survive.
        return normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=lowercase
        )
    # SentencePiece families: NFKC, and tabs / line breaks become spaces (as SentencePiece's nmt_nfkc
    # does; otherwise "line\n" would end in <unk>). Byte-level BPE: none, as GPT-2 / RoBERTa.
    steps: list[normalizers.Normalizer] = []
    if algorithm in ("unigram", "bpe"):
        steps += [normalizers.NFKC(), normalizers.Replace(Regex("[\t\n\r\f\v]"), " ")]
    if lowercase:
        steps.append(normalizers.Lowercase())
    if not steps:
        return None
    return steps[0] if len(steps) == 1 else normalizers.Sequence(steps)


def _metaspace(tok: Tokenizer) -> None:
    # '▁' replaces spaces and is prepended to every word, as SentencePiece's add_dummy_prefix.
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")


def _train_unigram(paths: Sequence[Path], vocab_size: int, norm: normalizers.Normalizer | None) -> Tokenizer:
    """Unigram pieces and scores from SentencePiece's trainer, served by a ``tokenizers`` Unigram.

    ``tokenizers``' own ``UnigramTrainer`` is not deterministic (its EM sums floats in hash-map
    order: two runs on the same 400 KB gave the same pieces in a different order, scores differing
    by up to 7e-4) and took 12.7 s for 8k pieces on 2.7 MB. SentencePiece's trainer with one thread
    is bit-for-bit reproducible and took 1.6 s. Its output is converted to ``models.Unigram``, so
    the runtime is the ``tokenizers`` Unigram + Metaspace either way.
    """
    import sentencepiece as spm

    def sentences() -> Iterator[str]:
        for line in _iter_lines(paths):
            yield norm.normalize_str(line) if norm is not None else line

    buf = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences(),
            model_writer=buf,
            model_type="unigram",
            vocab_size=vocab_size,
            hard_vocab_limit=False,  # return what the corpus supports; we check the size ourselves
            normalization_rule_name="identity",  # normalized above with the runtime's own normalizer
            remove_extra_whitespaces=False,  # the Metaspace runtime does not collapse spaces either
            add_dummy_prefix=True,
            character_coverage=1.0,  # every character gets a piece (scripts with large alphabets too)
            byte_fallback=False,
            max_sentence_length=1 << 20,  # the default (4192 bytes) silently drops longer lines
            num_threads=1,  # the EM result depends on the thread count; one thread is machine-independent
            bos_id=0, bos_piece="<s>", pad_id=1, pad_piece="<pad>", eos_id=2, eos_piece="</s>",
            unk_id=3, unk_piece="<unk>", user_defined_symbols=["<mask>"],
            minloglevel=2,
        )  # fmt: skip
    except RuntimeError as e:
        names = ", ".join(repr(str(p)) for p in paths)
        raise ValueError(f"sentencepiece could not train a unigram tokenizer on {names}: {e}") from None
    proc = spm.SentencePieceProcessor(model_proto=buf.getvalue())
    vocab = [(proc.id_to_piece(i), float(proc.get_score(i))) for i in range(proc.get_piece_size())]
    tok = Tokenizer(models.Unigram(vocab, unk_id=ROBERTA_SPECIALS.index("<unk>"), byte_fallback=False))
    if norm is not None:
        tok.normalizer = norm
    _metaspace(tok)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ROBERTA_SPECIALS])
    return tok


def _train_bpe(
    paths: Sequence[Path], vocab_size: int, norm: normalizers.Normalizer | None, bytelevel: bool, progress: bool
) -> Tokenizer:
    """SentencePiece-style BPE (Metaspace) or GPT-2 / RoBERTa byte-level BPE (deterministic)."""
    if bytelevel:
        tok = Tokenizer(models.BPE())  # no unk: every byte is in the base alphabet
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)  # as GPT-2 / RoBERTa
        tok.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        _metaspace(tok)
        alphabet = []
    if norm is not None:
        tok.normalizer = norm
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(ROBERTA_SPECIALS), initial_alphabet=alphabet, show_progress=progress
    )
    tok.train_from_iterator(_iter_lines(paths), trainer)
    return tok


def _train_wordpiece(paths: Sequence[Path], vocab_size: int, norm: normalizers.Normalizer, progress: bool) -> Tokenizer:
    """BERT-style WordPiece, made deterministic.

    ``tokenizers``' WordPiece trainer gives each continuation piece ``##c`` its id in hash-map
    order of the words, and merges with equal counts are broken by id, so two runs differ in a
    handful of tokens. Reserving every ``##c`` up front (sorted) fixes the ids; the reservations
    are then turned back into ordinary vocabulary entries.
    """
    chars: set[str] = set()
    for line in _iter_lines(paths):
        chars.update(line)
    continuation = sorted({"##" + c for c in norm.normalize_str("".join(sorted(chars))) if not c.isspace()})
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        special_tokens=list(WORDPIECE_SPECIALS) + continuation,
        continuing_subword_prefix="##",
        show_progress=progress,
    )
    scratch = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##"))
    scratch.normalizer = norm
    scratch.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    scratch.train_from_iterator(_iter_lines(paths), trainer)
    tok = Tokenizer(
        models.WordPiece(scratch.get_vocab(with_added_tokens=True), unk_token="[UNK]", continuing_subword_prefix="##")
    )
    tok.normalizer = norm
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in WORDPIECE_SPECIALS])
    return tok


def _train_backend(
    paths: Sequence[Path], algorithm: str, vocab_size: int, lowercase: bool, progress: bool
) -> Tokenizer:
    """A trained ``tokenizers.Tokenizer`` (no post-processor yet) with specials at ids 0..4."""
    norm = _normalizer(algorithm, lowercase)
    if algorithm == "unigram":
        return _train_unigram(paths, vocab_size, norm)
    if algorithm == "wordpiece":
        assert norm is not None
        return _train_wordpiece(paths, vocab_size, norm, progress)
    return _train_bpe(paths, vocab_size, norm, bytelevel=algorithm == "bytelevel-bpe", progress=progress)


def _add_post_processor(tok: Tokenizer, algorithm: str) -> None:
    if algorithm == "wordpiece":
        cls, sep = ("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[cls, sep]
        )
        return
    bos, eos = ("<s>", tok.token_to_id("<s>")), ("</s>", tok.token_to_id("</s>"))
    if algorithm == "bytelevel-bpe":
        tok.post_processor = processors.RobertaProcessing(eos, bos, trim_offsets=True, add_prefix_space=False)
    else:
        tok.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>", special_tokens=[bos, eos]
        )


def _wrap(tok: Tokenizer, algorithm: str, info: dict[str, Any]) -> PreTrainedTokenizerFast:
    common: dict[str, Any] = {"tokenizer_object": tok, "clean_up_tokenization_spaces": False, _INFO_KEY: info}
    if algorithm == "wordpiece":
        return PreTrainedTokenizerFast(
            unk_token="[UNK]",
            pad_token="[PAD]",
            cls_token="[CLS]",
            sep_token="[SEP]",
            mask_token="[MASK]",
            model_input_names=["input_ids", "token_type_ids", "attention_mask"],  # as BERT
            **common,
        )
    # As RoBERTa / XLM-R: "<mask>" absorbs the space before it, so "a <mask>" masks a whole word
    # ("▁x" / "Ġx") rather than leaving a lone "▁" / "Ġ" before it. Updates the trainer's entry in place.
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, normalized=False, special=True)])
    return PreTrainedTokenizerFast(
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        cls_token="<s>",
        sep_token="</s>",
        mask_token="<mask>",
        **common,
    )


def train_tokenizer(
    corpus: Sequence[Path | str],
    algorithm: Algorithm = "unigram",
    vocab_size: int = 8000,
    *,
    lowercase: bool = False,
    cache_dir: Path | str | None = None,
    progress: bool = False,
) -> PreTrainedTokenizerFast:
    """Train (or fetch from the cache) a subword tokenizer on text files.

    Args:
        corpus: UTF-8 text files, one sentence or document per line; read in the given order.
        algorithm: ``"unigram"`` | ``"bpe"`` | ``"bytelevel-bpe"`` | ``"wordpiece"`` (see the module table).
        vocab_size: requested vocabulary size, specials included.
        lowercase: lowercase the text in the normalizer (off by default, as in the cased models).
        cache_dir: cache root (entries go to ``<cache_dir>/tokenizers/``); :func:`harness.cache.cache_root` if None.
        progress: show the ``tokenizers`` trainer's progress bar (``unigram``, trained by
            sentencepiece in ~1-2 s for a few MB, shows none).

    Returns:
        A ``PreTrainedTokenizerFast``; ``tokenizer_info(tok)`` gives the requested and achieved sizes,
        corpus digests and training time. A cache hit returns a tokenizer identical to the first build.

    Raises:
        ValueError: unknown algorithm (listing the allowed ones), an empty corpus list, an empty or
            whitespace-only file, a file that is not UTF-8 (with byte offset and line), or a corpus
            that supports fewer than ``MIN_VOCAB_FRACTION * vocab_size`` tokens (with the achieved size).
        FileNotFoundError: a corpus file that does not exist (naming it).

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "c.txt").write_text("hello world\\n" * 20)
        >>> tok = train_tokenizer([d / "c.txt"], "bytelevel-bpe", vocab_size=270, cache_dir=d)
        >>> tok.convert_ids_to_tokens(tok("hello world")["input_ids"])
        ['<s>', 'hello', 'Ġworld', '</s>']
    """
    # Over 80 lines for its docstring; the code (cache key, build, load) is 56 lines and reads in one go.
    _check_algorithm(algorithm)
    _check_vocab_size(vocab_size)
    paths = _check_corpus_paths(corpus)
    key = {
        "what": "tokenizer",
        "code_version": CODE_VERSION,
        "algorithm": algorithm,
        "vocab_size": vocab_size,
        "lowercase": bool(lowercase),
        "corpus": paths,  # hashed by content, in order
    }

    def build(out: Path) -> None:
        for p in paths:
            _check_utf8_text(p)
        t0 = time.perf_counter()
        size = sum(p.stat().st_size for p in paths)
        desc = f"training a {algorithm} tokenizer ({vocab_size:,} tokens) on {size / 1e6:.1f} MB"
        _progress.line(desc)
        with _progress.heartbeat(desc, _training_status(size)):  # bytes ~ characters: a status, not a measure
            tok = _train_backend(paths, algorithm, vocab_size, lowercase, progress)
        seconds = time.perf_counter() - t0
        achieved = tok.get_vocab_size(with_added_tokens=True)
        names = ", ".join(repr(str(p)) for p in paths)
        if achieved < MIN_VOCAB_FRACTION * vocab_size:
            raise ValueError(
                f"corpus {names} supports only {achieved} {algorithm} tokens, fewer than "
                f"{MIN_VOCAB_FRACTION:.0%} of the requested vocab_size={vocab_size}; "
                f"use vocab_size={achieved} or smaller, or a larger corpus"
            )
        _add_post_processor(tok, algorithm)
        info = {
            "algorithm": algorithm,
            "requested_vocab_size": vocab_size,
            "vocab_size": achieved,
            "lowercase": bool(lowercase),
            "corpus_sha256": [file_hash(p) for p in paths],
            "corpus_files": [p.name for p in paths],
            "code_version": CODE_VERSION,
            "trainer": "sentencepiece" if algorithm == "unigram" else "tokenizers",
            "tokenizers_version": hf_tokenizers.__version__,
            "train_seconds": round(seconds, 3),
        }
        _wrap(tok, algorithm, info).save_pretrained(out)

    path = cached_dir("tokenizers", key, build, root=Path(cache_dir) if cache_dir is not None else None)
    # an entry never changes (content-addressed, renamed into place whole): read once per process, a fresh
    # copy per call (its truncation/padding state is the caller's own); every trial of a grid asks again
    return copy.deepcopy(_TRAINED_MEMO.get(str(path), lambda: AutoTokenizer.from_pretrained(path)))


_TRAINED_MEMO = ProcessMemo(4)
"""Trained tokenizers read from the cache in this process, by entry folder (a grid has a few targets)."""


def tokenizer_info(tok: Any) -> dict[str, Any]:
    """What :func:`train_tokenizer` recorded about ``tok`` (empty for tokenizers trained elsewhere).

    Keys: ``algorithm``, ``requested_vocab_size``, ``vocab_size`` (achieved, specials included),
    ``lowercase``, ``corpus_sha256``, ``corpus_files``, ``code_version``, ``tokenizers_version``,
    ``train_seconds``.
    """
    return dict(getattr(tok, "init_kwargs", {}).get(_INFO_KEY) or {})


# ----------------------------------------------------------------------------------------------
# Loading
# ----------------------------------------------------------------------------------------------

_OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def _env_offline() -> bool:
    return any(os.environ.get(v, "").strip().lower() in {"1", "true", "yes", "on"} for v in _OFFLINE_VARS)


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the hub endpoint opens within ``timeout`` seconds."""
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    host = url.hostname or "huggingface.co"
    port = url.port or (443 if url.scheme != "http" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _looks_local(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~", ".")) or name.count("/") > 1 or "\\" in name


def load_tokenizer(name_or_path: str | Path) -> PreTrainedTokenizerFast:
    """Load a tokenizer from a local directory or a Hugging Face hub id.

    A local directory (anything that exists, or that looks like a path: absolute, ``./``, ``~``)
    is loaded with ``AutoTokenizer.from_pretrained``. A hub id is first looked up in the local
    hub cache; if it is not there and the hub is unreachable (offline flags set, or no connection
    within 3 s) this fails at once with a message naming the id, instead of after transformers'
    retries (~46 s).

    Args:
        name_or_path: a directory written by ``save_pretrained`` or a hub id such as ``"xlm-roberta-base"``.

    Returns:
        The tokenizer.

    Raises:
        FileNotFoundError: a path-like name that does not exist.
        OSError: a hub id that is neither cached nor reachable (the message names it).

    Example:
        >>> load_tokenizer("no-such-org/no-such-model")  # doctest: +SKIP
        Traceback (most recent call last):
        OSError: cannot load tokenizer 'no-such-org/no-such-model': ...
    """
    path = Path(name_or_path).expanduser()
    if path.exists() or isinstance(name_or_path, Path) or _looks_local(str(name_or_path)):
        if not path.is_dir():
            raise FileNotFoundError(f"tokenizer directory {str(path)!r} does not exist")
        return AutoTokenizer.from_pretrained(path)
    name = str(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(name, local_files_only=True)
    except (OSError, ValueError):
        pass  # not in the local hub cache
    if _env_offline() or not _hub_reachable():
        why = "offline mode is set (HF_HUB_OFFLINE/TRANSFORMERS_OFFLINE)" if _env_offline() else "no connection"
        raise TokenizerNotFoundError(
            f"cannot load tokenizer {name!r}: it is not a local directory, not in the local Hugging Face "
            f"cache, and the Hugging Face hub is unreachable ({why}). Pass a local directory written by "
            "save_pretrained, or download it on a machine with network access."
        )
    return AutoTokenizer.from_pretrained(name)


def tokenizer_state(tokenizer: Any) -> str | None:
    """A sha256 of everything in ``tokenizer`` that decides how it encodes text: the key of the
    per-process memos of tokenizer-derived data (MLM evaluation sets, gold pairs).

    The serialized backend (model, normalizer, pre-tokenizer, post-processor, added tokens) without
    its truncation/padding state (which each encoding call sets), the class, the vocabulary size,
    the special ids and the truncation side. ``None`` for tokenizers without a ``tokenizers``
    backend: what is derived from them is not memoized.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    raw = backend.to_str()
    facts = {
        "class": type(tokenizer).__name__, "n": len(tokenizer),
        "special_ids": sorted(tokenizer.all_special_ids), "mask": tokenizer.mask_token_id,
        "pad": tokenizer.pad_token_id, "truncation_side": getattr(tokenizer, "truncation_side", None),
    }
    # the JSON round trip is most of the cost (every trial asks for the state of the same tokenizers'
    # fresh objects a few times): its digest is kept per process by what it is computed from
    memo_key = (hashlib.sha256(raw.encode("utf-8")).hexdigest(), json.dumps(facts, sort_keys=True))
    return _STATE_MEMO.get(memo_key, lambda: _state_digest(raw, facts))


_STATE_MEMO = ProcessMemo(32)
"""Digests of :func:`tokenizer_state` by (sha256 of the serialized backend, the other facts)."""


def _state_digest(raw: str, facts: dict) -> str:
    state = json.loads(raw)
    state.pop("truncation", None)
    state.pop("padding", None)
    return hashlib.sha256(json.dumps({"backend": state, **facts}, sort_keys=True, ensure_ascii=False)
                          .encode("utf-8")).hexdigest()
