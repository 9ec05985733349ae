"""The one fine-tune/evaluate loop every task uses, and the helpers around it.

Every downstream task (XNLI, QA, NER, …) is trained and scored by :func:`finetune`, so that all
methods are measured identically (STYLE.md, "avoid" 4). The protocol is FOCUS's: AdamW, linear
warmup over the first 10% of the steps then linear decay to 0, gradient clipping at 1.0,
evaluation on dev after every epoch, model selection on dev, and the selected checkpoint (kept in
memory as a CPU copy of its ``state_dict``) scored once on test.

Randomness: the data order of epoch ``e`` comes from an explicit generator
``torch_generator(seed, "task", "data-order", str(e))``; dropout (drawn by torch from its global
generator) runs under :func:`harness.seeding.seeded_globals`; task heads are created under
``seeded_globals(seed, "task", "head")`` in :func:`build_task_model`.

Distributed data parallel: :func:`finetune` and :func:`predict` run unchanged under ``torchrun``
(or any launcher that initializes ``torch.distributed``, or sets ``WORLD_SIZE``/``RANK``/
``MASTER_ADDR``). ``cfg.batch_size`` is the *global* batch size: each global batch of the seeded
order is split into contiguous per-rank chunks and each rank's mean loss is weighted by its
share of the batch, so that the averaged gradient equals the single-process gradient for
per-example losses (for token-level losses such as NER, each rank averages over its own tokens,
as the HF Trainer does). Evaluation shards the examples across ranks and gathers the predictions
in order, so every rank computes the same metrics and selects the same checkpoint. Only rank 0
prints and shows progress bars.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import nn

from harness import progress as _progress
from harness.examples import attach
from harness.seeding import seeded_globals

# re-exported: the tasks import the batching helpers from the loop
from tasks.batching import IGNORE_INDEX, epoch_batches, feature_lengths, length_batches, pad_collate  # noqa: F401

T = TypeVar("T")
LR_SCHEDULES = ("linear", "constant", "inverse_sqrt")
BATCHINGS = ("random", "length")
ADAMW_IMPLS = ("auto", "foreach", "fused")


# ------------------------------------------------------------------------------ distributed


def dist_info() -> tuple[int, int]:
    """``(rank, world_size)`` of this process; ``(0, 1)`` outside ``torch.distributed``."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def is_main_process() -> bool:
    """Whether this process prints and shows progress bars (rank 0)."""
    return dist_info()[0] == 0


def ensure_distributed(device: str = "cpu") -> tuple[int, int]:
    """Initialize ``torch.distributed`` from the environment when launched with ``WORLD_SIZE > 1``.

    Does nothing when it is already initialized or when ``WORLD_SIZE`` is unset or 1. Uses NCCL
    for CUDA devices and gloo otherwise, with the ``env://`` rendezvous ``torchrun`` provides.

    Returns:
        ``(rank, world_size)``.
    """
    if (
        torch.distributed.is_available()
        and not torch.distributed.is_initialized()
        and int(os.environ.get("WORLD_SIZE", "1")) > 1
    ):
        backend = "nccl" if torch.device(device).type == "cuda" else "gloo"
        torch.distributed.init_process_group(backend=backend)
    return dist_info()


def resolve_device(device: str) -> str:
    """Map a bare ``"cuda"`` to ``"cuda:LOCAL_RANK"`` under a multi-process launch."""
    if device == "cuda" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return device


def _all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    rank, world_size = dist_info()
    if world_size == 1:
        return values
    t = torch.tensor(values, dtype=torch.float64, device=device)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.SUM)
    return t.tolist()


def _all_gather_list(items: list) -> list:
    """Concatenate each rank's list in rank order (identity in a single process)."""
    rank, world_size = dist_info()
    if world_size == 1:
        return items
    gathered: list = [None] * world_size
    torch.distributed.all_gather_object(gathered, items)
    return [x for part in gathered for x in part]


def shard_indices(n: int, rank: int, world_size: int) -> range:
    """The contiguous slice of ``range(n)`` owned by ``rank`` (sizes differ by at most one).

    Example:
        >>> [list(shard_indices(5, r, 2)) for r in range(2)]
        [[0, 1, 2], [3, 4]]
    """
    base, extra = divmod(n, world_size)
    start = rank * base + min(rank, extra)
    return range(start, start + base + (1 if rank < extra else 0))


# -------------------------------------------------------------------------------- progress


def progress(items: Iterable[T], *, description: str, total: int | None = None, enabled: bool = True) -> Iterator[T]:
    """Iterate with a transient rich progress bar, shown only on rank 0 and when ``enabled``.

    Example:
        >>> list(progress(range(3), description="demo", enabled=False))
        [0, 1, 2]
    """
    yield from _progress.terminal_iterate(items, description, total=total, enabled=enabled and is_main_process())


def log(message: str, enabled: bool = True) -> None:
    """Print a line on rank 0 (rich markup allowed)."""
    if enabled and is_main_process():
        from rich.console import Console

        Console(stderr=True).print(message)


# ----------------------------------------------------------------------------------- config


@dataclass(frozen=True)
class TrainConfig:
    """Optimization settings of :func:`finetune` (defaults: FOCUS downstream protocol).

    Every fine-tuning task config holds one of these as its ``train`` block, made by
    :func:`train_block` with the task's papers' values as defaults. In a config file the block is
    written ``train: {learning_rate: 2e-4, epochs: 3}`` (keys it does not name keep the task's
    defaults); the keys may also be written at the top level of the task config (the flat layout
    of earlier configs and of the resolved trial config, ``FLAT_BLOCKS``), never both.
    """

    learning_rate: float = 2e-5
    """Peak learning rate of AdamW."""
    batch_size: int = 32
    """Global training batch size (summed over DDP ranks)."""
    eval_batch_size: int = 64
    """Evaluation batch size per process (does not change results)."""
    epochs: int = 2
    """Training epochs; dev evaluation and checkpoint selection after each."""
    warmup_ratio: float = 0.1
    """Fraction of all optimizer steps with linear warmup (FOCUS: 10%), then linear decay to 0."""
    weight_decay: float = 0.0
    """AdamW decoupled weight decay (HF example scripts' default 0)."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm (FOCUS: 1.0); 0 disables it."""
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_epsilon: float = 1e-8
    mixed_precision: bool = True
    """bf16 autocast, used only on CUDA devices (CPU runs in float32 unless ``cpu_bf16``)."""
    cpu_bf16: bool = False
    """bf16 autocast on CPU too, in training and evaluation (fast on CPUs with AMX or AVX512-BF16;
    weights, gradients and optimizer state stay float32). Changes the numbers a trial produces (an
    opt-in recorded in the trial config); deterministic run to run for a given thread count."""
    batching: str = "random"
    """``"random"``: each epoch's batches are consecutive slices of a seeded permutation (FOCUS).
    ``"length"``: the same permutation is cut into pools of ``length_pool`` batches, each pool sorted
    by length (ties in permutation order) and cut into batches, and the epoch's batches are shuffled
    by the same generator (HF Trainer's ``group_by_length``): far less padding, a different data
    order. Evaluation then also batches by length (:func:`length_batches`). Lengths are the
    features' ``input_ids`` lengths."""
    length_pool: int = 50
    """With ``batching: length``, batches per sorted pool (HF ``LengthGroupedSampler``'s mega-batch: 50)."""
    adamw_impl: str = "auto"
    """AdamW implementation: ``"auto"`` (torch's default: a per-parameter loop on CPU, ``foreach`` on
    CUDA), ``"foreach"`` or ``"fused"`` (one kernel for all parameters; much less optimizer time for
    small models; results differ from ``auto`` in the last bits)."""
    log_every: int = 10
    """Loss-curve resolution: one point per this many optimizer steps (mean over them)."""
    ddp_find_unused_parameters: bool = False
    """Passed to ``DistributedDataParallel`` (needed only for heads that skip parameters)."""
    lr_schedule: str = "linear"
    """After warmup: ``"linear"`` decay to 0 (FOCUS/WECHSEL fine-tuning), ``"constant"`` (FOCUS
    LAPT) or ``"inverse_sqrt"`` (``sqrt(warmup / step)``, fairseq's Transformer schedule, XLP MT)."""
    warmup_steps: int | None = None
    """Warmup length in optimizer steps; overrides ``warmup_ratio`` when set."""
    max_steps: int | None = None
    """Run exactly this many optimizer steps (passes over the data repeat or stop mid-epoch as
    needed; ``epochs`` is then ignored); None: ``epochs`` full passes."""
    freeze_embeddings: bool = False
    """Keep the input (word) embeddings fixed (an aid to zero-shot cross-lingual transfer: training on one
    language would move only its rows away from where pretraining aligned every language's)."""

    def __post_init__(self) -> None:
        for name in ("batch_size", "eval_batch_size", "epochs", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if self.max_grad_norm < 0 or self.weight_decay < 0:
            raise ValueError("max_grad_norm and weight_decay must be >= 0")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}")
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0 or None, got {self.warmup_steps}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 or None, got {self.max_steps}")
        if self.batching not in BATCHINGS:
            raise ValueError(f"batching must be one of {BATCHINGS}, got {self.batching!r}")
        if self.length_pool < 1:
            raise ValueError(f"length_pool must be >= 1, got {self.length_pool}")
        if self.adamw_impl not in ADAMW_IMPLS:
            raise ValueError(f"adamw_impl must be one of {ADAMW_IMPLS}, got {self.adamw_impl!r}")

    def predict_options(self, features: Sequence[dict]) -> dict[str, Any]:
        """The keyword arguments of :func:`predict` that follow this config when scoring ``features``:
        batch size, precision, and (``batching: length``) the features' lengths."""
        return {"batch_size": self.eval_batch_size, "mixed_precision": self.mixed_precision, "cpu_bf16": self.cpu_bf16,
                "lengths": feature_lengths(features) if self.batching == "length" else None}  # fmt: skip


FINETUNE_KEYS = (
    "learning_rate", "batch_size", "epochs", "warmup_ratio", "weight_decay", "max_grad_norm",
    "eval_batch_size", "mixed_precision", "log_every",
)  # fmt: skip
"""The training keys the fine-tuning tasks (XNLI, QA, NER) have always stored in the resolved trial
config; the other :class:`TrainConfig` keys are stored only when set to a non-default value, so the
trial ids of configs written before the ``train`` block existed are unchanged."""


def train_block(**defaults: Any) -> Any:
    """The ``train`` field of a task config: a :class:`TrainConfig` with the task's own defaults.

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass(frozen=True)
        ... class MyTaskConfig:
        ...     FLAT_BLOCKS = {"train": FINETUNE_KEYS}
        ...     max_length: int = 128
        ...     train: TrainConfig = train_block(learning_rate=3e-5, epochs=3)
        >>> MyTaskConfig().train.epochs, MyTaskConfig().train.batch_size
        (3, 32)
    """
    TrainConfig(**defaults)  # a bad default fails where the task is defined
    return field(default_factory=lambda: TrainConfig(**defaults))


@dataclass
class FinetuneResult:
    """What :func:`finetune` returns.

    Attributes:
        test: whatever ``test_eval_fn`` returned for the selected checkpoint.
        dev_history: dev metrics after each epoch (empty without a dev set).
        best_epoch: 1-based epoch of the selected checkpoint.
        best_dev: dev metrics of the selected checkpoint (``None`` without a dev set).
        loss_curve: ``[(optimizer step, mean training loss since the previous point)]``.
        steps: optimizer steps taken.
        train_examples: training examples (features) per epoch.
    """

    test: Any
    dev_history: list[dict] = field(default_factory=list)
    best_epoch: int = 0
    best_dev: dict | None = None
    loss_curve: list[tuple[int, float]] = field(default_factory=list)
    steps: int = 0
    train_examples: int = 0


# ---------------------------------------------------------------------------------- batching


def _to_device(batch: dict, device: str | torch.device) -> dict:
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}


def _autocast(device: str | torch.device, enabled: bool, cpu: bool = False):
    """bf16 autocast on CUDA when ``enabled``, on CPU when ``cpu``; else float32."""
    kind = torch.device(device).type
    if (enabled and kind == "cuda") or (cpu and kind == "cpu"):
        return torch.autocast(kind, dtype=torch.bfloat16)
    return nullcontext()


# ------------------------------------------------------------------------------------ models


def build_task_model(
    source_model: Any,
    auto_class: Any,
    *,
    seed: int,
    device: str | None = None,
    **config_updates: Any,
) -> tuple[Any, dict]:
    """A task model (classification/QA head) whose encoder is copied from ``source_model``.

    The head model is created from a copy of the source's config (updated with
    ``config_updates``, e.g. ``num_labels``, ``id2label``) under
    ``seeded_globals(seed, "task", "head")``, so the head's random initialization is a function
    of the trial seed. Then the *base model* (``model.base_model``: the encoder with its
    embeddings) of the source is copied into it. Parameters the source lacks (e.g. BERT's
    pooler, which ``BertForMaskedLM`` does not have) keep their seeded random initialization.

    A language-encoded source (``harness.language_encoding.EncodedModel``) gives a task model
    wrapped with a copy of its encoding (``rewrap(..., finetuning=True)``: XLP projections are
    frozen unless the encoding says otherwise); its batches then need language ids
    (:func:`tasks.data.language_collate`).

    Args:
        source_model: an ``*ForMaskedLM`` (or any HF model with ``base_model``), possibly language-encoded.
        auto_class: e.g. ``AutoModelForSequenceClassification``.
        seed: the trial seed.
        device: where to put the new model (default: the source model's device).
        **config_updates: attributes set on the copied config before construction.

    Returns:
        ``(model, info)`` with ``info = {"copied": n, "kept_random": [names]}`` and, for an
        encoded source, ``"encoding"`` (its parameters and whether they train).

    Raises:
        TypeError: when ``source_model`` is not an HF model with a ``base_model``.
        ValueError: when the source's base model has weights the new one lacks (architecture mismatch).
    """
    encoded = source_model if getattr(source_model, "is_language_encoded", False) else None
    if encoded is not None:
        source_model = encoded.model
    if not hasattr(source_model, "config") or not hasattr(source_model, "base_model"):
        raise TypeError(
            f"build_task_model: expected a transformers model with .config and .base_model, got "
            f"{type(source_model).__name__}"
        )
    config = copy.deepcopy(source_model.config)
    for key, value in config_updates.items():
        setattr(config, key, value)
    with seeded_globals(seed, "task", "head"):
        model = auto_class.from_config(config)
    src_state = source_model.base_model.state_dict()
    result = model.base_model.load_state_dict(src_state, strict=False)
    if result.unexpected_keys:
        raise ValueError(
            f"build_task_model: {type(model).__name__}.base_model has no place for source weights "
            f"{result.unexpected_keys[:5]} (architecture mismatch)"
        )
    param = next(source_model.parameters())
    model.to(device=device or param.device, dtype=param.dtype)
    info = {"copied": len(src_state), "kept_random": sorted(result.missing_keys)}
    if encoded is not None:
        model = encoded.rewrap(model, finetuning=True)
        enc = model.encoding_info()
        info["encoding"] = {k: enc[k] for k in ("name", "sides", "parameters_added")}
    return model, info


# ------------------------------------------------------------------------------- evaluation


class HeadAtPositions:
    """Apply a language model's output head only at chosen positions of a batch.

    A masked LM scores a few positions per sequence (15% of the tokens), but its forward applies
    the LM head (dense, norm and the ``d x |V|`` vocabulary projection) at every position. Inside
    this context, a forward hook on the model's base model (``model.base_model``: the encoder
    whose first output the head reads) keeps only the hidden states at the positions passed to
    :meth:`logits`, so the head runs on ``N`` rows instead of ``B x T``. Each kept row goes through
    the same head as before; only the shape of the head's matrix products changes.

    Models without a separate base model, or whose base model's first output is not the
    ``B x T x d`` sequence of the batch, are left alone: :meth:`logits` then selects the rows
    from the full logits, with the same result.

    Example:
        >>> from transformers import BertConfig, BertForMaskedLM
        >>> m = BertForMaskedLM(BertConfig(vocab_size=30, hidden_size=8, num_hidden_layers=1,
        ...                                num_attention_heads=2, intermediate_size=16)).eval()
        >>> ids, pos = torch.tensor([[2, 5, 7, 3]]), torch.tensor([[False, True, False, True]])
        >>> with torch.no_grad(), HeadAtPositions(m) as head:
        ...     picked = head.logits(m, {"input_ids": ids}, pos)
        >>> picked.shape, bool(torch.allclose(picked, m(input_ids=ids).logits[pos], atol=1e-6))
        (torch.Size([2, 30]), True)
    """

    def __init__(self, model: Any) -> None:
        inner = model.model if getattr(model, "is_language_encoded", False) else model
        base = getattr(inner, "base_model", None)
        self._base = base if isinstance(base, torch.nn.Module) and base is not inner else None
        self._handle: Any = None
        self._positions: torch.Tensor | None = None
        self._gathered = False

    def __enter__(self) -> HeadAtPositions:
        if self._base is not None:
            self._handle = self._base.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def logits(self, model: Any, inputs: dict, positions: torch.Tensor) -> torch.Tensor:
        """``N x |V|`` logits of ``model(**inputs)`` at the ``True`` entries of ``positions`` (``B x T``), row-major."""
        self._positions, self._gathered = positions, False
        try:
            out = model(**inputs)
        finally:
            self._positions = None
        logits = out.logits if hasattr(out, "logits") else out[0]
        if not self._gathered:
            return logits[positions]
        n = int(positions.sum())
        if logits.shape[:-1].numel() != n:
            raise RuntimeError(
                f"{type(model).__name__}: the LM head returned {tuple(logits.shape)} logits for {n} selected "
                "positions; its forward does not apply the head row by row to the base model's output"
            )
        return logits.reshape(n, logits.shape[-1])

    def _hook(self, module: Any, args: Any, output: Any) -> Any:
        pos = self._positions
        if pos is None or self._gathered:
            return None
        hidden = output[0]
        if not torch.is_tensor(hidden) or hidden.dim() != 3 or tuple(hidden.shape[:2]) != tuple(pos.shape):
            return None
        self._gathered = True
        picked = hidden[pos.to(hidden.device)].unsqueeze(0)
        if isinstance(output, tuple):
            return (picked, *output[1:])
        output[next(iter(output.keys()))] = picked  # a ModelOutput keeps its attribute and tuple views in sync
        return output


# ---------------------------------------------------------------------------------- predict


@torch.no_grad()
def predict(
    model: Any,
    features: Sequence[dict],
    collate_fn: Callable[[list[dict]], dict],
    output_fn: Callable[[dict, Any], list],
    *,
    batch_size: int = 64,
    device: str = "cpu",
    mixed_precision: bool = True,
    show_progress: bool = True,
    description: str = "eval",
    forward_fn: Callable[[Any, dict], Any] | None = None,
    lengths: Sequence[int] | None = None,
    cpu_bf16: bool = False,
) -> list:
    """Run ``model`` over ``features`` in eval mode and return one output per feature, in order.

    Under DDP each rank processes its contiguous shard and the outputs are gathered, so every
    rank returns the full list.

    Args:
        model: the (unwrapped) model.
        features: model inputs, one dict per example/window.
        collate_fn: turns a list of features into a batch of tensors.
        output_fn: ``(batch, model_output) -> list`` of per-feature Python/NumPy objects
            (e.g. ``lambda b, o: o.logits.argmax(-1).tolist()``).
        batch_size: per-process batch size.
        device: device of ``model``.
        mixed_precision: bf16 autocast on CUDA.
        show_progress: progress bar on rank 0.
        description: progress-bar label.
        forward_fn: ``(model, batch on device) -> output`` instead of ``model(**batch)`` (e.g.
            ``lambda m, b: m.generate(**b, num_beams=5)``).
        lengths: one length per feature (e.g. its number of tokens): batches then hold features
            of similar length (:func:`length_batches`, within each process's shard) and the
            outputs are put back in feature order. Less padding; a feature's output may differ
            from an unbucketed run by float rounding only, so a task opts in after checking its
            goldens. None: batches in feature order.
        cpu_bf16: bf16 autocast on CPU (:attr:`TrainConfig.cpu_bf16`).
    """
    rank, world_size = dist_info()
    mine = shard_indices(len(features), rank, world_size)
    if lengths is not None and len(lengths) != len(features):
        raise ValueError(f"predict: {len(lengths)} lengths for {len(features)} features")
    if lengths is None:
        batches = [list(range(s, min(s + batch_size, mine.stop))) for s in range(mine.start, mine.stop, batch_size)]
    else:
        batches = [[mine.start + j for j in b] for b in length_batches([lengths[i] for i in mine], batch_size)]
    was_training = model.training
    model.eval()
    outputs: list = [None] * len(mine)
    try:
        for rows in progress(batches, description=description, enabled=show_progress):
            batch = collate_fn([features[i] for i in rows])
            with _autocast(device, mixed_precision, cpu_bf16):
                on_device = _to_device(batch, device)
                out = model(**on_device) if forward_fn is None else forward_fn(model, on_device)
            got = list(output_fn(batch, out))
            if len(got) != len(rows):
                raise ValueError(f"predict: output_fn returned {len(got)} outputs for a batch of {len(rows)} features")
            for i, o in zip(rows, got):
                outputs[i - mine.start] = o
    finally:
        model.train(was_training)
    return _all_gather_list(outputs)


# ---------------------------------------------------------------------------------- finetune


def linear_warmup_decay(warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """LR multiplier: linear from 0 to 1 over ``warmup_steps``, then linear to 0 at ``total_steps``.

    Same schedule as ``transformers.get_linear_schedule_with_warmup`` (without importing the
    trainer stack).

    Example:
        >>> f = linear_warmup_decay(2, 10)
        >>> [round(f(s), 3) for s in (0, 1, 2, 6, 10)]
        [0.0, 0.5, 1.0, 0.5, 0.0]
    """

    def factor(step: int) -> float:
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return factor


def lr_factor(schedule: str, warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """LR multiplier of ``schedule`` (see :attr:`TrainConfig.lr_schedule`) after ``step`` steps.

    Example:
        >>> [round(lr_factor("constant", 2, 10)(s), 2) for s in (0, 1, 2, 9)]
        [0.0, 0.5, 1.0, 1.0]
        >>> [round(lr_factor("inverse_sqrt", 4, 100)(s), 2) for s in (2, 4, 16)]
        [0.5, 1.0, 0.5]
    """
    if schedule == "linear":
        return linear_warmup_decay(warmup_steps, total_steps)
    if schedule == "constant":
        return lambda step: step / warmup_steps if step < warmup_steps else 1.0
    if schedule == "inverse_sqrt":
        if warmup_steps < 1:
            raise ValueError("the inverse_sqrt schedule needs warmup_steps >= 1")
        return lambda step: step / warmup_steps if step < warmup_steps else math.sqrt(warmup_steps / step)
    raise ValueError(f"unknown lr_schedule {schedule!r}; expected one of {LR_SCHEDULES}")


def input_embeddings(model: Any) -> nn.Module:
    """The input (word) embedding module of an HF model, also through a language-encoding wrapper;
    ValueError when it has none (``TrainConfig.freeze_embeddings`` needs one)."""
    get = getattr(model, "get_input_embeddings", None)  # a language-encoded model passes it through
    module = get() if callable(get) else None
    if not isinstance(module, nn.Module) or not isinstance(getattr(module, "weight", None), torch.Tensor):
        raise ValueError(f"freeze_embeddings: {type(model).__name__} has no input embedding matrix to freeze")
    return module


def make_adamw(groups: list[dict], cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW over parameter ``groups`` with ``cfg``'s learning rate, betas, epsilon and implementation."""
    impl = {"auto": {}, "foreach": {"foreach": True}, "fused": {"fused": True}}[cfg.adamw_impl]
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2),
                             eps=cfg.adam_epsilon, **impl)  # fmt: skip


def finetune(
    model: Any,
    train_data: Sequence[dict],
    dev_eval_fn: Callable[[Any], dict] | None,
    test_eval_fn: Callable[[Any], Any],
    cfg: TrainConfig,
    seed: int,
    *,
    collate_fn: Callable[[list[dict]], dict],
    select_metric: str | None = None,
    greater_is_better: bool = True,
    device: str = "cpu",
    show_progress: bool = True,
    description: str = "train",
    loss_fn: Callable[[dict, Any], torch.Tensor] | None = None,
    rng_path: tuple[str, ...] = ("task",),
) -> FinetuneResult:
    """Fine-tune ``model`` on ``train_data``, select the best epoch on dev, score it on test.

    Args:
        model: an HF model whose forward returns ``.loss`` when the batch has labels; on ``device``.
        train_data: training features (dicts of model inputs including labels).
        dev_eval_fn: ``model -> {metric: value}``; called after every epoch. ``None``: no
            selection, the last epoch is scored.
        test_eval_fn: ``model -> anything`` (e.g. ``{lang: {metric: value}}``); called once on the
            selected checkpoint.
        cfg: optimization settings.
        seed: the trial seed.
        collate_fn: turns a list of features into a batch (see :func:`pad_collate`).
        select_metric: key of the dev metrics used for selection (required with ``dev_eval_fn``).
        greater_is_better: direction of ``select_metric``; ties keep the earlier epoch.
        device: device of ``model``.
        show_progress: progress bars and per-epoch log lines on rank 0.
        description: label of the progress bar.
        loss_fn: ``(batch, model output) -> scalar loss`` instead of ``output.loss`` (e.g.
            label-smoothed cross-entropy); token-level losses average over each rank's tokens.
        rng_path: component path of the data-order generator and the dropout seed under the
            trial seed (``("task",)`` for tasks; the LAPT stage uses its own).

    Returns:
        A :class:`FinetuneResult`.

    Example:
        >>> import torch.nn as nn
        >>> class Toy(nn.Module):
        ...     def __init__(self):
        ...         super().__init__(); self.w = nn.Linear(1, 2)
        ...     def forward(self, x, labels=None):
        ...         logits = self.w(x.float().unsqueeze(-1))
        ...         return type("O", (), {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits})
        >>> data = [{"x": float(i % 2), "labels": i % 2} for i in range(8)]
        >>> r = finetune(Toy(), data, None, lambda m: {"done": 1.0}, TrainConfig(batch_size=4, learning_rate=0.1),
        ...              seed=1, collate_fn=pad_collate(0), show_progress=False)
        >>> r.steps, r.best_epoch, r.test
        (4, 2, {'done': 1.0})
    """
    # Long on purpose: the one training loop every task uses (DDP batch split, schedule, selection) reads top
    # to bottom.
    if not train_data:
        raise ValueError("finetune: no training data")
    if dev_eval_fn is not None and select_metric is None:
        raise ValueError("finetune: select_metric is required when dev_eval_fn is given")
    rank, world_size = ensure_distributed(device)
    n = len(train_data)
    steps_per_epoch = math.ceil(n / cfg.batch_size)
    total_steps = cfg.max_steps if cfg.max_steps is not None else steps_per_epoch * cfg.epochs
    n_epochs = math.ceil(total_steps / steps_per_epoch) if cfg.max_steps is not None else cfg.epochs
    warmup_steps = cfg.warmup_steps if cfg.warmup_steps is not None else math.ceil(total_steps * cfg.warmup_ratio)

    if cfg.freeze_embeddings:
        input_embeddings(model).weight.requires_grad_(False)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if p.ndim < 2 or "norm" in name.lower() else decay).append(p)
    optimizer = make_adamw(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}], cfg
    )
    lengths = feature_lengths(train_data) if cfg.batching == "length" else None
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(cfg.lr_schedule, warmup_steps, total_steps))

    train_model = model
    if world_size > 1:
        torch_device = torch.device(device)
        train_model = torch.nn.parallel.DistributedDataParallel(
            model,
            device_ids=[torch_device.index] if torch_device.type == "cuda" else None,
            find_unused_parameters=cfg.ddp_find_unused_parameters,
        )

    result = FinetuneResult(test=None, train_examples=n)
    best_value: float | None = None
    best_state: dict[str, torch.Tensor] | None = None
    step = 0
    window_loss, window_steps = 0.0, 0
    with seeded_globals(seed, *rng_path, "dropout", str(rank)):
        for epoch in range(1, n_epochs + 1):
            train_model.train()
            batches = epoch_batches(n, cfg.batch_size, seed, epoch, rng_path, lengths, cfg.length_pool)[: total_steps - step]
            label = f"{description} epoch {epoch}/{n_epochs}"
            for global_idx in progress(batches, description=label, enabled=show_progress):
                chunk = global_idx.tensor_split(world_size)[rank]
                share = len(chunk) / len(global_idx)
                if len(chunk) == 0:  # fewer examples than ranks: take part with zero weight
                    chunk = global_idx[:1]
                batch = _to_device(collate_fn([train_data[int(i)] for i in chunk]), device)
                with _autocast(device, cfg.mixed_precision, cfg.cpu_bf16):
                    out = train_model(**batch)
                    loss = out.loss if loss_fn is None else loss_fn(batch, out)
                # DDP averages gradients over ranks; weighting by share*world_size makes that average
                # the gradient of the global batch mean.
                (loss * share * world_size).backward()
                if cfg.max_grad_norm > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                window_loss += float(loss.detach()) * share
                window_steps += 1
                if step % cfg.log_every == 0 or step == total_steps:
                    (total,) = _all_reduce_sum([window_loss], torch.device(device))
                    result.loss_curve.append((step, total / window_steps))
                    window_loss, window_steps = 0.0, 0
            if dev_eval_fn is not None:
                dev_metrics = dev_eval_fn(model)
                result.dev_history.append(dev_metrics)
                if select_metric not in dev_metrics:
                    raise KeyError(f"finetune: dev metrics {sorted(dev_metrics)} lack select_metric {select_metric!r}")
                value = float(dev_metrics[select_metric])
                better = best_value is None or (value > best_value if greater_is_better else value < best_value)
                log(f"[bold]{description}[/] epoch {epoch}: dev {select_metric}={value:.4f}", show_progress)
                if better:
                    best_value, result.best_epoch, result.best_dev = value, epoch, dev_metrics
                    best_state = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
            else:
                result.best_epoch = epoch
        if best_state is not None and result.best_epoch != n_epochs:
            model.load_state_dict(best_state)
        del best_state
        result.steps = step
        result.test = test_eval_fn(model)
    return result


# ------------------------------------------------------------------------------ task helpers


def finetune_info(result: FinetuneResult) -> dict:
    """The JSON-serializable summary of a :class:`FinetuneResult` for ``TaskResult.info``."""
    return {
        "best_epoch": result.best_epoch,
        "best_dev": result.best_dev,
        "dev_history": result.dev_history,
        "steps": result.steps,
        "train_features": result.train_examples,
    }


def check_max_length(model: Any, max_length: int, task: str) -> None:
    """Raise a clear error when ``max_length`` exceeds the positions the model has.

    RoBERTa-family models reserve ``pad_token_id + 1`` position rows, so a model with
    ``max_position_embeddings = 130`` and pad id 1 takes at most 128 tokens.
    """
    cfg = getattr(model, "config", None)
    n_pos = getattr(cfg, "max_position_embeddings", None)
    if n_pos is None:
        return
    offset = (cfg.pad_token_id or 0) + 1 if getattr(cfg, "model_type", "") in ("roberta", "xlm-roberta", "camembert") else 0
    if max_length > n_pos - offset:
        raise ValueError(f"{task}: max_length={max_length} exceeds the {n_pos - offset} positions of the model; "
                         f"set {task}.config.max_length <= {n_pos - offset}")


def record_language(out: Any, lang: str, result: FinetuneResult, *, metrics: dict, counts: dict, data_info: dict, head: dict) -> None:
    """Put one language's fine-tuning outcome into a ``TaskResult`` (the same layout for every task);
    per-example statistics carried by ``metrics`` (:class:`harness.examples.Scores`) go to ``out.examples``."""
    out.metrics[lang] = attach(out.examples, lang, metrics)
    out.counts[lang] = counts
    out.curves[f"{lang}/train_loss"] = result.loss_curve
    out.info["data"][lang] = data_info
    out.info["finetune"][lang] = {**finetune_info(result), "head": head}


@dataclass(frozen=True)
class LanguageRun:
    """One language's fine-tuning outcome, as a per-language task's ``run_one(lang)`` returns it.

    Attributes:
        result: the fine-tuning result.
        counts: example counts of the language (train/dev/test).
        data_info: where the language's data came from.
        head: the task head's facts.
        metrics: the language's metrics (``None``: ``result.test``).
    """

    result: FinetuneResult
    counts: dict
    data_info: dict
    head: dict
    metrics: dict | None = None


def run_per_language(out: Any, languages: Sequence[str], run_one: Callable[[str], LanguageRun]) -> Any:
    """Fine-tune and score separately on every language (NER, QA, XNLI translate-train), recording each.

    ``run_one(lang)`` does one language's work; its outcome goes into ``out`` (a ``TaskResult``)
    by :func:`record_language`, so every per-language task writes the same layout. Returns ``out``.
    """
    for lang in languages:
        r = run_one(lang)
        record_language(out, lang, r.result, metrics=r.result.test if r.metrics is None else r.metrics,
                        counts=r.counts, data_info=r.data_info, head=r.head)  # fmt: skip
    return out

