"""Built-in source models: a tiny RoBERTa-like masked LM or GPT-2-like causal LM pretrained on the world.

:func:`pretrained_source` trains a SentencePiece-Unigram tokenizer on the world's source-language
text (optionally mixed with some target-language text, to mimic a multilingual source that "saw"
the target), builds a ``RobertaForMaskedLM`` (``kind="mlm"``) or ``GPT2LMHeadModel``
(``kind="clm"``), pretrains it for a few minutes on CPU and saves model, tokenizer and
``pretrain_info.json`` into a content-hashed cache directory. The hash covers the bytes of the
text it trained on, the resolved :class:`PretrainConfig` and :data:`CODE_VERSION`, so a later call
with the same world and config returns at once.

Language-aware pretraining (``PretrainConfig.encoding``, the XLP paper's settings): the source
language and ``extra_languages`` are cut into single-language blocks whose language ids travel
with every batch; the encoding (``additive``, ``attached``, ``xlp`` or ``none``) is trained with
the model and saved beside it, so ``read_pretrained``/``load_encoded`` of
:mod:`harness.language_encoding` read it back and a trial with the same encoding keeps it.
:func:`multilingual_config` is that config for a world (``tokxfer world pretrain --encoding xlp``).

Reproducibility: every random draw comes from :mod:`harness.seeding` (model init and dropout under
``seeded_globals``; data order and MLM masks from explicit ``torch.Generator`` s), and the caller's
global RNG state is left untouched. Same config, same text, same torch thread count and machine
=> bitwise-identical weights (CPU kernels may sum in a different order with a different thread
count, which changes low-order bits).

Example:
    >>> from harness.world import build_world                               # doctest: +SKIP
    >>> model_dir = pretrained_source(build_world("small"), kind="mlm")      # doctest: +SKIP
    >>> AutoModelForMaskedLM.from_pretrained(model_dir)                      # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import transformers

from harness import progress as _progress
from harness import seeding
from harness import tokenizers as tk
from harness.cache import cache_target, cached_dir
from harness.world import codeswitch, tlm
from harness.world import pretrain_data as pdata
from harness.world import pretrain_model as pmodel
from harness.world.pretrain_config import Kind, PretrainConfig

__all__ = ["CODE_VERSION", "INFO_FILE", "PretrainConfig", "multilingual_config", "pretrain_on_files", "pretrained_source"]

CODE_VERSION = 1
"""Part of every cache key: bump when a change here changes the weights a config produces."""

INFO_FILE = "pretrain_info.json"
"""Written next to the model: config, loss curve, dev loss, timings, versions."""

# ----------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def _dev_loss(
    model: torch.nn.Module,
    config: PretrainConfig,
    dev: torch.Tensor,
    mask_kwargs: dict[str, Any],
    loss_fn: Any = None,
) -> float:
    """Mean loss over the dev blocks with masks fixed by the seed (identical at every eval point).

    ``loss_fn(model, kind, inputs, labels)`` defaults to :func:`loss`.
    """
    loss_fn = loss_fn or pmodel.token_loss
    was_training = model.training
    model.eval()
    g = seeding.torch_generator(config.seed, "pretrain", "eval-mask")
    total, count = 0.0, 0
    for start in range(0, dev.shape[0], config.batch_size):
        ids = dev[start : start + config.batch_size]
        if config.kind == "mlm":
            inputs, labels = pdata.mask_tokens(ids, generator=g, **mask_kwargs)
            n = int((labels != -100).sum())
        else:
            inputs, labels = ids, ids
            n = ids.numel() - ids.shape[0]
        total += loss_fn(model, config.kind, inputs, labels).item() * n
        count += n
    model.train(was_training)
    return total / max(count, 1)


def _pretrain_into(
    out: Path,
    config: PretrainConfig,
    train_files: Sequence[Path],
    dev_files: Sequence[Path],
    cache_dir: Path | None,
    progress: bool,
    provenance: dict[str, Any],
    language_files: dict[str, list[Path]] | None = None,
    tlm_pairs: dict[str, list[tuple[str, str]]] | None = None,
) -> None:
    """Train tokenizer and model on ``train_files`` and save everything into ``out``.

    With ``config.encoding`` set, ``language_files`` holds each language's training text (the
    source language first; its dev text is ``dev_files``) and ``train_files`` only trains the
    tokenizer (the same mixed corpus as plain multilingual pretraining, hence the same vocabulary).
    ``tlm_pairs`` (``config.tlm_fraction > 0``): each extra language's (source, translation) pairs.
    """
    # Stays whole: data, model, encoding wrapper, training and the saved provenance run in the order the cache
    # entry records; split, its eight inputs would be threaded through each piece.
    t_start, cpu_start = time.perf_counter(), time.process_time()
    tok = tk.train_tokenizer(
        list(train_files), config.tokenizer_algorithm, config.vocab_size, cache_dir=cache_dir, progress=False
    )
    t_tok = time.perf_counter()
    train, block_langs, dev = _pretraining_blocks(tok, config, train_files, dev_files, language_files)
    seqs = None
    if tlm_pairs is not None:
        seqs = tlm.pack_pairs(tok, tlm_pairs, str(provenance["source_language"]), config.max_len,
                              seeding.torch_generator(config.seed, "pretrain", "tlm-pack"), config.tlm_style)  # fmt: skip
    t_data = time.perf_counter()
    if config.kind == "mlm" and tok.mask_token_id is None:
        raise ValueError("an MLM source needs a tokenizer with a mask token")

    with seeding.seeded_globals(config.seed, "pretrain", "init"):
        model = pmodel.build_model(config, tok, config.dropout)
    n_params = sum(p.numel() for p in model.parameters())
    # a GPU when there is one, as the runner does for tasks (the medium presets' sources); recorded below
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device)
    wrapped = pmodel.encode_model(model, config, list(language_files)) if language_files else None
    t_train = time.perf_counter()
    curve, dev_curve, tlm_curve = _train_source(model, wrapped, config, tok, train, block_langs, dev, progress,
                                                dev_langs=[next(iter(language_files))] if wrapped is not None else [],
                                                tlm_seqs=seqs)  # fmt: skip
    t_end = time.perf_counter()

    (wrapped if wrapped is not None else model).to("cpu")
    _save_source(out, model, wrapped, tok, config)
    info = {
        "schema_version": 1,
        "code_version": CODE_VERSION,
        "config": config.to_dict(),
        "model_class": type(model).__name__,
        "parameters": n_params,
        "tokenizer": tk.tokenizer_info(tok),
        "train_blocks": int(train.shape[0]),
        "train_tokens": int(train.numel()),
        "tokens_seen": config.steps * config.batch_size * config.max_len,
        "epochs": round(config.steps * config.batch_size / train.shape[0], 3),
        "final_loss": curve[-1][1],
        "loss_curve": curve,
        "dev_loss": dev_curve[-1][1] if dev_curve else None,
        "dev_curve": dev_curve,
        "timings": {
            "tokenizer_s": round(t_tok - t_start, 3),
            "data_s": round(t_data - t_tok, 3),
            "train_s": round(t_end - t_train, 3),
            "total_s": round(time.perf_counter() - t_start, 3),
            # CPU seconds of this process: a load-independent measure on a shared machine.
            "cpu_s": round(time.process_time() - cpu_start, 3),
        },
        "torch_threads": torch.get_num_threads(),
        "device": device,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        **provenance,
    }
    if config.encoding is not None:
        counts = {lang: block_langs.count(lang) for lang in dict.fromkeys(block_langs or [])}
        info["language_blocks"] = counts
        info["encoding"] = wrapped.encoding_info() if wrapped is not None else {"name": "none", "parameters_added": 0}
    if seqs is not None:
        info["tlm"] = {**seqs.info(), "steps": sum(tlm.is_tlm_step(s, config.tlm_fraction) for s in range(1, config.steps + 1)),
                       "final_loss": tlm_curve[-1][1] if tlm_curve else None, "loss_curve": tlm_curve}  # fmt: skip
    (out / INFO_FILE).write_text(json.dumps(info, indent=1) + "\n")


def _pretraining_blocks(
    tok: Any,
    config: PretrainConfig,
    train_files: Sequence[Path],
    dev_files: Sequence[Path],
    language_files: dict[str, list[Path]] | None,
) -> tuple[torch.Tensor, list[str] | None, torch.Tensor | None]:
    """``(train blocks, language of each block or None, dev blocks or None)``."""
    block_langs: list[str] | None = None
    if config.encoding is None:
        block_len = config.max_len
        train = pdata.blocks(pdata.token_stream(tok, train_files), block_len, "training")
    else:
        if not language_files:
            raise ValueError("PretrainConfig.encoding needs the training text of each language")
        block_len = config.max_len - 1  # room for attached's language token, the same blocks for every encoding
        train, block_langs = pdata.language_blocks(tok, language_files, block_len)
    dev_stream = pdata.token_stream(tok, dev_files) if dev_files else None
    # A dev text shorter than one block gives no dev loss rather than an error.
    dev = None
    if dev_stream is not None and dev_stream.numel() >= block_len:
        dev = pdata.blocks(dev_stream, block_len, "dev")[: config.eval_blocks]
    return train, block_langs, dev


def _train_source(
    model: Any,
    wrapped: Any,
    config: PretrainConfig,
    tok: Any,
    train: torch.Tensor,
    block_langs: list[str] | None,
    dev: torch.Tensor | None,
    progress: bool,
    dev_langs: list[str],
    tlm_seqs: tlm.TlmSequences | None = None,
) -> tuple[list[list[float]], list[list[float]], list[list[float]]]:
    """The pretraining loop (``wrapped``: the language-encoded model, or None); returns the (MLM)
    loss curve, the dev curve and the TLM loss curve (empty without TLM) as ``[step, loss]`` rows."""
    # Stays whole: one training loop (MLM and TLM batches, schedule, dev curve) whose state is the optimizer,
    # the step count and three curves.
    special_ids = torch.tensor(sorted(set(tok.all_special_ids)), dtype=torch.long)
    regular_ids = torch.tensor(sorted(set(range(len(tok))) - set(tok.all_special_ids)), dtype=torch.long)
    mask_kwargs: dict[str, Any] = dict(
        special_ids=special_ids,
        regular_ids=regular_ids,
        mask_id=int(tok.mask_token_id) if tok.mask_token_id is not None else -1,
        probability=config.mlm_probability,
    )
    loss_fn = None
    if wrapped is not None:

        def loss_fn(m: Any, kind: str, inputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            return pmodel.encoded_loss(m, kind, inputs, labels, dev_langs * inputs.shape[0])

    trained = wrapped if wrapped is not None else model
    trained.train()
    device_type = next(trained.parameters()).device.type
    optimizer = torch.optim.AdamW(pmodel.param_groups(trained, config.weight_decay), lr=config.lr, betas=(0.9, 0.98), eps=1e-6)
    warmup = max(1, round(config.warmup_ratio * config.steps)) if config.warmup_ratio > 0 else 0

    def lr_factor(step: int) -> float:  # step = number of optimizer steps already taken
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (config.steps - step) / max(1, config.steps - warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
    data_gen = seeding.torch_generator(config.seed, "pretrain", "data")
    mask_gen = seeding.torch_generator(config.seed, "pretrain", "mask")
    batches = pdata.batch_indices(train.shape[0], config.batch_size, data_gen)
    tlm_batches = None
    if tlm_seqs is not None:
        tlm_batches = tlm.TlmBatches(tlm_seqs, config.batch_size, config.seed, int(tok.pad_token_id), mask_kwargs,
                                     max_len=config.max_len)  # fmt: skip
    log_every = max(1, config.steps // 50)
    eval_at = {round(config.steps * (i + 1) / config.eval_points) for i in range(config.eval_points)}
    curve: list[list[float]] = []
    dev_curve: list[list[float]] = []
    window: list[float] = []
    tlm_curve: list[list[float]] = []
    tlm_window: list[float] = []
    ema: float | None = None
    with (
        seeding.seeded_globals(config.seed, "pretrain", "dropout"),
        _progress.terminal_bar(f"pretraining {config.kind} source", config.steps, enabled=progress, fields=("loss",)) as bar,
    ):
        for step in range(1, config.steps + 1):
            is_tlm = tlm_batches is not None and tlm.is_tlm_step(step, config.tlm_fraction)
            with torch.autocast(device_type, dtype=torch.bfloat16, enabled=config.bf16):
                if is_tlm:
                    assert tlm_batches is not None and tlm_seqs is not None
                    loss = tlm.tlm_loss(model, wrapped, tlm_batches.next(), tlm_seqs.languages)
                else:
                    idx = next(batches)
                    ids = train[idx]
                    if config.kind == "mlm":
                        inputs, labels = pdata.mask_tokens(ids, generator=mask_gen, **mask_kwargs)
                    else:
                        inputs, labels = ids, ids
                    if wrapped is None:
                        loss = pmodel.token_loss(model, config.kind, inputs, labels)
                    else:
                        assert block_langs is not None
                        langs = [block_langs[i] for i in idx.tolist()]
                        loss = pmodel.encoded_loss(wrapped, config.kind, inputs, labels, langs)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trained.parameters(), config.max_grad_norm)
            optimizer.step()
            scheduler.step()
            value = loss.detach().item()
            if not math.isfinite(value):
                raise FloatingPointError(f"pretraining loss became {value} at step {step}; lower PretrainConfig.lr")
            if is_tlm:
                tlm_window.append(value)
            else:
                window.append(value)
                ema = value if ema is None else 0.98 * ema + 0.02 * value
            bar.advance(1, loss=f"{ema if ema is not None else value:.3f}")
            if step % log_every == 0 or step == config.steps:
                for rows, values in ((curve, window), (tlm_curve, tlm_window)):
                    if values:
                        rows.append([step, round(sum(values) / len(values), 4)])
                        values.clear()
            if dev is not None and step in eval_at:
                dev_curve.append([step, round(_dev_loss(trained, config, dev, mask_kwargs, loss_fn), 4)])
    return curve, dev_curve, tlm_curve


def _save_source(out: Path, model: Any, wrapped: Any, tok: Any, config: PretrainConfig) -> None:
    """Save the model (with its language encoding, if any) and the tokenizer into ``out``."""
    pmodel.set_dropout(model, config.saved_dropout)
    tok.model_max_length = config.max_len  # only now: the stream above encodes whole lines
    hf_logging = transformers.utils.logging
    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # no "Writing model shards" bar for a 20 MB file
    try:
        if wrapped is None:
            model.save_pretrained(out)
        else:  # the model plus language_encoding.json/.safetensors (masked LMs: tables moved off the loss module)
            saved = wrapped.rewrap(model, finetuning=False) if config.kind == "mlm" else wrapped
            saved.save_pretrained(out)
    finally:
        if bars_were_on:
            hf_logging.enable_progress_bar()
    tok.save_pretrained(out)


_OMITTED_AT_DEFAULT = {"encoding": None, "tlm_fraction": 0.0, "bf16": False, "codeswitch": 0.0, "tlm_style": "packed"}
"""Fields added after sources were cached: left out of the cache key at these values."""


def _config_key(config: PretrainConfig) -> dict[str, Any]:
    """The config as :func:`harness.cache.content_hash` hashes a dataclass, without the fields of
    :data:`_OMITTED_AT_DEFAULT` at their defaults: sources pretrained before they existed keep their cache keys."""
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    for name, default in _OMITTED_AT_DEFAULT.items():
        if fields[name] == default:
            del fields[name]
    return {"__dataclass__": type(config).__qualname__, **fields}


def _cache_key(config: PretrainConfig, train: Any, dev: Any, parallel: dict[str, Path] | None = None,
               word_maps: dict[str, Path] | None = None) -> dict[str, Any]:  # fmt: skip
    key = {
        "what": "pretrained_source",
        "code_version": CODE_VERSION,
        "tokenizer_code_version": tk.CODE_VERSION,
        "config": _config_key(config),
        "train": train,  # Paths: hashed by content (a dict of them per language for encoded pretraining)
        "dev": dev,
    }
    if parallel is not None:  # TLM's parallel text (absent otherwise: earlier keys unchanged)
        key["parallel"] = parallel
    if word_maps is not None:  # code-switching's word maps (likewise)
        key["word_maps"] = word_maps
    return key


def pretrain_on_files(
    train_files: Sequence[Path | str],
    config: PretrainConfig | None = None,
    *,
    dev_files: Sequence[Path | str] = (),
    cache_dir: Path | str | None = None,
    progress: bool = True,
) -> Path:
    """Pretrain a source model on arbitrary text files (one sentence or document per line).

    The world-free core of :func:`pretrained_source`, for real text. ``config.extra_languages``
    must be empty here (there is no world to draw them from: pass their files in ``train_files``).

    Args:
        train_files: UTF-8 text used for the tokenizer and for pretraining.
        config: what to build; ``PretrainConfig()`` if None.
        dev_files: held-out text for the dev loss recorded in ``pretrain_info.json`` (optional).
        cache_dir: cache root (entries under ``<cache_dir>/sources/``); :func:`harness.cache.cache_root` if None.
        progress: show a progress bar with the running loss.

    Returns:
        The cached model directory (model, tokenizer, ``pretrain_info.json``).

    Example:
        >>> d = pretrain_on_files(["corpus.txt"], PretrainConfig.tiny())   # doctest: +SKIP
    """
    config = config or PretrainConfig()
    if config.extra_languages:
        raise ValueError("PretrainConfig.extra_languages needs a world; use pretrained_source, or add the files")
    if config.encoding is not None:
        raise ValueError("PretrainConfig.encoding needs a world (text tagged by language); use pretrained_source")
    train = [Path(p) for p in train_files]
    dev = [Path(p) for p in dev_files]
    for p in (*train, *dev):
        if not p.is_file():
            raise FileNotFoundError(f"pretraining text file {str(p)!r} does not exist")
    root = Path(cache_dir) if cache_dir is not None else None

    def build(out: Path) -> None:
        _pretrain_into(out, config, train, dev, root, progress, {"train_files": [p.name for p in train]})

    return cached_dir("sources", _cache_key(config, train, dev), build, root=root)


def multilingual_config(world_dir: Path | str, kind: Kind, encoding: str,
                        languages: Sequence[str] | None = None, **overrides: Any) -> PretrainConfig:  # fmt: skip
    """The multilingual source of the XLP settings: the source language plus ``languages`` (None:
    every target of the world, in the world's order) pretrained with ``encoding``.

    ``tokxfer world pretrain --encoding ENC`` builds this config; an experiment gets the same one
    from ``source: {model: "world:mlm", pretrain: {encoding: trial, extra_languages: [...]}}``.

    Example:
        >>> multilingual_config(world, "mlm", "xlp").extra_languages      # doctest: +SKIP
        ('near', 'far', 'script', 'agglu')
    """
    from harness.world import World

    world = World(Path(world_dir))
    if languages is None:
        languages = [lang for lang in world.languages if lang != world.source_language]
    return PretrainConfig(kind=kind, encoding=encoding, extra_languages=tuple(languages), **overrides)


def pretrained_source(
    world_dir: Path | str,
    kind: Kind | None = None,
    config: PretrainConfig | None = None,
    cache_dir: Path | str | None = None,
    progress: bool = True,
    locate_only: bool = False,
) -> Path:
    """The world's built-in source model: pretrained on first use, then served from the cache.

    Trains the tokenizer (``config.tokenizer_algorithm``, SentencePiece-Unigram by default) on
    ``World(world_dir).text("src", "train")`` (plus the first lines of each of
    ``config.extra_languages``), pretrains the model, and records the dev loss on
    ``text("src", "dev")``. Cached by the content of those files and the config.

    Args:
        world_dir: a world directory (see ``harness.world.build_world``).
        kind: ``"mlm"`` or ``"clm"``; None takes ``config.kind``. Conflicting with an explicit
            ``config.kind`` is an error.
        config: what to build; ``PretrainConfig(kind=kind)`` if None.
        cache_dir: cache root (entries under ``<cache_dir>/sources/``); :func:`harness.cache.cache_root` if None.
        progress: show a progress bar with the running loss.
        locate_only: build nothing: return where the cached model is or will be (complete once it exists).

    Returns:
        An HF model directory (``AutoModelForMaskedLM`` / ``AutoModelForCausalLM`` and
        ``AutoTokenizer`` load it) holding ``pretrain_info.json``.

    Raises:
        ValueError: conflicting ``kind``, or an extra language the world does not have.

    Example:
        >>> path = pretrained_source(world, "mlm", PretrainConfig.tiny(), progress=False)  # doctest: +SKIP
        >>> json.loads((path / "pretrain_info.json").read_text())["final_loss"]            # doctest: +SKIP
        5.1
    """
    # Over 80 lines by its docstring and the nested build of the cache entry; the body reads config, checks, build.
    if config is None:
        config = PretrainConfig(kind=kind or "mlm")
    elif kind is not None and kind != config.kind:
        raise ValueError(f"kind={kind!r} conflicts with config.kind={config.kind!r}; pass one of them")
    from harness.world import World  # the world package imports this module's siblings; import late

    world = World(Path(world_dir))
    source = world.source_language
    unknown = [lang for lang in config.extra_languages if lang not in world.languages or lang == source]
    if unknown:
        others = [lang for lang in world.languages if lang != source]
        raise ValueError(
            f"PretrainConfig.extra_languages has {unknown!r}, not target languages of this world; choose from {others!r}"
        )
    train: dict[str, Path] = {source: Path(world.text(source, "train"))}
    train.update({lang: Path(world.text(lang, "train")) for lang in config.extra_languages})
    dev = Path(world.text(source, "dev"))
    parallel = {lang: Path(world.parallel(lang)) for lang in config.extra_languages} if config.tlm_fraction > 0 else None
    word_maps = {lang: Path(world.word_map(lang)) for lang in config.extra_languages} if config.codeswitch > 0 else None
    root = Path(cache_dir) if cache_dir is not None else None
    provenance = {"world": str(Path(world_dir)), "source_language": source}

    def build(out: Path) -> None:
        if not config.extra_languages:
            language_files = None if config.encoding is None else {source: [train[source]]}
            _pretrain_into(out, config, [train[source]], [dev], root, progress, provenance, language_files)
            return
        # One mixed corpus (source first, then each extra language's first lines), so the tokenizer
        # and the model see the same text. Language-aware pretraining (config.encoding) trains the
        # tokenizer on the same corpus and the model on each language's part of it.
        n_source = sum(1 for _ in pdata.lines(train[source]))
        n_extra = max(1, round(config.extra_fraction * n_source))
        extra = {lang: list(pdata.lines(train[lang], limit=n_extra)) for lang in config.extra_languages}
        prov = dict(provenance)
        if word_maps is not None:  # each line, then its code-switched copy (the copy is of the same language)
            prov["codeswitch"] = {}
            for lang in config.extra_languages:
                gen = seeding.torch_generator(config.seed, "pretrain", "codeswitch", lang)
                copies, prov["codeswitch"][lang] = codeswitch.switched_copies(
                    extra[lang], codeswitch.read_word_map(word_maps[lang]), config.codeswitch, gen)
                extra[lang] = [x for pair in zip(extra[lang], copies, strict=True) for x in pair]
        with tempfile.TemporaryDirectory(prefix="tokxfer-mix-") as tmp:
            mixed = Path(tmp) / "pretrain_corpus.txt"
            with open(mixed, "w", encoding="utf-8") as f:
                for line in pdata.lines(train[source]):
                    f.write(line + "\n")
                for lang in config.extra_languages:
                    f.writelines(line + "\n" for line in extra[lang])
            language_files = None
            if config.encoding is not None:
                language_files = {source: [train[source]]}
                for lang in config.extra_languages:
                    part = Path(tmp) / f"{lang}.txt"
                    part.write_text("".join(line + "\n" for line in extra[lang]), encoding="utf-8")
                    language_files[lang] = [part]
            pairs = None if parallel is None else {lang: tlm.read_pairs(parallel[lang], n_extra) for lang in parallel}
            _pretrain_into(out, config, [mixed], [dev], root, progress, prov, language_files, pairs)

    key = _cache_key(config, train, dev, parallel, word_maps)
    return cache_target("sources", key, root=root) if locate_only else cached_dir("sources", key, build, root=root)
