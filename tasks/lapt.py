"""``lapt``: language-adaptive pretraining (continued pretraining on target-language text).

The stage continues the source model's own objective on unlabeled target-language text: masked
LM (15% of the non-special tokens selected, 80% ``<mask>`` / 10% random / 10% unchanged) for
encoders, causal LM for decoders; the objective is detected from the model class. Training runs
through the project's one loop (:func:`tasks.loop.finetune`) with a step budget (``max_steps``),
AdamW, gradient clipping and the schedule of the chosen preset.

Presets (``schedule``; every hyperparameter field left at ``None`` takes the preset's value):

========== ================== ============ ============= ============ =========== ===============
preset     peak LR            LR schedule  warmup        batch x len  weight dec. Adam b2 / eps
========== ================== ============ ============= ============ =========== ===============
focus      5e-5 (see note)    constant     10% of steps  128 x 256    0           0.999 / 1e-8
wechsel    1e-4 MLM, 5e-4 CLM linear to 0  10% of steps  512 x 512    0.01        0.98 / 1e-6
custom     (required)         (required)   10%           (required)   0           0.999 / 1e-8
========== ================== ============ ============= ============ =========== ===============

FOCUS (Appendix A, Table 5): 50M samples of 256 tokens in batches of 128 = 390,625 steps, linear
warmup over 5M samples (10%), then a *constant* learning rate; no weight decay; clipping 1.0. The
peak learning rate and Adam's epsilon were lost in the text extraction of Table 5: 5e-5 and 1e-8
are placeholders to be checked against the PDF. WECHSEL (Appendix B, Table 5): 250k steps of
512 x 512, warmup over the first 10% then linear decay to 0, weight decay 0.01, Adam
(0.9, 0.98, 1e-6), peak 1e-4 (RoBERTa) / 5e-4 (GPT-2); clipping is not stated (1.0 here).

The papers' budgets (390,625 / 250,000 steps) are far beyond the built-in world, so ``max_steps``
defaults to a world-sized 200 steps and the warmup is a *fraction* of whatever budget is set;
``max_steps=None`` runs the paper's budget.

TransInner (de Vries & Nissim 2021), driven by the method's directives
``{"embeddings_only_fraction": f, "embeddings_only_schedule": "fraction" | "extra"}``:

- ``fraction`` (WECHSEL's setup): of the ``N`` steps, the first ``round(f * N)`` train only the
  lexical parameters, the remaining ones train everything. WECHSEL: "two warmup phases from zero
  to peak LR, once for the first 10% of steps for training embeddings only, then again for the
  remaining steps": phase 1 warms up over its whole length, phase 2 runs the preset schedule
  (10% warmup, linear decay) over its own length.
- ``extra`` (FOCUS's setup): ``round(f * N)`` *extra* embeddings-only steps, then the normal
  ``N``-step run (1.2 x the steps for f = 0.2). FOCUS gives no schedule for the extra phase; it
  runs the preset schedule over its own length.
- the stage option ``embeddings_only_steps: N`` (any method): N embeddings-only steps, then the
  normal ``max_steps`` run (like ``extra`` with an explicit count); it replaces the directives.

``embeddings_phase_warmup`` overrides how phase 1 warms up (``"full"`` or ``"ratio"``). The
lexical parameters are the input embedding matrix, the output embedding matrix (the same tensor
when tied) and the output bias when the head has one (RoBERTa's ``lm_head.bias``); everything
else, including position embeddings and the MLM head's transform, is frozen by
``requires_grad=False`` and left out of phase 1's optimizer (each phase has its own AdamW and
schedule). A fingerprint of every frozen parameter is taken before and after phase 1, and the
stage fails if any of them changed. ``reinitialize_body`` (from-scratch) needs nothing here: the
harness has already reinitialized the model.

Randomness: data order from ``torch_generator(seed, "lapt", ..., "data-order", epoch)`` (inside
the loop), masks from per-batch seeds ``derive(seed, "lapt", ..., "mask", rank, batch)``, dropout
under ``seeded_globals``; the caller's global RNG state is left untouched.

Caching: :func:`lapt_cache_key` hashes the caller's initialization key, this config, the
directives, the seed, the languages and the *contents* of the training text;
``apply(..., cache_key=...)`` then stores the adapted model (and its loss curve) in
``<cache>/lapt/<hash>`` via :func:`harness.cache.cached_dir`, so several tasks reuse one LAPT run.
The forgetting options (``forgetting_examples``, ``forgetting_file``) are not part of the key.

Forgetting (:mod:`tasks.forgetting`, where the definition is argued): every stage scores held-out
source-language sentences with (a) the original source model and its tokenizer, (b) the model it
receives and (c) the model it returns, both under the trial's tokenizer with the same masks; the
stage's metrics carry the three losses and ``source_forgetting = (c) - (b)``. The scores are a
deterministic function of the weights, so a cache hit recomputes them (nothing extra is cached).

Language encodings: a language-encoded model prepares its own batches (language ids of each
block's language; ``attached`` inserts its token, so blocks are ``max_length - 1`` tokens and the
token is labelled -100). LAPT is continued *pre*training, so the encoding's parameters train
(XLP's projections included, as in the paper's pretraining), and TransInner's embeddings-only
phase trains them with the embeddings. The cached model keeps its encoding (``save_pretrained``
writes it beside the weights).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.protocols import TaskContext, TaskResult
from harness.registry import register_stage
from tasks.data import added_tokens, batch_preparer
from tasks.lapt_data import _LaptCollate, build_blocks, read_train_lines
from tasks.loop import ADAMW_IMPLS, TrainConfig, finetune, log, resolve_device

LAPT_CODE_VERSION = 1
"""Part of every LAPT cache key: bump when a change here changes the weights a config produces."""

SCHEDULES = ("focus", "wechsel", "custom")
LR_SCHEDULES = ("linear", "constant")
PHASE_WARMUPS = ("full", "ratio")
RESULT_FILE = "lapt_result.json"

_PRESETS: dict[str, dict[str, Any]] = {
    "focus": {
        "learning_rate": 5e-5,  # lost in extraction (FOCUS Table 5); placeholder, check the PDF
        "lr_schedule": "constant",
        "warmup_ratio": 0.1,  # 5M of 50M samples
        "batch_size": 128,
        "max_length": 256,
        "weight_decay": 0.0,
        "adam_beta1": 0.9,
        "adam_beta2": 0.999,
        "adam_epsilon": 1e-8,  # lost in extraction; torch's default
        "max_grad_norm": 1.0,
        "paper_steps": 390_625,
        "embeddings_phase_warmup": "ratio",
    },
    "wechsel": {
        "learning_rate": {"mlm": 1e-4, "clm": 5e-4},
        "lr_schedule": "linear",
        "warmup_ratio": 0.1,
        "batch_size": 512,
        "max_length": 512,
        "weight_decay": 0.01,
        "adam_beta1": 0.9,
        "adam_beta2": 0.98,
        "adam_epsilon": 1e-6,
        "max_grad_norm": 1.0,  # not stated in WECHSEL; HF Trainer's default
        "paper_steps": 250_000,
        "embeddings_phase_warmup": "full",
    },
    "custom": {
        "learning_rate": None,
        "lr_schedule": None,
        "warmup_ratio": 0.1,
        "batch_size": None,
        "max_length": None,
        "weight_decay": 0.0,
        "adam_beta1": 0.9,
        "adam_beta2": 0.999,
        "adam_epsilon": 1e-8,
        "max_grad_norm": 1.0,
        "paper_steps": None,
        "embeddings_phase_warmup": "ratio",
    },
}
_HPARAMS = ("learning_rate", "lr_schedule", "warmup_ratio", "batch_size", "max_length", "weight_decay",
            "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "embeddings_phase_warmup")  # fmt: skip


@dataclass(frozen=True)
class LaptConfig:
    """Configuration of :class:`Lapt`. ``None`` hyperparameters take the ``schedule`` preset's value.

    For the built-in world on 2 CPU cores, use world-sized blocks, e.g. ``batch_size=32,
    max_length=128`` (the pretraining shape of the built-in sources): the paper presets' 128 x 256
    (FOCUS) and 512 x 512 (WECHSEL) blocks cost 8x and 64x more per step.
    """

    schedule: str = "focus"
    """Preset: ``"focus"``, ``"wechsel"`` or ``"custom"`` (then ``learning_rate``,
    ``lr_schedule``, ``batch_size`` and ``max_length`` must be given)."""
    max_steps: int | None = 200
    """Optimizer steps of the (normal) LAPT run. World-sized default; None: the preset's paper
    budget (FOCUS 390,625; WECHSEL 250,000). TransInner's ``extra`` steps come on top."""
    learning_rate: float | None = None
    """Peak learning rate (AdamW)."""
    lr_schedule: str | None = None
    """``"linear"`` (warmup, then linear decay to 0) or ``"constant"`` (warmup, then constant)."""
    warmup_ratio: float | None = None
    """Fraction of the steps spent warming up linearly from 0."""
    batch_size: int | None = None
    """Sequences (blocks of ``max_length`` tokens) per optimizer step."""
    max_length: int | None = None
    """Tokens per block. The text is tokenized line by line with the tokenizer's specials,
    concatenated and cut into blocks (RoBERTa's FULL-SENTENCES; the remainder is dropped)."""
    weight_decay: float | None = None
    """AdamW decoupled weight decay (not applied to biases and LayerNorm weights)."""
    adam_beta1: float | None = None
    adam_beta2: float | None = None
    adam_epsilon: float | None = None
    max_grad_norm: float | None = None
    """Gradient clipping by global norm; 0 disables it."""
    embeddings_phase_warmup: str | None = None
    """TransInner phase 1: ``"full"`` warms up over the whole embeddings-only phase (WECHSEL),
    ``"ratio"`` runs the preset schedule over it (FOCUS gives none)."""
    mlm_probability: float = 0.15
    """MLM only: share of non-special tokens selected (then 80% mask / 10% random / 10% kept)."""
    train_file: str | None = None
    """Text file (one sentence or document per line) to train on instead of the world's text;
    may contain ``{lang}``."""
    split: str = "train"
    """World text split used when ``train_file`` is not given."""
    max_train_examples: int | None = None
    """Use the first N non-empty lines per language (None: all)."""
    log_every: int = 10
    """Loss-curve resolution (mean loss over this many steps per point)."""
    mixed_precision: bool = True
    """bf16 autocast on CUDA only (CPU: see ``cpu_bf16``)."""
    cpu_bf16: bool | None = None
    """bf16 autocast on CPU too (:attr:`tasks.loop.TrainConfig.cpu_bf16`: weights, gradients and
    optimizer state stay float32; other numbers than a float32 run, deterministic for a thread count).
    None (float32) is the default so that configs written before the option keep their trial ids."""
    adamw_impl: str | None = None
    """AdamW implementation (:attr:`tasks.loop.TrainConfig.adamw_impl`: ``"auto"``, ``"foreach"`` or
    ``"fused"``, which takes much less optimizer time for small models); None: ``"auto"``."""
    cache: bool = True
    """Reuse/store the adapted model when the caller passes a ``cache_key`` to ``apply``."""
    embeddings_only_steps: int | None = None
    """N embeddings-only steps (TransInner's phase 1) before the ``max_steps`` full steps, for any
    initialization: "N embeddings-only then M full" as a stage option. Set, it replaces the method's
    TransInner directives (recorded in ``info["embeddings_only"]``); None: the directives decide."""
    forgetting_examples: int | None = None
    """Held-out source-language sentences scored before and after the stage (forgetting,
    :mod:`tasks.forgetting`); None: :data:`tasks.forgetting.DEFAULT_EXAMPLES` (256), 0: off. None is the
    default so that configs written before the option keep their trial ids."""
    forgetting_file: str | None = None
    """Held-out source-language text (one sentence a line) for the forgetting measurement; None: the
    world's source language, ``test`` split (no world and no file: the record says it was skipped)."""

    NEW_FIELDS_OMITTED_WHEN_NONE = ("embeddings_only_steps", "forgetting_examples", "forgetting_file", "cpu_bf16",
                                    "adamw_impl")
    """Left out of the resolved config while unset, so trials written before them keep their ids."""
    MEASUREMENT_FIELDS = ("forgetting_examples", "forgetting_file")
    """Fields that change what is measured, not the adapted weights: not part of the LAPT cache key."""

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        if self.schedule == "custom":
            missing = [
                n for n in ("learning_rate", "lr_schedule", "batch_size", "max_length") if getattr(self, n) is None
            ]
            if missing:
                raise ValueError(f"schedule='custom' needs explicit {', '.join(missing)}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 or None, got {self.max_steps}")
        if self.lr_schedule is not None and self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule!r}")
        if self.adamw_impl is not None and self.adamw_impl not in ADAMW_IMPLS:
            raise ValueError(f"adamw_impl must be one of {ADAMW_IMPLS}, got {self.adamw_impl!r}")
        if self.embeddings_phase_warmup is not None and self.embeddings_phase_warmup not in PHASE_WARMUPS:
            raise ValueError(
                f"embeddings_phase_warmup must be one of {PHASE_WARMUPS}, got {self.embeddings_phase_warmup!r}"
            )
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.warmup_ratio is not None and not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        for name in ("batch_size", "log_every"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.max_length is not None and self.max_length < 4:
            raise ValueError(f"max_length must be >= 4, got {self.max_length}")
        if self.max_train_examples is not None and self.max_train_examples < 1:
            raise ValueError(f"max_train_examples must be >= 1 or None, got {self.max_train_examples}")
        if self.embeddings_only_steps is not None and self.embeddings_only_steps < 1:
            raise ValueError(f"embeddings_only_steps must be >= 1 or None, got {self.embeddings_only_steps}")
        if self.forgetting_examples is not None and self.forgetting_examples < 0:
            raise ValueError(f"forgetting_examples must be >= 0 (0: off) or None, got {self.forgetting_examples}")
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"mlm_probability must be in (0, 1), got {self.mlm_probability}")
        for name in ("weight_decay", "max_grad_norm", "adam_epsilon"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0, got {value}")

    def resolved(self, kind: str) -> dict[str, Any]:
        """The effective hyperparameters for a model of ``kind`` (``"mlm"`` or ``"clm"``).

        Example:
            >>> LaptConfig(schedule="wechsel").resolved("clm")["learning_rate"]
            0.0005
        """
        preset = _PRESETS[self.schedule]
        out: dict[str, Any] = {}
        for name in _HPARAMS:
            value = getattr(self, name)
            if value is None:
                value = preset[name]
                if isinstance(value, dict):
                    value = value[kind]
            out[name] = value
        out["max_steps"] = self.max_steps if self.max_steps is not None else preset["paper_steps"]
        if out["max_steps"] is None:
            raise ValueError("lapt: schedule='custom' has no paper budget; set max_steps")
        return out


# ------------------------------------------------------------------------------------- model


def lm_kind(model: Any) -> str:
    """``"mlm"`` or ``"clm"`` from the model class (transformers' auto-class tables, then the name).

    Raises:
        ValueError: for a model that is neither a masked nor a causal LM.

    Example:
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> lm_kind(GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=8, n_head=2, vocab_size=10)))
        'clm'
    """
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_MASKED_LM_MAPPING_NAMES,
    )

    hf = hf_model(model)
    name = type(hf).__name__
    if name in set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()) or name.endswith(("ForCausalLM", "LMHeadModel")):
        return "clm"
    if name in set(MODEL_FOR_MASKED_LM_MAPPING_NAMES.values()) or name.endswith("ForMaskedLM"):
        if getattr(hf.config, "is_encoder_decoder", False):
            raise ValueError(f"lapt: {name} is an encoder-decoder model; LAPT supports masked and causal LMs")
        return "mlm"
    raise ValueError(f"lapt: cannot tell whether {name} is a masked or a causal LM")


def hf_model(model: Any) -> Any:
    """The transformers model itself, or the one a language-encoding wrapper holds as a direct child."""
    from transformers import PreTrainedModel

    if isinstance(model, PreTrainedModel):
        return model
    for child in model.children():
        if isinstance(child, PreTrainedModel):
            return child
    raise TypeError(f"lapt: {type(model).__name__} is not a transformers model and holds none")


def lexical_parameters(model: Any) -> dict[str, torch.nn.Parameter]:
    """The parameters TransInner trains first: input/output embedding matrices and the output bias,
    plus a language encoding's parameters (input-layer parameters as new as the embeddings).

    Tied tensors appear once. Keys are names as in ``model.named_parameters()``.
    """
    hf = hf_model(model)
    wanted: list[torch.nn.Parameter] = [hf.get_input_embeddings().weight]
    tables = getattr(model, "tables", None) if getattr(model, "is_language_encoded", False) else None
    if tables is not None:
        wanted.extend(tables.parameters())
    out = hf.get_output_embeddings()
    if out is not None:
        wanted.append(out.weight)
        if getattr(out, "bias", None) is not None:
            wanted.append(out.bias)
    ids = {id(p) for p in wanted}
    return {name: p for name, p in model.named_parameters() if id(p) in ids}


def parameter_fingerprints(params: dict[str, torch.nn.Parameter]) -> dict[str, str]:
    """sha256 of the exact bytes of each parameter: detects any change without keeping a copy."""
    return {
        name: hashlib.sha256(
            p.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        ).hexdigest()
        for name, p in params.items()
    }


# ------------------------------------------------------------------------------------ phases


def plan_phases(n_steps: int, directives: dict, embeddings_only_steps: int | None = None
                ) -> tuple[list[tuple[str, int]], float | None, str | None]:  # fmt: skip
    """``(phases, fraction, schedule)``: the ``[(name, steps)]`` of a LAPT run of ``n_steps`` full steps.

    ``embeddings_only_steps`` (the stage option) gives ``[("embeddings", N), ("full", n_steps)]``
    (schedule ``"steps"``) whatever the directives say; else TransInner's directives decide
    (``fraction`` / ``extra``, module docstring); no directive: one full phase.

    Example:
        >>> plan_phases(100, {}, 30)[0], plan_phases(100, {"embeddings_only_fraction": 0.1})[0]
        ([('embeddings', 30), ('full', 100)], [('embeddings', 10), ('full', 90)])
    """
    if embeddings_only_steps is not None:
        return [("embeddings", embeddings_only_steps), ("full", n_steps)], None, "steps"
    f = directives.get("embeddings_only_fraction")
    mode = directives.get("embeddings_only_schedule", "fraction") if f is not None else None
    if mode not in (None, "fraction", "extra"):
        raise ValueError(f"lapt: unknown embeddings_only_schedule {mode!r}; expected 'fraction' or 'extra'")
    if f is None:
        phases = [("full", n_steps)]
    elif mode == "fraction":
        if not 0 < f <= 1:
            raise ValueError(f"lapt: embeddings_only_fraction must be in (0, 1] with schedule 'fraction', got {f}")
        s1 = max(1, round(f * n_steps))
        phases = [("embeddings", s1), ("full", n_steps - s1)]
    else:
        if not f > 0:
            raise ValueError(f"lapt: embeddings_only_fraction must be > 0 with schedule 'extra', got {f}")
        phases = [("embeddings", max(1, round(f * n_steps))), ("full", n_steps)]
    return [(name, steps) for name, steps in phases if steps > 0], f, mode


# ------------------------------------------------------------------------------------- cache


def lapt_cache_key(
    init_key: dict,
    config: LaptConfig,
    *,
    directives: dict | None = None,
    data_files: Sequence[str | Path] = (),
    seed: int | None = None,
    languages: Sequence[str] = (),
) -> str:
    """Content hash naming one LAPT result: same key => same adapted weights.

    Args:
        init_key: the caller's key of the initialized model (source, target tokenizer, method
            and its config, seed, …); JSON values or ``Path`` s (hashed by content).
        config: the stage config.
        directives: the method's directives (TransInner), if any.
        data_files: the training text files (hashed by *content*).
        seed: the trial seed (drives data order, masks and dropout).
        languages: the target languages trained on.

    Returns:
        64 hex characters.

    Example:
        >>> a = lapt_cache_key({"method": "focus", "seed": 1}, LaptConfig())
        >>> a == lapt_cache_key({"seed": 1, "method": "focus"}, LaptConfig()) != lapt_cache_key({"seed": 2}, LaptConfig())
        True
    """
    import transformers

    from harness.cache import content_hash

    return content_hash(
        {
            "what": "lapt",
            "code_version": LAPT_CODE_VERSION,
            "init": init_key,
            "config": weights_config(config),
            "directives": dict(directives or {}),
            "data": [Path(p) for p in data_files],
            "seed": seed,
            "languages": list(languages),
            "versions": {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__},
        }
    )


def weights_config(config: LaptConfig) -> dict[str, Any]:
    """The config as :func:`lapt_cache_key` hashes it: every field but the
    :attr:`LaptConfig.MEASUREMENT_FIELDS`, in the canonical form of the dataclass itself (so keys made
    before those fields existed stay valid).

    Example:
        >>> weights_config(LaptConfig(forgetting_examples=0)) == weights_config(LaptConfig())
        True
    """
    skip = set(LaptConfig.MEASUREMENT_FIELDS)
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name not in skip}
    for name in LaptConfig.NEW_FIELDS_OMITTED_WHEN_NONE:  # an option added later enters the key once set
        if fields.get(name, 0) is None:
            del fields[name]
    return {"__dataclass__": type(config).__qualname__, **fields}


def save_lapt(out_dir: str | Path, model: Any, result: TaskResult) -> Path:
    """Write the adapted model (``save_pretrained``; with its language encoding beside it) and its
    :class:`TaskResult` into ``out_dir``."""
    out_dir = Path(out_dir)
    (model if getattr(model, "is_language_encoded", False) else hf_model(model)).save_pretrained(out_dir / "model")
    payload = {"metrics": result.metrics, "counts": result.counts, "curves": result.curves, "info": result.info}
    (out_dir / RESULT_FILE).write_text(json.dumps(payload, indent=1, default=str) + "\n", encoding="utf-8")
    return out_dir


def load_lapt(path: str | Path, model_cls: type, device: str = "cpu") -> tuple[Any, TaskResult]:
    """Load what :func:`save_lapt` wrote: ``(model on device, in eval mode; its TaskResult)``.

    ``model_cls`` is the transformers class; a saved language encoding is loaded with it.
    """
    from harness.language_encoding import ENCODING_FILE, load_encoded

    path = Path(path)
    if (path / "model" / ENCODING_FILE).is_file():
        model = load_encoded(path / "model", model_cls, device)
    else:
        model = model_cls.from_pretrained(path / "model").to(device)
    model.eval()
    payload = json.loads((path / RESULT_FILE).read_text(encoding="utf-8"))
    curves = {k: [tuple(p) for p in v] for k, v in payload["curves"].items()}
    return model, TaskResult(payload["metrics"], payload["counts"], curves, payload["info"])


def cached_stage(kind: str, key: dict, train: Callable[[], tuple[Any, TaskResult]], model_cls: type, device: str, *,
                 cache_root: str | Path | None, progress: bool, what: str = "adapted") -> tuple[Any, TaskResult]:
    """A trained stage through tokxfer's cache (kind ``kind``, :func:`harness.cache.cached_dir` under
    ``{"<kind>_key": key}``): on a miss ``train()``'s model and result, saved with :func:`save_lapt` and
    cached only when they reload identically (:func:`check_reload`: a hit must give the very weights a
    miss gives); on a hit the saved ones (:func:`load_lapt`). ``result.info["cache"]`` says which, with
    the key and the entry; a hit is logged as "reused the cached <what> model". Shared by LAPT and the
    distill stage.
    """
    from harness.cache import cached_dir

    trained: dict[str, Any] = {}

    def build(out: Path) -> None:
        trained["model"], trained["result"] = train()
        save_lapt(out, trained["model"], trained["result"])
        check_reload(trained["model"], load_lapt(out, model_cls)[0])

    entry = cached_dir(kind, {f"{kind}_key": key}, build, root=Path(cache_root) if cache_root is not None else None)
    if "model" in trained:
        model, result = trained["model"], trained["result"]
        result.info["cache"] = {"hit": False, "key": key, "path": str(entry)}
        return model, result
    model, result = load_lapt(entry, model_cls, device)
    result.info["cache"] = {"hit": True, "key": key, "path": str(entry)}
    log(f"[bold]{kind}[/]: reused the cached {what} model {entry}", progress)
    return model, result


def check_reload(trained: Any, reloaded: Any) -> None:
    """Raise unless ``reloaded`` has exactly the parameters and buffers of ``trained``.

    Raises:
        RuntimeError: naming the first differing tensors (e.g. a head that ``save_pretrained`` /
            ``from_pretrained`` re-ties although it was untied in memory).
    """
    encoded = getattr(trained, "is_language_encoded", False)
    a, b = (trained if encoded else hf_model(trained)).state_dict(), reloaded.state_dict()
    if set(a) != set(b):
        raise RuntimeError(f"lapt: the saved model reloads with other tensors: {sorted(set(a) ^ set(b))[:5]}")
    bad = [k for k in a if not torch.equal(a[k].detach().cpu(), b[k].detach().cpu())]
    if bad:
        raise RuntimeError(f"lapt: the saved model does not reload identically ({bad[:5]}); not caching it")


# ------------------------------------------------------------------------------------- stage


@register_stage(
    "lapt",
    config=LaptConfig,
    description="language-adaptive pretraining (MLM/CLM) with FOCUS/WECHSEL presets and TransInner freezing",
)
class Lapt:
    """Continued pretraining on target-language text; TransInner freezing from the method's directives."""

    needs_lm_head = True
    """Trains through the source model's LM head: a checkpoint without one is refused (never a random head)."""

    def __init__(self, config: LaptConfig) -> None:
        self.config = config

    # -- inputs

    def train_paths(self, ctx: TaskContext) -> list[Path]:
        """One training text file per language of ``ctx.languages``."""
        cfg = self.config
        if cfg.train_file is not None:
            return [Path(cfg.train_file.format(lang=lang)) for lang in ctx.languages]
        if ctx.data_root is None:
            raise ValueError("lapt: set config 'train_file' (no world directory in the task context)")
        from harness.world import World  # the world generator room; imported lazily

        world = World(ctx.data_root)
        return [Path(world.text(lang, cfg.split)) for lang in ctx.languages]

    # -- entry point

    def apply(
        self,
        ctx: TaskContext,
        directives: dict,
        *,
        cache_key: dict | None = None,
        cache_root: str | Path | None = None,
    ) -> tuple[Any, TaskResult]:
        """Adapt ``ctx.model`` to the languages of ``ctx``; returns ``(model, result)``.

        Args:
            ctx: the trial's context (model, tokenizer, languages, seed, device, data_root).
            directives: the initialization method's directives (TransInner keys are used).
            cache_key: the caller's key of the initialized model; when given (and ``config.cache``
                is on and the model is a transformers model, language-encoded or not) the adapted model is cached
                under :func:`lapt_cache_key` and a later identical call loads it.
            cache_root: cache root (default :func:`harness.cache.cache_root`).

        Returns:
            The adapted model (in eval mode) and a :class:`TaskResult` whose ``curves["loss"]`` is
            ``[(step, mean loss)]`` over all phases and whose ``info`` records the resolved
            hyperparameters, phases, freeze check and cache use. Its metrics also hold the forgetting
            measurement (:mod:`tasks.forgetting`: ``source_loss_original`` / ``_before`` / ``_after`` and
            ``source_forgetting`` = after - before), recomputed on a cache hit; ``info["forgetting"]``
            has the details, or ``{"skipped": why}``.
        """
        from tasks.forgetting import Measurement, probe_for

        cfg = self.config
        probe, why = probe_for(ctx, lm_kind(ctx.model), cfg.forgetting_examples, cfg.forgetting_file)
        measurement = Measurement(probe, why, resolve_device(ctx.device))
        measurement.before(ctx, type(hf_model(ctx.model)))  # before training: _train changes ctx.model in place
        model, result = self._adapt(ctx, directives, cache_key, cache_root)
        metrics, result.info["forgetting"] = measurement.after(ctx, model)
        result.metrics.setdefault("+".join(ctx.languages), {}).update(metrics)
        return model, result

    def _adapt(self, ctx: TaskContext, directives: dict, cache_key: dict | None,
               cache_root: str | Path | None) -> tuple[Any, TaskResult]:  # fmt: skip
        """Train, or load the cached adapted model (see :meth:`apply`)."""
        from transformers import PreTrainedModel

        paths = self.train_paths(ctx)
        cacheable = isinstance(ctx.model, PreTrainedModel) or (
            getattr(ctx.model, "is_language_encoded", False) and isinstance(hf_model(ctx.model), PreTrainedModel)
        )
        if cache_key is None or not self.config.cache or not cacheable:
            model, result = self._train(ctx, directives, paths)
            result.info["cache"] = (
                None if cache_key is None or not self.config.cache else "skipped: not a plain transformers model"
            )
            return model, result
        key = lapt_cache_key(
            cache_key, self.config, directives=directives, data_files=paths, seed=ctx.seed, languages=ctx.languages
        )
        return cached_stage("lapt", key, lambda: self._train(ctx, directives, paths), type(hf_model(ctx.model)),
                            resolve_device(ctx.device), cache_root=cache_root, progress=ctx.progress)

    # -- training

    def _train(self, ctx: TaskContext, directives: dict, paths: list[Path]) -> tuple[Any, TaskResult]:
        # Long on purpose: the blocks, the phase schedule (TransInner's embeddings-only phase) and the loop
        # share the resolved hyper-parameters; the phases read in order here.
        cfg = self.config
        t0 = time.perf_counter()
        model = ctx.model
        kind = lm_kind(model)
        hp = cfg.resolved(kind)
        device = resolve_device(ctx.device)
        plain = getattr(model, "prepare_batch", None) is None and (
            ctx.encoding is None or getattr(ctx.encoding, "registry_name", None) == "none"
        )
        block = hp["max_length"] - added_tokens(model)  # an attached language token takes one position

        features: list[dict] = []
        n_lines = {}
        for li, (lang, path) in enumerate(zip(ctx.languages, paths)):
            lines = read_train_lines(path, cfg.max_train_examples)
            n_lines[lang] = len(lines)
            blocks = build_blocks(ctx.tokenizer, lines, block)
            if not blocks:
                raise ValueError(f"lapt: {path} has fewer tokens than one block of {block} tokens")
            features.extend({"input_ids": b, "lang": li} for b in blocks)

        n_steps = int(hp["max_steps"])
        phases, f, mode = plan_phases(n_steps, directives, cfg.embeddings_only_steps)

        curve: list[tuple[int, float]] = []
        phase_info: list[dict] = []
        offset = 0
        freeze_verified: bool | None = None
        model.train()
        for pi, (name, steps) in enumerate(phases):
            # "full" after an embeddings phase in 'fraction' mode continues with a fresh data
            # order; an unfrozen run (no TransInner, or 'extra' mode's normal run) uses the same
            # order and masks as every other method's LAPT.
            path = ("lapt",) if name == "full" and (mode in (None, "extra", "steps")) else ("lapt", f"phase{pi + 1}")
            train_cfg = self._train_config(hp, steps, embeddings_phase=name == "embeddings")
            collate = _LaptCollate(
                kind, ctx.tokenizer, seed=ctx.seed, path=path, mlm_probability=cfg.mlm_probability,
                prepare=None if plain else batch_preparer(model, ctx.encoding), languages=ctx.languages,
            )  # fmt: skip
            if name == "embeddings":
                res, frozen_ok, trainable = self._embeddings_phase(
                    model, features, train_cfg, ctx, collate, path, device
                )
                freeze_verified = frozen_ok
            else:
                res = self._run(model, features, train_cfg, ctx, collate, path, device, f"lapt {name}")
                trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
            curve.extend((offset + s, float(v)) for s, v in res.loss_curve)
            phase_info.append({"phase": name, "steps": res.steps, "first_step": offset + 1, "lr_schedule": train_cfg.lr_schedule,
                               "warmup_steps": train_cfg.warmup_steps, "trainable_parameters": trainable, "rng_path": list(path)})  # fmt: skip
            offset += res.steps
        model.eval()

        key = "+".join(ctx.languages)
        first = curve[0][1] if curve else math.nan
        last = curve[-1][1] if curve else math.nan
        info = {
            "objective": kind,
            "schedule": cfg.schedule,
            "hyperparameters": hp,
            "steps": offset,
            "phases": phase_info,
            "embeddings_only": None if mode is None else {
                "fraction": f, "schedule": mode, "steps": phases[0][1],
                **({"replaced_directives": {k: v for k, v in directives.items() if k.startswith("embeddings_only")}}
                   if mode == "steps" else {}),
            },  # fmt: skip
            "freeze_verified": freeze_verified,
            "blocks": len(features),
            "tokens_per_block": hp["max_length"],
            "epochs": round(offset * hp["batch_size"] / len(features), 3),
            "train_files": [str(p) for p in paths],
            "train_s": round(time.perf_counter() - t0, 3),
        }
        result = TaskResult(
            metrics={key: {"first_loss": first, "final_loss": last}},
            counts={key: {"train_lines": sum(n_lines.values()), "train_blocks": len(features), "steps": offset}},
            curves={"loss": curve},
            info=info,
        )
        return model, result

    def _train_config(self, hp: dict, steps: int, *, embeddings_phase: bool) -> TrainConfig:
        schedule, warmup = hp["lr_schedule"], math.ceil(hp["warmup_ratio"] * steps)
        if embeddings_phase and hp["embeddings_phase_warmup"] == "full":
            schedule, warmup = "constant", steps  # 0 -> peak over the whole phase (WECHSEL)
        return TrainConfig(
            learning_rate=hp["learning_rate"],
            batch_size=hp["batch_size"],
            epochs=1,
            max_steps=steps,
            lr_schedule=schedule,
            warmup_steps=warmup,
            weight_decay=hp["weight_decay"],
            max_grad_norm=hp["max_grad_norm"],
            adam_beta1=hp["adam_beta1"],
            adam_beta2=hp["adam_beta2"],
            adam_epsilon=hp["adam_epsilon"],
            mixed_precision=self.config.mixed_precision,
            cpu_bf16=bool(self.config.cpu_bf16),
            adamw_impl=self.config.adamw_impl or "auto",
            log_every=self.config.log_every,
        )

    def _run(self, model: Any, features: list[dict], train_cfg: TrainConfig, ctx: TaskContext,
             collate: Callable, path: tuple[str, ...], device: str, description: str) -> Any:  # fmt: skip
        return finetune(
            model,
            features,
            None,
            lambda m: None,
            train_cfg,
            ctx.seed,
            collate_fn=collate,
            device=device,
            show_progress=ctx.progress,
            description=description,
            rng_path=path,
        )

    def _embeddings_phase(self, model: Any, features: list[dict], train_cfg: TrainConfig, ctx: TaskContext,
                          collate: Callable, path: tuple[str, ...], device: str) -> tuple[Any, bool, int]:  # fmt: skip
        """Train only the lexical parameters; verify every other parameter is bit-identical after."""
        lexical = lexical_parameters(model)
        lexical_ids = {id(p) for p in lexical.values()}
        saved = {name: p.requires_grad for name, p in model.named_parameters()}
        frozen = {name: p for name, p in model.named_parameters() if id(p) not in lexical_ids}
        before = parameter_fingerprints(frozen)
        try:
            for p in model.parameters():
                p.requires_grad_(id(p) in lexical_ids)
            trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
            res = self._run(model, features, train_cfg, ctx, collate, path, device, "lapt embeddings only")
        finally:
            for name, p in model.named_parameters():
                p.requires_grad_(saved[name])
        after = parameter_fingerprints(frozen)
        changed = [name for name in frozen if after[name] != before[name]]
        if changed:
            raise RuntimeError(f"lapt: frozen parameters changed during the embeddings-only phase: {changed[:5]}")
        return res, True, trainable
