"""``iwslt-bleu``: X → English translation with an encoder–decoder Transformer, scored by sacreBLEU.

The XLP paper (papers/xlp-language-projection.txt, §4.3 and Appendix B.2, Table 7) trains a
6+6-layer Transformer (hidden 512, feed-forward 1024, 4 heads, dropout 0.3, weight decay 1e-4)
on IWSLT X→en with label-smoothed cross-entropy (ε = 0.1), Adam (0.9, 0.98, 1e-8), peak learning
rate 5e-4 after a 4k-step warmup followed by an inverse-square-root decay, 180 epochs, beam 5 with
length penalty 1.2, and reports sacreBLEU. These are the defaults here; ``size="tiny"`` is a small
2+2-layer model for the built-in world.

How the initialization method enters the task (``model_kind = "mlm"``): the trial's source model
is the masked LM whose vocabulary was transferred to the *target-language* tokenizer
(``ctx.tokenizer``). That tokenizer segments the translation's **source side** (language X), and
the MLM's initialized (and possibly LAPT-ed) input embedding matrix is copied into the encoder's
input embeddings. Everything else — the encoder and decoder layers, the decoder's embeddings
(tied to its output projection) — is trained from scratch, seeded by the trial seed. So the
initialization method determines the encoder's source-language word embeddings, and BLEU measures
how good a starting point they are. ``copy_source_embeddings=False`` gives the random-encoder
control. When the MLM's hidden size differs from ``d_model`` the task fails with a clear message,
unless ``embedding_projection=True`` (the copied ``|V| x d_mlm`` matrix is followed by a learned
``d_mlm -> d_model`` linear map). ``d_model=None`` (default) takes the MLM's hidden size.

The **target side** (English; the world's source language ``src`` in the built-in world) uses its
own tokenizer: ``target_tokenizer`` (a path or hub id), or one trained on the training targets
(``target_tokenizer_algorithm``, ``target_vocab_size``; content-hashed cache).

Data: ``{"translation": {"<lang>": ..., "<target_language>": ...}}`` from the world
(``World.task_file(lang, "translation", split)``), local files (``files``) or the hub
(``IWSLT/iwslt2017``, config ``iwslt2017-<lang>-en``) through :mod:`tasks.data`.

Language encodings: with an encoded MLM (``ctx.model``), the translation model is wrapped with
the same encoding — the encoder side starts from the MLM's language parameters (source
language X), the decoder side gets its own for the target language (neutral start, or random
when the encoding's ``init`` is ``random``); both are trained with the model (the XLP paper's MT
models are trained from scratch, XLP included). ``attached`` inserts the source-language token
into the encoder input (sources are cut to ``max_source_length - 1`` tokens) and uses the
target-language vector as the decoder-start embedding. The parameters the encoding adds are in
``info["model"][lang]["encoding"]``.

Multilingual X→en (the XLP paper's Table 2: one model over ar/de/es/fr/tr/zh→en): with
``languages`` set, the training pairs of every listed language are concatenated (shuffled
together), one model is trained, checkpoints are selected on the concatenated dev sets, and each
language's test set is decoded and scored on its own. Every batch carries each sequence's own
source language (``language_ids``) for an encoded model. The record's ``metrics["all"]``
(:data:`tasks.languages.SUMMARY`) holds the mean over the languages.

BLEU: ``bleu`` is detokenized sacreBLEU (``bleu_tokenize``, 13a by default), the comparable
number. The XLP paper reports *tokenized* BLEU (Moses-tokenized hypotheses and references scored
as they are); ``tokenized_bleu`` computes it beside the default as ``bleu_tokenized`` (``moses``:
sacremoses, the paper's tokenizer; or one of sacreBLEU's tokenizers as the pre-tokenizer), scored
with sacreBLEU ``tokenize="none"``. Both signatures are recorded (``info["sacrebleu_signature"]``,
``info["sacrebleu_signature_tokenized"]``, the latter prefixed with the pre-tokenizer).

Training goes through the shared loop (:func:`tasks.loop.finetune`, with a label-smoothed loss and
the inverse-sqrt schedule); checkpoint selection on dev per ``select_metric``; decoding with beam
search (``model.generate``) through :func:`tasks.loop.predict`; corpus BLEU with
:func:`tasks.metrics.bleu`, whose signature is stored in ``TaskResult.info``.
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from harness.examples import Scores, attach
from harness.protocols import TaskContext, TaskResult
from harness.registry import register_task
from harness.seeding import seeded_globals, torch_generator
from tasks import metrics
from tasks.data import DataError, added_tokens, ensure_languages, language_collate, limit, load_task_splits
from tasks.languages import LANGUAGES, SUMMARY, check_language_list
from tasks.loop import (
    FINETUNE_KEYS,
    IGNORE_INDEX,
    TrainConfig,
    finetune,
    finetune_info,
    pad_collate,
    predict,
    resolve_device,
    train_block,
)

SIZES: dict[str, dict[str, int]] = {
    "xlp": {"layers": 6, "attention_heads": 4, "ffn_dim": 1024, "d_model": 512},
    "tiny": {"layers": 2, "attention_heads": 4, "ffn_dim": 512, "d_model": 256},
}
"""Model presets: ``xlp`` = XLP Table 7 (6+6 layers, 4 heads, FFN 1024, hidden 512); ``tiny`` for the world.
``d_model`` here is used only when no source embeddings are copied (see :attr:`IwsltConfig.d_model`)."""
SELECT_METRICS = ("loss", "bleu", "last")
TOKENIZED_BLEU = ("moses", "13a", "intl", "char", "none")
"""Pre-tokenizers of the tokenized BLEU: ``moses`` (sacremoses), sacreBLEU's ``13a``/``intl``/``char``,
or ``none`` (the decoded text's own whitespace tokens)."""


@dataclass(frozen=True)
class IwsltConfig:
    """Configuration of :class:`IwsltBleu`. Defaults: XLP paper, Appendix B.2 / Table 7."""

    FLAT_BLOCKS = {
        "train": FINETUNE_KEYS + ("lr_schedule", "warmup_steps", "max_steps", "adam_beta1", "adam_beta2", "adam_epsilon")
    }
    """The ``train`` keys are stored flat in the resolved config (trial ids of the flat layout kept)."""
    NEW_FIELDS_OMITTED_WHEN_NONE = ("languages", "tokenized_bleu")
    """Options added after records existed: left out of the trial id while unset (harness.run.config.resolved_fields)."""

    files: str | None = None
    """Local JSONL path template with ``{lang}`` and ``{split}``; default: the world directory for
    world languages, the hub (``IWSLT/iwslt2017``) for real ones."""
    target_language: str | None = None
    """Key of the translation target in the examples; None: ``en`` for hub data, else the
    context's source language (``src`` in the world)."""
    size: str = "xlp"
    """Model preset (``xlp`` or ``tiny``); the fields below override single values."""
    d_model: int | None = None
    """Hidden size; None: the source MLM's hidden size when its embeddings are copied (else the
    preset's, XLP: 512)."""
    encoder_layers: int | None = None
    decoder_layers: int | None = None
    attention_heads: int | None = None
    """Heads in every attention block (XLP: 4; must divide ``d_model``)."""
    ffn_dim: int | None = None
    """Feed-forward width (XLP: 1024)."""
    dropout: float = 0.3
    attention_dropout: float = 0.0
    """fairseq's default (XLP states only the overall dropout)."""
    activation_dropout: float = 0.0
    copy_source_embeddings: bool = True
    """Copy the initialized MLM's input embeddings into the encoder (the point of the task);
    False: a randomly initialized encoder embedding (control)."""
    embedding_projection: bool = False
    """Allow a hidden-size mismatch by a learned ``d_mlm -> d_model`` projection after the copied embeddings."""
    target_tokenizer: str | None = None
    """Tokenizer of the English side (directory or hub id); None: train one on the training targets."""
    target_tokenizer_algorithm: str = "unigram"
    """Algorithm of the trained target tokenizer (see ``harness.tokenizers.ALGORITHMS``)."""
    target_vocab_size: int = 8000
    """Vocabulary size of the trained target tokenizer."""
    # XLP: learning rate 5e-4, 4k warmup steps then inverse square root, Adam betas (0.9, 0.98),
    # weight decay 1e-4. Batch: XLP batches 4096 tokens; IWSLT averages ~30 tokens per side, so 128
    # sentence pairs is the closest sentence-count equivalent. Gradient clipping is not stated by
    # XLP: 0 (off) is fairseq's default. warmup_ratio is used only when warmup_steps is None;
    # max_steps is a step budget instead of epochs (dev selection then happens once per pass).
    train: TrainConfig = train_block(
        learning_rate=5e-4, lr_schedule="inverse_sqrt", warmup_steps=4000, warmup_ratio=0.0, batch_size=128,
        epochs=180, weight_decay=1e-4, max_grad_norm=0.0, adam_beta2=0.98,
    )  # fmt: skip
    """Optimization (:class:`tasks.loop.TrainConfig`; its keys may also be given flat)."""
    label_smoothing: float = 0.1
    num_beams: int = 5
    length_penalty: float = 1.2
    max_source_length: int = 256
    """Source tokens per example (specials included); longer sources are truncated."""
    max_target_length: int = 256
    """Target tokens per example (EOS included) in training, and the generation limit."""
    select_metric: str = "loss"
    """Checkpoint selection after each epoch: dev ``loss`` (token NLL, fairseq's default), dev
    ``bleu`` (decodes dev every epoch), or ``last``."""
    bleu_tokenize: str = "13a"
    """sacreBLEU tokenizer (on detokenized output; the signature records it)."""
    tokenized_bleu: str | None = None
    """Also compute the XLP paper's tokenized BLEU (metric ``bleu_tokenized``): hypotheses and
    references word-tokenized with this pre-tokenizer (one of :data:`TOKENIZED_BLEU`; ``moses``, the
    paper's, needs the ``sacremoses`` package), then scored by sacreBLEU with ``tokenize="none"``.
    None: not computed (the default keeps earlier records' metrics as they were)."""
    languages: tuple[str, ...] | None = None
    """Source languages X of one multilingual X→en model (the XLP paper's Table 2 setting); None:
    one model per language of the trial. Must include the trial's target language (resume checks
    its metrics). ``max_train_examples``/``max_eval_examples`` then apply per language. Languages a
    language-encoded model has no parameters for are added, initialized by the encoding's ``init``
    option (:func:`tasks.data.ensure_languages`)."""
    max_train_examples: int | None = None
    """Use the first N training pairs (None: all)."""
    max_eval_examples: int | None = None
    """Use the first N dev and test pairs (None: all)."""

    def __post_init__(self) -> None:
        if self.size not in SIZES:
            raise ValueError(f"size must be one of {sorted(SIZES)}, got {self.size!r}")
        if self.select_metric not in SELECT_METRICS:
            raise ValueError(f"select_metric must be one of {SELECT_METRICS}, got {self.select_metric!r}")
        for name in ("d_model", "encoder_layers", "decoder_layers", "attention_heads", "ffn_dim"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {value}")
        for name in ("dropout", "attention_dropout", "activation_dropout", "label_smoothing"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)}")
        if self.num_beams < 1:
            raise ValueError(f"num_beams must be >= 1, got {self.num_beams}")
        if self.max_source_length < 4 or self.max_target_length < 2:
            raise ValueError("max_source_length must be >= 4 and max_target_length >= 2")
        if self.target_vocab_size < 16:
            raise ValueError(f"target_vocab_size must be >= 16, got {self.target_vocab_size}")
        if self.tokenized_bleu is not None and self.tokenized_bleu not in TOKENIZED_BLEU:
            raise ValueError(f"tokenized_bleu must be one of {TOKENIZED_BLEU} or null, got {self.tokenized_bleu!r}")
        check_language_list(self, "languages")

    def architecture(self, source_hidden: int | None) -> dict[str, int]:
        """Resolved sizes; ``source_hidden`` is the copied embeddings' width (None: not copied).

        Example:
            >>> IwsltConfig(size="tiny").architecture(16)["d_model"], IwsltConfig().architecture(None)["d_model"]
            (16, 512)
        """
        preset = SIZES[self.size]
        d_model = self.d_model or (source_hidden if source_hidden is not None else preset["d_model"])
        arch = {
            "d_model": d_model,
            "encoder_layers": self.encoder_layers or preset["layers"],
            "decoder_layers": self.decoder_layers or preset["layers"],
            "attention_heads": self.attention_heads or preset["attention_heads"],
            "ffn_dim": self.ffn_dim or preset["ffn_dim"],
        }
        if d_model % arch["attention_heads"]:
            raise ValueError(f"iwslt-bleu: attention_heads={arch['attention_heads']} must divide d_model={d_model}")
        return arch


class ProjectedEmbedding(nn.Module):
    """Copied ``|V| x d_in`` embeddings followed by a learned ``d_in -> d_out`` linear map."""

    def __init__(self, weight: torch.Tensor, d_out: int, padding_idx: int | None = None) -> None:
        super().__init__()
        self.embedding = nn.Embedding(weight.shape[0], weight.shape[1], padding_idx=padding_idx)
        with torch.no_grad():
            self.embedding.weight.copy_(weight)
        self.projection = nn.Linear(weight.shape[1], d_out, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.projection(self.embedding(input_ids))


def _special_id(tok: Any, *roles: str) -> int:
    for role in roles:
        value = getattr(tok, f"{role}_token_id", None)
        if value is not None:
            return int(value)
    raise ValueError(f"iwslt-bleu: the tokenizer has no {' / '.join(roles)} token")


def build_translation_model(
    source_tokenizer: Any,
    target_tokenizer: Any,
    cfg: IwsltConfig,
    *,
    seed: int,
    source_model: Any = None,
) -> tuple[Any, dict]:
    """A ``MarianMTModel`` (post-norm Transformer, sinusoidal positions) built from scratch.

    Encoder vocabulary: ``source_tokenizer``; decoder vocabulary: ``target_tokenizer`` (separate,
    untied from the encoder; the decoder's input and output embeddings are tied). When
    ``cfg.copy_source_embeddings`` and ``source_model`` is given, the source model's input
    embeddings become the encoder's (see the module docstring). Built under
    ``seeded_globals(seed, "task", "iwslt", "model")``.

    Returns:
        ``(model, info)`` with the resolved architecture and what was copied.

    Raises:
        ValueError: on a hidden-size mismatch without ``embedding_projection``, or when the
            source embeddings have fewer rows than the source tokenizer.
    """
    # Stays whole: one seeded build (config, model, copied source embeddings, projection): the order of the
    # draws under seeded_globals defines the model.
    from transformers import MarianConfig, MarianMTModel

    src_weight = None
    if cfg.copy_source_embeddings and source_model is not None:
        src_weight = source_model.get_input_embeddings().weight.detach().to("cpu", torch.float32)
        if src_weight.shape[0] < len(source_tokenizer):
            raise ValueError(
                f"iwslt-bleu: the source model has {src_weight.shape[0]} embedding rows for a tokenizer of "
                f"{len(source_tokenizer)} tokens; the context's model and tokenizer do not belong together"
            )
    arch = cfg.architecture(None if src_weight is None else int(src_weight.shape[1]))
    d_model = arch["d_model"]
    if src_weight is not None and src_weight.shape[1] != d_model and not cfg.embedding_projection:
        raise ValueError(
            f"iwslt-bleu: the source model's embeddings are {src_weight.shape[1]}-dimensional but d_model={d_model}; "
            "leave d_model unset (it then follows the source), or set embedding_projection=true to learn a projection"
        )
    src_pad = _special_id(source_tokenizer, "pad")
    tgt_pad = _special_id(target_tokenizer, "pad")
    tgt_eos = _special_id(target_tokenizer, "eos", "sep")
    tgt_start = _special_id(target_tokenizer, "bos", "cls")
    config = MarianConfig(
        vocab_size=int(src_weight.shape[0]) if src_weight is not None else len(source_tokenizer),
        decoder_vocab_size=len(target_tokenizer),
        share_encoder_decoder_embeddings=False,
        tie_word_embeddings=True,
        d_model=d_model,
        encoder_layers=arch["encoder_layers"],
        decoder_layers=arch["decoder_layers"],
        encoder_attention_heads=arch["attention_heads"],
        decoder_attention_heads=arch["attention_heads"],
        encoder_ffn_dim=arch["ffn_dim"],
        decoder_ffn_dim=arch["ffn_dim"],
        activation_function="relu",
        dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout,
        activation_dropout=cfg.activation_dropout,
        max_position_embeddings=max(cfg.max_source_length, cfg.max_target_length) + 2,
        scale_embedding=True,
        pad_token_id=tgt_pad,  # Marian uses it for shifting labels into decoder inputs
        eos_token_id=tgt_eos,
        forced_eos_token_id=tgt_eos,
        decoder_start_token_id=tgt_start,
        bos_token_id=None,
    )
    with seeded_globals(seed, "task", "iwslt", "model"):
        model = MarianMTModel(config)
        encoder = model.get_encoder()
        encoder.embed_tokens.padding_idx = src_pad  # the encoder pads with the *source* pad id
        copied = False
        if src_weight is not None:
            if src_weight.shape[1] == d_model:
                with torch.no_grad():
                    encoder.embed_tokens.weight.copy_(src_weight)
            else:
                encoder.embed_tokens = ProjectedEmbedding(src_weight, d_model, padding_idx=src_pad)
            copied = True
    info = {
        **arch,
        "parameters": sum(p.numel() for p in model.parameters()),
        "encoder_vocab": config.vocab_size,
        "decoder_vocab": config.decoder_vocab_size,
        "source_embeddings_copied": copied,
        "embedding_projection": copied and src_weight.shape[1] != d_model,
        "source_model": type(source_model).__name__ if source_model is not None else None,
    }
    return model, info


def encode_pairs(src_tok: Any, tgt_tok: Any, sources: list[str], targets: list[str], cfg: IwsltConfig) -> list[dict]:
    """Features ``{"input_ids", "attention_mask", "labels"}``; labels are target tokens + EOS."""
    enc = src_tok(sources, truncation=True, max_length=cfg.max_source_length)
    eos = _special_id(tgt_tok, "eos", "sep")
    tgt = tgt_tok(targets, add_special_tokens=False, truncation=True, max_length=cfg.max_target_length - 1)
    return [
        {"input_ids": ids, "attention_mask": mask, "labels": list(t) + [eos]}
        for ids, mask, t in zip(enc["input_ids"], enc["attention_mask"], tgt["input_ids"])
    ]


def label_smoothed_loss(epsilon: float):
    """``(batch, output) -> loss``: token-averaged cross-entropy with label smoothing ``epsilon``.

    Equal to fairseq's ``label_smoothed_cross_entropy``: ``(1 - ε) · NLL + ε · mean_v(-log p_v)``.
    """

    def loss(batch: dict, out: Any) -> torch.Tensor:
        logits = out.logits.float()
        return F.cross_entropy(
            logits.view(-1, logits.shape[-1]),
            batch["labels"].view(-1),
            ignore_index=IGNORE_INDEX,
            label_smoothing=epsilon,
        )

    return loss


def _pretokenizer(name: str, language: str) -> tuple[Any, str]:
    """``(text -> tokenized text, description)`` for :func:`tokenized_bleu`."""
    if name == "moses":
        try:
            import sacremoses
        except ImportError:
            raise ImportError(
                "iwslt-bleu.tokenized_bleu='moses' needs the sacremoses package (pip install sacremoses); "
                "or set tokenized_bleu to one of sacreBLEU's tokenizers (13a, intl, char)"
            ) from None
        moses = sacremoses.MosesTokenizer(lang=language)
        version = getattr(sacremoses, "__version__", "?")
        return (lambda text: moses.tokenize(text, return_str=True, escape=False)), f"moses-{language}+sacremoses.{version}"
    if name == "none":
        return (lambda text: text), "none"
    from sacrebleu.metrics import BLEU

    return BLEU(tokenize=name).tokenizer, f"sacrebleu-{name}"


def tokenized_bleu(hypotheses: list[str], references: list[str], pretokenizer: str, language: str = "en",
                   *, examples: bool = False) -> dict:
    """BLEU on word-tokenized text, as the XLP paper reports it (Moses tokens scored as they are).

    Args:
        hypotheses: detokenized system outputs.
        references: detokenized references.
        pretokenizer: one of :data:`TOKENIZED_BLEU`.
        language: language of the texts (Moses's per-language rules).
        examples: also return the per-segment statistics (``"examples"``,
            :func:`tasks.metrics.bleu_segment_statistics` of the tokenized texts).

    Returns:
        ``{"score", "signature"}``; the signature is sacreBLEU's (``tok:none``) prefixed with
        ``pretok:<pre-tokenizer>|``.

    Example:
        >>> r = tokenized_bleu(["the cat sat on the mat."], ["the cat sat on a mat."], "13a")
        >>> round(r["score"], 2), r["signature"].split("|")[0]
        (48.89, 'pretok:sacrebleu-13a')
    """
    tok, what = _pretokenizer(pretokenizer, language)
    hyps, refs = [tok(h) for h in hypotheses], [tok(r) for r in references]
    # force: the texts are tokenized on purpose; sacreBLEU would warn that they look tokenized (same score and signature)
    score = metrics.bleu(hyps, refs, tokenize="none", force=True)
    out = {"score": score["score"], "signature": f"pretok:{what}|{score['signature']}"}
    if examples:
        out["examples"] = metrics.bleu_segment_statistics(hyps, refs, tokenize="none", force=True)
    return out


def _nll_rows(batch: dict, out: Any) -> list[tuple[float, int]]:
    logp = torch.log_softmax(out.logits.float(), dim=-1)
    labels = batch["labels"].to(logp.device)
    mask = labels != IGNORE_INDEX
    nll = -logp.gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1) * mask
    return list(zip(nll.sum(1).tolist(), mask.sum(1).tolist()))


@register_task(
    "iwslt-bleu",
    config=IwsltConfig,
    description="X->en translation BLEU with the initialized embeddings in the encoder (XLP setup)",
)
class IwsltBleu:
    """Encoder–decoder translation into English; the initialized MLM embeddings seed the encoder."""

    model_kind = "mlm"
    metrics = ("bleu",)
    """Metrics every language of a complete record carries (resume re-runs a record lacking one)."""
    """The trial's source model is the masked LM whose transferred embeddings seed the encoder
    (a seq2seq source model is not needed: the translation model is trained from scratch)."""

    def __init__(self, config: IwsltConfig) -> None:
        self.config = config
        self._moses_language = "en"
        """Moses rules for the tokenized BLEU: the English side's code when it is a real language."""

    # -- pieces

    def target_tokenizer(self, ctx: TaskContext, targets: list[str], lang: str) -> tuple[Any, dict]:
        """The English-side tokenizer: loaded from ``target_tokenizer`` or trained on ``targets``."""
        from harness.tokenizers import load_tokenizer, tokenizer_info, train_tokenizer

        cfg = self.config
        if cfg.target_tokenizer is not None:
            tok = load_tokenizer(cfg.target_tokenizer)
            return tok, {"source": cfg.target_tokenizer, "vocab_size": len(tok)}
        if ctx.work_dir is not None:
            Path(ctx.work_dir).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="tokxfer-iwslt-", dir=ctx.work_dir) as tmp:
            corpus = Path(tmp) / f"{lang}-targets.txt"
            corpus.write_text("".join(t.replace("\n", " ").strip() + "\n" for t in targets), encoding="utf-8")
            try:
                tok = train_tokenizer([corpus], cfg.target_tokenizer_algorithm, cfg.target_vocab_size)
            except ValueError as e:
                raise ValueError(
                    f"iwslt-bleu: cannot train the English-side tokenizer on the {lang} training targets "
                    f"(set target_vocab_size or target_tokenizer): {e}"
                ) from None
        return tok, {"source": "trained on the training targets", **tokenizer_info(tok)}

    def _load(self, ctx: TaskContext, lang: str) -> tuple[dict, dict, str]:
        cfg = self.config
        data, info = load_task_splits(
            "translation", lang, splits=("train", "dev", "test"), files=cfg.files, data_root=ctx.data_root
        )
        for split in data:
            data[split] = limit(data[split], cfg.max_train_examples if split == "train" else cfg.max_eval_examples)
        target = cfg.target_language or ("en" if info["source"] == "hub" else (ctx.source_language or "src"))
        keys = set(data["train"][0]["translation"])
        missing = [k for k in (lang, target) if k not in keys]
        if missing:
            raise DataError(
                f"iwslt-bleu: translation examples for {lang!r} have keys {sorted(keys)}, missing {missing}; "
                "set target_language to the English side's key"
            )
        return data, info, target

    def _decode(
        self, model: Any, features: list[dict], collate: Any, tgt_tok: Any, device: str, show: bool, desc: str
    ) -> list[str]:
        cfg = self.config
        gen = dict(
            num_beams=cfg.num_beams,
            length_penalty=cfg.length_penalty,
            max_new_tokens=cfg.max_target_length,
            decoder_start_token_id=model.config.decoder_start_token_id,
            eos_token_id=model.config.eos_token_id,
            pad_token_id=model.config.pad_token_id,
            early_stopping=True,
        )
        keep = ("input_ids", "attention_mask", "language")  # language: mixed-language batches
        inputs = [{k: f[k] for k in keep if k in f} for f in features]
        return predict(
            model,
            inputs,
            collate,
            lambda batch, ids: [s.strip() for s in tgt_tok.batch_decode(ids, skip_special_tokens=True)],
            batch_size=cfg.train.eval_batch_size,
            device=device,
            mixed_precision=cfg.train.mixed_precision,
            show_progress=show,
            description=desc,
            # every batch key but the labels: input ids, mask and, with an encoding, the language ids
            forward_fn=lambda m, b: m.generate(**{k: v for k, v in b.items() if k != "labels"}, **gen),
        )

    def _bleu(
        self,
        model: Any,
        features: list[dict],
        refs: list[str],
        collate: Any,
        tgt_tok: Any,
        device: str,
        show: bool,
        desc: str,
        examples: bool = False,
    ) -> dict:
        hyps = self._decode(model, features, collate, tgt_tok, device, show, desc)
        score = metrics.bleu(hyps, refs, tokenize=self.config.bleu_tokenize)
        out = {"bleu": score["score"], "signature": score["signature"], "hypotheses": hyps, "examples": {}}
        if examples:
            out["examples"]["bleu"] = metrics.bleu_segment_statistics(hyps, refs, tokenize=self.config.bleu_tokenize)
        if self.config.tokenized_bleu is not None:
            tok = tokenized_bleu(hyps, refs, self.config.tokenized_bleu, self._moses_language, examples=examples)
            out.update(bleu_tokenized=tok["score"], signature_tokenized=tok["signature"])
            if examples:
                out["examples"]["bleu_tokenized"] = tok["examples"]
        return out

    def _dev_loss(self, model: Any, features: list[dict], collate: Any, device: str, show: bool, desc: str) -> dict:
        rows = predict(model, features, collate, _nll_rows, batch_size=self.config.train.eval_batch_size, device=device,
                       mixed_precision=self.config.train.mixed_precision, show_progress=show, description=desc)  # fmt: skip
        nll, count = sum(r[0] for r in rows), sum(r[1] for r in rows)
        return {"loss": nll / count, "perplexity": metrics.perplexity(nll, count)}

    # -- entry point

    def run(self, ctx: TaskContext) -> TaskResult:
        """Train and score an X→en model for every language of ``ctx.languages``, or one
        multilingual model over ``languages`` (see :class:`IwsltConfig`)."""
        cfg = self.config
        decoding = {
            "num_beams": cfg.num_beams,
            "length_penalty": cfg.length_penalty,
            "max_new_tokens": cfg.max_target_length,
        }
        out = TaskResult(
            metrics={},
            info={"data": {}, "finetune": {}, "model": {}, "target_tokenizer": {}, "decoding": decoding, "samples": {}},
        )
        if cfg.tokenized_bleu is not None:
            _pretokenizer(cfg.tokenized_bleu, "en")  # a missing sacremoses fails before any training
        if cfg.languages is None:
            for lang in ctx.languages:
                self._run_languages(ctx, [lang], out, multilingual=False)
            return out
        langs = list(cfg.languages)
        missing = [lang for lang in ctx.languages if lang not in langs]
        if missing:
            raise ValueError(
                f"iwslt-bleu.languages {langs} must include the trial's target language(s) {missing} "
                "(a record is complete when its target language has metrics)"
            )
        # languages the model's encoding lacks start from the encoding's init option
        model, added = ensure_languages(ctx.model, ctx.encoding, langs, ctx.seed)
        if added:
            ctx = dataclasses.replace(ctx, model=model)
            out.info["encoding_languages_added"] = added
        self._run_languages(ctx, langs, out, multilingual=True)
        if len(langs) > 1:
            keys = [k for k in ("bleu", "bleu_tokenized") if k in out.metrics[langs[0]]]
            out.metrics[SUMMARY] = {k: statistics.fmean(out.metrics[lang][k] for lang in langs) for k in keys}
        return out

    def _run_languages(self, ctx: TaskContext, langs: list[str], out: TaskResult, *, multilingual: bool) -> None:
        """Train one model on the pairs of ``langs`` and score it on each language's test set.

        One language (``multilingual=False``): every batch is in that language, and the record
        keys curves and facts by it. Several: features carry their language, batches mix them, and
        curves and model facts are keyed ``"+".join(langs)``.
        """
        cfg = self.config
        device = resolve_device(ctx.device)
        show = ctx.progress
        key = "+".join(langs)
        pairs, target = self._pairs(ctx, langs, out)
        self._moses_language = target if target in LANGUAGES and not LANGUAGES[target].world else "en"
        train_targets = [t for lang in langs for t in pairs[lang]["train"][1]]
        tgt_tok, tok_info = self.target_tokenizer(ctx, train_targets, key)
        model, model_info = self._model(ctx, tgt_tok, target, device)
        # the source side leaves room for an attached language token
        scfg = dataclasses.replace(cfg, max_source_length=cfg.max_source_length - added_tokens(model))
        feats = {lang: {s: encode_pairs(ctx.tokenizer, tgt_tok, *pairs[lang][s], scfg) for s in pairs[lang]}
                 for lang in langs}  # fmt: skip
        base = pad_collate(_special_id(ctx.tokenizer, "pad"))
        if multilingual:
            for lang in langs:
                for split in feats[lang].values():
                    for f in split:
                        f["language"] = lang
            collate = language_collate(base, model, None, encoding=ctx.encoding, decoder_language=target)
            if collate is base:  # a plain model: the language keys are not model inputs

                def collate(features: list[dict]) -> dict:
                    return base([{k: v for k, v in f.items() if k != "language"} for f in features])

            train = [f for lang in langs for f in feats[lang]["train"]]
            dev = [f for lang in langs for f in feats[lang]["dev"]]
            dev_refs = [r for lang in langs for r in pairs[lang]["dev"][1]]
        else:
            (lang,) = langs
            collate = language_collate(base, model, lang, encoding=ctx.encoding, decoder_language=target)
            train, dev, dev_refs = feats[lang]["train"], feats[lang]["dev"], pairs[lang]["dev"][1]

        def dev_loss(m: Any) -> dict:
            return self._dev_loss(m, dev, collate, device, show, f"iwslt dev {key}")

        def dev_bleu(m: Any) -> dict:
            return {"bleu": self._bleu(m, dev, dev_refs, collate, tgt_tok, device, show, f"iwslt dev {key}")["bleu"]}

        def test_bleu(m: Any) -> dict:
            return {
                lang: self._bleu(m, feats[lang]["test"], pairs[lang]["test"][1], collate, tgt_tok, device, show,
                                 f"iwslt test {lang}", examples=True)  # fmt: skip
                for lang in langs
            }

        dev_fn = {"loss": dev_loss, "bleu": dev_bleu, "last": None}[cfg.select_metric]
        result = finetune(
            model,
            train,
            dev_fn,
            test_bleu,
            cfg.train,
            ctx.seed,
            collate_fn=collate,
            select_metric=None if dev_fn is None else cfg.select_metric,
            greater_is_better=cfg.select_metric != "loss",
            device=device,
            show_progress=show,
            description=f"iwslt {key}",
            loss_fn=label_smoothed_loss(cfg.label_smoothing),
        )
        self._record(out, result, langs, feats, pairs)
        out.curves[f"{key}/train_loss"] = result.loss_curve
        out.info["finetune"][key] = finetune_info(result)
        out.info["model"][key] = model_info
        out.info["target_tokenizer"][key] = tok_info
        if multilingual:
            out.info["multilingual"] = {"languages": langs, "target_language": target, "train_pairs": len(train)}

    def _pairs(self, ctx: TaskContext, langs: list[str], out: TaskResult) -> tuple[dict, str]:
        """``({lang: {split: (sources, references)}}, target language)``; every language must
        translate into the same target. Records each language's data facts in ``out``."""
        pairs: dict[str, dict[str, tuple[list[str], list[str]]]] = {}
        targets = set()
        for lang in langs:
            data, data_info, target = self._load(ctx, lang)
            targets.add(target)
            pairs[lang] = {
                s: ([ex[lang] for ex in data[s]["translation"]], [ex[target] for ex in data[s]["translation"]])
                for s in data
            }
            out.info["data"][lang] = {**data_info, "target_language": target}
        if len(targets) != 1:
            raise DataError(f"iwslt-bleu: the languages {langs} translate into different targets {sorted(targets)}")
        return pairs, targets.pop()

    def _model(self, ctx: TaskContext, tgt_tok: Any, target: str, device: str) -> tuple[Any, dict]:
        """The encoder-decoder (the initialized MLM's embeddings copied into its encoder), on
        ``device``, carrying the trial's language encoding when the MLM has one."""
        encoded = ctx.model if getattr(ctx.model, "is_language_encoded", False) else None
        source = encoded.model if encoded is not None else ctx.model
        model, model_info = build_translation_model(ctx.tokenizer, tgt_tok, self.config, seed=ctx.seed,
                                                    source_model=source)  # fmt: skip
        model.to(device)
        if encoded is not None:
            model = encoded.to_seq2seq(
                model, [target], decoder_start_token_id=model.config.decoder_start_token_id,
                generator=torch_generator(ctx.seed, "task", "iwslt", "encoding"),
            )
            enc = model.encoding_info()
            model_info["encoding"] = {k: enc[k] for k in ("name", "sides", "parameters_added")}
        return model, model_info

    @staticmethod
    def _record(out: TaskResult, result: Any, langs: list[str], feats: dict, pairs: dict) -> None:
        """Per-language BLEU (and tokenized BLEU), counts, signatures and sample translations."""
        for lang in langs:
            test = result.test[lang]
            values = {"bleu": test["bleu"]}
            if "bleu_tokenized" in test:
                values["bleu_tokenized"] = test["bleu_tokenized"]
                out.info["sacrebleu_signature_tokenized"] = test["signature_tokenized"]
            out.metrics[lang] = attach(out.examples, lang, Scores(values, test["examples"]))
            out.counts[lang] = {s: len(feats[lang][s]) for s in feats[lang]}
            out.info["sacrebleu_signature"] = test["signature"]
            out.info["samples"][lang] = [
                {"source": s, "reference": r, "hypothesis": h}
                for s, r, h in list(zip(pairs[lang]["test"][0], pairs[lang]["test"][1], test["hypotheses"]))[:5]
            ]
