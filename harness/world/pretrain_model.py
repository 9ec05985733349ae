"""The built-in source models: construction, losses, language-encoding wrappers and the progress bar.

Split out of :mod:`harness.world.pretrain`, which drives them; their configuration is
:mod:`harness.world.pretrain_config` (imported only for type checking).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    RobertaConfig,
    RobertaForMaskedLM,
)

if TYPE_CHECKING:
    from harness.world.pretrain_config import PretrainConfig


def special_id(tok: PreTrainedTokenizerBase, primary: str, fallback: str) -> int:
    value = getattr(tok, f"{primary}_token_id")
    if value is None:
        value = getattr(tok, f"{fallback}_token_id")
    if value is None:
        raise ValueError(f"tokenizer has neither a {primary} nor a {fallback} token")
    return int(value)


def build_model(config: PretrainConfig, tok: PreTrainedTokenizerBase, dropout: float) -> PreTrainedModel:
    """A freshly initialized model (call under ``seeded_globals``); embeddings tied to the LM head."""
    pad, bos, eos = int(tok.pad_token_id), special_id(tok, "bos", "cls"), special_id(tok, "eos", "sep")
    if config.kind == "mlm":
        mcfg = RobertaConfig(
            vocab_size=len(tok),
            hidden_size=config.hidden_size,
            num_hidden_layers=config.num_layers,
            num_attention_heads=config.num_heads,
            intermediate_size=config.intermediate_size,
            # RoBERTa numbers positions from pad_token_id + 1: max_len tokens need max_len + 2 rows.
            max_position_embeddings=config.max_len + 2,
            type_vocab_size=1,
            hidden_dropout_prob=dropout,
            attention_probs_dropout_prob=dropout,
            layer_norm_eps=1e-5,
            pad_token_id=pad,
            bos_token_id=bos,
            eos_token_id=eos,
            tie_word_embeddings=True,
        )
        return RobertaForMaskedLM(mcfg)
    mcfg = GPT2Config(
        vocab_size=len(tok),
        n_positions=config.max_len,
        n_embd=config.hidden_size,
        n_layer=config.num_layers,
        n_head=config.num_heads,
        n_inner=config.intermediate_size,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
        pad_token_id=pad,
        bos_token_id=bos,
        eos_token_id=eos,
        tie_word_embeddings=True,
    )
    return GPT2LMHeadModel(mcfg)


def set_dropout(model: PreTrainedModel, p: float) -> None:
    """Set every dropout probability, in modules and in the config that will be saved."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = p
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop", "embd_pdrop", "attn_pdrop"):
        if hasattr(model.config, name):
            setattr(model.config, name, p)


def token_loss(model: PreTrainedModel, kind: str, inputs: torch.Tensor, labels: torch.Tensor,
               attention_mask: torch.Tensor | None = None, *, position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Mean token loss. For MLM only the selected positions go through the LM head (~7x cheaper).

    ``attention_mask``: padded MLM batches (TLM); None for the full blocks of MLM pretraining.
    ``position_ids``: explicit positions (XLM-style TLM restarts them at each side); None: the model's
    own numbering. The tensors are moved to the model's device (a no-op on the CPU).
    """
    device = model.device
    inputs, labels = inputs.to(device), labels.to(device)
    attention_mask = attention_mask.to(device) if attention_mask is not None else None
    if kind == "mlm":
        assert isinstance(model, RobertaForMaskedLM)
        position_ids = position_ids.to(device) if position_ids is not None else None
        hidden = model.roberta(input_ids=inputs, attention_mask=attention_mask, position_ids=position_ids).last_hidden_state
        selected = labels != -100
        logits = model.lm_head(hidden[selected])
        return F.cross_entropy(logits, labels[selected])
    logits = model(input_ids=inputs).logits[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: no decay for biases, norms and a language encoding's tables (``tables.*``:
    decay would pull XLP's identity start towards zero)."""
    decay, no_decay = [], []
    seen: set[int] = set()
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        plain = p.ndim < 2 or "norm" in name.lower() or name.endswith(".bias") or name.startswith("tables.")
        (no_decay if plain else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class MaskedLMLoss(torch.nn.Module):
    """A masked LM whose forward returns :func:`token_loss` (LM head on the selected positions only).

    Language encodings wrap this module during pretraining: their hook sits on the word-embedding
    module it shares with the masked LM, so the trained tables are then moved onto the masked LM
    itself (``EncodedModel.rewrap``) for saving.
    """

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.model = model

    @property
    def config(self) -> Any:
        return self.model.config

    @property
    def device(self) -> torch.device:
        return self.model.device

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.model.get_input_embeddings()

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        return token_loss(self.model, "mlm", input_ids, labels, attention_mask, position_ids=position_ids)


def encode_model(model: PreTrainedModel, config: PretrainConfig, languages: Sequence[str]) -> Any:
    """``model`` wrapped with ``config.encoding`` (default config) for ``languages``; None for ``none``.

    Masked LMs are wrapped through :class:`MaskedLMLoss` (cheap loss); causal LMs directly.
    """
    from harness import registry

    encoding = registry.get("encoding", str(config.encoding)).make(None)
    if config.encoding == "none":
        return None
    target = MaskedLMLoss(model) if config.kind == "mlm" else model
    return encoding.wrap(target, list(languages), seed=config.seed)


def encoded_loss(wrapped: Any, kind: str, inputs: torch.Tensor, labels: torch.Tensor, languages: list[str]) -> torch.Tensor:
    """Mean token loss of a language-encoded model on blocks in ``languages`` (one per row).

    The wrapper prepares the batch (language ids; ``attached`` inserts its token, labelled -100).
    """
    batch = wrapped.prepare_batch({"input_ids": inputs, "labels": labels}, languages)
    device = wrapped.model.device
    batch = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
    if kind == "mlm":
        return wrapped(**batch)
    labels = batch.pop("labels")
    logits = wrapped(**batch).logits[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
