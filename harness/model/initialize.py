"""Initialization: load the source model, run a method, install its result (trials and ``tokxfer init``).

Two jobs of a trial live here:

* **build the model** — :func:`load_source` loads the source model, its tokenizer and a copy of
  its input embeddings;
* **initialize** — :func:`initialize` (re)uses the method's output from the init cache (a
  :func:`harness.cache.cached_dir` entry of kind ``inits``, see :func:`cached_init`), keeps the
  source rows in extension mode, installs the mapping (:mod:`harness.model.surgery`) and computes the
  gold diagnostics of the built-in world.

What to initialize is one value, :class:`InitRequest`; every random number comes from its seed.

Example:
    >>> req = InitRequest(source_model="world-model-dir", target_tokenizer=None, method="overlap",
    ...                   method_config=None, seed=1, model_kind="mlm")
    >>> req.mode, req.resources.dictionary
    ('replace', None)
"""

from __future__ import annotations

import dataclasses
import gc
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness import progress, registry, seeding
from harness.cache import cached_dir
from harness.extension import DEFAULT_EXTEND_TOP_N, extend_tokenizer, keep_original_rows
from harness.model import surgery
from harness.model.diagnostics import row_norm_diagnostics, world_diagnostics
from harness.protocols import (
    PROVENANCE_NAMES,
    InitResult,
    LowRank,
    RandomRows,
    TokenMapping,
    TransferInputs,
    TransferResources,
)
from harness.run import resources
from harness.vocab import special_ids, vocab_size

__all__ = ["InitRequest", "Initialized", "load_source", "check_head", "initialize", "cached_init",
           "init_summary", "provenance_string", "write_init_info", "INIT_CACHE_KIND"]

INIT_CACHE_KIND = "inits"
"""Cache kind (subdirectory of the cache root) of the methods' outputs."""


@dataclass(frozen=True)
class InitRequest:
    """What to initialize and how.

    Attributes:
        source_model: a model directory or hub id.
        target_tokenizer: the new tokenizer (a loaded tokenizer object).
        method: registered method name.
        method_config: the method's config dataclass (``None``: its defaults).
        seed: the trial seed; the method's generator is ``numpy_rng(seed, "init", method)``.
        model_kind: ``mlm`` | ``clm`` | ``seq2seq``.
        resources: corpora, dictionary and word vectors the method may read.
        source_tokenizer: tokenizer path or hub id when it differs from ``source_model``.
        source_language / target_language: language codes handed to the method.
        mode: ``replace`` (the target tokenizer replaces the source's) or ``extend`` (the source
            tokenizer is extended with the ``extend_top_n`` most frequent target tokens).
        extend_top_n: tokens added in extension mode.
        bias: how an MLM head's bias is set for new rows (see :func:`harness.model.surgery.install`).
        head_needed_by: who needs the ``model_kind`` head (a task or stage, for the message); a
            checkpoint without it is then refused (:func:`harness.run.resources.load_source_model`).
    """

    source_model: str
    target_tokenizer: Any
    method: str
    method_config: Any
    seed: int
    model_kind: str
    resources: TransferResources = field(default_factory=TransferResources)
    source_tokenizer: str | None = None
    source_language: str = "src"
    target_language: str = "tgt"
    mode: str = "replace"
    extend_top_n: int = DEFAULT_EXTEND_TOP_N
    bias: str = "map"
    head_needed_by: str | None = None


@dataclass
class Initialized:
    """A model with its new vocabulary, plus what the record needs to know about the init."""

    model: Any
    tokenizer: Any
    result: InitResult
    source_tokenizer: Any
    source_embeddings: torch.Tensor
    diagnostics: dict
    timings: dict


# --------------------------------------------------------------------------------------------
# build the model


def load_source(source_model: str, source_tokenizer: str | None, model_kind: str, *,
                head_needed_by: str | None = None) -> tuple[Any, Any, torch.Tensor]:
    """``(model, tokenizer, input embeddings in float32 on the CPU)`` of a source model (the embeddings share the
    model's storage when its weights are float32 on the CPU already, else they are a converted copy).

    Raises:
        SurgeryError: the tokenizer has more tokens than the model has embedding rows.
        ResourceError: ``head_needed_by`` is given and the checkpoint lacks the ``model_kind`` head
            (:func:`check_head`).
    """
    if head_needed_by is not None:
        check_head(source_model, model_kind, head_needed_by)
    with progress.step(f"loading the source model {source_model}"):
        model = resources.load_source_model(source_model, model_kind)
        tok = resources.load_tokenizer(source_tokenizer or source_model)
    # no copy when the weights are float32 on the CPU already (2 GB at 256k x 2048): methods read it and never
    # write it (tests/methods/test_contract.py checks every registered method), and install() swaps in a new tensor
    emb = model.get_input_embeddings().weight.detach().float().cpu()
    if emb.shape[0] < len(tok):
        raise surgery.SurgeryError(
            f"source tokenizer has {len(tok)} tokens but the model has only {emb.shape[0]} embedding rows"
        )
    return model, tok, emb


_HEAD_MEMO: dict[tuple, tuple[list[str], list[str]] | None] = {}


def check_head(source_model: str, model_kind: str, needed_by: str) -> None:
    """Refuse a local checkpoint without the ``model_kind`` head that ``needed_by`` (a task or stage) reads,
    instead of letting transformers add a random head (:func:`harness.model.heads.missing_head`; the
    answer is kept per process for a directory whose files did not change). Hub ids pass.

    Raises:
        ResourceError: naming ``needed_by``, the head, the checkpoint and what it holds.
    """
    if model_kind not in ("mlm", "clm"):
        return
    from harness.model.heads import HeadError, missing_head

    d = Path(source_model).expanduser()
    files = sorted(p for p in d.iterdir() if p.is_file()) if d.is_dir() else []
    key = (str(d.resolve()), model_kind, tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files))
    if key not in _HEAD_MEMO:
        try:
            _HEAD_MEMO[key] = missing_head(source_model, model_kind)
        except HeadError as e:
            raise resources.ResourceError(f"{needed_by} needs a {model_kind} head: {e}") from None
    found = _HEAD_MEMO[key]
    if found is not None and found[0]:
        head = {"mlm": "masked-LM head", "clm": "causal-LM head"}[model_kind]
        arch = ", ".join(found[1]) or "a model"
        raise resources.ResourceError(
            f"{needed_by} needs the source model's {head}, but {source_model} holds {arch} without it (missing "
            f"{', '.join(found[0][:3])}{' …' if len(found[0]) > 3 else ''}); a random head would make its numbers "
            "meaningless. Use a checkpoint with its head, or a task that reads the encoder only "
            "(bitext-retrieval, teacher-agreement)"
        )


# --------------------------------------------------------------------------------------------
# initialize


@contextmanager
def long_lived_objects_frozen() -> Iterator[None]:
    """Keep what is alive on entry (imported libraries, tokenizers, the source model) out of the cyclic
    garbage collector's full collections while the block runs; hand it back on exit.

    A method allocates Python objects in bursts (two vocabularies' dicts, a tuple per token pair), and
    a burst can trigger a full collection, which walks every tracked object of the process (torch
    and transformers alone are hundreds of thousands) although none of them can be garbage yet. On the
    FOCUS end-to-end benchmark's 32k/16k files (``benchmarks/bench_focus.py --end-to-end --scale 1``) one
    such collection during the overlap step was most of that step's time (seen with ``gc.get_stats()``).
    ``gc.freeze`` moves the objects to the permanent generation; ``gc.unfreeze`` returns them on exit,
    exceptions included, so a worker running many trials collects each trial's garbage as before.
    Objects the block creates are collected normally. Inside a caller's own freeze it does nothing
    (unfreezing would undo the caller's).

    Example:
        >>> import gc
        >>> with long_lived_objects_frozen():
        ...     gc.get_freeze_count() > 0
        True
        >>> gc.get_freeze_count()
        0
    """
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def initialize(request: InitRequest, *, world: Any = None, cache_key: dict | None = None) -> Initialized:
    """Load the source, run the method (or reuse its cached output), install the result.

    Args:
        request: what to initialize.
        world: the built-in :class:`harness.world.World` of the trial, for gold diagnostics
            (``None``: none).
        cache_key: everything the method's output depends on (``None``: no init cache); see
            :func:`cached_init`.

    Raises:
        ResourceError: ``mode=extend`` without a target corpus.
    """
    r = request
    t0 = time.perf_counter()
    model, src_tok, src_emb = load_source(r.source_model, r.source_tokenizer, r.model_kind,
                                          head_needed_by=r.head_needed_by)
    t_load = time.perf_counter() - t0

    t0 = time.perf_counter()
    tgt = r.target_tokenizer
    if r.mode == "extend":
        if r.resources.target_corpus is None:
            raise resources.ResourceError("mode=extend needs a target corpus to rank the new tokens")
        tgt, _ = extend_tokenizer(src_tok, r.target_tokenizer, r.resources.target_corpus, r.extend_top_n)
    surgery.check_special_tokens(tgt, r.model_kind, where="target tokenizer")
    method = registry.get("method", r.method).make(r.method_config)
    inputs = TransferInputs(
        source_tokenizer=src_tok, target_tokenizer=tgt, source_embeddings=src_emb,
        source_language=r.source_language, target_language=r.target_language, cache_dir=resources.cache_dir(),
        extension_tokenizer=r.target_tokenizer if r.mode == "extend" else None, **r.resources.as_dict(),
    )
    def compute() -> InitResult:
        with long_lived_objects_frozen():
            return method.initialize(inputs, seeding.numpy_rng(r.seed, "init", r.method))

    result = cached_init(cache_key, compute, tgt)
    from_scratch = bool(result.directives.get("reinitialize_body"))
    if r.mode == "extend":
        result = _keep_original_rows(result, src_tok, tgt, from_scratch)
    t_method = time.perf_counter() - t0

    t0 = time.perf_counter()
    with progress.step(f"installing the new embeddings ({result.mapping.n_target} rows)"):
        surgery.install(model, result, seeding.torch_generator(r.seed, "init", "materialize"), bias=r.bias)
    if from_scratch:
        with progress.step("re-initializing every parameter (from-scratch)"):
            surgery.reinitialize_all(model, seeding.seeded_globals(r.seed, "init", "from-scratch"))
    new_emb = model.get_input_embeddings().weight.detach().float().cpu()
    # gold diagnostics compare target-tokenizer rows with source rows; they say nothing when the
    # method keeps the source tokenizer (``original``), so they are left out there
    diag = (world_diagnostics(world, r.target_language, src_tok, result.tokenizer, src_emb, new_emb)
            if world is not None and result.tokenizer is not src_tok else {})
    diag = {**row_norm_diagnostics(src_emb, new_emb), **diag}
    return Initialized(
        model=model, tokenizer=result.tokenizer, result=result, source_tokenizer=src_tok, source_embeddings=src_emb,
        diagnostics=diag, timings={"load_s": t_load, "method_s": t_method, "install_s": time.perf_counter() - t0},
    )


def _keep_original_rows(result: InitResult, src_tok, extended_tok, from_scratch: bool) -> InitResult:
    """Extension mode: old ids keep their source rows bit-exactly; only new ids come from the method.

    Applied to every method's result (see :func:`harness.extension.keep_original_rows`), except
    where nothing is extended (a method that keeps the source tokenizer, ``original``) or nothing is
    kept by design (``from-scratch`` re-initializes every parameter); ``info["extension"]`` says which.
    """

    def with_extension(**facts) -> dict:  # keeps what the method itself said about the extension
        return {**result.info, "extension": {**(result.info.get("extension") or {}), **facts}}

    if from_scratch:
        return dataclasses.replace(result, info=with_extension(
            original_rows_kept=False, reason="from-scratch re-initializes every parameter"))
    if result.tokenizer is not extended_tok:
        return dataclasses.replace(result, info=with_extension(
            original_rows_kept=True, reason="the method keeps the source tokenizer; nothing was added"))
    mapping, ext = keep_original_rows(result.mapping, vocab_size(src_tok), special_ids(src_tok))
    # a factorized result (ofa with rank < d) factorizes the new rows only: the original ones stay the source's
    low_rank = dataclasses.replace(result.low_rank, first_row=vocab_size(src_tok)) if result.low_rank else None
    return dataclasses.replace(result, mapping=mapping, low_rank=low_rank,
                               info=with_extension(original_rows_kept=True, **ext))


# --------------------------------------------------------------------------------------------
# the init cache


class _NotCacheable(Exception):
    """The method answered with another tokenizer than the one given: its mapping alone is not enough."""


def cached_init(key: dict | None, compute: Callable[[], InitResult], tokenizer: Any) -> InitResult:
    """The method's output (mapping, info, directives) from the init cache, computed on a miss.

    An entry is a :func:`harness.cache.cached_dir` of kind :data:`INIT_CACHE_KIND` keyed by
    ``key`` (the trial's source, target, world, method, mode, seed, model kind and tokxfer
    version), holding ``mapping.npz`` and ``init.json``. Only results whose tokenizer is
    ``tokenizer`` are cached (a method that keeps the source tokenizer, ``original``, is simply
    run); a hit says ``info["cache_hit"] = True``.

    Args:
        key: the cache key (``None``: no cache, ``compute()`` is returned).
        compute: runs the method.
        tokenizer: the tokenizer the method was given.
    """
    if key is None:
        return compute()
    fresh: dict[str, InitResult] = {}

    def build(d: Path) -> None:
        res = fresh["result"] = compute()
        if res.tokenizer is not tokenizer:
            raise _NotCacheable
        m = res.mapping
        np.savez(d / "mapping.npz", shape=np.array([m.n_target, m.n_source]), indptr=m.indptr, indices=m.indices,
                 weights=m.weights, provenance=m.provenance)
        reasons = {k: np.asarray(v, dtype=np.int64).tolist() for k, v in res.random_reasons.items()}
        (d / "init.json").write_text(json.dumps({"info": res.info, "directives": res.directives,
                                                 "random_reasons": reasons,
                                                 "random_rows": dataclasses.asdict(res.random_rows),
                                                 "low_rank": dataclasses.asdict(res.low_rank) if res.low_rank else None},
                                                default=str))

    try:
        d = cached_dir(INIT_CACHE_KIND, key, build)
    except _NotCacheable:
        return fresh["result"]
    if "result" in fresh:
        return fresh["result"]
    z = np.load(d / "mapping.npz")
    meta = json.loads((d / "init.json").read_text())
    mapping = TokenMapping(int(z["shape"][0]), int(z["shape"][1]), z["indptr"], z["indices"], z["weights"], z["provenance"])
    # only results whose tokenizer is the given one are cached, so it is the right one here
    # entries written before ``random_rows`` existed hold methods that draw N(mean, std): the default
    return InitResult(mapping, tokenizer, dict(meta["info"], cache_hit=True), meta["directives"],
                      meta.get("random_reasons") or {}, RandomRows(**(meta.get("random_rows") or {})),
                      LowRank(**meta["low_rank"]) if meta.get("low_rank") else None)


# --------------------------------------------------------------------------------------------
# what the record and init_info.json say about an init


def init_summary(init: Initialized) -> dict:
    """The ``init`` section of a record."""
    info = json.loads(json.dumps(init.result.info, default=str))
    return {
        "counts": init.result.mapping.counts(),
        "n_target": init.result.mapping.n_target,
        "n_source": init.result.mapping.n_source,
        "info": info,
        "directives": init.result.directives,
        "diagnostics": init.diagnostics,
    }


def provenance_string(mapping: TokenMapping) -> str:
    """Per-token provenance, one digit per target id (0 special, 1 copied, 2 combined, 3 fallback)."""
    return "".join(map(str, mapping.provenance.tolist()))


def write_init_info(path: Path, init: Initialized, extra: dict | None = None) -> None:
    """Write ``init_info.json``: the record's ``init`` section plus per-token provenance, and the rows by
    category with the random rows' reasons as ``tokxfer init`` reports them
    (:func:`harness.model.provenance.provenance_summary`)."""
    from harness.model.provenance import provenance_summary

    info = init_summary(init)
    info["provenance_codes"] = {str(k): v for k, v in PROVENANCE_NAMES.items()}
    info["provenance"] = provenance_string(init.result.mapping)
    summary = provenance_summary(init.result, init.source_tokenizer, init.tokenizer)
    info["categories"], info["random_rows"] = summary["categories"], summary["random_rows"]
    info.update(extra or {})
    path.write_text(json.dumps(info, indent=2, default=str))
