"""Shared machinery of the language encodings ``additive``, ``attached``, ``xlp`` and ``langsamp``.

No model code is forked. :class:`EncodedModel` holds a transformers model and, per *side* of
it (``input`` for encoders and causal LMs; ``encoder`` and ``decoder`` for encoder–decoders),
a :class:`LanguageTable` of per-language parameters. The table is registered as a forward hook
on that side's **word-embedding module** (``get_input_embeddings()``, the encoder's and the
decoder's ``embed_tokens``), so it transforms the word embeddings *before* the model adds
positional and token-type embeddings (RoBERTa/BERT add them inside their embeddings module after
the word-embedding lookup; GPT-2 adds ``wpe`` after ``wte``; Llama has rotary positions). Where a
family multiplies by ``sqrt(d)`` *inside* the word-embedding module (Gemma, BART's
``*ScaledWordEmbedding``), the hook sees the scaled output; where the scale is applied outside
(Marian, used by ``iwslt-bleu``), the hook sees the unscaled lookup. XLP is linear, so both give
``W_l`` applied to the scaled embedding; an additive vector is then added before or after the scale.

The language of each sequence travels with the batch: ``language_ids`` (and, for
encoder–decoders, ``decoder_language_ids``) are popped by :meth:`EncodedModel.forward` /
:meth:`EncodedModel.generate`, held by the tables for the duration of the call, and read by the
hooks. Beam search repeats every sequence ``k`` times (``repeat_interleave``); the hooks expand
the ids the same way. ``language_ids`` of shape ``[batch, length]`` give every token its own
language (a sentence and its translation in one sequence: TLM pretraining, :mod:`harness.world.tlm`).

The transforms (``x`` a word embedding of a sequence in language ``l``):

- ``additive``: ``x + v_l`` at every position (XLM);
- ``xlp``: ``W_l x`` (XLP; ``W_l`` a ``d x d`` matrix);
- ``langsamp``: not on the word embeddings: a hook on the LM body (``base_model``) adds ``L[l] + S[s]``
  (``s`` the script of ``l``, one row per script) to its last hidden state, the LM head's input; a
  task model (no LM head) is wrapped without it (:func:`lm_body`);
- ``attached``: the embedding at the inserted language-token position is replaced by ``v_l``.
  :meth:`EncodedModel.prepare_batch` inserts that position (column ``insert_at``) and records it in
  ``added_positions``; on the decoder side of an encoder–decoder the decoder-start token's
  embedding is replaced by the target language's vector instead (fairseq's ``--decoder-langtok``),
  which keeps generation unchanged.

Saving: :meth:`EncodedModel.save_pretrained` writes the HF model plus ``language_encoding.json``
and ``language_encoding.safetensors``; :func:`load_encoded` reads them back.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.errors import TokxferError
from harness.protocols import ADDED_POSITIONS_KEY, DECODER_LANGUAGE_IDS_KEY, LANGUAGE_IDS_KEY

KINDS = ("additive", "attached", "xlp", "langsamp")
ENCODING_FILE = "language_encoding.json"
WEIGHTS_FILE = "language_encoding.safetensors"
FORMAT_VERSION = 1
NEUTRAL_INITS = ("identity", "zero")
ENCODER_KEYS = ("input_ids", "attention_mask", "token_type_ids")
"""Per-token keys of an encoder–decoder batch that belong to the encoder input (``attached`` inserts into these only)."""
POSITION_KEYS = ("start_positions", "end_positions")
"""1-D batch keys holding token indices (extractive QA); ``attached`` shifts them past the inserted token."""


class EncodingError(TokxferError, ValueError):
    """A language-encoding misuse: unknown language, missing ids, unsupported model layout."""


def parse_init(value: str, *, where: str) -> tuple[str, str | None]:
    """Validate an ``init`` option: ``identity``/``zero``, ``random``, ``mean`` or ``copy:<lang>``.

    Example:
        >>> parse_init("copy:src", where="x"), parse_init("zero", where="x")
        (('copy', 'src'), ('zero', None))
    """
    if value in (*NEUTRAL_INITS, "random", "mean"):
        return value, None
    if isinstance(value, str) and value.startswith("copy:") and len(value) > len("copy:"):
        return "copy", value[len("copy:"):]
    raise ValueError(f"{where}: init must be 'identity', 'zero', 'random', 'mean' or 'copy:<language>', got {value!r}")


def check_init_options(name: str, init: str, random_std: float | None) -> None:
    """Validate the ``init``/``random_std`` fields every encoding config has (errors name ``<name>.<field>``).

    Example:
        >>> check_init_options("xlp", "identity", None)
    """
    parse_init(init, where=f"{name}.init")
    if random_std is not None and not random_std > 0:
        raise ValueError(f"{name}.random_std must be > 0 or None, got {random_std}")


# ------------------------------------------------------------------------------------ tables


def _neutral(kind: str, n: int, dim: int) -> torch.Tensor:
    if kind == "xlp":
        return torch.eye(dim).expand(n, dim, dim).clone()
    return torch.zeros(n, dim)


class LanguageTable(nn.Module):
    """Per-language parameters of one side of a model and the hook that applies them.

    Attributes:
        kind: ``additive``, ``attached`` or ``xlp``.
        languages: language codes; row ``i`` of ``weight`` belongs to ``languages[i]``.
        weight: ``[n_languages, d]`` (additive, attached) or ``[n_languages, d, d]`` (xlp).
        start_token_id: ``attached`` on a decoder: the id whose embedding becomes the language vector.
    """

    def __init__(self, kind: str, languages: Sequence[str], weight: torch.Tensor, *,
                 start_token_id: int | None = None, scripts: Sequence[str] | None = None,
                 script_weight: torch.Tensor | None = None) -> None:  # fmt: skip
        super().__init__()
        if kind not in KINDS:
            raise EncodingError(f"unknown encoding kind {kind!r}; expected one of {KINDS}")
        if len(set(languages)) != len(languages):
            raise EncodingError(f"duplicate languages in {list(languages)}")
        want = 3 if kind == "xlp" else 2
        if weight.ndim != want or weight.shape[0] != len(languages):
            raise EncodingError(f"{kind}: expected a {want}-D table with {len(languages)} rows, got {tuple(weight.shape)}")
        self.kind = kind
        self.languages = list(languages)
        self.weight = nn.Parameter(weight)
        self.start_token_id = start_token_id
        self.scripts: list[str] | None = None
        if kind == "langsamp":
            self._set_scripts(scripts, script_weight)
        self._ids: torch.Tensor | None = None
        self._added: torch.Tensor | None = None
        self._fixed: int | None = None

    def _set_scripts(self, scripts: Sequence[str] | None, script_weight: torch.Tensor | None) -> None:
        """``langsamp``: the script of each language and one shared row per script (in first-seen order)."""
        if scripts is None or script_weight is None or len(scripts) != len(self.languages):
            raise EncodingError(f"langsamp: needs one script per language {self.languages} and a script table, got {scripts}")
        names = list(dict.fromkeys(scripts))
        if tuple(script_weight.shape) != (len(names), self.dim):
            raise EncodingError(f"langsamp: expected a {len(names)} x {self.dim} script table for {names}, "
                                f"got {tuple(script_weight.shape)}")  # fmt: skip
        self.scripts = list(scripts)
        self.script_weight = nn.Parameter(script_weight)
        self.register_buffer("script_of", torch.tensor([names.index(s) for s in scripts], dtype=torch.long),
                             persistent=False)  # fmt: skip

    @property
    def script_names(self) -> list[str]:
        """``langsamp``: the scripts, row ``i`` of ``script_weight`` belongs to ``script_names[i]``."""
        return list(dict.fromkeys(self.scripts or []))

    def extra_repr(self) -> str:
        return f"kind={self.kind}, languages={self.languages}, shape={tuple(self.weight.shape)}"

    @property
    def dim(self) -> int:
        return int(self.weight.shape[-1])

    def index(self, languages: Sequence[str]) -> torch.Tensor:
        """Language ids of ``languages`` (LongTensor); an unknown language raises naming the known ones."""
        pos = {lang: i for i, lang in enumerate(self.languages)}
        missing = sorted({lang for lang in languages if lang not in pos})
        if missing:
            raise EncodingError(f"no language-encoding parameters for {missing}; the model knows {self.languages}")
        return torch.tensor([pos[lang] for lang in languages], dtype=torch.long)

    def _ids_for(self, output: torch.Tensor) -> torch.Tensor:
        """Language ids of the call for ``output`` ``[rows, length, d]``: ``[rows]`` or per token ``[rows, length]``."""
        rows = output.shape[0]
        if self._ids is not None:
            ids = self._ids.to(output.device)
        elif self._fixed is not None:
            ids = torch.full((rows,), self._fixed, dtype=torch.long, device=output.device)
        else:
            raise EncodingError(
                f"{self.kind}: the model was called without language ids; pass the batch through "
                "prepare_batch (or the task's collate), or use fixed_language(...)"
            )
        if ids.ndim == 2:  # a language per token: a sentence and its translation in one sequence (TLM)
            if ids.shape != output.shape[:2]:
                raise EncodingError(f"{self.kind}: per-token language ids {tuple(ids.shape)} do not match the input {tuple(output.shape[:2])}")
            return ids
        if ids.shape[0] != rows:
            if ids.shape[0] == 0 or rows % ids.shape[0]:
                raise EncodingError(f"{self.kind}: {ids.shape[0]} language ids for {rows} sequences")
            ids = ids.repeat_interleave(rows // ids.shape[0])  # beam search expands each sequence
        return ids

    def output_hook(self, module: nn.Module, args: tuple, output: Any) -> Any:
        """``langsamp``: forward hook of the LM body: ``h + L[l] + S[script(l)]`` on its last hidden state
        (only that output: ``hidden_states`` keep the language-neutral states)."""
        tuple_out = isinstance(output, tuple) and not hasattr(output, "last_hidden_state")
        h = output[0] if tuple_out else output.last_hidden_state
        ids = self._ids_for(h)
        shift = self.weight[ids] + self.script_weight[self.script_of.to(ids.device)[ids]]
        h = h + (shift if ids.ndim == 2 else shift.unsqueeze(1)).to(h.dtype)
        if tuple_out:
            return (h, *output[1:])
        output.last_hidden_state = h
        return output

    def hook(self, module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        """Forward hook of the word-embedding module: apply this side's language transform."""
        ids = self._ids_for(output)
        w = self.weight.to(output.dtype)
        if ids.ndim == 2:
            if self.kind == "additive":
                return output + w[ids]
            if self.kind == "xlp":
                out = output
                for k in ids.unique().tolist():
                    out = torch.where((ids == k).unsqueeze(-1), torch.matmul(output, w[k].transpose(0, 1)), out)
                return out
            return torch.where(self._added_mask(args, output).unsqueeze(-1), w[ids], output)
        if self.kind == "additive":
            return output + w[ids].unsqueeze(1)
        if self.kind == "xlp":
            if bool((ids == ids[0]).all()):
                return torch.matmul(output, w[ids[0]].transpose(0, 1))
            return torch.bmm(output, w[ids].transpose(1, 2))
        return torch.where(self._added_mask(args, output).unsqueeze(-1), w[ids].unsqueeze(1), output)

    def _added_mask(self, args: tuple, output: torch.Tensor) -> torch.Tensor:
        """``attached``: the positions whose embedding becomes the language vector."""
        if self.start_token_id is not None:
            return args[0] == self.start_token_id
        added = self._added
        if added is None:
            raise EncodingError("attached: the batch has no 'added_positions'; it was not prepared by this encoding")
        added = added.to(output.device)
        if added.shape != output.shape[:2]:
            raise EncodingError(f"attached: added_positions {tuple(added.shape)} do not match the input {tuple(output.shape[:2])}")
        return added


def init_table(
    kind: str, languages: Sequence[str], dim: int, init: str, *, existing: dict[str, torch.Tensor] | None = None,
    generator: torch.Generator | None = None, random_std: float | None = None, embedding_std: float | None = None,
    where: str = "encoding",
) -> tuple[torch.Tensor, dict]:
    """A parameter table for ``languages``: rows of ``existing`` languages are kept, new ones initialized.

    Args:
        kind: ``additive``, ``attached`` or ``xlp``.
        languages: the table's languages, in order.
        dim: hidden size ``d``.
        init: how a language absent from ``existing`` starts (see :func:`parse_init`):
            ``identity``/``zero`` the neutral element (identity matrix for XLP, zero vector
            otherwise), ``random`` (XLP: entries N(0, 1/d), so ``W x`` keeps the expected norm;
            vectors: N(0, std) with ``random_std`` or the word-embedding matrix's std),
            ``mean`` of the existing languages, ``copy:<lang>`` of one existing language.
        existing: parameters of languages the model already has (a pretrained encoding).
        generator: source of randomness for ``random``.
        random_std: std of random vectors (None: ``embedding_std``).
        embedding_std: std of the model's word-embedding matrix.
        where: prefix of error messages.

    Returns:
        ``(table, info)`` with ``info = {"kept": [...], "initialized": {lang: how}}``.

    Raises:
        EncodingError: ``mean``/``copy`` without the languages they need, or a random init without a generator.
    """
    how, ref = parse_init(init, where=where)
    existing = dict(existing or {})
    new = [lang for lang in languages if lang not in existing]
    rows: list[torch.Tensor] = []
    info: dict = {"kept": [lang for lang in languages if lang in existing], "initialized": {}}
    for lang in languages:
        if lang in existing:
            rows.append(existing[lang].detach().float().clone())
            continue
        if how in NEUTRAL_INITS:
            row = _neutral(kind, 1, dim)[0]
        elif how == "random":
            if generator is None:
                raise EncodingError(f"{where}: init='random' needs the trial seed")
            if kind == "xlp":
                std = random_std if random_std is not None else dim ** -0.5
                row = torch.randn(dim, dim, generator=generator) * std
            else:
                std = random_std if random_std is not None else embedding_std
                if std is None:
                    raise EncodingError(f"{where}: init='random' needs random_std (no word-embedding matrix to take it from)")
                row = torch.randn(dim, generator=generator) * std
        elif how == "mean":
            if not existing:
                raise EncodingError(
                    f"{where}: init='mean' averages the languages the source model was pretrained with, and it has "
                    f"none (a plain model); use init='identity', 'zero' or 'random' for {new}"
                )
            row = torch.stack([t.detach().float() for t in existing.values()]).mean(0)
        else:
            if ref not in existing:
                known = sorted(existing) or "none (a plain model)"
                raise EncodingError(f"{where}: init='copy:{ref}' but the source model's encoding has languages {known}")
            row = existing[ref].detach().float().clone()
        rows.append(row)
        info["initialized"][lang] = init
    shape = (0, dim, dim) if kind == "xlp" else (0, dim)
    table = torch.stack(rows) if rows else torch.zeros(shape)
    return table, info


# ------------------------------------------------------------------------------- the wrapper


def _word_embedding(module: nn.Module) -> nn.Module:
    """The word-embedding module of a model or of an encoder/decoder stack."""
    emb = module.get_input_embeddings() if hasattr(module, "get_input_embeddings") else getattr(module, "embed_tokens", None)
    if emb is None:
        raise EncodingError(f"{type(module).__name__} has no word-embedding module (get_input_embeddings / embed_tokens)")
    inner = getattr(emb, "embedding", None)  # iwslt-bleu's ProjectedEmbedding: copied rows, then a projection
    return inner if isinstance(inner, nn.Embedding) and not isinstance(emb, nn.Embedding) else emb


def side_modules(model: nn.Module) -> dict[str, nn.Module]:
    """``{"input": emb}`` for encoders/causal LMs; ``{"encoder": ..., "decoder": ...}`` for encoder–decoders.

    Raises:
        EncodingError: for an encoder–decoder whose encoder and decoder share one embedding module
            (the hook could not tell the sides apart).
    """
    cfg = getattr(model, "config", None)
    if getattr(cfg, "is_encoder_decoder", False):
        enc, dec = _word_embedding(model.get_encoder()), _word_embedding(model.get_decoder())
        if enc is dec:
            raise EncodingError(
                f"{type(model).__name__}: encoder and decoder share one embedding module; language encodings "
                "need separate ones (e.g. Marian with share_encoder_decoder_embeddings=False)"
            )
        return {"encoder": enc, "decoder": dec}
    return {"input": _word_embedding(model)}


def lm_body(model: nn.Module) -> nn.Module | None:
    """The body whose last hidden state a model's LM head reads (``base_model``); None without an LM head.

    A module that wraps a transformers model in ``.model`` (pretraining's ``MaskedLMLoss``) is searched through.

    Raises:
        EncodingError: a model with an LM head but no separate body module.
    """
    hf = model
    while not hasattr(hf, "get_output_embeddings") and isinstance(getattr(hf, "model", None), nn.Module):
        hf = hf.model
    if not hasattr(hf, "get_output_embeddings") or hf.get_output_embeddings() is None:
        return None
    body = getattr(hf, "base_model", None)
    if not isinstance(body, nn.Module) or body is hf:
        raise EncodingError(f"langsamp: {type(hf).__name__} has an LM head but no separate body (base_model) to hook")
    return body


def _drop_encoding_hooks(module: nn.Module) -> None:
    """Remove the forward hooks a :class:`LanguageTable` registered on ``module``."""
    for key, hook in list(module._forward_hooks.items()):
        if isinstance(getattr(hook, "__self__", None), LanguageTable):
            del module._forward_hooks[key]


def _config_dict(config: Any) -> dict:
    return asdict(config) if is_dataclass(config) else dict(config or {})


class EncodedModel(nn.Module):
    """A transformers model with a language encoding; forward/generate take ``language_ids``.

    Attribute access falls through to the wrapped model (``config``, ``device``,
    ``get_input_embeddings`` …), so code that reads a model keeps working.

    Attributes:
        model: the transformers model (a direct child, see ``tasks.lapt.hf_model``).
        tables: ``{side: LanguageTable}``.
        encoding: registered name of the encoding.
        encoding_config: its config as a dict.
        insert_at: ``attached`` only: column of the inserted language token (None otherwise).
        train_in_finetuning: whether the tables stay trainable in task fine-tuning (XLP: False by default).
    """

    is_language_encoded = True

    def __init__(self, model: nn.Module, tables: dict[str, LanguageTable], *, encoding: str, encoding_config: dict,
                 insert_at: int | None = None, train_in_finetuning: bool = True, info: dict | None = None) -> None:  # fmt: skip
        super().__init__()
        modules = side_modules(model)
        if set(tables) != set(modules):
            raise EncodingError(f"{type(model).__name__} has sides {sorted(modules)}, got tables for {sorted(tables)}")
        self.model = model
        self.tables = nn.ModuleDict(tables)
        self.encoding = encoding
        self.encoding_config = dict(encoding_config)
        self.insert_at = insert_at
        self.train_in_finetuning = train_in_finetuning
        self.init_info = dict(info or {})
        for side, module in modules.items():
            _drop_encoding_hooks(module)  # a model taken over from another wrapper
            # a bound method: copy.deepcopy of the wrapper re-binds it to the copied table
            if self.tables[side].kind != "langsamp":
                module.register_forward_hook(self.tables[side].hook)
        body = lm_body(model) if "input" in self.tables and self.tables["input"].kind == "langsamp" else None
        self.output_hooked = body is not None  # langsamp acts with an LM head only: never in a task model
        if body is not None:
            _drop_encoding_hooks(body)
            body.register_forward_hook(self.tables["input"].output_hook)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "model" or "model" not in self._modules:
                raise
            return getattr(self._modules["model"], name)

    # -- language ids

    @property
    def languages(self) -> list[str]:
        """Languages of the encoder/input side."""
        return list(self.tables["encoder" if "encoder" in self.tables else "input"].languages)

    @property
    def decoder_languages(self) -> list[str] | None:
        return list(self.tables["decoder"].languages) if "decoder" in self.tables else None

    @property
    def added_tokens(self) -> int:
        """Tokens :meth:`prepare_batch` inserts into each input sequence (1 for ``attached``)."""
        return 1 if self.encoding == "attached" else 0

    def language_index(self, languages: Sequence[str], side: str | None = None) -> torch.Tensor:
        side = side or ("encoder" if "encoder" in self.tables else "input")
        return self.tables[side].index(languages)

    @contextmanager
    def _active(self, language_ids: Any, decoder_language_ids: Any, added: Any) -> Iterator[None]:
        first = self.tables["encoder" if "encoder" in self.tables else "input"]
        first._ids, first._added = language_ids, added
        if "decoder" in self.tables:
            self.tables["decoder"]._ids = decoder_language_ids
        try:
            yield
        finally:
            for t in self.tables.values():
                t._ids = t._added = None

    @contextmanager
    def fixed_language(self, language: str, decoder_language: str | None = None) -> Iterator[None]:
        """Run the wrapped model itself (``self.model``) as if every sequence were in ``language``.

        Used to hand the encoded model to code that calls a plain transformers model (lm-eval);
        not available for ``attached``, whose batches need an inserted token.
        """
        if self.encoding == "attached":
            raise EncodingError("attached: a fixed language cannot insert the language token; prepare the batches")
        sides = {s: (decoder_language if s == "decoder" else language) for s in self.tables}
        for s, lang in sides.items():
            if lang is not None:
                self.tables[s]._fixed = int(self.tables[s].index([lang])[0])
        try:
            yield
        finally:
            for t in self.tables.values():
                t._fixed = None

    def forward(self, *args: Any, language_ids: Any = None, decoder_language_ids: Any = None,
                added_positions: Any = None, **kwargs: Any) -> Any:  # fmt: skip
        with self._active(language_ids, decoder_language_ids, added_positions):
            return self.model(*args, **kwargs)

    def generate(self, *args: Any, language_ids: Any = None, decoder_language_ids: Any = None,
                 added_positions: Any = None, **kwargs: Any) -> Any:  # fmt: skip
        with self._active(language_ids, decoder_language_ids, added_positions):
            return self.model.generate(*args, **kwargs)

    # -- batches

    def prepare_batch(self, batch: dict, languages: Sequence[str], decoder_languages: Sequence[str] | None = None) -> dict:
        """Add language ids to a collated batch; ``attached`` also inserts the language-token column.

        For ``attached``, every ``[batch, length]`` tensor of the input side (for an encoder–decoder
        only :data:`ENCODER_KEYS`; never ``decoder_*``) gets a column at :attr:`insert_at`:
        ``input_ids`` a copy of its neighbour's id (a valid, non-padding id whose embedding the
        hook replaces), ``attention_mask`` 1, ``labels`` -100, anything else its neighbour's value;
        ``start_positions``/``end_positions`` at or after the column move one to the right.

        Args:
            batch: a collated batch (tensors) with ``input_ids``.
            languages: one language code per sequence (encoder/input side).
            decoder_languages: one per sequence for the decoder side of an encoder–decoder.

        Returns:
            A new dict (the input is not modified).
        """
        ids = batch["input_ids"]
        if len(languages) != ids.shape[0]:
            raise EncodingError(f"{len(languages)} languages for a batch of {ids.shape[0]} sequences")
        out = dict(batch)
        out[LANGUAGE_IDS_KEY] = self.language_index(languages)
        if "decoder" in self.tables:
            if decoder_languages is None:
                raise EncodingError("an encoder–decoder batch needs decoder_languages (the target language)")
            out[DECODER_LANGUAGE_IDS_KEY] = self.language_index(decoder_languages, "decoder")
        if self.encoding != "attached":
            return out
        c = self.insert_at
        n, length = ids.shape
        if not 0 <= c <= length:
            raise EncodingError(f"attached: insert_at={c} is outside sequences of length {length}")
        src = max(c - 1, 0)
        seq2seq = "decoder" in self.tables
        for key, value in batch.items():
            if not torch.is_tensor(value):
                continue
            # an encoder–decoder's labels and decoder_* tensors are target-side: never shifted,
            # even when the target happens to be as long as the source
            target_side = key.startswith("decoder_") or (seq2seq and key not in ENCODER_KEYS)
            if value.ndim == 2 and value.shape == ids.shape and not target_side:
                if key == "attention_mask":
                    col = torch.ones(n, 1, dtype=value.dtype)
                elif key == "labels":
                    col = torch.full((n, 1), -100, dtype=value.dtype)
                else:
                    col = value[:, src : src + 1]
                out[key] = torch.cat([value[:, :c], col, value[:, c:]], dim=1)
            elif key in POSITION_KEYS and value.ndim == 1 and not seq2seq:
                out[key] = value + (value >= c).to(value.dtype)
        added = torch.zeros(n, length + 1, dtype=torch.bool)
        added[:, c] = True
        out[ADDED_POSITIONS_KEY] = added
        return out

    # -- derived models

    def rewrap(self, model: nn.Module, *, finetuning: bool) -> EncodedModel:
        """The same encoding (a copy of its parameters) around another model with the same sides.

        Used for task models whose body is copied from this one (classification, QA, NER heads).
        With ``finetuning`` the tables are frozen unless :attr:`train_in_finetuning`.
        """
        tables = {s: copy.deepcopy(t) for s, t in self.tables.items()}
        wrapped = EncodedModel(model, tables, encoding=self.encoding, encoding_config=self.encoding_config,
                               insert_at=self.insert_at, train_in_finetuning=self.train_in_finetuning,
                               info=self.init_info)  # fmt: skip
        param = next(model.parameters())
        wrapped.tables.to(device=param.device)
        if finetuning and not self.train_in_finetuning:
            for p in wrapped.tables.parameters():
                p.requires_grad_(False)
        return wrapped

    def to_seq2seq(self, model: nn.Module, decoder_languages: Sequence[str], *, decoder_start_token_id: int | None,
                   generator: torch.Generator | None = None) -> EncodedModel:  # fmt: skip
        """This encoding around an encoder–decoder: the encoder side copies this model's parameters,
        the decoder side starts for ``decoder_languages`` (neutral, or random when ``init='random'``).

        Both sides stay trainable (the translation model is trained, not fine-tuned), except with
        ``decoder: false`` in the encoding's config: the decoder side is then a frozen identity.
        """
        if self.encoding == "langsamp":
            raise EncodingError("langsamp: encoder–decoder (translation) models are not supported; "
                                "it is defined for masked and causal LM pretraining")  # fmt: skip
        sides = side_modules(model)
        if set(sides) != {"encoder", "decoder"}:
            raise EncodingError(f"{type(model).__name__} is not an encoder–decoder")
        src = next(iter(self.tables.values()))
        enc = copy.deepcopy(src)
        enc_dim = sides["encoder"].weight.shape[1]
        if enc.dim != enc_dim:
            raise EncodingError(f"the encoder's embeddings are {enc_dim}-d but the encoding's parameters are {enc.dim}-d")
        dec_dim = sides["decoder"].weight.shape[1]
        init = self.encoding_config.get("init", "identity")
        # decoder: false (xlp's control without the decoder-side layer): a frozen identity, i.e. no layer
        decoder = self.encoding_config.get("decoder", True)
        dec_init = "random" if decoder and parse_init(init, where="init")[0] == "random" else "identity"
        std = float(sides["decoder"].weight.detach().float().std())
        table, info = init_table(self.encoding, list(decoder_languages), dec_dim, dec_init, generator=generator,
                                 random_std=self.encoding_config.get("random_std"), embedding_std=std,
                                 where=f"{self.encoding} decoder")  # fmt: skip
        dec = LanguageTable(self.encoding, list(decoder_languages), table,
                            start_token_id=decoder_start_token_id if self.encoding == "attached" else None)  # fmt: skip
        param = next(model.parameters())
        wrapped = EncodedModel(model, {"encoder": enc, "decoder": dec}, encoding=self.encoding,
                               encoding_config=self.encoding_config, insert_at=self.insert_at,
                               train_in_finetuning=self.train_in_finetuning,
                               info={**self.init_info, "decoder": info})  # fmt: skip
        wrapped.tables.to(device=param.device)
        for side, table in wrapped.tables.items():
            for p in table.parameters():
                p.requires_grad_(side == "encoder" or decoder)
        return wrapped

    # -- facts, saving, folding

    def encoding_info(self) -> dict:
        """JSON facts for the record: the encoding, its config, and the parameters it adds per side."""
        sides = {
            s: {"languages": list(t.languages), "parameters": sum(p.numel() for p in t.parameters()),
                "trainable": t.weight.requires_grad,
                **({"scripts": dict(zip(t.languages, t.scripts)), "active": self.output_hooked} if t.scripts else {})}
            for s, t in self.tables.items()
        }
        return {
            "name": self.encoding,
            "config": self.encoding_config,
            "sides": sides,
            "parameters_added": sum(v["parameters"] for v in sides.values()),
            "model_parameters": sum(p.numel() for p in self.model.parameters()),
            "insert_at": self.insert_at,
            "init": self.init_info,
        }

    def state(self) -> dict[str, dict[str, torch.Tensor]]:
        """``{side: {language: parameters}}`` (CPU copies): what a later ``wrap(pretrained=...)`` keeps."""
        return {s: {lang: t.weight[i].detach().cpu().clone() for i, lang in enumerate(t.languages)}
                for s, t in self.tables.items()}  # fmt: skip

    def script_state(self) -> dict[str, dict]:
        """``langsamp``: ``{side: {"languages": {language: script}, "rows": {script: row}}}`` (CPU copies)."""
        return {s: {"languages": dict(zip(t.languages, t.scripts)),
                    "rows": {n: t.script_weight[i].detach().cpu().clone() for i, n in enumerate(t.script_names)}}
                for s, t in self.tables.items() if t.scripts}  # fmt: skip

    def save_pretrained(self, path: str | Path, **kwargs: Any) -> None:
        """``model.save_pretrained(path)`` plus the encoding's config and parameters beside it."""
        from safetensors.torch import save_file

        path = Path(path)
        self.model.save_pretrained(path, **kwargs)
        meta = {
            "format_version": FORMAT_VERSION,
            "encoding": self.encoding,
            "encoding_config": self.encoding_config,
            "model_class": type(self.model).__name__,
            "insert_at": self.insert_at,
            "train_in_finetuning": self.train_in_finetuning,
            "sides": {s: {"languages": t.languages, "start_token_id": t.start_token_id,
                          **({"scripts": t.scripts} if t.scripts else {})} for s, t in self.tables.items()},
        }
        (path / ENCODING_FILE).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        weights = {s: t.weight.detach().cpu().contiguous() for s, t in self.tables.items()}
        weights.update({f"{s}.scripts": t.script_weight.detach().cpu().contiguous() for s, t in self.tables.items() if t.scripts})
        save_file(weights, str(path / WEIGHTS_FILE))

    def fold(self, language: str) -> nn.Module:
        """A plain transformers model equal to this one on ``language`` (``xlp`` and ``additive``).

        XLP: every row of the input embedding matrix becomes ``W_l e``; additive: ``e + v_l``.
        Tied output embeddings are untied first (the output side keeps the original matrix), and
        ``config.tie_word_embeddings`` is set to False so that a save/load round trip keeps them apart.

        Raises:
            EncodingError: for ``attached`` (it changes the sequence), encoder–decoders, or an additive
                encoding on a word-embedding module that is not a plain ``nn.Embedding`` (it may scale).
        """
        if self.encoding in ("attached", "langsamp") or "input" not in self.tables:
            raise EncodingError(f"{self.encoding}: only xlp/additive encodings of single-stack models can be folded")
        model = copy.deepcopy(self.model)
        for m in model.modules():
            _drop_encoding_hooks(m)  # the copy carries the hooks of copied tables
        table = self.tables["input"]
        emb = _word_embedding(model)
        if not isinstance(emb, nn.Embedding) or (self.encoding == "additive" and type(emb) is not nn.Embedding):
            raise EncodingError(f"{self.encoding}: cannot fold into a {type(emb).__name__}")
        i = int(table.index([language])[0])
        out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        with torch.no_grad():
            if out is not None and out.weight is emb.weight:
                out.weight = nn.Parameter(emb.weight.detach().clone())
                model.config.tie_word_embeddings = False
            w = table.weight[i].detach().to(emb.weight.dtype)
            if self.encoding == "xlp":
                emb.weight.copy_(emb.weight @ w.transpose(0, 1))
            else:
                emb.weight.add_(w)
        return model


# ---------------------------------------------------------------------------------- wrapping


def read_pretrained(path: str | Path) -> dict | None:
    """The encoding saved beside a model directory (``{"meta", "state"}``), or None if there is none."""
    from safetensors.torch import load_file

    path = Path(path)
    if not (path / ENCODING_FILE).is_file():
        return None
    meta = json.loads((path / ENCODING_FILE).read_text(encoding="utf-8"))
    if meta.get("format_version") != FORMAT_VERSION:
        raise EncodingError(f"{path / ENCODING_FILE}: format_version {meta.get('format_version')!r}, expected {FORMAT_VERSION}")
    if not (path / WEIGHTS_FILE).is_file():
        raise EncodingError(f"{path / ENCODING_FILE} has no {WEIGHTS_FILE} beside it")
    weights = load_file(str(path / WEIGHTS_FILE))
    state = {s: {lang: weights[s][i] for i, lang in enumerate(info["languages"])} for s, info in meta["sides"].items()}
    scripts = {s: {"languages": dict(zip(info["languages"], info["scripts"])),
                   "rows": {n: weights[f"{s}.scripts"][i] for i, n in enumerate(dict.fromkeys(info["scripts"]))}}
               for s, info in meta["sides"].items() if info.get("scripts")}  # fmt: skip
    return {"meta": meta, "state": state, "scripts": scripts}


def wrap_model(
    model: nn.Module, languages: Sequence[str], *, encoding: str, config: Any, seed: int | None = None,
    pretrained: dict | None = None, insert_at: int | None = None, train_in_finetuning: bool = True,
    scripts: dict[str, str] | None = None, script_rows: dict[str, torch.Tensor] | None = None,
) -> EncodedModel:
    """Wrap a transformers model with an encoding for ``languages`` (see the module docstring).

    Args:
        model: a transformers model, or an :class:`EncodedModel` of the same encoding (its
            parameters are then the ``pretrained`` ones).
        languages: languages the wrapped model must accept (encoder/input side). Languages of
            ``pretrained`` come first (in their order), new ones after.
        encoding: ``additive``, ``attached``, ``xlp`` or ``langsamp``.
        config: the encoding's config dataclass (fields ``init`` and ``random_std`` are used).
        seed: trial seed; random initialization draws from ``torch_generator(seed, "encoding", encoding, side)``.
        pretrained: what :func:`read_pretrained` returns for the source model, or None.
        insert_at: ``attached`` only: the column of the language token.
        train_in_finetuning: recorded on the wrapper (see :meth:`EncodedModel.rewrap`).
        scripts, script_rows: ``langsamp`` only: the script of every language, and every script's row.

    Raises:
        EncodingError: a pretrained encoding of another kind, or an init that cannot be satisfied.
    """
    from harness.seeding import torch_generator

    cfg = _config_dict(config)
    if isinstance(model, EncodedModel):
        if model.encoding != encoding:
            raise EncodingError(f"the model already carries a {model.encoding!r} encoding, not {encoding!r}")
        pretrained = {"meta": {"encoding": encoding}, "state": model.state(), "scripts": model.script_state()}
        model = model.model
    if pretrained is not None and pretrained["meta"]["encoding"] != encoding:
        raise EncodingError(
            f"the source model was pretrained with the {pretrained['meta']['encoding']!r} encoding; "
            f"the trial asks for {encoding!r}"
        )
    modules = side_modules(model)
    if "decoder" in modules:
        raise EncodingError("wrap an encoder–decoder with EncodedModel.to_seq2seq (it needs the decoder's language)")
    emb = modules["input"]
    dim = int(emb.weight.shape[1])
    existing = (pretrained or {}).get("state", {}).get("input", {})
    ordered = list(existing) + [lang for lang in languages if lang not in existing]
    gen = torch_generator(seed, "encoding", encoding, "input") if seed is not None else None
    table, info = init_table(
        encoding, ordered, dim, cfg.get("init", "identity"), existing=existing, generator=gen,
        random_std=cfg.get("random_std"), embedding_std=float(emb.weight.detach().float().std()), where=encoding,
    )
    param = emb.weight
    per = [scripts[lang] for lang in ordered] if scripts is not None else None
    rows = torch.stack([script_rows[n] for n in dict.fromkeys(per)]).to(param.device) if per and script_rows else None
    t = LanguageTable(encoding, ordered, table.to(device=param.device), scripts=per, script_weight=rows)
    return EncodedModel(model, {"input": t}, encoding=encoding, encoding_config=cfg, insert_at=insert_at,
                        train_in_finetuning=train_in_finetuning, info=info)  # fmt: skip


def default_insert_at(model: nn.Module) -> int:
    """``attached``: 0 for causal LMs (the token conditions the first word), 1 otherwise (after [CLS]/<s>)."""
    name = type(model.model if isinstance(model, EncodedModel) else model).__name__
    return 0 if name.endswith(("ForCausalLM", "LMHeadModel")) else 1


def load_encoded(path: str | Path, model_cls: Any = None, device: str | torch.device = "cpu") -> EncodedModel:
    """Load what :meth:`EncodedModel.save_pretrained` wrote (the model class is read from the files
    unless ``model_cls`` is given)."""
    import transformers

    saved = read_pretrained(path)
    if saved is None:
        raise EncodingError(f"{path} has no {ENCODING_FILE}: not a language-encoded model")
    meta, state = saved["meta"], saved["state"]
    cls = model_cls or getattr(transformers, meta["model_class"])
    model = cls.from_pretrained(path).to(device)
    tables = {}
    for side, info in meta["sides"].items():
        weight = torch.stack([state[side][lang] for lang in info["languages"]]).to(device)
        rows = saved["scripts"].get(side, {}).get("rows")
        tables[side] = LanguageTable(meta["encoding"], info["languages"], weight, start_token_id=info["start_token_id"],
                                     scripts=info.get("scripts"),
                                     script_weight=torch.stack(list(rows.values())).to(device) if rows else None)  # fmt: skip
    return EncodedModel(model, tables, encoding=meta["encoding"], encoding_config=meta["encoding_config"],
                        insert_at=meta["insert_at"], train_in_finetuning=meta["train_in_finetuning"])  # fmt: skip


def world_scripts() -> dict[str, str]:
    """ISO 15924 script of each language of the built-in worlds (``harness.world.config``), e.g. ``script: Cyrl``."""
    from harness.world.config import language_scripts

    return language_scripts()


def prepare_for(encoding: Any, batch: dict, languages: Sequence[str]) -> dict:
    """``LanguageEncoding.prepare``: prepare ``batch`` for the model ``encoding`` wrapped last."""
    wrapped = getattr(encoding, "wrapped", None)
    if wrapped is None:
        raise EncodingError(f"{getattr(encoding, 'registry_name', 'encoding')}: prepare called before wrap")
    return wrapped.prepare_batch(batch, languages)
