"""The phases of a trial after initialization: the language encoding, the stages, the task.

:func:`harness.run.runner.run_trial` calls them in this order on one :class:`~harness.protocols.TaskContext`:

1. :func:`wrap_encoding` wraps ``ctx.model`` in the trial's language encoding (a source model
   pretrained with an encoding keeps its parameters);
2. :func:`run_stages` adapts the model stage by stage (LAPT), collecting curves and facts;
3. :func:`run_task` fine-tunes and/or evaluates it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from harness import registry
from harness.language_encoding import read_pretrained
from harness.protocols import TaskContext, TaskResult
from harness.run.config import ComponentSpec, TrialSpec, component_config

__all__ = ["wrap_encoding", "StagesOutcome", "run_stages", "stage_cache_key", "run_task"]


def wrap_encoding(ctx: TaskContext, encoding_spec: ComponentSpec, source_path: str, seed: int) -> None:
    """Wrap ``ctx.model`` in the language encoding of ``encoding_spec``; sets ``ctx.encoding``.

    The encoding covers the target language and, for cross-lingual settings, the source
    language; ``seed`` drives the random initialization of languages the source did not have.
    """
    encoding = registry.get("encoding", encoding_spec.name).make(component_config("encoding", encoding_spec))
    ctx.encoding = encoding
    languages = list(dict.fromkeys(ctx.languages + ([ctx.source_language] if ctx.source_language else [])))
    ctx.model = encoding.wrap(ctx.model, languages, seed=seed, pretrained=read_pretrained(source_path))


@dataclass
class StagesOutcome:
    """What the stages of a trial produced.

    Attributes:
        curves: ``<stage id>.<curve>`` → ``[(step, value), …]``.
        info: per stage id, ``{"metrics", "info", "counts"}``.
        seconds: wall time of all stages.
    """

    curves: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    seconds: float = 0.0


def stage_cache_key(init_key: dict, spec: TrialSpec, index: int) -> dict:
    """The cache key of stage ``index``: the init key plus the encoding and the stages before it."""
    return {**init_key, "encoding": spec.encoding.as_dict(),
            "previous_stages": [s.as_dict() for s in spec.stages[:index]]}


def run_stages(ctx: TaskContext, spec: TrialSpec, directives: dict, init_key: dict) -> StagesOutcome:
    """Apply the trial's stages in order to ``ctx.model`` (replaced by each stage's model).

    Args:
        ctx: the trial's context.
        spec: the trial (its ``stages`` and ``encoding``).
        directives: the method's directives (e.g. TransInner's freezing schedule).
        init_key: the init cache key (see :func:`stage_cache_key`).
    """
    out = StagesOutcome()
    t0 = time.perf_counter()
    for i, st in enumerate(spec.stages):
        stage = registry.get("stage", st.name).make(component_config("stage", st))
        ctx.model, res = stage.apply(ctx, directives, cache_key=stage_cache_key(init_key, spec, i))
        out.curves.update({f"{st.id}.{k}": v for k, v in res.curves.items()})
        out.info[st.id] = {"metrics": res.metrics, "info": res.info, "counts": res.counts}
    out.seconds = time.perf_counter() - t0
    return out


def run_task(task: Any, ctx: TaskContext) -> tuple[TaskResult, float]:
    """Run the task on the context; ``(result, seconds)``."""
    t0 = time.perf_counter()
    result = task.run(ctx)
    return result, time.perf_counter() - t0
