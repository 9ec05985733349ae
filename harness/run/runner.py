"""One trial: resources → initialization → (encoding) → (stages) → task → one :class:`TrialRecord`.

:func:`run_trial` orchestrates the jobs, each of which lives in its own module:

* resolve the resources (:mod:`harness.run.resources`: source model, target tokenizer, corpora);
* build the model and initialize it, with the init cache (:mod:`harness.model.initialize`);
* wrap the language encoding, run the stages, run the task (:mod:`harness.run.trial`);
* build the record once (:func:`trial_record`), and :func:`execute` writes it
  (:func:`harness.run.records.write_record`).

A grid of trials is :func:`harness.run.experiment.run_experiment`'s business; it hands
:func:`execute` to the executors.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from harness import about, registry
from harness.cache import content_hash, file_hash
from harness.model.initialize import InitRequest, init_summary, initialize, write_init_info
from harness.protocols import TaskContext
from harness.run import records, resources, sanity
from harness.run.config import TrialSpec, component_config
from harness.run.records import TrialRecord
from harness.run.trial import run_stages, run_task, wrap_encoding
from harness.tokenizers import tokenizer_state

log = logging.getLogger("tokxfer")

__all__ = ["device", "init_cache_key", "init_inputs", "model_requirements", "run_trial", "trial_record", "failed_record",
           "execute", "prepare_shared", "prepare_source", "shared_sources", "plan_sources", "SourcePlan"]


def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def init_cache_key(spec: TrialSpec, source_path: str, model_kind: str, inputs: dict | None = None) -> dict:
    """Everything the method's output depends on: the key of the init cache (and, extended, of
    the stages' caches, see :func:`harness.run.trial.stage_cache_key`), the method's code included
    (:func:`harness.registry.code_hash`).

    ``inputs`` (:func:`init_inputs`) adds the content of what the method reads besides the source
    model (itself a content-keyed cache path): the target tokenizer and the corpora/dictionary
    files. Without it a world rebuilt by another generator version, or a corpus edited in place,
    would be served the initialization made from the old files (the spec names them only by
    language and path).
    """
    key = {
        "source": str(source_path), "source_tokenizer": spec.source.tokenizer, "target": spec.target.resolved(),
        "world": dataclasses.asdict(spec.world) if spec.world else None, "method": spec.method.as_dict(),
        "mode": spec.mode, "extend_top_n": spec.extend_top_n, "seed": spec.component_seed("init"), "kind": model_kind,
        "version": about.package_version(), "method_code": registry.code_hash("method", spec.method.name),
    }
    if inputs is not None:
        key["inputs"] = inputs
    return key


def init_inputs(target_tokenizer: Any, transfer: Any) -> dict:
    """The content part of :func:`init_cache_key`: the target tokenizer's state
    (:func:`harness.tokenizers.tokenizer_state`; its vocabulary for a tokenizer without a
    ``tokenizers`` backend) and the sha256 of every resource file a transfer may read."""
    state = tokenizer_state(target_tokenizer)
    if state is None:
        state = content_hash(sorted(target_tokenizer.get_vocab().items()))
    files = {name: content_hash(Path(path)) if Path(path).is_dir() else file_hash(Path(path))  # a helper model: a tree
             for name, path in transfer.as_dict().items() if path is not None}
    return {"target_tokenizer": state, "files": files}


def model_requirements(spec: TrialSpec) -> tuple[str, str | None]:
    """The kind of model a trial loads, and who needs its head (``None``: nobody).

    The kind is the task's ``model_kind``; an ``encoder`` task (sentence embeddings) behind a stage
    that trains through the masked-LM head (LAPT) loads the masked LM instead. A task or stage class
    whose ``needs_lm_head`` is true (``mlm-at-init``, ``lapt``) refuses a checkpoint without that head
    rather than receiving a random one (:func:`harness.run.resources.load_source_model`).
    """
    task_cls = registry.get("task", spec.task.name).cls
    kind = task_cls.model_kind
    needed_by = f"task {spec.task.name!r}" if getattr(task_cls, "needs_lm_head", False) else None
    for st in spec.stages:
        if getattr(registry.get("stage", st.name).cls, "needs_lm_head", False):
            kind = "mlm" if kind == "encoder" else kind
            needed_by = needed_by or f"stage {st.name!r}"
    return kind, needed_by


def run_trial(spec: TrialSpec, *, progress: bool = True, artifacts_dir: Path | None = None) -> TrialRecord:
    """Run one trial and return its record (status ``ok``); exceptions propagate to the caller."""
    started = about.now_iso()
    t_start = time.perf_counter()
    task_entry = registry.get("task", spec.task.name)
    task = task_entry.make(component_config("task", spec.task))
    kind, head_needed_by = model_requirements(spec)
    world = resources.world_for(spec.world)
    src_kind = resources.model_kind_of(spec.source.model)
    if src_kind is not None and src_kind != kind and not (kind == "encoder" and src_kind == "mlm"):
        raise ValueError(
            f"task {spec.task.name!r} needs a {kind} source model but source.model is {spec.source.model!r}"
        )
    t0 = time.perf_counter()
    src_path = resources.source_model_dir(spec.source, spec.world, progress=progress, encoding=spec.encoding.name)
    tgt_tok = resources.target_tokenizer(spec.target, world, progress=progress)
    seeds = spec.component_seeds()
    transfer = resources.transfer_resources(spec.target, world, source=spec.source, progress=progress,
                                            helper=spec.reads_helper_model(), seed=seeds["init"])
    t_resources = time.perf_counter() - t0

    init_key = init_cache_key(spec, src_path, kind, init_inputs(tgt_tok, transfer))
    init = initialize(InitRequest(
        source_model=src_path, target_tokenizer=tgt_tok, method=spec.method.name,
        method_config=component_config("method", spec.method), seed=seeds["init"], model_kind=kind, resources=transfer,
        source_tokenizer=resources.local_name(spec.source.tokenizer) if spec.source.tokenizer else None,
        source_language=world.source_language if world else "src",
        target_language=spec.target.language, mode=spec.mode, extend_top_n=spec.extend_top_n,
        head_needed_by=head_needed_by,
    ), world=world, cache_key=init_key)
    sanity.check_ids(init.tokenizer, init.model)  # ids beyond the embedding matrix can only be a bug

    torch_device = device()
    ctx = TaskContext(
        model=init.model.to(torch_device), tokenizer=init.tokenizer, languages=[spec.target.language], seed=seeds["stages"],
        device=torch_device, data_root=Path(resources.world_dir(spec.world.size, spec.world.seed)) if spec.world else None,
        source_language=world.source_language if world else None, progress=progress, work_dir=artifacts_dir,
        source_model=str(src_path), source_tokenizer=init.source_tokenizer,
    )
    wrap_encoding(ctx, spec.encoding, src_path, seeds["init"])  # a new language's parameters are initialization
    stages = run_stages(ctx, spec, init.result.directives, init_key)
    ctx.seed = seeds["task"]
    result, t_task = run_task(task, ctx)
    if artifacts_dir is not None:
        artifacts_dir.mkdir(parents=True, exist_ok=True)
        write_init_info(artifacts_dir / "init_info.json", init)

    init_section = init_summary(init)
    flags = sanity.check_record({"config": spec.resolved(), "metrics": result.metrics, "init": init_section},
                                registry.get("method", spec.method.name).cls)
    record = trial_record(
        spec, "ok", started=started, flags=flags,
        seeds=seeds,
        metrics=result.metrics, init=init_section, stages=stages.info, counts=result.counts,
        curves={**stages.curves, **result.curves}, task_info=result.info,
        encoding=ctx.model.encoding_info() if getattr(ctx.model, "is_language_encoded", False) else None,
        timings={
            "resources_s": t_resources, **{f"init_{k}": v for k, v in init.timings.items()},
            "stages_s": stages.seconds, "task_s": t_task, "total_s": time.perf_counter() - t_start,
        },
        revisions={"source_model": str(src_path), "world": _world_revision(spec, world)},
        example_scores=result.examples,
    )
    sanity.log_flags(record.to_json())
    return record


def _world_revision(spec: TrialSpec, world: Any) -> dict | None:
    """The world a record was made on: its spec plus the generator version and config fingerprint
    that built it (a size and seed name different worlds under different generator versions)."""
    if spec.world is None:
        return None
    out = dataclasses.asdict(spec.world)
    if world is not None:
        out.update(generator_version=world.manifest["generator_version"], fingerprint=world.manifest["fingerprint"])
    return out


def trial_record(spec: TrialSpec, status: str, *, started: str, **sections: Any) -> TrialRecord:
    """The record of a trial: identity, versions, config and environment, plus ``sections``.

    Args:
        spec: the trial.
        status: ``ok`` or ``failed``.
        started: ISO time the trial started.
        sections: the other :class:`TrialRecord` fields (``metrics``, ``init``, ``error`` …);
            ``metrics`` defaults to ``{}``.
    """
    return TrialRecord(
        trial_id=spec.trial_id, status=status, schema_version=records.SCHEMA_VERSION,
        tokxfer_version=about.package_version(), git=about.git_info(), experiment=spec.experiment,
        config=spec.resolved(), seed=spec.seed, environment=about.environment(), started_at=started,
        finished_at=about.now_iso(), **{"metrics": {}, **sections},
    )


def failed_record(spec: TrialSpec, exc: BaseException, started: str, *, with_traceback: bool = True) -> TrialRecord:
    """The record of a trial that raised ``exc`` (the traceback of the exception being handled)."""
    error = {"type": type(exc).__name__, "message": str(exc),
             "traceback": traceback.format_exc() if with_traceback else None}
    return trial_record(spec, "failed", started=started, error=error,
                        flags=None)  # the sanity guards need a finished trial


def shared_sources(specs: list[TrialSpec]) -> list[TrialSpec]:
    """One trial per distinct built-in source model the ``specs`` read (the first that reads it), in grid order."""
    seen: dict[str, TrialSpec] = {}
    for spec in specs:
        seen.setdefault(_source_key(spec), spec)
    return list(seen.values())


@dataclasses.dataclass(frozen=True)
class SourcePlan:
    """How a pool of workers gets the built-in source models a grid reads (:func:`plan_sources`).

    Attributes:
        before: one trial per source to build before the trials, several at once (whole rounds of the pool).
        order: the trials, those whose source is built inside them first.
        building: trial id → the cache directory of a source its trial builds (or waits for); a pool
            gives no worker a trial whose source directory another running trial of it has not finished.
    """

    before: list[TrialSpec]
    order: list[TrialSpec]
    building: dict[str, str]


def plan_sources(specs: list[TrialSpec], workers: int) -> SourcePlan:
    """Which of the grid's built-in sources to build before the trials, and in which order to hand the trials out.

    Sources already in the cache are left out. Of the ``n`` others, the largest multiple of ``workers`` is
    built before the trials (every worker busy in every round); the remaining ``n mod workers`` are built
    each by its first trial, which goes to the front of the queue, so that the workers without a source to
    build run trials whose source exists meanwhile instead of waiting for the last builds (unless every
    trial reads one of those sources: then all are built first, as nothing could run beside them; a grid resumed
    with one source left to build kept one core idle through that build; five sources on two workers
    left one idle for the whole third round). Each build runs at the trials' thread count either way, so
    no number depends on the plan.

    Example:
        >>> plan_sources([], 2)
        SourcePlan(before=[], order=[], building={})
    """
    keys = [_source_key(s) for s in specs]
    unbuilt: dict[str, tuple[TrialSpec, str]] = {}  # source key -> its first trial and its cache directory
    for spec in shared_sources(specs):
        try:
            if not resources.model_kind_of(spec.source.model):
                continue  # a hub or local model: nothing to build
            where = resources.source_model_dir(spec.source, spec.world, encoding=spec.encoding.name, locate_only=True)
        except Exception as e:  # the trials that need it record why
            log.debug("could not locate the source model of trial %s: %s", spec.trial_id, e)
            continue
        if not Path(where).is_dir():
            unbuilt[_source_key(spec)] = (spec, where)
    todo = [spec for spec, _ in unbuilt.values()]
    n_before = len(todo) - len(todo) % max(1, workers)
    inside = {_source_key(s) for s in todo[n_before:]}
    if all(k in inside for k in keys):  # no trial could run beside those builds: build them all first
        n_before, inside = len(todo), set()
    first = todo[n_before:]
    order = first + [s for s in specs if s not in first]
    building = {s.trial_id: unbuilt[k][1] for s, k in zip(specs, keys) if k in inside}
    return SourcePlan(todo[:n_before], order, building)


def _source_key(spec: TrialSpec) -> str:
    return repr((spec.source, spec.world, spec.encoding.name))


def prepare_source(spec: TrialSpec, progress: bool = False) -> None:
    """Build (or find cached) the source model of ``spec``; a failure is left to the trials that need it, which
    record it as they always do. Picklable (:meth:`harness.run.executors.WorkerPoolExecutor.prepare` runs it in
    worker processes)."""
    try:
        resources.source_model_dir(spec.source, spec.world, progress=progress, encoding=spec.encoding.name)
    except Exception as e:
        log.debug("could not prepare the source model of trial %s (%s) before the trials: %s", spec.trial_id,
                  spec.describe(), e)


def prepare_shared(specs: list[TrialSpec], *, progress: bool = True, sources: bool = True) -> None:
    """Build, in this process, what several trials of a grid share: built-in source models and target tokenizers.

    For worker processes (:class:`harness.run.executors.WorkerPoolExecutor`): two workers would otherwise
    build the same entry at once (the cache keeps one, the other's minutes are lost). The source models,
    whose pretraining depends on the torch thread count (:mod:`harness.world.pretrain`), are built first by
    the executor's :meth:`~harness.run.executors.WorkerPoolExecutor.prepare` (:func:`shared_sources`,
    :func:`prepare_source`) at the trials' thread count, and ``sources=False`` skips them here. A resource
    that cannot be built is left to its trials, which record the error as they always do.
    """
    if sources:
        for spec in shared_sources(specs):
            prepare_source(spec, progress=progress)
    done: set[str] = set()
    for spec in specs:
        k = repr((spec.target, spec.world))
        if k in done:
            continue
        done.add(k)
        try:
            resources.target_tokenizer(spec.target, resources.world_for(spec.world), progress=progress)
        except Exception as e:  # the trials that need it fail and record why
            log.debug("could not prepare the target tokenizer of trial %s (%s) before the workers start: %s",
                      spec.trial_id, spec.describe(), e)


def execute(spec: TrialSpec, runs_dir: str, progress: bool = False) -> TrialRecord:
    """Run one trial and write its record (ok or failed). Picklable entry point for executors.

    Returns:
        The record as written (read back from its file, so it names its per-example results).
    """
    exp_dir = Path(runs_dir) / spec.experiment
    started = about.now_iso()
    try:
        rec = run_trial(spec, progress=progress, artifacts_dir=exp_dir / "artifacts" / spec.trial_id)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # isolated: recorded, the grid goes on
        log.error("trial %s (%s) failed: %s", spec.trial_id, spec.describe(), e)
        rec = failed_record(spec, e, started)
    path = records.write_record(exp_dir / "records", rec)
    return records.read_record(path)  # as written: with the section naming its per-example results
