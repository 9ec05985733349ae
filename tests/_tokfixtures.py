"""Tiny tokenizers of every family, trained in memory from a few dozen strings (no network).

Used by ``tests/test_canon.py`` and ``tests/test_baselines.py``; importable by other test files.
Specials follow ``harness/tokenizers.py``: RoBERTa-style ``<s> </s> <pad> <unk> <mask>`` for
SentencePiece and byte-level BPE, BERT-style ``[CLS] [SEP] [PAD] [UNK] [MASK]`` for WordPiece.
"""

from __future__ import annotations

import functools
import json

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

SOURCE_TEXT = [
    "the cat sat on the mat.",
    "the dog ate the food, and the cat watched!",
    "a café in the old town sells 12 cakes for 3,50 euros.",
    "hello world: 2024-01-01 was a good day?",
    "she said (quietly) that the room was cold; he agreed.",
    "numbers like 100, 250 and 1,000 appear in text.",
    "foo bar baz qux foo bar foo.",
    "The Quick Brown Fox jumps over the lazy dog.",
    "naïve résumé fiancé déjà vu.",
    "running runner runs ran; walking walker walks.",
    "#hashtags & @mentions cost $5 or 10% off!",
    "email me at name@example.com — thanks...",
] * 3

TARGET_TEXT = [
    "der hund frisst das essen, und die katze schaut zu!",
    "ein café in der altstadt verkauft 12 kuchen für 3,50 euro.",
    "hallo welt: 2024-01-01 war ein guter tag?",
    "sie sagte (leise), dass der raum kalt war; er stimmte zu.",
    "zahlen wie 100, 250 und 1.000 kommen im text vor.",
    "foo bar baz foo bar foo.",
    "Der Schnelle Braune Fuchs springt über den faulen Hund.",
    "naïve résumé fiancé déjà vu straße größe.",
    "laufen läufer läuft lief; gehen geher geht.",
    "kosten $5 oder 10% rabatt!",
    "katze katze katze hund hund essen essen tag tag welt",
] * 3

ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
BERT_SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def _wrap_roberta(backend: Tokenizer) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        mask_token="<mask>",
    )


def unigram(texts: tuple[str, ...] | list[str] = tuple(SOURCE_TEXT), vocab_size: int = 200) -> PreTrainedTokenizerFast:
    """SentencePiece-style Unigram + Metaspace with byte fallback."""
    return _unigram(tuple(texts), vocab_size)


@functools.cache
def _unigram(texts: tuple[str, ...], vocab_size: int) -> PreTrainedTokenizerFast:
    bk = Tokenizer(models.Unigram(byte_fallback=True))
    bk.normalizer = normalizers.NFKC()
    bk.pre_tokenizer = pre_tokenizers.Metaspace()
    bk.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=ROBERTA_SPECIALS, unk_token="<unk>")
    bk.train_from_iterator(list(texts), trainer)
    # The trainer drops byte_fallback (tokenizers 0.23): append the 256 byte pieces and switch it on.
    cfg = json.loads(bk.to_str())
    cfg["model"]["byte_fallback"] = True
    cfg["model"]["vocab"].extend([f"<0x{b:02X}>", -20.0] for b in range(256))
    return _wrap_roberta(Tokenizer.from_str(json.dumps(cfg)))


def bytelevel(
    texts: tuple[str, ...] | list[str] = tuple(SOURCE_TEXT), vocab_size: int = 400
) -> PreTrainedTokenizerFast:
    """GPT-2/RoBERTa-style byte-level BPE."""
    return _bytelevel(tuple(texts), vocab_size)


@functools.cache
def _bytelevel(texts: tuple[str, ...], vocab_size: int) -> PreTrainedTokenizerFast:
    bk = Tokenizer(models.BPE())
    bk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=ROBERTA_SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bk.train_from_iterator(list(texts), trainer)
    return _wrap_roberta(bk)


def wordpiece(
    texts: tuple[str, ...] | list[str] = tuple(SOURCE_TEXT), vocab_size: int = 200
) -> PreTrainedTokenizerFast:
    """BERT-style WordPiece (no lower-casing, so case survives)."""
    return _wordpiece(tuple(texts), vocab_size)


@functools.cache
def _wordpiece(texts: tuple[str, ...], vocab_size: int) -> PreTrainedTokenizerFast:
    bk = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    bk.normalizer = normalizers.NFC()
    bk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    bk.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=BERT_SPECIALS)
    bk.train_from_iterator(list(texts), trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bk,
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token="[MASK]",
    )


def from_vocab(family: str, pieces: list[str]) -> PreTrainedTokenizerFast:
    """A tokenizer whose vocabulary is exactly ``pieces`` (ids in order), for hand-made cases.

    ``family`` is ``"sentencepiece"`` (Unigram + Metaspace, byte fallback), ``"bytelevel"`` (BPE
    without merges + ByteLevel) or ``"wordpiece"``. Specials present in ``pieces`` get their roles.
    """
    if family == "sentencepiece":
        bk = Tokenizer(models.Unigram([(p, -1.0) for p in pieces], unk_id=pieces.index("<unk>"), byte_fallback=True))
        bk.pre_tokenizer = pre_tokenizers.Metaspace()
        bk.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace()])
    elif family == "bytelevel":
        bk = Tokenizer(models.BPE({p: i for i, p in enumerate(pieces)}, []))
        bk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        bk.decoder = decoders.ByteLevel()
    elif family == "wordpiece":
        bk = Tokenizer(models.WordPiece({p: i for i, p in enumerate(pieces)}, unk_token="[UNK]"))
        bk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        bk.decoder = decoders.WordPiece()
    else:
        raise ValueError(family)
    roles = {
        "<s>": "bos_token", "</s>": "eos_token", "<unk>": "unk_token", "<pad>": "pad_token", "<mask>": "mask_token",
        "[CLS]": "cls_token", "[SEP]": "sep_token", "[UNK]": "unk_token", "[PAD]": "pad_token", "[MASK]": "mask_token",
    }  # fmt: skip
    kwargs = {roles[p]: p for p in pieces if p in roles}
    return PreTrainedTokenizerFast(tokenizer_object=bk, **kwargs)
