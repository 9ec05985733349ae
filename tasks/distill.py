"""``distill``: continued training of an embedding model by distillation from the original model.

An embedding model (the real lane's multilingual-e5-small, a bare ``BertModel``) has no LM head, so
:mod:`tasks.lapt` refuses it. Its natural continued training is what the distillation-based
transfers optimize (ZeTT, TokAlign): the *student* (the trial's model: new tokenizer, initialized
embeddings) learns to put each target-language line where the *teacher* (the original source model,
``TaskContext.source_model``, reading the same line with the original tokenizer) puts it.

* Sentence vectors: pooled last hidden states of ``prefix + line`` (``pooling``: mean over every
  token, specials included, or the first token), L2-normalized, on both sides — the pooling of
  :mod:`tasks.sentence_embeddings`, so the loss is exactly what ``teacher-agreement`` measures.
* Loss per line (``loss``): ``cosine`` = ``1 - cos(student, teacher)``; ``mse`` = mean squared
  difference of the two normalized vectors (``2 (1 - cos) / d``: the same optimum, another scale).
* The teacher's vectors of the training lines are computed once before training (frozen teacher,
  no gradient, in batches of ``teacher_batch_size``) by :func:`tasks.sentence_embeddings.teacher_embeddings`,
  so they are shared per process and in tokxfer's cache with every method and seed of a grid.
* ``train: embeddings`` (default) trains only the input embedding matrix (TransInner's phase 1 as a
  stage); every other parameter has ``requires_grad=False`` and is checked bit-identical afterwards
  by fingerprint (:func:`tasks.lapt.parameter_fingerprints`). ``all`` trains the whole encoder.
* Held out: the *last* ``held_out_lines`` lines of each language's training file are never trained
  on; ``distill_loss_before`` / ``distill_loss_after`` are the mean loss on them (student in eval
  mode, no dropout) before and after training.
* The training loop is the project's one loop (:func:`tasks.loop.finetune`): AdamW, warmup then
  linear decay, clipping, data order from ``torch_generator(seed, "distill", "data-order", epoch)``,
  dropout under ``seeded_globals``; the caller's global RNG is left untouched.
* Cached like LAPT (:func:`harness.cache.cached_dir`, kind ``distill``) under
  :func:`distill_cache_key`: the caller's init key, this config, the seed, the languages, the
  *contents* of the training files and the teacher's identity (path, weights fingerprint, tokenizer).

A language-encoded model is refused (not supported yet).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from harness.protocols import TaskContext, TaskResult
from harness.registry import register_stage
from tasks.lapt import cached_stage, hf_model, parameter_fingerprints
from tasks.loop import TrainConfig, finetune, resolve_device
from tasks.sentence_embeddings import POOLINGS, SentenceConfig, _hidden, embed, pool, teacher_embeddings

__all__ = ["DistillConfig", "Distill", "distill_cache_key", "distill_loss"]

DISTILL_CODE_VERSION = 1
"""Part of every distill cache key: bump when a change here changes the weights a config produces."""

TRAINS = ("embeddings", "all")
LOSSES = ("cosine", "mse")


@dataclass(frozen=True)
class DistillConfig:
    """Configuration of :class:`Distill`.

    Example:
        >>> DistillConfig(train_file="real:data/{lang}/train.txt", prefix="query: ").max_steps
        100
    """

    train_file: str | None = None
    """Target-language text, one line a sentence; ``{lang}`` is replaced by each language, a ``real:``
    name is resolved (``real:data/{lang}/train.txt``). None: the world's text (``split``)."""
    split: str = "train"
    """World text split used when ``train_file`` is not given."""
    prefix: str = ""
    """Put before every line on both sides (e5's card: ``"query: "``)."""
    pooling: str = "mean"
    """``mean`` over every token (specials included) or ``cls`` (first token), as the model's card says."""
    max_steps: int = 100
    """Optimizer steps (passes over the lines repeat as needed). Small by default: an e5-small step
    with 16 lines costs a fraction of a second on one CPU thread."""
    batch_size: int = 16
    """Lines per optimizer step."""
    max_length: int = 64
    """Tokens per line, special tokens included (both sides; longer lines are truncated)."""
    learning_rate: float = 1e-4
    """Peak AdamW learning rate."""
    lr_schedule: str = "linear"
    """After warmup: ``linear`` decay to 0 or ``constant``."""
    warmup_ratio: float = 0.1
    """Fraction of the steps spent warming up linearly from 0."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay (none: the embeddings of rare tokens should not shrink to 0)."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm; 0 disables it."""
    train: str = "embeddings"
    """``embeddings``: only the input embedding matrix trains, everything else is frozen and checked
    unchanged; ``all``: every parameter trains."""
    loss: str = "cosine"
    """``cosine``: ``1 - cos(student, teacher)``; ``mse``: mean squared difference of the normalized vectors."""
    max_train_lines: int | None = None
    """Train on the first N lines per language (after the held-out lines are set aside); None: all.
    Also bounds the teacher's one-off embedding cost."""
    held_out_lines: int = 64
    """The last N lines of each training file: never trained on, the before/after loss is measured on them."""
    teacher_batch_size: int = 64
    """Lines per teacher forward pass when its vectors are computed (memory bound; same vectors up to rounding)."""
    log_every: int = 10
    """Loss-curve resolution (mean loss over this many steps per point)."""
    mixed_precision: bool = True
    """bf16 autocast on CUDA only."""
    cache: bool = True
    """Reuse/store the distilled model when the caller passes a ``cache_key`` to ``apply``."""

    def __post_init__(self) -> None:
        def bad(name: str, expected: str) -> ValueError:
            return ValueError(f"distill: config '{name}' must be {expected}, got {getattr(self, name)!r}")

        if self.pooling not in POOLINGS:
            raise bad("pooling", f"one of {', '.join(POOLINGS)}")
        if self.train not in TRAINS:
            raise bad("train", f"one of {', '.join(TRAINS)}")
        if self.loss not in LOSSES:
            raise bad("loss", f"one of {', '.join(LOSSES)}")
        if self.lr_schedule not in ("linear", "constant"):
            raise bad("lr_schedule", "'linear' or 'constant'")
        for name in ("max_steps", "batch_size", "held_out_lines", "teacher_batch_size", "log_every"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise bad(name, "an integer >= 1")
        if self.max_train_lines is not None and (not isinstance(self.max_train_lines, int) or self.max_train_lines < 1):
            raise bad("max_train_lines", "an integer >= 1 or null")
        if not isinstance(self.max_length, int) or self.max_length < 4:
            raise bad("max_length", "an integer >= 4")
        if not self.learning_rate > 0:
            raise bad("learning_rate", "> 0")
        if not 0 <= self.warmup_ratio < 1:
            raise bad("warmup_ratio", "in [0, 1)")
        for name in ("weight_decay", "max_grad_norm"):
            if not getattr(self, name) >= 0:
                raise bad(name, ">= 0")
        if self.train_file is not None and not str(self.train_file).strip():
            raise bad("train_file", "a file path (with {lang}) or null")

    def sentence_config(self, batch_size: int | None = None) -> SentenceConfig:
        """How a line becomes a vector, as :mod:`tasks.sentence_embeddings` takes it."""
        return SentenceConfig(pooling=self.pooling, prefix=self.prefix, max_length=self.max_length,
                              batch_size=batch_size or self.teacher_batch_size)

    def train_config(self) -> TrainConfig:
        """The :class:`tasks.loop.TrainConfig` of the one training loop."""
        return TrainConfig(learning_rate=self.learning_rate, batch_size=self.batch_size, epochs=1,
                           max_steps=self.max_steps, lr_schedule=self.lr_schedule,
                           warmup_steps=math.ceil(self.warmup_ratio * self.max_steps), weight_decay=self.weight_decay,
                           max_grad_norm=self.max_grad_norm, mixed_precision=self.mixed_precision,
                           log_every=self.log_every)


# ------------------------------------------------------------------------------------ loss


def distill_loss(student: torch.Tensor, teacher: torch.Tensor, kind: str) -> torch.Tensor:
    """Mean loss of L2-normalized ``student`` rows against their ``teacher`` rows.

    Example:
        >>> s = torch.tensor([[1.0, 0.0], [0.0, 1.0]]); t = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
        >>> float(distill_loss(s, t, "cosine")), float(distill_loss(s, t, "mse"))
        (0.5, 0.5)
    """
    if kind == "cosine":
        return (1.0 - (student * teacher).sum(-1)).mean()
    if kind == "mse":
        return ((student - teacher) ** 2).mean()
    raise ValueError(f"distill: unknown loss {kind!r}; expected one of {', '.join(LOSSES)}")


class _Student(torch.nn.Module):
    """The trial's model as the loop trains it: ``forward(input_ids, attention_mask, teacher)`` returns
    the distillation loss of the pooled, normalized last hidden states (:func:`tasks.sentence_embeddings.pool`, as ``embed``)."""

    def __init__(self, model: Any, pooling: str, loss: str) -> None:
        super().__init__()
        self.model, self.pooling, self.loss = model, pooling, loss

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, teacher: torch.Tensor) -> Any:
        student = pool(_hidden(self.model, {"input_ids": input_ids, "attention_mask": attention_mask}), attention_mask,
                       self.pooling)
        return SimpleNamespace(loss=distill_loss(student, teacher.to(student.dtype), self.loss))


class _Collate:
    """Pads the lines of a batch and stacks their teacher vectors."""

    def __init__(self, pad_id: int, teacher: np.ndarray) -> None:
        self.pad_id, self.teacher = pad_id, teacher

    def __call__(self, features: list[dict]) -> dict[str, torch.Tensor]:
        width = max(len(f["input_ids"]) for f in features)
        ids = torch.full((len(features), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(features), width), dtype=torch.long)
        for r, f in enumerate(features):
            ids[r, : len(f["input_ids"])] = torch.tensor(f["input_ids"])
            mask[r, : len(f["input_ids"])] = 1
        rows = [f["row"] for f in features]
        return {"input_ids": ids, "attention_mask": mask, "teacher": torch.from_numpy(self.teacher[rows])}


# ----------------------------------------------------------------------------------- cache


def teacher_identity(ctx: TaskContext) -> dict:
    """What names the teacher in the cache key: its path, the fingerprint of its weights (loaded once per
    process, shared with :func:`tasks.sentence_embeddings.teacher_embeddings`) and its tokenizer's content."""
    from harness.vocab import tokenizer_key
    from tasks.sentence_embeddings import _TEACHER_MODEL, _load_teacher

    src = str(ctx.source_model)
    _, fingerprint = _TEACHER_MODEL.get(src, lambda: _load_teacher(src))
    return {"model": src, "weights": fingerprint, "tokenizer": tokenizer_key(ctx.source_tokenizer)}


def distill_cache_key(init_key: dict, config: DistillConfig, *, teacher: dict, data_files: list[Path],
                      seed: int, languages: list[str]) -> str:
    """Content hash naming one distillation result: same key => same weights.

    Args:
        init_key: the caller's key of the initialized model.
        config: the stage config (every field: ``teacher_batch_size`` changes the teacher's vectors in
            the last bits, ``held_out_lines`` which lines are trained on).
        teacher: :func:`teacher_identity`.
        data_files: the training text files (hashed by *content*).
        seed: the trial seed (data order, dropout).
        languages: the target languages.

    Example:
        >>> a = distill_cache_key({"m": 1}, DistillConfig(), teacher={"model": "t"}, data_files=[], seed=1, languages=["de"])
        >>> a != distill_cache_key({"m": 1}, DistillConfig(), teacher={"model": "t"}, data_files=[], seed=2, languages=["de"])
        True
    """
    import transformers

    from harness.cache import content_hash

    return content_hash({
        "what": "distill", "code_version": DISTILL_CODE_VERSION, "init": init_key,
        "config": {"__dataclass__": type(config).__qualname__, **dataclasses.asdict(config)},
        "teacher": teacher, "data": [Path(p) for p in data_files], "seed": seed, "languages": list(languages),
        "versions": {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__},
    })


# ------------------------------------------------------------------------------------ stage


@register_stage(
    "distill",
    config=DistillConfig,
    description="distillation from the original model: student sentence embeddings of target text match the teacher's",
)
class Distill:
    """Train the transferred model's embeddings (or all of it) to reproduce the original model's sentence embeddings."""

    needs_lm_head = False
    """Reads the encoder body only: works on a checkpoint without an LM head (the real lane's e5)."""

    def __init__(self, config: DistillConfig) -> None:
        self.config = config

    # -- inputs

    def train_paths(self, ctx: TaskContext) -> list[Path]:
        """One training text file per language (``train_file``, ``real:`` names resolved, or the world's text)."""
        cfg = self.config
        if cfg.train_file is None:
            if ctx.data_root is None:
                raise ValueError("distill: set config 'train_file' (no world directory in the task context)")
            from harness.world import World  # the world generator room; imported lazily

            world = World(ctx.data_root)
            return [Path(world.text(lang, cfg.split)) for lang in ctx.languages]
        from harness.real import is_real_name, resolve  # the real lane's resources; imported lazily

        out = []
        for lang in ctx.languages:
            name = cfg.train_file.format(lang=lang)
            path = resolve(name) if is_real_name(name) else Path(name)
            if not path.is_file():
                raise FileNotFoundError(f"distill: config 'train_file' {cfg.train_file!r}: no file {path}")
            out.append(path)
        return out

    def split_lines(self, path: Path) -> tuple[list[str], list[str]]:
        """``(training lines, held-out lines)`` of one file: the last ``held_out_lines`` are held out."""
        from harness.files import text_lines

        cfg = self.config
        lines = list(text_lines(path, strip=True, what="distill: config 'train_file'"))
        if len(lines) <= cfg.held_out_lines:
            raise ValueError(f"distill: config 'train_file': {path} has {len(lines)} non-empty line(s); needs more "
                             f"than held_out_lines={cfg.held_out_lines}")
        train, held = lines[: -cfg.held_out_lines], lines[-cfg.held_out_lines :]
        return (train[: cfg.max_train_lines] if cfg.max_train_lines is not None else train), held

    def _check(self, ctx: TaskContext) -> None:
        if ctx.source_model is None or ctx.source_tokenizer is None:
            raise ValueError("distill: the task context has no source model/tokenizer (TaskContext.source_model), "
                             "the teacher; the stage runs inside a trial or with them set")
        if getattr(ctx.model, "is_language_encoded", False) or (
                ctx.encoding is not None and getattr(ctx.encoding, "registry_name", None) != "none"):
            raise ValueError("distill: language-encoded models are not supported (use encoding 'none')")

    # -- entry point

    def apply(self, ctx: TaskContext, directives: dict, *, cache_key: dict | None = None,
              cache_root: str | Path | None = None) -> tuple[Any, TaskResult]:
        """Distill ``ctx.model`` towards the original model on the languages of ``ctx``; ``(model, result)``.

        Args:
            ctx: the trial's context (model, tokenizer, languages, seed, device, source_model/tokenizer).
            directives: the method's directives: not used (TransInner's phases belong to LAPT; ``train``
                chooses what trains here), recorded in ``info["ignored_directives"]``.
            cache_key: the caller's key of the initialized model; when given (and ``config.cache``) the
                distilled model is cached under :func:`distill_cache_key` and a later identical call loads it.
            cache_root: cache root (default :func:`harness.cache.cache_root`).

        Returns:
            The distilled model (eval mode) and a :class:`TaskResult`: metrics ``distill_loss_before`` /
            ``distill_loss_after`` on the held-out lines, ``curves["loss"]`` (training loss), ``info`` with
            the resolved hyperparameters, timings, freeze check and cache use.
        """
        from transformers import PreTrainedModel

        self._check(ctx)
        paths = self.train_paths(ctx)
        if cache_key is None or not self.config.cache or not isinstance(ctx.model, PreTrainedModel):
            model, result = self._train(ctx, paths, directives)
            result.info["cache"] = None if cache_key is None or not self.config.cache else "skipped: not a transformers model"
            return model, result
        t0 = time.perf_counter()
        key = distill_cache_key(cache_key, self.config, teacher=teacher_identity(ctx), data_files=paths, seed=ctx.seed,
                                languages=ctx.languages)
        model, result = cached_stage("distill", key, lambda: self._train(ctx, paths, directives), type(ctx.model),
                                     resolve_device(ctx.device), cache_root=cache_root, progress=ctx.progress,
                                     what="distilled")
        if result.info["cache"]["hit"]:
            result.info["timings"] = {**result.info.get("timings", {}), "cache_hit_s": round(time.perf_counter() - t0, 3)}
        return model, result

    # -- training

    def _train(self, ctx: TaskContext, paths: list[Path], directives: dict) -> tuple[Any, TaskResult]:
        cfg = self.config
        t0, c0 = time.perf_counter(), time.process_time()
        device = resolve_device(ctx.device)
        model = ctx.model
        sentence = cfg.sentence_config()
        train_lines, held_lines, teacher_rows, teacher_held = [], [], [], []
        for lang, path in zip(ctx.languages, paths):
            train, held = self.split_lines(path)
            teacher_rows.append(teacher_embeddings("distill", ctx, train, sentence, description=f"teacher {lang}"))
            teacher_held.append(teacher_embeddings("distill", ctx, held, sentence, description=f"teacher {lang} held out"))
            train_lines += train
            held_lines.append(held)
        teacher = np.concatenate(teacher_rows).astype(np.float32)
        t_teacher, c_teacher = time.perf_counter() - t0, time.process_time() - c0

        def held_out_loss() -> float:
            losses = [float(distill_loss(torch.from_numpy(embed(model, ctx.tokenizer, held, sentence, device=device)),
                                         torch.from_numpy(t), cfg.loss)) for held, t in zip(held_lines, teacher_held)]
            return float(np.mean(losses))

        before = held_out_loss()
        ids = ctx.tokenizer([cfg.prefix + t for t in train_lines], truncation=True, max_length=cfg.max_length)["input_ids"]
        features = [{"input_ids": x, "row": i} for i, x in enumerate(ids)]
        pad = ctx.tokenizer.pad_token_id if ctx.tokenizer.pad_token_id is not None else 0

        hf = hf_model(model)
        embedding = hf.get_input_embeddings().weight
        saved = {name: p.requires_grad for name, p in model.named_parameters()}
        frozen = {name: p for name, p in model.named_parameters() if p is not embedding} if cfg.train == "embeddings" else {}
        fingerprints = parameter_fingerprints(frozen)
        t1, c1 = time.perf_counter(), time.process_time()
        try:
            for p in model.parameters():
                p.requires_grad_(cfg.train == "all" or p is embedding)
            trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
            res = finetune(_Student(model, cfg.pooling, cfg.loss), features, None, lambda m: None, cfg.train_config(),
                           ctx.seed, collate_fn=_Collate(pad, teacher), device=device, show_progress=ctx.progress,
                           description="distill", rng_path=("distill",))
        finally:
            for name, p in model.named_parameters():
                p.requires_grad_(saved[name])
        t_train, c_train = time.perf_counter() - t1, time.process_time() - c1
        changed = [name for name, fp in parameter_fingerprints(frozen).items() if fp != fingerprints[name]]
        if changed:
            raise RuntimeError(f"distill: frozen parameters changed while training the embeddings only: {changed[:5]}")
        model.eval()
        after = held_out_loss()

        key = "+".join(ctx.languages)
        info = {
            "hyperparameters": {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)},
            "train_files": [str(p) for p in paths],
            "held_out": f"the last {cfg.held_out_lines} lines of each training file, never trained on",
            "teacher": {"model": str(ctx.source_model), "note": "the original model and tokenizer, frozen"},
            "loss": {"cosine": "1 - cos(student, teacher)", "mse": "mean squared difference of normalized vectors"}[cfg.loss],
            "trained": "input embedding matrix" if cfg.train == "embeddings" else "all parameters",
            "trainable_parameters": trainable,
            "freeze_verified": True if cfg.train == "embeddings" else None,
            "ignored_directives": dict(directives) or None,
            "steps": res.steps,
            "epochs": round(res.steps * cfg.batch_size / len(features), 3),
            "timings": {"teacher_s": round(t_teacher, 3), "train_s": round(t_train, 3),
                        "total_s": round(time.perf_counter() - t0, 3), "teacher_cpu_s": round(c_teacher, 3),
                        "train_cpu_s": round(c_train, 3), "total_cpu_s": round(time.process_time() - c0, 3)},
        }
        result = TaskResult(
            metrics={key: {"distill_loss_before": before, "distill_loss_after": after}},
            counts={key: {"train_lines": len(train_lines), "held_out_lines": sum(len(h) for h in held_lines),
                          "steps": res.steps}},
            curves={"loss": [(int(s), float(v)) for s, v in res.loss_curve]},
            info=info,
        )
        return model, result
