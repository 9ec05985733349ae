"""The configuration of the built-in source models (:class:`PretrainConfig`), in its own module so the
model builders (:mod:`harness.world.pretrain_model`) and the driver (:mod:`harness.world.pretrain`,
which re-exports it) both import it without importing each other.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

from harness import tokenizers as tk
from harness.registry import MAX_SEED, MAX_VOCAB_SIZE

__all__ = ["MAX_BATCH", "MAX_DEPTH", "MAX_LEN", "MAX_WIDTH", "Kind", "PretrainConfig"]

Kind = Literal["mlm", "clm"]

MAX_WIDTH = 65_536
"""Largest ``hidden_size`` / ``intermediate_size``: wider than any released transformer's layers
(the widest feed-forward layers are ~53k); a built-in world model of that width would not fit in
memory anyway, so a larger value is a typo caught at ``validate`` rather than an allocation failure."""
MAX_DEPTH = 1024
"""Largest ``num_layers`` / ``num_heads`` (the deepest released transformers have ~120 layers)."""
MAX_LEN = 1 << 20
"""Largest ``max_len``: positions are an embedding table of this many rows; the longest contexts of
released models are about 1M tokens."""
MAX_BATCH = 65_536
"""Largest ``batch_size`` / ``eval_blocks``: each is a tensor of this many blocks of ``max_len`` tokens."""


TLM_STYLES = ("packed", "xlm")
"""The TLM layouts of :attr:`PretrainConfig.tlm_style` (:mod:`harness.world.tlm`)."""


@dataclass(frozen=True)
class PretrainConfig:
    """How a built-in source model is built and pretrained. Every field is part of the cache key.

    The defaults give a ~5.1M-parameter RoBERTa (4 x 256, ~7.2k pieces on the ``small`` world)
    whose cold pretraining takes about 3.5 minutes on 2 idle CPU cores and reaches dev MLM loss
    ~5.76 (the unigram baseline is 6.20); ``pretrain_info.json`` records every run's curves.
    """

    kind: Kind = "mlm"
    """``"mlm"``: RoBERTa-like ``RobertaForMaskedLM``; ``"clm"``: GPT-2-like ``GPT2LMHeadModel``."""
    hidden_size: int = 256
    """Width of the model."""
    num_layers: int = 4
    """Transformer layers."""
    num_heads: int = 4
    """Attention heads; must divide ``hidden_size``."""
    intermediate_size: int = 1024
    """Feed-forward width."""
    max_len: int = 128
    """Tokens per training block (specials included); RoBERTa gets ``max_len + 2`` positions."""
    vocab_size: int = 6000
    """Source tokenizer size. The small world's source text supports ~7.2k Unigram pieces; 6000 leaves
    a margin so small changes to the generator do not trip the achievable-size check (specials included)."""
    tokenizer_algorithm: str = "unigram"
    """One of :data:`harness.tokenizers.ALGORITHMS`; the built-in sources are SentencePiece-Unigram."""
    steps: int = 500
    """Optimizer steps. 500 x 16 x 128 = 1M tokens (~2.4 epochs of the ``small`` world's source
    text). Measured on an idle 2-core AMD EPYC: 0.40 s per MLM step with 2 threads (0.69 s with 1),
    so ~3.5 min cold in all; a CLM step costs 0.64 s (full-vocabulary logits)."""
    batch_size: int = 16
    """Blocks of ``max_len`` tokens per step. 16 rather than 32: twice the updates for the same
    tokens and time, the usual better trade-off for a small model far from convergence."""
    lr: float = 5e-4
    """Peak learning rate (AdamW), reached after warmup, then linear decay to 0. On the ``small``
    world, 200-step runs reached dev loss 5.98 at 5e-4 against 6.13 at 1e-3 and 2e-3."""
    warmup_ratio: float = 0.06
    """Fraction of ``steps`` spent warming up linearly from 0 (RoBERTa's 6%)."""
    weight_decay: float = 0.01
    """AdamW weight decay, not applied to biases and LayerNorm weights."""
    max_grad_norm: float = 1.0
    """Gradient-norm clipping threshold."""
    mlm_probability: float = 0.15
    """Fraction of non-special tokens selected for MLM (80% ``<mask>``, 10% random, 10% unchanged)."""
    dropout: float = 0.0
    """Dropout *during pretraining*. 0 because a few-minute pretraining is far from overfitting and
    dropout only slows it down (as in short-budget BERT recipes)."""
    saved_dropout: float = 0.1
    """Dropout written into the saved model config, i.e. what fine-tuning the source will use
    (the usual RoBERTa / GPT-2 value)."""
    seed: int = 0
    """Seed of model init, data order, masking and dropout (through :mod:`harness.seeding`)."""
    extra_languages: tuple[str, ...] = ()
    """World languages whose train text is mixed into pretraining (and the tokenizer corpus)."""
    extra_fraction: float = 0.25
    """Lines taken from each extra language, as a fraction of the source language's line count
    (its first lines; the world's text is already in random order)."""
    eval_points: int = 4
    """Held-out (dev) loss is measured this many times, evenly spaced, the last at the final step."""
    eval_blocks: int = 64
    """Dev blocks of ``max_len`` tokens used for each held-out loss (fixed masks)."""
    encoding: str | None = None
    """None: plain pretraining (all text as one token stream, no language information). A registered
    language encoding (``none``, ``additive``, ``attached``, ``xlp``, ``xlp-shared``, ``langsamp``; its default config):
    language-aware pretraining, as the XLP paper pretrains XLM/XLP — every block of
    ``max_len - 1`` tokens holds one language's text (one position is left for ``attached``'s
    language token, so every encoding sees the same blocks), its language id travels with the
    batch, and the encoding's parameters train with the model (without weight decay) and are
    saved beside it (``language_encoding.json``). ``none`` is the same data without language
    information: the baseline row of the XLP tables. Part of the cache key only when set, so
    sources pretrained before this field existed keep their cache entries."""
    tlm_fraction: float = 0.0
    """Fraction of the optimizer steps spent on translation language modelling instead of MLM (XLM's
    TLM, :mod:`harness.world.tlm`; XLM alternates the two objectives): a sentence of an extra language
    and its source-language original (``World.parallel``, the same lines as that language's MLM text,
    ``extra_fraction``) in one sequence, masked on both sides, every token with its side's language.
    Evenly spaced steps; ``batch_size`` packed sequences of at most ``max_len`` positions each. Needs
    ``kind="mlm"`` and ``extra_languages``; without ``encoding`` the tokens carry no language. 0: MLM
    only. Part of the cache key only when above 0."""

    tlm_style: str = "packed"
    """How TLM lays out its pairs (:mod:`harness.world.tlm`): ``packed`` (pairs packed into ``max_len``
    sequences, positions running on) or ``xlm`` (XLM's: one pair per sequence, positions restarting at
    the second side, a batch of as many pairs as fill ``batch_size x max_len`` positions). Part of the
    cache key only when not ``packed``."""

    codeswitch: float = 0.0
    """Dictionary code-switching (:mod:`harness.world.codeswitch`): each extra language's line is followed
    in its MLM text by a copy in which each word is replaced by its source-language form (the world's
    word map) with this probability; the copy is of the line's language. Anchors for languages that share
    no words with the source. Needs ``extra_languages``; 0: off. Part of the cache key only when above 0."""
    bf16: bool = False
    """bf16 autocast of the training forward passes on CPU (weights, gradients and AdamW state stay
    float32; the dev loss is always measured in float32, so runs of either precision compare). Faster
    on CPUs with AMX or AVX512-BF16; another source (a different cache key), not a faster copy of the
    float32 one. Part of the cache key only when set."""

    def __post_init__(self) -> None:
        # Canonical values, so equal configs hash equally: lists -> tuples, ints in float fields -> floats.
        if isinstance(self.extra_languages, list):
            object.__setattr__(self, "extra_languages", tuple(self.extra_languages))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type in ("float", float) and isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, f.name, float(value))

        def positive(name: str) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"PretrainConfig.{name} must be a positive int, got {value!r}")

        if self.kind not in ("mlm", "clm"):
            raise ValueError(f"PretrainConfig.kind must be 'mlm' or 'clm', got {self.kind!r}")
        for name in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "steps", "batch_size",
                     "eval_points", "eval_blocks"):  # fmt: skip
            positive(name)
        for name, most in (("hidden_size", MAX_WIDTH), ("intermediate_size", MAX_WIDTH), ("num_layers", MAX_DEPTH),
                           ("num_heads", MAX_DEPTH), ("max_len", MAX_LEN), ("batch_size", MAX_BATCH),
                           ("eval_blocks", MAX_BATCH), ("vocab_size", MAX_VOCAB_SIZE)):  # fmt: skip
            if isinstance(getattr(self, name), int) and getattr(self, name) > most:
                raise ValueError(f"PretrainConfig.{name} must be at most {most}, got {getattr(self, name)!r}")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"PretrainConfig.num_heads={self.num_heads} must divide hidden_size={self.hidden_size}")
        if not isinstance(self.max_len, int) or self.max_len < 8:
            raise ValueError(f"PretrainConfig.max_len must be an int >= 8, got {self.max_len!r}")
        if not isinstance(self.vocab_size, int) or self.vocab_size < 16:
            raise ValueError(f"PretrainConfig.vocab_size must be an int >= 16, got {self.vocab_size!r}")
        if self.tokenizer_algorithm not in tk.ALGORITHMS:
            raise ValueError(
                f"PretrainConfig.tokenizer_algorithm must be one of {', '.join(tk.ALGORITHMS)}, "
                f"got {self.tokenizer_algorithm!r}"
            )
        if not self.lr > 0:
            raise ValueError(f"PretrainConfig.lr must be > 0, got {self.lr!r}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"PretrainConfig.warmup_ratio must be in [0, 1), got {self.warmup_ratio!r}")
        if not self.weight_decay >= 0:
            raise ValueError(f"PretrainConfig.weight_decay must be >= 0, got {self.weight_decay!r}")
        if not self.max_grad_norm > 0:
            raise ValueError(f"PretrainConfig.max_grad_norm must be > 0, got {self.max_grad_norm!r}")
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"PretrainConfig.mlm_probability must be in (0, 1), got {self.mlm_probability!r}")
        for name in ("dropout", "saved_dropout"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"PretrainConfig.{name} must be in [0, 1), got {getattr(self, name)!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed <= MAX_SEED:
            raise ValueError(f"PretrainConfig.seed must be an int in [0, {MAX_SEED}], got {self.seed!r}")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"PretrainConfig.{f.name} must be a finite number, got {value!r}")
        self._validate_multilingual()
        if not isinstance(self.bf16, bool):
            raise ValueError(f"PretrainConfig.bf16 must be true or false, got {self.bf16!r}")
        if not 0 <= self.tlm_fraction < 1:
            raise ValueError(f"PretrainConfig.tlm_fraction must be in [0, 1), got {self.tlm_fraction!r}")
        if self.tlm_style not in TLM_STYLES:
            raise ValueError(f"PretrainConfig.tlm_style must be one of {TLM_STYLES}, got {self.tlm_style!r}")
        if self.tlm_fraction > 0:
            missing = [name for name, ok in (("kind='mlm'", self.kind == "mlm"), ("extra_languages", bool(self.extra_languages)))
                       if not ok]  # fmt: skip
            if missing:
                raise ValueError(f"PretrainConfig.tlm_fraction={self.tlm_fraction} (translation language modelling) "
                                 f"needs {', '.join(missing)}: a masked LM and parallel text of the source and its "
                                 "extra languages")  # fmt: skip
        if self.encoding is not None:
            from harness import registry  # the encodings register themselves on first lookup

            known = registry.names("encoding")
            if self.encoding not in known:
                raise ValueError(
                    f"PretrainConfig.encoding must be None or a registered encoding ({', '.join(known)}), "
                    f"got {self.encoding!r}"
                )

    def _validate_multilingual(self) -> None:
        """The checks of the extra languages and of code-switching (TLM's are in ``__post_init__``)."""
        if not all(isinstance(x, str) and x for x in self.extra_languages):
            raise ValueError(f"PretrainConfig.extra_languages must be language names, got {self.extra_languages!r}")
        if len(set(self.extra_languages)) != len(self.extra_languages):
            raise ValueError(f"PretrainConfig.extra_languages has duplicates: {self.extra_languages!r}")
        if not 0 < self.extra_fraction <= 1:
            raise ValueError(f"PretrainConfig.extra_fraction must be in (0, 1], got {self.extra_fraction!r}")
        if not 0 <= self.codeswitch <= 1:
            raise ValueError(f"PretrainConfig.codeswitch must be in [0, 1], got {self.codeswitch!r}")
        if self.codeswitch > 0 and not self.extra_languages:
            raise ValueError(f"PretrainConfig.codeswitch={self.codeswitch} needs extra_languages: the languages "
                             "whose text is code-switched with the source language's words")  # fmt: skip

    @classmethod
    def tiny(cls, **overrides: Any) -> PretrainConfig:
        """A seconds-long preset for tests: hidden 16, 2 layers, 200-token vocabulary, 30 steps.

        ``max_len`` stays 128, like the default, so the tiny model accepts the 128-token inputs the
        tasks feed by default.

        Example:
            >>> PretrainConfig.tiny(kind="clm").hidden_size
            16
        """
        values: dict[str, Any] = dict(
            hidden_size=16, num_layers=2, num_heads=2, intermediate_size=64, max_len=128, vocab_size=200,
            steps=30, batch_size=8, lr=3e-3, warmup_ratio=0.1, eval_points=2, eval_blocks=8,
        )  # fmt: skip
        values.update(overrides)
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict of the fields (tuples as lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}
