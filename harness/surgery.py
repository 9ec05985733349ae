"""Model surgery: turn an :class:`~harness.protocols.InitResult` into a model with the new vocabulary.

Every row is set explicitly — ``resize_token_embeddings`` is never used to create rows (its
default samples new rows from a fitted normal). The same mapping is applied to the input
embeddings, to untied output embeddings and to the MLM-head bias (METHODS.md, "Output side").

Example:
    >>> import torch, numpy as np
    >>> from harness.protocols import TokenMapping, COPIED, FALLBACK
    >>> m = TokenMapping.from_coo(2, 3, [0], [2], [1.0], provenance=[COPIED, FALLBACK])
    >>> E = torch.arange(6.).reshape(3, 2)
    >>> out = materialize(m, E, torch.Generator().manual_seed(0))
    >>> out[0].tolist()
    [4.0, 5.0]
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn

from harness.protocols import FALLBACK, InitResult, TokenMapping


class SurgeryError(ValueError):
    """The model cannot receive the new embeddings (no embeddings, missing special tokens …)."""


def materialize(mapping: TokenMapping, source: torch.Tensor, generator: torch.Generator, *, chunk: int = 65536) -> torch.Tensor:
    """Rows of the new matrix: ``W @ source`` for mapped rows, N(mean, std) per dimension for fallbacks.

    Works for matrices (``|Vs| x d``) and vectors (a bias, ``|Vs|``: fallback rows get the source
    mean). Computed in float32 in row chunks of the sparse map, returned in ``source.dtype``.
    """
    if source.shape[0] != mapping.n_source:
        raise SurgeryError(f"mapping expects {mapping.n_source} source rows, the model has {source.shape[0]}")
    vec = source.dim() == 1
    src = source.detach().to(torch.float32).cpu()
    if vec:
        src = src[:, None]
    d = src.shape[1]
    out = torch.empty(mapping.n_target, d, dtype=torch.float32)
    for a in range(0, mapping.n_target, chunk):
        b = min(a + chunk, mapping.n_target)
        out[a:b] = _rows_matmul(mapping, src, a, b)
    fb = torch.from_numpy(np.flatnonzero(mapping.provenance == FALLBACK))
    if fb.numel():
        if vec:
            out[fb] = src.mean()
        else:
            mean, std = src.mean(0), src.std(0)
            out[fb] = mean + std * torch.randn(fb.numel(), d, generator=generator, dtype=torch.float32)
    out = out.to(source.dtype)
    return out[:, 0] if vec else out


def _rows_matmul(mapping: TokenMapping, src: torch.Tensor, a: int, b: int) -> torch.Tensor:
    lo, hi = mapping.indptr[a], mapping.indptr[b]
    # TokenMapping.__post_init__ already validated the CSR invariants (indptr, index ranges)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        sub = torch.sparse_csr_tensor(
            torch.from_numpy(mapping.indptr[a : b + 1] - lo), torch.from_numpy(mapping.indices[lo:hi]),
            torch.from_numpy(mapping.weights[lo:hi]), size=(b - a, mapping.n_source), dtype=torch.float32,
            check_invariants=False,
        )
        return sub @ src


def _tied(model: nn.Module) -> bool:
    out = model.get_output_embeddings()
    inp = model.get_input_embeddings()
    return out is not None and out.weight is inp.weight


def install(model: nn.Module, result: InitResult, generator: torch.Generator, *, bias: str = "map") -> nn.Module:
    """Install ``result`` into ``model`` in place and return it.

    Sets the input embeddings, untied output embeddings (same mapping, its own random stream),
    the output bias (``bias``: map | zero | keep), ``config.vocab_size`` and the special-token ids
    of ``result.tokenizer``.

    Raises:
        SurgeryError: when the model has no input embeddings or the mapping does not fit it.
    """
    if bias not in ("map", "zero", "keep"):
        raise SurgeryError(f"bias: expected map|zero|keep, got {bias!r}")
    try:
        inp = model.get_input_embeddings()
    except (NotImplementedError, AttributeError):
        inp = None
    if inp is None or not hasattr(inp, "weight"):
        raise SurgeryError(f"{type(model).__name__} has no input embeddings to replace")
    m = result.mapping
    old_in = inp.weight.data
    if old_in.shape[0] != m.n_source:
        raise SurgeryError(
            f"mapping was built for {m.n_source} source tokens but the model's input embeddings have {old_in.shape[0]} rows"
        )
    tied = _tied(model)
    out_mod = model.get_output_embeddings()
    new_in = materialize(m, old_in, generator)
    emb = nn.Embedding(m.n_target, new_in.shape[1], padding_idx=_pad_id(result.tokenizer, m.n_target), dtype=old_in.dtype, device=old_in.device)
    emb.weight.data.copy_(new_in)
    model.set_input_embeddings(emb)

    if out_mod is not None:
        old_bias = out_mod.bias.data if getattr(out_mod, "bias", None) is not None else None
        if tied:
            out_mod.weight = emb.weight
        else:
            new_out = materialize(m, out_mod.weight.data, generator)
            out_mod.weight = nn.Parameter(new_out.to(out_mod.weight.device))
        if hasattr(out_mod, "out_features"):
            out_mod.out_features = m.n_target
        if old_bias is not None:
            if bias == "map":
                nb = materialize(m, old_bias, generator)
            elif bias == "zero":
                nb = torch.zeros(m.n_target, dtype=old_bias.dtype)
            else:
                nb = torch.zeros(m.n_target, dtype=old_bias.dtype)
                k = min(m.n_target, old_bias.shape[0])
                nb[:k] = old_bias[:k]
            new_param = nn.Parameter(nb.to(old_bias.device))
            old_param = out_mod.bias
            out_mod.bias = new_param
            # heads such as RobertaLMHead / BertLMPredictionHead keep their own ``bias`` next to the
            # decoder (the same Parameter when tied, a separate one otherwise): replace both
            for mod in model.modules():
                parent_of_out = any(c is out_mod for c in mod.children())
                for name, p in list(mod._parameters.items()):
                    if p is old_param or (parent_of_out and name == "bias" and p is not None
                                          and p.dim() == 1 and p.shape[0] == m.n_source):
                        mod._parameters[name] = new_param

    cfg = model.config
    cfg.vocab_size = m.n_target
    tok = result.tokenizer
    for attr in ("pad_token_id", "bos_token_id", "eos_token_id"):
        tid = getattr(tok, attr, None)
        if tid is not None:
            setattr(cfg, attr, tid)
    if getattr(model, "generation_config", None) is not None:
        for attr in ("pad_token_id", "bos_token_id", "eos_token_id"):
            tid = getattr(tok, attr, None)
            if tid is not None:
                setattr(model.generation_config, attr, tid)
    return model


def _pad_id(tok, n: int) -> int | None:
    pid = getattr(tok, "pad_token_id", None)
    return pid if pid is not None and 0 <= pid < n else None


def check_special_tokens(tokenizer, model_kind: str, where: str = "tokenizer") -> None:
    """Raise when the tokenizer lacks the special tokens a model kind needs.

    MLM encoders need pad and mask tokens; causal LMs need an eos token.
    """
    needed = {"mlm": ("pad_token", "mask_token"), "clm": ("eos_token",), "seq2seq": ("pad_token", "eos_token")}[model_kind]
    missing = [n for n in needed if getattr(tokenizer, n, None) is None or getattr(tokenizer, n + "_id", None) is None]
    if missing:
        raise SurgeryError(f"{where}: lacks special token(s) {', '.join(missing)} that a {model_kind} model needs")


def reinitialize_body(model: nn.Module, seed_ctx) -> None:
    """Re-initialize every parameter except the (already installed) embeddings: from-scratch.

    Uses the architecture's own ``_init_weights`` on every module under ``seed_ctx`` (a
    :func:`harness.seeding.seeded_globals` context), then restores the installed embedding rows.
    """
    emb = model.get_input_embeddings().weight.data.clone()
    with seed_ctx:
        for mod in model.modules():
            for p in mod.parameters(recurse=False):
                if hasattr(p, "_is_hf_initialized"):
                    p._is_hf_initialized = False
            model._init_weights(mod)
    model.get_input_embeddings().weight.data.copy_(emb)
