"""Tiny tokenizers of every family, trained in memory from a few dozen strings (no network).

Used by ``tests/api/test_canon.py`` and ``tests/methods/test_baselines.py``; importable by other test files.
Also: tokenizers of specific model families and :data:`FAMILIES`, tiny random models of every
architecture family the harness claims (``tests/model/test_surgery.py``, ``tests/methods/test_arch_matrix.py``).
Specials follow ``harness/tokenizers.py``: RoBERTa-style ``<s> </s> <pad> <unk> <mask>`` for
SentencePiece and byte-level BPE, BERT-style ``[CLS] [SEP] [PAD] [UNK] [MASK]`` for WordPiece.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass

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


# ---------------------------------------------------------------------------------------------
# Tokenizers of specific model families (special tokens in the family's order), for tiny models


def sentencepiece_bpe(
    texts: tuple[str, ...] | list[str] = tuple(SOURCE_TEXT),
    vocab_size: int = 200,
    specials: tuple[str, ...] = ("<unk>", "<s>", "</s>"),
) -> PreTrainedTokenizerFast:
    """Llama-2/Gemma-style SentencePiece BPE: ``▁`` from a Prepend/Replace normalizer, byte fallback.

    ``specials`` come first, in order (Llama: ``<unk> <s> </s>``; Gemma: ``<pad> <eos> <bos> <unk>``),
    then the merges' pieces, then the 256 ``<0x..>`` byte pieces.
    """
    return _sentencepiece_bpe(tuple(texts), vocab_size, tuple(specials))


@functools.cache
def _sentencepiece_bpe(texts: tuple[str, ...], vocab_size: int, specials: tuple[str, ...]) -> PreTrainedTokenizerFast:
    unk = "<unk>"
    bk = Tokenizer(models.BPE(byte_fallback=True, unk_token=unk))
    bk.pre_tokenizer = pre_tokenizers.Metaspace()  # training must not merge across words
    bk.train_from_iterator(list(texts), trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(specials)))
    cfg = json.loads(bk.to_str())
    cfg["model"]["byte_fallback"] = True
    vocab = cfg["model"]["vocab"]
    n = len(vocab)
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = n + b
    bk = Tokenizer.from_str(json.dumps(cfg))
    bk.pre_tokenizer = None
    bk.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    bk.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    roles = {"<unk>": "unk_token", "<s>": "bos_token", "</s>": "eos_token", "<pad>": "pad_token",
             "<bos>": "bos_token", "<eos>": "eos_token", "<mask>": "mask_token"}  # fmt: skip
    return PreTrainedTokenizerFast(tokenizer_object=bk, **{roles[s]: s for s in specials if s in roles})


def t5_unigram(texts: tuple[str, ...] | list[str] = tuple(SOURCE_TEXT), vocab_size: int = 200) -> PreTrainedTokenizerFast:
    """T5-style SentencePiece Unigram: ``<pad>=0 </s>=1 <unk>=2``, no bos/mask, byte fallback."""
    return _t5_unigram(tuple(texts), vocab_size)


@functools.cache
def _t5_unigram(texts: tuple[str, ...], vocab_size: int) -> PreTrainedTokenizerFast:
    bk = Tokenizer(models.Unigram())
    bk.normalizer = normalizers.NFKC()
    bk.pre_tokenizer = pre_tokenizers.Metaspace()
    bk.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "</s>", "<unk>"], unk_token="<unk>")
    bk.train_from_iterator(list(texts), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bk, eos_token="</s>", unk_token="<unk>", pad_token="<pad>")


# ---------------------------------------------------------------------------------------------
# Tiny random models of every family the harness claims, each with a tokenizer of its family


@dataclass(frozen=True)
class Family:
    """A model family for tests: how to build a tiny random model and a tokenizer of its kind.

    Attributes:
        name: a short name (``"gemma"``, ``"t5-untied"`` …).
        kind: ``"mlm"``, ``"clm"`` or ``"seq2seq"`` (the harness's model kinds).
        model_class: name of the ``transformers`` model class.
        config_class: name of the ``transformers`` config class.
        config: config keyword arguments besides the vocabulary size and special-token ids.
        tokenizer: builds the family's tokenizer from a list of texts.
        tied: whether input and output embeddings are one tensor.
    """

    name: str
    kind: str
    model_class: str
    config_class: str
    config: dict
    tokenizer: Callable[[list[str]], PreTrainedTokenizerFast]
    tied: bool = True

    def build(self, tok: PreTrainedTokenizerFast, seed: int = 0):
        """A tiny random model for ``tok`` (one row per token id), seeded, in eval mode."""
        import torch
        import transformers

        from harness.vocab import vocab_size

        ids = {k: getattr(tok, f"{k}_token_id", None) for k in ("pad", "bos", "eos")}
        kwargs = {"vocab_size": vocab_size(tok), **self.config}
        for k, v in ids.items():
            if v is not None:
                kwargs[f"{k}_token_id"] = v
        if self.kind == "seq2seq" and "decoder_start_token_id" not in kwargs:
            kwargs["decoder_start_token_id"] = ids["eos"] if self.name.startswith("bart") else ids["pad"]
        cfg = getattr(transformers, self.config_class)(**kwargs, tie_word_embeddings=self.tied)
        state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        try:
            model = getattr(transformers, self.model_class)(cfg)
        finally:
            torch.random.set_rng_state(state)
        with torch.no_grad():  # HF zero-inits biases and scaled-norm weights: make them non-trivial
            g = torch.Generator().manual_seed(seed + 1)
            head = model.get_output_embeddings()
            if not self.tied and head.weight is model.get_input_embeddings().weight:
                # transformers 5 always ties T5 (T5Config forces tie_word_embeddings=True); a T5 v1.1
                # checkpoint loads untied because its lm_head differs from ``shared``: make it differ
                head.weight = torch.nn.Parameter(torch.randn(head.weight.shape, generator=g))
            for p in model.parameters():
                if p.dim() == 1:
                    p.add_(0.1 * torch.randn(p.shape, generator=g))
            for mod in model.modules():
                b = mod._buffers.get("final_logits_bias")
                if b is not None:
                    b.add_(0.1 * torch.randn(b.shape, generator=g))
        return model.eval()

    def inputs(self, ids: list[int]) -> dict:
        """Model inputs for one sequence of token ids (decoder inputs too for seq2seq)."""
        import torch

        x = torch.tensor([ids])
        batch = {"input_ids": x, "attention_mask": torch.ones_like(x)}
        if self.kind == "seq2seq":
            batch["decoder_input_ids"] = x.flip(1)
        return batch


_SMALL = {"num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 64}
_ENC = {"hidden_size": 16, **_SMALL}
_DEC = {"hidden_size": 16, "num_key_value_heads": 1, **_SMALL}
_BART = {"d_model": 16, "encoder_layers": 1, "decoder_layers": 1, "encoder_attention_heads": 2,
         "decoder_attention_heads": 2, "encoder_ffn_dim": 32, "decoder_ffn_dim": 32, "max_position_embeddings": 64,
         "scale_embedding": True}  # fmt: skip
_GEMMA_SPECIALS = ("<pad>", "<eos>", "<bos>", "<unk>")
_XGLM_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")


def _roberta_unigram(texts):
    return unigram(tuple(texts))


def _xglm_unigram(texts):
    return _unigram_specials(tuple(texts), 200, _XGLM_SPECIALS)


@functools.cache
def _unigram_specials(texts: tuple[str, ...], vocab_size: int, specials: tuple[str, ...]) -> PreTrainedTokenizerFast:
    bk = Tokenizer(models.Unigram())
    bk.normalizer = normalizers.NFKC()
    bk.pre_tokenizer = pre_tokenizers.Metaspace()
    bk.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=list(specials), unk_token="<unk>")
    bk.train_from_iterator(list(texts), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bk, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>")


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in [
        Family("bert", "mlm", "BertForMaskedLM", "BertConfig", _ENC, lambda t: wordpiece(tuple(t))),
        Family("roberta", "mlm", "RobertaForMaskedLM", "RobertaConfig", _ENC, lambda t: bytelevel(tuple(t))),
        Family("xlm-r", "mlm", "XLMRobertaForMaskedLM", "XLMRobertaConfig", _ENC, _roberta_unigram),
        Family("xlm-r-untied", "mlm", "XLMRobertaForMaskedLM", "XLMRobertaConfig", _ENC, _roberta_unigram, tied=False),
        Family("gpt2", "clm", "GPT2LMHeadModel", "GPT2Config", {"n_embd": 16, "n_layer": 1, "n_head": 2,
               "n_positions": 64}, lambda t: bytelevel(tuple(t))),  # fmt: skip
        Family("llama-untied", "clm", "LlamaForCausalLM", "LlamaConfig", _DEC,
               lambda t: sentencepiece_bpe(tuple(t)), tied=False),
        Family("gemma", "clm", "GemmaForCausalLM", "GemmaConfig", {**_DEC, "head_dim": 8},
               lambda t: sentencepiece_bpe(tuple(t), specials=_GEMMA_SPECIALS)),
        Family("gemma3", "clm", "Gemma3ForCausalLM", "Gemma3TextConfig", {**_DEC, "head_dim": 8},
               lambda t: sentencepiece_bpe(tuple(t), specials=_GEMMA_SPECIALS)),
        Family("xglm", "clm", "XGLMForCausalLM", "XGLMConfig", {"d_model": 16, "num_layers": 1, "attention_heads": 2,
               "ffn_dim": 32, "max_position_embeddings": 64}, _xglm_unigram),  # fmt: skip
        Family("bart", "seq2seq", "BartForConditionalGeneration", "BartConfig", _BART, lambda t: bytelevel(tuple(t))),
        Family("mbart", "seq2seq", "MBartForConditionalGeneration", "MBartConfig", _BART, _roberta_unigram),
        Family("t5", "seq2seq", "T5ForConditionalGeneration", "T5Config", {"d_model": 16, "d_kv": 8, "d_ff": 32,
               "num_layers": 1, "num_decoder_layers": 1, "num_heads": 2}, lambda t: t5_unigram(tuple(t))),  # fmt: skip
        Family("t5-untied", "seq2seq", "T5ForConditionalGeneration", "T5Config", {"d_model": 16, "d_kv": 8, "d_ff": 32,
               "num_layers": 1, "num_decoder_layers": 1, "num_heads": 2}, lambda t: t5_unigram(tuple(t)), tied=False),  # fmt: skip
    ]
}
"""Every family the harness claims (BERT, RoBERTa, XLM-R, GPT-2, Llama, Gemma 1/3, XGLM, BART, mBART,
T5 (original, tied and output-scaled; v1.1-style untied)), tied and untied heads."""


# ---------------------------------------------------------------------------------------------
# Inputs every registered method can run on, and the settings that make it fast

FAST_METHOD_CONFIG: dict[str, dict] = {
    "focus": {"aux_dim": 16, "aux_epochs": 1, "aux_min_count": 1, "aux_threads": 1, "aux_bucket": 540_672},
    "wechsel": {"dim": 16, "epochs": 1, "min_count": 1, "threads": 1, "bucket": 540_672},
    "tiktotok": {"min_count": 1, "aligner": "ibm1"},
    "omp": {"aux_dim": 16, "aux_epochs": 1, "aux_min_count": 1, "aux_threads": 1, "aux_bucket": 540_672},
    "ofa": {"dim": 16, "epochs": 5, "min_count": 1},
    "hypernet": {"steps": 30, "hidden": 32, "heads": 2},
}
"""Tiny fastText / aligner settings for methods that train auxiliary models; others use defaults."""


def helper_model(tok: PreTrainedTokenizerFast, directory, seed: int = 0):
    """A tiny random BERT body saved with ``tok``: a "helper model" in ``tok``'s vocabulary (CLP, OMP's
    helper donor). Its embeddings share a common offset, as trained embeddings do (anisotropy), so
    cosines between tokens are mostly positive and CLP's normalization is defined."""
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    model = BertModel(BertConfig(vocab_size=len(tok), hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=16, max_position_embeddings=32))
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed)
        emb = torch.randn(len(tok), 8, generator=g) + torch.randn(8, generator=g).abs() + 1.0
        model.get_input_embeddings().weight.copy_(emb)
    model.save_pretrained(directory)
    tok.save_pretrained(directory)
    return directory

DICTIONARY = "hund\tdog\nkatze\tcat\nessen\tfood\ntag\tday\nwelt\tworld\nraum\troom\nkalt\tcold\nFuchs\tfox\nzahlen\tnumbers\n"


def transfer_files(directory):
    """Write the target/source corpora, a dictionary and a parallel corpus; return their ``TransferResources``.

    The parallel corpus pairs the i-th source and target fixture sentences (not translations, but
    enough for an aligner to run).
    """
    from pathlib import Path

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / "target.txt").write_text("\n".join(TARGET_TEXT) + "\n", encoding="utf-8")
    (d / "source.txt").write_text("\n".join(SOURCE_TEXT) + "\n", encoding="utf-8")
    (d / "dict.tsv").write_text(DICTIONARY, encoding="utf-8")
    pairs = [json.dumps({"source": s, "target": t}) for s, t in zip(SOURCE_TEXT, TARGET_TEXT)]
    (d / "parallel.jsonl").write_text("\n".join(pairs) + "\n", encoding="utf-8")
    from harness.protocols import TransferResources

    return TransferResources(
        target_corpus=d / "target.txt", source_corpus=d / "source.txt", dictionary=d / "dict.tsv",
        parallel_corpus=d / "parallel.jsonl",
    )
