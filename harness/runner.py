"""The trial runner: one trial = init → (encoding) → (stages) → task → record.

``run_experiment`` expands the grid, skips trials whose record exists and validates (resume),
runs the rest through an executor, writes every record atomically the moment its trial ends, and
mirrors it to the tracker. A failed trial is recorded with its traceback and the grid goes on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import logging
import os
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness import records, registry, resources, sanity, seeding
from harness.config import ExperimentConfig, TrialSpec, component_config, config_hash
from harness.protocols import PROVENANCE_NAMES, InitResult, TaskContext, TokenMapping, TransferInputs

log = logging.getLogger("tokxfer")


@dataclasses.dataclass
class Initialized:
    """A model with its new vocabulary, plus what the record needs to know about the init."""

    model: Any
    tokenizer: Any
    result: InitResult
    source_tokenizer: Any
    source_embeddings: torch.Tensor
    diagnostics: dict
    timings: dict


def device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


# --------------------------------------------------------------------------------------------
# initialization (shared by trials and `tokxfer init`)


def initialize_model(
    *, source_model: str, source_tokenizer: str | None, target_tok, method_name: str, method_config: Any,
    seed: int, model_kind: str, transfer_paths: dict, source_language: str = "src", target_language: str = "tgt",
    mode: str = "replace", extend_top_n: int = 30000, bias: str = "map", world=None, cache_key: dict | None = None,
) -> Initialized:
    """Load the source, run the method, install the result. All randomness from ``seed``."""
    from harness import surgery
    from harness.diagnostics import world_diagnostics

    t0 = time.perf_counter()
    model = resources.load_source_model(source_model, model_kind)
    src_tok = resources.load_tokenizer(source_tokenizer or source_model)
    src_emb = model.get_input_embeddings().weight.detach().float().cpu().clone()
    if src_emb.shape[0] != len(src_tok):
        if src_emb.shape[0] < len(src_tok):
            raise surgery.SurgeryError(
                f"source tokenizer has {len(src_tok)} tokens but the model has only {src_emb.shape[0]} embedding rows"
            )
    t_load = time.perf_counter() - t0

    t0 = time.perf_counter()
    tgt = target_tok
    if mode == "extend":
        from harness.extension import extend_tokenizer

        if transfer_paths.get("target_corpus") is None:
            raise resources.ResourceError("mode=extend needs a target corpus to rank the new tokens")
        tgt, _ = extend_tokenizer(src_tok, target_tok, transfer_paths["target_corpus"], extend_top_n)
    surgery.check_special_tokens(tgt, model_kind, where="target tokenizer")
    entry = registry.get("method", method_name)
    method = entry.make(method_config)
    inputs = TransferInputs(
        source_tokenizer=src_tok, target_tokenizer=tgt, source_embeddings=src_emb,
        source_language=source_language, target_language=target_language, cache_dir=resources.cache_dir(),
        extension_tokenizer=target_tok if mode == "extend" else None, **transfer_paths,
    )
    result = _cached_init(cache_key, lambda: method.initialize(inputs, seeding.numpy_rng(seed, "init", method_name)), tgt)
    from_scratch = bool(result.directives.get("reinitialize_body"))
    if mode == "extend":
        result = _keep_original_rows(result, src_tok, tgt, from_scratch)
    t_method = time.perf_counter() - t0

    t0 = time.perf_counter()
    gen = seeding.torch_generator(seed, "init", "materialize")
    surgery.install(model, result, gen, bias=bias)
    if from_scratch:
        surgery.reinitialize_all(model, seeding.seeded_globals(seed, "init", "from-scratch"))
    new_emb = model.get_input_embeddings().weight.detach().float().cpu()
    # gold diagnostics compare target-tokenizer rows with source rows; they say nothing when the
    # method keeps the source tokenizer (``original``), so they are left out there
    diag = (world_diagnostics(world, target_language, src_tok, result.tokenizer, src_emb, new_emb)
            if world is not None and result.tokenizer is not src_tok else {})
    return Initialized(
        model=model, tokenizer=result.tokenizer, result=result, source_tokenizer=src_tok, source_embeddings=src_emb,
        diagnostics=diag, timings={"load_s": t_load, "method_s": t_method, "install_s": time.perf_counter() - t0},
    )


def _keep_original_rows(result: InitResult, src_tok, extended_tok, from_scratch: bool) -> InitResult:
    """Extension mode: old ids keep their source rows bit-exactly; only new ids come from the method.

    Applied to every method's result (see :func:`methods._extension.keep_original_rows`), except
    where nothing is extended (a method that keeps the source tokenizer, ``original``) or nothing is
    kept by design (``from-scratch`` re-initializes every parameter); ``info["extension"]`` says which.
    """
    from harness.vocab import special_ids, vocab_size
    from harness.extension import keep_original_rows

    def with_extension(**facts) -> dict:  # keeps what the method itself said about the extension
        return {**result.info, "extension": {**(result.info.get("extension") or {}), **facts}}

    if from_scratch:
        return dataclasses.replace(result, info=with_extension(
            original_rows_kept=False, reason="from-scratch re-initializes every parameter"))
    if result.tokenizer is not extended_tok:
        return dataclasses.replace(result, info=with_extension(
            original_rows_kept=True, reason="the method keeps the source tokenizer; nothing was added"))
    mapping, ext = keep_original_rows(result.mapping, vocab_size(src_tok), special_ids(src_tok))
    return dataclasses.replace(result, mapping=mapping, info=with_extension(original_rows_kept=True, **ext))

def _cached_init(key: dict | None, compute, tokenizer) -> InitResult:
    """Content-hashed cache of method outputs (mapping + info), so re-runs do not recompute them."""
    if key is None:
        return compute()
    d = resources.cache_dir() / "inits" / config_hash(key)
    if (d / "mapping.npz").is_file() and (d / "init.json").is_file():
        z = np.load(d / "mapping.npz")
        meta = json.loads((d / "init.json").read_text())
        mapping = TokenMapping(int(z["shape"][0]), int(z["shape"][1]), z["indptr"], z["indices"], z["weights"], z["provenance"])
        # only results whose tokenizer is the given one are cached, so it is the right one here
        return InitResult(mapping, tokenizer, dict(meta["info"], cache_hit=True), meta["directives"])
    res = compute()
    if res.tokenizer is not tokenizer:
        return res  # method chose another tokenizer (original); do not cache the mapping alone
    import os
    import tempfile

    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=d.parent, prefix=".tmp-"))
    m = res.mapping
    np.savez(tmp / "mapping.npz", shape=np.array([m.n_target, m.n_source]), indptr=m.indptr, indices=m.indices,
             weights=m.weights, provenance=m.provenance)
    (tmp / "init.json").write_text(json.dumps({"info": res.info, "directives": res.directives}, default=str))
    try:
        os.replace(tmp, d)
    except OSError:  # another process filled it first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return res


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
    info = init_summary(init)
    info["provenance_codes"] = {str(k): v for k, v in PROVENANCE_NAMES.items()}
    info["provenance"] = provenance_string(init.result.mapping)
    info.update(extra or {})
    path.write_text(json.dumps(info, indent=2, default=str))


# --------------------------------------------------------------------------------------------
# trials


def run_trial(spec: TrialSpec, *, progress: bool = True, artifacts_dir: Path | None = None) -> dict:
    """Run one trial and return its record (status ``ok``); exceptions propagate to the caller."""
    started = records.now_iso()
    t_start = time.perf_counter()
    task_entry = registry.get("task", spec.task.name)
    task = task_entry.make(component_config("task", spec.task))
    kind = task_entry.cls.model_kind
    world = resources.world_for(spec.world)
    src_kind = resources.model_kind_of(spec.source.model)
    if src_kind is not None and src_kind != kind:
        raise ValueError(
            f"task {spec.task.name!r} needs a {kind} source model but source.model is {spec.source.model!r}"
        )
    t0 = time.perf_counter()
    src_path = resources.source_model_dir(spec.source, spec.world, progress=progress)
    tgt_tok = resources.target_tokenizer(spec.target, world, progress=progress)
    paths = resources.transfer_paths(spec.target, world)
    t_resources = time.perf_counter() - t0
    cache_key = {
        "source": str(src_path), "source_tokenizer": spec.source.tokenizer, "target": dataclasses.asdict(spec.target),
        "world": dataclasses.asdict(spec.world) if spec.world else None, "method": spec.method.as_dict(),
        "mode": spec.mode, "extend_top_n": spec.extend_top_n, "seed": spec.seed, "kind": kind,
        "version": records.package_version(),
    }
    init = initialize_model(
        source_model=src_path, source_tokenizer=spec.source.tokenizer, target_tok=tgt_tok,
        method_name=spec.method.name, method_config=component_config("method", spec.method), seed=spec.seed,
        model_kind=kind, transfer_paths=paths, source_language=world.source_language if world else "src",
        target_language=spec.target.language, mode=spec.mode, extend_top_n=spec.extend_top_n, world=world,
        cache_key=cache_key,
    )
    sanity.check_ids(init.tokenizer, init.model)  # ids beyond the embedding matrix can only be a bug
    dev = device()
    model = init.model.to(dev)
    ctx = TaskContext(
        model=model, tokenizer=init.tokenizer, languages=[spec.target.language], seed=spec.seed, device=dev,
        data_root=Path(resources.world_dir(spec.world.size, spec.world.seed)) if spec.world else None,
        source_language=world.source_language if world else None, progress=progress, work_dir=artifacts_dir,
    )
    enc_entry = registry.get("encoding", spec.encoding.name)
    encoding = enc_entry.make(component_config("encoding", spec.encoding))
    ctx.encoding = encoding
    # the target, and the source language for cross-lingual settings; seed: random init of new languages
    languages = list(dict.fromkeys([spec.target.language] + ([ctx.source_language] if ctx.source_language else [])))
    from harness.language_encoding import read_pretrained  # a source pretrained with an encoding keeps it

    ctx.model = encoding.wrap(ctx.model, languages, seed=spec.seed, pretrained=read_pretrained(src_path))
    curves: dict = {}
    stage_info: dict = {}
    t0 = time.perf_counter()
    for st in spec.stages:
        stage = registry.get("stage", st.name).make(component_config("stage", st))
        kwargs = {}
        if "cache_key" in inspect.signature(stage.apply).parameters:
            # stages that cache their result (LAPT) key it on everything that determined the init,
            # so several tasks and seeds that share an adapted model reuse it
            kwargs["cache_key"] = {**cache_key, "encoding": spec.encoding.as_dict(),
                                   "previous_stages": [s.as_dict() for s in spec.stages[: spec.stages.index(st)]]}
        ctx.model, res = stage.apply(ctx, init.result.directives, **kwargs)
        curves.update({f"{st.id}.{k}": v for k, v in res.curves.items()})
        stage_info[st.id] = {"metrics": res.metrics, "info": res.info, "counts": res.counts}
    t_stages = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = task.run(ctx)
    t_task = time.perf_counter() - t0
    curves.update(result.curves)
    if artifacts_dir is not None:
        artifacts_dir.mkdir(parents=True, exist_ok=True)
        write_init_info(artifacts_dir / "init_info.json", init)
    record = {
        "schema_version": records.SCHEMA_VERSION,
        "tokxfer_version": records.package_version(),
        "git": records.git_info(),
        "experiment": spec.experiment,
        "trial_id": spec.trial_id,
        "status": "ok",
        "error": None,
        "config": spec.resolved(),
        "seed": spec.seed,
        "seeds": {"init": seeding.derive(spec.seed, "init", spec.method.name), "task": seeding.derive(spec.seed, "task")},
        "metrics": result.metrics,
        "init": init_summary(init),
        "stages": stage_info,
        "counts": result.counts,
        "curves": curves,
        "task_info": result.info,
        "encoding": ctx.model.encoding_info() if getattr(ctx.model, "is_language_encoded", False) else None,
        "timings": {
            "resources_s": t_resources, **{f"init_{k}": v for k, v in init.timings.items()}, "stages_s": t_stages,
            "task_s": t_task, "total_s": time.perf_counter() - t_start,
        },
        "revisions": {"source_model": str(src_path), "world": dataclasses.asdict(spec.world) if spec.world else None},
        "environment": records.environment(),
        "started_at": started,
        "finished_at": records.now_iso(),
    }
    record["flags"] = sanity.check_record(record, registry.get("method", spec.method.name).cls)
    sanity.log_flags(record)
    return record


def failed_record(spec: TrialSpec, exc: BaseException, started: str) -> dict:
    return {
        "schema_version": records.SCHEMA_VERSION,
        "tokxfer_version": records.package_version(),
        "git": records.git_info(),
        "experiment": spec.experiment,
        "trial_id": spec.trial_id,
        "status": "failed",
        "error": {"type": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc()},
        "config": spec.resolved(),
        "seed": spec.seed,
        "metrics": {},
        "flags": None,  # the sanity guards need a finished trial
        "environment": records.environment(),
        "started_at": started,
        "finished_at": records.now_iso(),
    }


def execute(spec: TrialSpec, runs_dir: str, progress: bool = False) -> dict:
    """Run one trial and write its record (ok or failed). Picklable entry point for executors."""
    exp_dir = Path(runs_dir) / spec.experiment
    started = records.now_iso()
    try:
        rec = run_trial(spec, progress=progress, artifacts_dir=exp_dir / "artifacts" / spec.trial_id)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # isolated: recorded, the grid goes on
        log.error("trial %s (%s) failed: %s", spec.trial_id, spec.describe(), e)
        rec = failed_record(spec, e, started)
    records.write_record(exp_dir / "records", rec)
    return rec


def declared_metrics(task_name: str) -> tuple[str, ...]:
    """Metric names a task declares with a ``metrics`` class attribute (``()`` if it declares none).

    A task class may declare ``metrics: ClassVar[tuple[str, ...]] = ("loss", "accuracy")``: a
    record that lacks one of them is incomplete and re-run on resume, and leaderboard specs are
    checked against them.
    """
    try:
        cls = registry.get("task", task_name).cls
    except registry.RegistryError:
        return ()
    names = getattr(cls, "metrics", None)
    if isinstance(names, (tuple, list, frozenset, set)) and all(isinstance(n, str) for n in names):
        return tuple(names)
    return ()


def resume_state(spec: TrialSpec, rec_dir: Path) -> tuple[str, str]:
    """``(state, why)`` of a trial's record for resume (see :func:`harness.records.trial_state`).

    Raises:
        RecordError: the record exists but cannot be read or is from a newer schema; the message
            names the file and says that resuming would overwrite it.
    """
    path = Path(rec_dir) / f"{spec.trial_id}.json"
    try:
        return records.trial_state(path, languages=[spec.target.language],
                                   required_metrics=declared_metrics(spec.task.name))
    except records.RecordError as e:
        raise records.RecordError(
            f"{e}. Resuming would overwrite this record of trial {spec.describe()}; move it away (or upgrade "
            f"tokxfer for a newer schema) and run again"
        ) from None


def _resume_todo(specs: list[TrialSpec], rec_dir: Path) -> list[TrialSpec]:
    """The trials a resumed run must (re-)run: missing, failed and incomplete records.

    Unreadable or newer-schema records stop the run (:func:`resume_state`). For a task that
    declares no metrics, a record lacking a metric that another complete record of the same task
    entry and language has is incomplete too (a metric removed by hand or by a bug).
    """
    states = {s.trial_id: resume_state(s, rec_dir) for s in specs}
    keys: dict[str, set[str]] = {}
    groups: dict[tuple[str, str], list[str]] = {}
    for s in specs:
        if states[s.trial_id][0] == "complete" and not declared_metrics(s.task.name):
            rec = records.load_record(rec_dir / f"{s.trial_id}.json")
            keys[s.trial_id] = set((rec.get("metrics") or {}).get(s.target.language) or {})
            groups.setdefault((s.task.id, s.target.language), []).append(s.trial_id)
    for members in groups.values():
        union = set().union(*(keys[t] for t in members))
        for t in members:
            if keys[t] != union:
                states[t] = ("incomplete", f"metric(s) {', '.join(sorted(union - keys[t]))} missing")
    todo = []
    for s in specs:
        state, why = states[s.trial_id]
        if state in ("incomplete",):
            log.warning("record of trial %s (%s) is incomplete (%s); running it again", s.trial_id, s.describe(), why)
        if state != "complete":
            todo.append(s)
    return todo


@dataclasses.dataclass
class ExperimentSummary:
    """What :func:`run_experiment` did.

    Attributes:
        ran: trials this process ran (ok or failed).
        skipped: trials whose complete record existed when the run started.
        failed: trials this process ran that failed.
        records_dir: where the records are.
        tracking_errors: one message per record that could not be mirrored (records are safe).
        by_others: trials of this run's work that other ``tokxfer run`` processes ran meanwhile.
    """

    ran: int
    skipped: int
    failed: int
    records_dir: Path
    tracking_errors: list[str]
    by_others: int = 0


class WorkerLost(RuntimeError):
    """The process running a trial died before it wrote the trial's record."""


def _mtime_ns(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return None


def _write_json_atomic(path: Path, obj: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(obj, indent=2))
    os.replace(tmp, path)


def run_experiment(
    cfg: ExperimentConfig, runs_dir: str | Path = "runs", *, executor=None, tracker=None, force: bool = False,
    progress: bool = True, claims=None, poll_s: float = 1.0, trial_fn=None,
) -> ExperimentSummary:
    """Run every trial of an experiment whose record is missing, failed or incomplete; mirror to the tracker.

    Several processes may run the same experiment into the same runs dir at once (on one machine
    or on several sharing the file system): each trial is claimed before it runs
    (:mod:`harness.claims`), so they split the grid and every trial runs once. A process that
    runs out of unclaimed trials waits for the others' trials and takes over the claims of dead
    owners; it returns when the whole grid has records.

    Args:
        cfg: the experiment.
        runs_dir: records go to ``<runs_dir>/<cfg.name>/records``.
        executor: where trials run (default: this process).
        tracker: MLflow mirror (``None``: none). On resume, records the store lacks are mirrored first.
        force: re-run trials that have complete records.
        progress: progress bars and info logs.
        claims: a :class:`harness.claims.TrialClaims` (default: one on the experiment dir).
        poll_s: how often to look at other processes' trials while waiting for them.
        trial_fn: the picklable function executors run per trial (default :func:`execute`; tests
            pass stand-ins).

    Raises:
        RecordError: a record that resuming would overwrite cannot be read (names the file).
        OSError: the runs dir cannot be written (read-only, full).
    """
    from harness.claims import TrialClaims
    from harness.executors import LocalExecutor

    runs_dir = Path(runs_dir)
    exp_dir = runs_dir / cfg.name
    rec_dir = exp_dir / "records"
    try:
        rec_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise OSError(e.errno, f"cannot create the records folder {rec_dir} ({e.strerror}); is the runs dir "
                               f"{runs_dir} writable?") from None
    _write_json_atomic(exp_dir / "experiment.json", {"name": cfg.name, "path": cfg.path, "description": cfg.description})
    specs = cfg.trials()
    # what the records looked like before deciding what to run: a record that changes later was
    # written by another process running the same experiment
    seen = {s.trial_id: _mtime_ns(rec_dir / f"{s.trial_id}.json") for s in specs}
    todo = specs if force else _resume_todo(specs, rec_dir)
    skipped = len(specs) - len(todo)
    if progress and skipped:
        log.info("%d of %d trials already have records; running %d", skipped, len(specs), len(todo))
    executor = executor or LocalExecutor(progress=progress)
    tracking_errors: list[str] = []

    def tracking_failed(e: Exception) -> None:
        # one warning for the first failure; the rest are counted and summarized at the end
        if not tracking_errors:
            log.warning("tracking failed (records are safe on disk; further failures are counted, not shown): %s", e)
        tracking_errors.append(str(e))

    if tracker is not None and hasattr(tracker, "mirrored") and any(rec_dir.glob("*.json")):
        # resume: records written before an interruption may not have reached the store
        from harness.tracking import sync

        try:
            sync(rec_dir, tracker)
        except Exception as e:
            tracking_failed(e)

    claims = claims if claims is not None else TrialClaims(exp_dir)
    elsewhere: dict[str, TrialSpec] = {}
    by_others: set[str] = set()

    def written_by_other(tid: str) -> bool:
        """A record appeared or changed since this run looked: another process ran the trial."""
        return _mtime_ns(rec_dir / f"{tid}.json") != seen[tid]

    def claim(spec: TrialSpec) -> bool:
        if not claims.acquire(spec.trial_id):
            elsewhere[spec.trial_id] = spec
            return False
        if written_by_other(spec.trial_id):  # finished by another process after we listed the work
            claims.release(spec.trial_id)
            by_others.add(spec.trial_id)
            return False
        return True

    def lost(spec: TrialSpec, reason: str, since: float) -> dict:
        path = rec_dir / f"{spec.trial_id}.json"
        if written_by_other(spec.trial_id) and path.stat().st_mtime >= since:
            with contextlib.suppress(records.RecordError):
                return records.load_record(path)  # the worker died after writing it
        log.error("trial %s (%s) failed: %s", spec.trial_id, spec.describe(), reason)
        rec = failed_record(spec, WorkerLost(reason), records.now_iso())
        rec["error"]["traceback"] = None
        records.write_record(rec_dir, rec)
        return rec

    def on_record(rec: dict) -> None:
        claims.release(rec["trial_id"])
        seen[rec["trial_id"]] = _mtime_ns(rec_dir / f"{rec['trial_id']}.json")
        if tracker is None:
            return
        try:
            path = rec_dir / f"{rec['trial_id']}.json"
            arts = [path]
            info = exp_dir / "artifacts" / rec["trial_id"] / "init_info.json"
            if info.is_file():
                arts.append(info)
            # mirror the record as stored (and as `tokxfer sync` reads it), so that digests agree
            tracker.log_trial(cfg.name, records.load_record(path), arts)
        except Exception as e:  # the record is already on disk
            tracking_failed(e)

    results: list[dict] = []
    pending = list(todo)
    try:
        while pending:
            elsewhere.clear()
            results += executor.run(pending, str(runs_dir.resolve()), on_record, execute=trial_fn or execute,
                                    claim=claim, lost=lost)
            pending = _wait_for_others(elsewhere, claims, written_by_other, by_others, poll_s, progress)
    finally:
        claims.close()
    failed = sum(1 for r in results if r.get("status") != "ok")
    return ExperimentSummary(len(results), skipped, failed, rec_dir, tracking_errors, by_others=len(by_others))


def _wait_for_others(elsewhere: dict, claims, written_by_other, by_others: set, poll_s: float, progress: bool) -> list:
    """Wait until trials claimed by other processes have records; return those whose owner died.

    Returns as soon as one claim is stale or gone without a record (then every trial still
    unfinished is tried again: the ones still owned are simply skipped again).
    """
    waiting = dict(elsewhere)
    if waiting and progress:
        log.info("%d trial(s) are being run by other processes; waiting for them", len(waiting))
    while waiting:
        orphaned = False
        for tid in list(waiting):
            if written_by_other(tid):
                by_others.add(tid)
                del waiting[tid]
                continue
            info = claims.read(tid)
            if info is None or claims.is_stale(info):
                orphaned = True
        if orphaned:
            return list(waiting.values())
        if waiting:
            time.sleep(poll_s)
    return []
