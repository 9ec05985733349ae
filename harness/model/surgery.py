"""Model surgery: turn an :class:`~harness.protocols.InitResult` into a model with the new vocabulary.

Every row is set explicitly — ``resize_token_embeddings`` is never used to create rows (its
default samples new rows from a fitted normal). The same mapping is applied to the input
embeddings, to untied output embeddings, to the MLM-head bias and to BART-family
``final_logits_bias`` (METHODS.md, "Output side"). New rows go into the model's existing modules
(only their weight tensors change), so an embedding module that scales its output
(``*ScaledWordEmbedding``: Gemma, XGLM, BART/mBART/M2M100, BioGPT) keeps doing so and an identity
mapping leaves every logit bit-identical.

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

from harness.cache import ProcessMemo
from harness.errors import TokxferError
from harness.protocols import FALLBACK, SPECIAL, InitResult, LowRank, RandomRows, TokenMapping
from harness.random_rows import CHUNK_ELEMENTS, content_key, draw


class SurgeryError(TokxferError, ValueError):
    """The model cannot receive the new embeddings (no embeddings, missing special tokens …)."""


def materialize(mapping: TokenMapping, source: torch.Tensor, generator: torch.Generator, *, chunk: int = 65536,
                random_rows: RandomRows | None = None, low_rank: LowRank | None = None) -> torch.Tensor:
    """Rows of the new matrix: ``W @ source`` for mapped rows, random rows for fallbacks.

    Works for matrices (``|Vs| x d``) and vectors (a bias, ``|Vs|``: fallback rows get the source
    mean). Fallback rows of a matrix are drawn from ``random_rows`` (default N(mean, std) per
    dimension; :func:`harness.random_rows.draw`) with the statistics of ``source``. With
    ``low_rank`` (a matrix of width above its rank), rows from ``low_rank.first_row`` on pass through
    the rank-``r`` factorization of ``source`` (:class:`~harness.protocols.LowRank`). Computed in
    float32 in row chunks of the sparse map (the projection in float64), returned in ``source.dtype``.
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
    lr = low_rank if low_rank is not None and not vec and low_rank.rank < d else None
    first = lr.first_row if lr is not None else mapping.n_target
    fb_all = np.flatnonzero(mapping.provenance == FALLBACK)
    fb = torch.from_numpy(fb_all[fb_all < first])
    if fb.numel():
        if vec:
            out[fb] = src.mean()
        else:
            out[fb] = _diagonal_rows(src, fb.numel(), generator, random_rows)
    if lr is not None:
        v = principal_directions(src, lr.rank)
        rows = np.arange(first, mapping.n_target)
        mapped = torch.from_numpy(rows[mapping.provenance[first:] != FALLBACK])
        for a in range(0, mapped.numel(), chunk):
            ids = mapped[a : a + chunk]
            out[ids] = ((out[ids].to(torch.float64) @ v) @ v.T).to(torch.float32)
        fb_low = torch.from_numpy(fb_all[fb_all >= first])
        if fb_low.numel():
            coords = torch.cat([(src[a : a + chunk].to(torch.float64) @ v) for a in range(0, src.shape[0], chunk)])
            drawn = draw(coords.to(torch.float32), fb_low.numel(), generator, random_rows)
            out[fb_low] = (drawn.to(torch.float64) @ v.T).to(torch.float32)
    out = out.to(source.dtype)
    return out[:, 0] if vec else out


def principal_directions(matrix: torch.Tensor, rank: int, *, chunk_elements: int = CHUNK_ELEMENTS) -> torch.Tensor:
    """The top ``rank`` right singular vectors of ``matrix`` (``n x d``, uncentered), float64 ``d x rank``.

    From the eigenvectors of the ``d x d`` Gram matrix ``matrixᵀ · matrix``, accumulated in row chunks
    (a 250k x 768 matrix is never copied whole), largest eigenvalue first; signs are whatever ``eigh``
    gives (only the projection ``V · Vᵀ`` is used).

    Example:
        >>> v = principal_directions(torch.tensor([[3.0, 0.0], [0.0, 1.0]]), 1)
        >>> v.abs().tolist()
        [[1.0], [0.0]]
    """
    n, d = matrix.shape
    step = max(1, chunk_elements // max(d, 1))
    gram = torch.zeros(d, d, dtype=torch.float64)
    for a in range(0, n, step):
        c = matrix[a : a + step].detach().to("cpu", torch.float64)
        gram += c.T @ c
    _, vecs = torch.linalg.eigh((gram + gram.T) / 2)
    return vecs[:, -int(rank):].flip(1).contiguous()


_STATS_MEMO = ProcessMemo(2)


def _column_stats(src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(src.mean(0), src.std(0))`` of a float32 CPU matrix, kept per process by its content: every
    trial of a grid draws fallback rows from the same source rows, and ``std`` over XLM-R's 250k rows
    costs ~2 s of CPU where hashing them costs ~0.3 s."""
    mean, std = _STATS_MEMO.get(content_key(src), lambda: (src.mean(0), src.std(0)))
    return mean.clone(), std.clone()


def _diagonal_rows(src: torch.Tensor, n: int, generator: torch.Generator, random_rows: RandomRows | None) -> torch.Tensor:
    """``n`` random rows of ``random_rows`` for ``src``: the default N(mean, std) from the memoized column
    statistics (the same stream as :func:`harness.random_rows.draw`'s ``diagonal``), any other through ``draw``."""
    if random_rows is not None and random_rows.distribution != "diagonal":
        return draw(src, n, generator, random_rows)
    mean, std = _column_stats(src)
    # in place: the same numbers as ``mean + std * z`` without two more n x d temporaries (1 GB each at 128k x 2048)
    return torch.randn(n, src.shape[1], generator=generator, dtype=torch.float32).mul_(std).add_(mean)


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


def _swap_tensor(model: nn.Module, old: torch.Tensor, new: torch.Tensor, n_target: int, pad: int | None) -> list[str]:
    """Put ``new`` wherever ``old`` is held (parameter or buffer) and fix the size attributes there.

    Modules keep their type — a ``*ScaledWordEmbedding`` keeps its ``embed_scale``, a head keeps
    being the Linear it was — and tensors shared between modules (tied embeddings; BART's
    ``shared`` / ``encoder.embed_tokens`` / ``decoder.embed_tokens``) stay shared. Embeddings get
    ``num_embeddings = n_target`` and, where they had a padding index, the new tokenizer's pad id;
    linear heads get ``out_features = n_target``. Returns the qualified names replaced.
    """
    names = []
    for mod_name, mod in model.named_modules(remove_duplicate=False):
        for store in (mod._parameters, mod._buffers):
            for name, t in list(store.items()):
                if t is old:
                    store[name] = new
                    names.append(f"{mod_name}.{name}" if mod_name else name)
                    if name == "weight" and isinstance(mod, nn.Embedding):
                        mod.num_embeddings = n_target
                        if mod.padding_idx is not None:
                            mod.padding_idx = pad
                    elif name == "weight" and isinstance(mod, nn.Linear):
                        mod.out_features = n_target
    return names


def _other_input_embeddings(model: nn.Module) -> list[torch.Tensor]:
    """Token-embedding tensors of the encoder and decoder (seq2seq), which may differ from the model's."""
    out = []
    for getter in ("get_encoder", "get_decoder"):
        try:
            sub = getattr(model, getter)()
            emb = sub.get_input_embeddings() if sub is not None and sub is not model else None
        except (AttributeError, NotImplementedError, TypeError):
            continue
        w = getattr(emb, "weight", None)
        if isinstance(w, torch.Tensor) and not any(w is o for o in out):
            out.append(w)
    return out


def _vocab_biases(model: nn.Module, out_mod: nn.Module | None, n_source: int) -> list[torch.Tensor]:
    """The distinct tensors that hold one output bias value per token.

    The output layer's own ``bias``; a 1-d ``bias`` of size ``|Vs|`` kept by the module holding
    the output layer (RobertaLMHead / BertLMPredictionHead: the same Parameter when tied, a separate
    one otherwise); BART-family ``final_logits_bias`` buffers (``1 x |Vs|``).
    """
    found: list[torch.Tensor] = []

    def add(t):
        if t is not None and not any(t is f for f in found):
            found.append(t)

    if out_mod is not None:
        add(getattr(out_mod, "bias", None))
    for mod in model.modules():
        if out_mod is not None and any(c is out_mod for c in mod.children()):
            p = mod._parameters.get("bias")
            if p is not None and p.dim() == 1 and p.shape[0] == n_source:
                add(p)
        b = mod._buffers.get("final_logits_bias")
        if b is not None and b.shape[-1] == n_source:
            add(b)
    return found


def _new_bias(mapping: TokenMapping, old: torch.Tensor, how: str, generator: torch.Generator) -> torch.Tensor:
    flat = old.detach().reshape(-1)
    if how == "map":
        nb = materialize(mapping, flat, generator)
    else:
        nb = torch.zeros(mapping.n_target, dtype=old.dtype)
        if how == "keep":
            k = min(mapping.n_target, flat.shape[0])
            nb[:k] = flat[:k].cpu()
    return nb.reshape(*old.shape[:-1], mapping.n_target).to(old.device)


def _translate_id(old_id, old_roles: dict[str, int | None], new_roles: dict[str, int | None], mapping: TokenMapping,
                  attr: str):
    """The new id of a token a config names by id (``decoder_start_token_id`` …).

    By role first (the old id was the old pad/eos/bos id → the new tokenizer's), else the target
    token whose SPECIAL row copies that source id.
    """
    if old_id is None:
        return None
    if isinstance(old_id, (list, tuple)):
        return type(old_id)(_translate_id(i, old_roles, new_roles, mapping, attr) for i in old_id)
    for role, oid in old_roles.items():
        if oid is not None and oid == old_id and new_roles.get(role) is not None:
            return new_roles[role]
    rows = np.flatnonzero(mapping.provenance == SPECIAL)
    for t in rows:
        ids, _ = mapping.row(int(t))
        if len(ids) == 1 and int(ids[0]) == int(old_id):
            return int(t)
    raise SurgeryError(
        f"config.{attr}={old_id} names a source token that neither is the pad/bos/eos token nor is mapped to a "
        "special token of the new tokenizer; set it explicitly for the new vocabulary"
    )


_ID_ATTRS = ("decoder_start_token_id", "forced_bos_token_id", "forced_eos_token_id")


def install(model: nn.Module, result: InitResult, generator: torch.Generator, *, bias: str = "map") -> nn.Module:
    """Install ``result`` into ``model`` in place and return it.

    Sets the input embeddings, untied output embeddings (same mapping, its own random stream),
    the output bias (``bias``: map | zero | keep; BART-family ``final_logits_bias`` too),
    ``config.vocab_size`` and the special-token ids of ``result.tokenizer`` (pad/bos/eos, and
    ``decoder_start_token_id`` / ``forced_*_token_id`` translated to the new vocabulary).

    The new rows go into the model's *existing* modules — only their weight tensors are
    replaced — so architectures whose embedding module does more than a lookup keep doing it:
    Gemma, XGLM, BART/mBART/M2M100 and BioGPT multiply by ``embed_scale`` inside a
    ``*ScaledWordEmbedding`` (an ``nn.Embedding`` in its place would change every logit). Tied
    input/output embeddings stay one tensor; embeddings shared by encoder and decoder stay shared.
    With an identity mapping the model computes bit-identical logits.

    Raises:
        SurgeryError: when the model has no input embeddings or the mapping does not fit it.
    """
    # Stays whole: the order of the steps (input rows, tied/untied output rows, biases, config ids) is the surgery;
    # each is a few lines, and all share the mapping and the generator.
    if bias not in ("map", "zero", "keep"):
        raise SurgeryError(f"bias: expected map|zero|keep, got {bias!r}")
    try:
        inp = model.get_input_embeddings()
    except (NotImplementedError, AttributeError):
        inp = None
    if inp is None or not isinstance(getattr(inp, "weight", None), torch.Tensor) or inp.weight.dim() != 2:
        raise SurgeryError(f"{type(model).__name__} has no input embeddings to replace")
    m = result.mapping
    old_in = inp.weight
    if old_in.shape[0] != m.n_source:
        raise SurgeryError(
            f"mapping was built for {m.n_source} source tokens but the model's input embeddings have {old_in.shape[0]} rows"
        )
    tied = _tied(model)
    out_mod = model.get_output_embeddings()
    biases = _vocab_biases(model, out_mod, m.n_source)
    pad = _pad_id(result.tokenizer, m.n_target)

    others = [w for w in _other_input_embeddings(model) if w is not old_in]
    rr, lr = result.random_rows, result.low_rank
    new_in = nn.Parameter(materialize(m, old_in.data, generator, random_rows=rr, low_rank=lr).to(old_in.device),
                          requires_grad=old_in.requires_grad)
    for w in others:  # encoder/decoder token embeddings held apart from ``shared`` (T5 untied in transformers 5)
        if w.shape != old_in.shape:
            raise SurgeryError(f"{type(model).__name__}: an encoder/decoder token embedding has shape "
                               f"{tuple(w.shape)}, the input embeddings {tuple(old_in.shape)}")
        same = torch.equal(w.data, old_in.data)
        nw = new_in.data.clone() if same else materialize(m, w.data, generator, random_rows=rr, low_rank=lr).to(w.device)
        _swap_tensor(model, w, nn.Parameter(nw, requires_grad=w.requires_grad), m.n_target, pad)
    _swap_tensor(model, old_in, new_in, m.n_target, pad)
    if out_mod is not None and not tied:
        old_out = out_mod.weight
        if old_out.shape[0] != m.n_source:
            raise SurgeryError(
                f"mapping was built for {m.n_source} source tokens but the output embeddings have {old_out.shape[0]} rows"
            )
        new_out = nn.Parameter(materialize(m, old_out.data, generator, random_rows=rr, low_rank=lr).to(old_out.device),
                               requires_grad=old_out.requires_grad)
        _swap_tensor(model, old_out, new_out, m.n_target, pad)
    for old_b in biases:
        nb = _new_bias(m, old_b, bias, generator)
        new_b = nn.Parameter(nb, requires_grad=old_b.requires_grad) if isinstance(old_b, nn.Parameter) else nb
        _swap_tensor(model, old_b, new_b, m.n_target, pad)

    tok = result.tokenizer
    cfg = model.config
    roles = ("pad_token_id", "bos_token_id", "eos_token_id")
    targets = [cfg]
    text_cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    if text_cfg is not cfg:
        targets.append(text_cfg)
    gen_cfg = getattr(model, "generation_config", None)
    if gen_cfg is not None:
        targets.append(gen_cfg)
    new_roles = {r: getattr(tok, r, None) for r in roles}
    for c in targets:
        old_roles = {r: getattr(c, r, None) for r in roles}
        translated = {a: _translate_id(getattr(c, a, None), old_roles, new_roles, m, a) for a in _ID_ATTRS
                      if getattr(c, a, None) is not None}
        for r, tid in new_roles.items():
            if tid is not None:
                setattr(c, r, tid)
        for a, v in translated.items():
            setattr(c, a, v)
        if c is not gen_cfg and hasattr(c, "vocab_size"):
            c.vocab_size = m.n_target
    return model


def _pad_id(tok, n: int) -> int | None:
    pid = getattr(tok, "pad_token_id", None)
    return pid if pid is not None and 0 <= pid < n else None


def check_special_tokens(tokenizer, model_kind: str, where: str = "tokenizer") -> None:
    """Raise when the tokenizer lacks the special tokens a model kind needs.

    MLM encoders need pad and mask tokens; causal LMs need an eos token; a bare encoder (sentence
    embeddings) needs a pad token.
    """
    needed = {"mlm": ("pad_token", "mask_token"), "clm": ("eos_token",), "seq2seq": ("pad_token", "eos_token"),
              "encoder": ("pad_token",)}[model_kind]
    missing = [n for n in needed if getattr(tokenizer, n, None) is None or getattr(tokenizer, n + "_id", None) is None]
    if missing:
        raise SurgeryError(f"{where}: lacks special token(s) {', '.join(missing)} that a {model_kind} model needs")


def reinitialize_all(model: nn.Module, seed_ctx) -> None:
    """Re-initialize every parameter — embeddings and heads included — as a fresh model would be: from-scratch.

    Runs the architecture's own ``initialize_weights`` (its ``_init_weights`` on every module,
    dispatched per sub-model) under ``seed_ctx`` (a :func:`harness.seeding.seeded_globals`
    context: HF init functions draw from torch's global generator), after clearing the
    "already initialized" marks that loading left on modules and tensors. Buffers that the
    architecture initializes (embedding scales, rotary frequencies, ``final_logits_bias``) are
    recomputed from the config, so no value of the loaded weights survives: the result depends only
    on the config, the vocabulary size and the seed.
    """
    for mod in model.modules():
        if getattr(mod, "_is_hf_initialized", False):
            mod._is_hf_initialized = False
        for t in (*mod._parameters.values(), *mod._buffers.values()):
            if t is not None and getattr(t, "_is_hf_initialized", False):
                t._is_hf_initialized = False
    with seed_ctx, torch.no_grad():
        model.initialize_weights()
    # no ``tie_weights()``: tensors shared before stay shared, and re-tying from the config would tie
    # heads the checkpoint keeps apart (T5 v1.1 loads untied although transformers 5 forces its
    # config's ``tie_word_embeddings`` to True)
