"""Trial records: one versioned JSON file per trial, written atomically, loaded with migrations.

Records on disk are the source of truth; MLflow and the leaderboards read them. In memory a
record is a :class:`TrialRecord` (typed, frozen, versioned): the runner builds one per trial,
:meth:`TrialRecord.to_json` is what :func:`write_record` stores, and :meth:`TrialRecord.from_json`
reads any schema version back through :data:`MIGRATIONS`.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> p = write_record(d, {"trial_id": "abc", "status": "ok", "metrics": {}})
    >>> load_record(p)["schema_version"] == SCHEMA_VERSION
    True
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from harness.errors import TokxferError
from harness.files import write_atomic

SCHEMA_VERSION = 3
"""1: the first schema. 2: ``seeds`` lists only the derived seeds the runner hands out (``init``);
schema 1 also named a ``task`` seed that no task used (tasks derive theirs from ``seed``).
3: ``seeds`` names the seed of every random source of the trial (``source``, ``init``, ``stages``,
``task``: :data:`harness.run.config.SEED_COMPONENTS`), each the trial seed unless held; ``examples`` names
the per-example results stored beside the record (:mod:`harness.examples`)."""
REQUIRED_FIELDS = ("schema_version", "trial_id", "status")
TRIAL_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}$")
"""The shape of a trial id: tokxfer's are 16 hex digits (:func:`harness.run.config.config_hash`); records
written by hand or by tests may use other ids of letters, digits and ``_ . + -``. Never a path."""


class RecordError(TokxferError, ValueError):
    """A record file is unreadable, truncated, or from a newer schema."""


# migrations[n] turns a record of schema n into schema n+1. Old records kept in
# tests/fixtures/records/ must keep loading through these.
# Optional fields added without a version bump (old records simply lack them; readers treat a
# missing field as unknown): ``flags`` — the sanity guards' findings (harness/run/sanity.py).
def _drop_unused_task_seed(rec: dict) -> dict:
    """Schema 1 → 2: ``seeds.task`` named ``derive(seed, "task")``, which no task ever used."""
    rec = dict(rec, schema_version=2)
    seeds = rec.get("seeds")
    if isinstance(seeds, dict) and "task" in seeds:
        rec["seeds"] = {k: v for k, v in seeds.items() if k != "task"}
    return rec


def _seeds_of_every_source(rec: dict) -> dict:
    """Schema 2 → 3: ``seeds`` becomes the seed of every random source. A schema-2 trial drew its
    initialization, stages and task from the trial seed, and a built-in source model was pretrained
    with ``source.pretrain.seed`` (default 0) whatever the trial seed; other sources were not
    pretrained by tokxfer (``None``). Such records have no per-example results (``examples: null``)."""
    rec = dict(rec, schema_version=3)
    config = rec.get("config") if isinstance(rec.get("config"), Mapping) else {}
    source = config.get("source") if isinstance(config.get("source"), Mapping) else {}
    model = source.get("model")
    pretrain = source.get("pretrain") if isinstance(source.get("pretrain"), Mapping) else {}
    seed = rec.get("seed", config.get("seed"))
    world = isinstance(model, str) and model.startswith("world:")
    rec["seeds"] = {"source": int(pretrain.get("seed", 0)) if world else None, "init": seed, "stages": seed,
                    "task": seed}
    rec.setdefault("examples", None)
    return rec


MIGRATIONS: dict[int, Callable[[dict], dict]] = {1: _drop_unused_task_seed, 2: _seeds_of_every_source}


def migrate(rec: dict, where: str = "record") -> dict:
    """Bring a record mapping of any known schema version to :data:`SCHEMA_VERSION`.

    A record without ``schema_version`` is taken to be of the current schema (as
    :func:`write_record` stamps it).

    Raises:
        RecordError: naming ``where``, for a version that is not a positive integer or is newer
            than this tokxfer understands.
    """
    v = rec.get("schema_version", SCHEMA_VERSION)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise RecordError(f"{where}: schema_version must be a positive integer, got {v!r}")
    if v > SCHEMA_VERSION:
        raise RecordError(
            f"{where}: record has schema_version {v}, newer than this tokxfer understands ({SCHEMA_VERSION}); upgrade tokxfer"
        )
    rec = dict(rec, schema_version=v)
    while rec["schema_version"] < SCHEMA_VERSION:
        rec = MIGRATIONS[rec["schema_version"]](rec)
    return rec


_IN_MEMORY = ("extra", "example_scores", "path")
"""Fields of :class:`TrialRecord` that are not keys of its JSON form."""
_SECTIONS = ("git", "config", "seeds", "metrics", "init", "stages", "counts", "curves", "task_info", "encoding",
             "timings", "revisions", "environment", "examples")
"""Fields that hold a JSON object (or ``null``)."""


@dataclass(frozen=True)
class TrialRecord:
    """The record of one trial (schema :data:`SCHEMA_VERSION`); ``None`` means unknown / not reached.

    The sections are JSON objects as stored (``docs/CONTRACTS.md``); the properties below are
    how readers (tracking, leaderboards) get at what identifies a trial, so none of them walks
    dotted paths into the config itself.

    Attributes:
        trial_id: hash of the resolved config (:attr:`harness.run.config.TrialSpec.trial_id`).
        status: ``ok`` or ``failed``.
        schema_version: the schema the record is in (always :data:`SCHEMA_VERSION` in memory).
        tokxfer_version / git: what wrote it (``{"sha", "dirty"}``).
        experiment: the experiment's name.
        error: ``{"type", "message", "traceback"}`` of a failed trial.
        config: the resolved config (:meth:`harness.run.config.TrialSpec.resolved`).
        seed: the trial seed. seeds: the seed of each random source (``{"source", "init", "stages",
            "task"}``; ``source`` is ``None`` for a model tokxfer did not pretrain).
        metrics: ``{language: {metric: value}}``.
        init: counts, info, directives and gold diagnostics of the initialization.
        stages: per stage id, its metrics, info and counts. counts / curves / task_info: the task's.
        encoding: facts of the language encoding (``None`` for plain models).
        timings / revisions / environment: seconds per phase, model/data revisions, the machine.
        flags: the sanity guards' findings (``[]``: none; ``None``: not checked, as for failed trials).
        examples: the per-example results beside the record (:func:`harness.examples.write_examples`:
            file, sha256, layout), ``None`` when the task produced none.
        started_at / finished_at: ISO-8601 times.
        extra: top-level keys this schema does not know (kept as they are, written back unchanged).

    Example:
        >>> r = TrialRecord.from_json({"schema_version": 1, "trial_id": "t", "status": "ok", "seed": 1,
        ...     "seeds": {"init": 5, "task": 6}, "config": {"method": {"id": "focus"}, "task": {"name": "ner"}}})
        >>> r.schema_version, r.seeds, r.method_id, r.task_name, r.target_language
        (3, {'source': None, 'init': 1, 'stages': 1, 'task': 1}, 'focus', 'ner', None)
        >>> TrialRecord.from_json(r.to_json()) == r
        True
    """

    trial_id: str | None
    status: str | None
    schema_version: int = SCHEMA_VERSION
    tokxfer_version: str | None = None
    git: dict | None = None
    experiment: str | None = None
    error: Any = None
    config: dict | None = None
    seed: int | None = None
    seeds: dict | None = None
    metrics: dict | None = None
    init: dict | None = None
    stages: dict | None = None
    counts: dict | None = None
    curves: dict | None = None
    task_info: dict | None = None
    encoding: dict | None = None
    timings: dict | None = None
    revisions: dict | None = None
    environment: dict | None = None
    flags: list | None = None
    examples: dict | None = None
    started_at: str | None = None
    finished_at: str | None = None
    extra: dict = field(default_factory=dict)
    example_scores: dict = field(default_factory=dict, compare=False, repr=False)
    """In memory only: ``{language: {metric: harness.examples.ExampleScores}}`` of a finished trial;
    :func:`write_record` stores them beside the record and names them in :attr:`examples`, and
    :meth:`scores` reads them back from there."""
    path: Path | None = field(default=None, compare=False, repr=False)
    """In memory only: the file the record was read from (:func:`read_record`); per-example results
    lie beside it."""

    # -- JSON

    def to_json(self) -> dict:
        """The record as stored: every field (``null`` when unknown) plus :attr:`extra`."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _IN_MEMORY}
        clash = sorted(set(self.extra) & set(out))
        if clash:
            raise RecordError(f"record {self.trial_id}: extra key(s) {', '.join(clash)} shadow record fields")
        return {**out, **self.extra}

    @classmethod
    def from_json(cls, data: Mapping, *, where: str | None = None) -> TrialRecord:
        """Read a record mapping of any known schema version (migrated to the current one).

        Raises:
            RecordError: naming ``where`` (default: the trial id) and the field, for a mapping that
                is not a record: no ``trial_id`` or ``status``, an unknown or newer schema version, a
                section that is not a JSON object, a ``flags`` that is not a list.
        """
        if isinstance(data, TrialRecord):
            return data
        if not isinstance(data, Mapping):
            raise RecordError(f"{where or 'record'}: expected a JSON object, got {type(data).__name__}")
        where = where or f"record {data.get('trial_id')!r}"
        missing = [k for k in ("trial_id", "status") if k not in data]
        if missing:
            raise RecordError(f"{where}: missing required field(s) {', '.join(missing)}")
        rec = migrate(dict(data), where)
        known = {f.name for f in fields(cls)} - set(_IN_MEMORY)
        for name in _SECTIONS:
            if rec.get(name) is not None and not isinstance(rec[name], Mapping):
                raise RecordError(f"{where}: field {name!r} must be a JSON object or null, got {type(rec[name]).__name__}")
        if rec.get("flags") is not None and not isinstance(rec["flags"], list):
            raise RecordError(f"{where}: field 'flags' must be a list or null, got {type(rec['flags']).__name__}")
        return cls(
            **{k: v for k, v in rec.items() if k in known},
            extra={k: v for k, v in rec.items() if k not in known},
        )

    # -- what identifies the trial

    def _component(self, kind: str) -> dict:
        value = (self.config or {}).get(kind)
        return value if isinstance(value, Mapping) else {}

    @property
    def method_id(self) -> str | None:
        """The method's id in the experiment (its registry name when the experiment gave none)."""
        m = self._component("method")
        return m.get("id") or m.get("name")

    @property
    def encoding_id(self) -> str:
        """The language encoding's id (``none`` for plain models and records without one)."""
        e = self._component("encoding")
        return e.get("id") or e.get("name") or "none"

    @property
    def task_name(self) -> str | None:
        """The task's registry name."""
        return self._component("task").get("name")

    @property
    def target_language(self) -> str | None:
        """The target language of the transfer."""
        return self._component("target").get("language")

    @property
    def stage_specs(self) -> list[dict]:
        """The stages of the trial (``[{"id", "name", "config"}, …]``)."""
        return [s for s in (self.config or {}).get("stages") or [] if isinstance(s, Mapping)]

    @property
    def trial_seed(self) -> int | None:
        """The trial seed (``seed``, else the config's)."""
        return self.seed if self.seed is not None else (self.config or {}).get("seed")

    @property
    def version(self) -> str:
        """``schema <n> / tokxfer <version>``: records of one cell should agree on it."""
        return f"schema {self.schema_version} / tokxfer {self.tokxfer_version}"

    @property
    def ok(self) -> bool:
        """Whether the trial finished (``status == "ok"``)."""
        return self.status == "ok"

    @property
    def init_counts(self) -> dict:
        """Rows per provenance (``{"special", "copied", "combined", "fallback"}``), ``{}`` if unknown."""
        return (self.init or {}).get("counts") or {}

    @property
    def init_diagnostics(self) -> dict:
        """Gold diagnostics of the initialization (``{}`` if none)."""
        return (self.init or {}).get("diagnostics") or {}

    @property
    def flag_codes(self) -> frozenset[str]:
        """Codes of the sanity flags (empty when none or not checked)."""
        return frozenset(str(f["code"]) for f in self.flags or [] if isinstance(f, Mapping) and f.get("code"))

    def scores(self, language: str, metric: str) -> Any:
        """The per-example statistics behind ``metrics[language][metric]``
        (:class:`harness.examples.ExampleScores`), or ``None`` when the record has none.

        Read once from the file :attr:`examples` names beside :attr:`path` (hash-checked) and kept.

        Raises:
            harness.examples.ExamplesError: the file is missing, changed or does not match the record.
        """
        if not self.example_scores and self.examples and self.path is not None:
            from harness.examples import read_examples

            object.__setattr__(self, "example_scores", read_examples(self.path.parent, str(self.trial_id), self.examples))
        return (self.example_scores.get(language) or {}).get(metric)

    def config_value(self, path: str) -> Any:
        """The resolved config's value at a dotted ``path`` (``None`` when absent): for the
        ``where`` filters of leaderboard specs, whose paths are data, not code."""
        cur: Any = self.config or {}
        for part in path.split("."):
            if not isinstance(cur, Mapping) or part not in cur:
                return None
            cur = cur[part]
        return cur


def write_record(directory: Path, record: TrialRecord | dict) -> Path:
    """Write ``record`` to ``directory/<trial_id>.json`` atomically (temp file + fsync + rename).

    A :class:`TrialRecord` is written as :meth:`TrialRecord.to_json`; a mapping as it is. The
    per-example results of a :class:`TrialRecord` (:attr:`TrialRecord.example_scores`) are written
    first, beside it (:func:`harness.examples.write_examples`), and the record names them with their
    sha256 under ``examples``: a record never names a file that is not complete.
    """
    directory = Path(directory)
    tid = record.trial_id if isinstance(record, TrialRecord) else dict(record).get("trial_id")
    if tid is None:
        raise RecordError("record has no 'trial_id'")
    if not isinstance(tid, str) or not TRIAL_ID_RE.match(tid):  # it names files: never a path
        raise RecordError(f"record trial_id {tid!r} is not a trial id (letters, digits and _ . + -)")
    directory.mkdir(parents=True, exist_ok=True)
    if isinstance(record, TrialRecord) and record.example_scores:
        from harness.examples import write_examples

        record = dataclasses.replace(record, examples=write_examples(directory, record.trial_id, record.example_scores))
    record = record.to_json() if isinstance(record, TrialRecord) else dict(record)
    record.setdefault("schema_version", SCHEMA_VERSION)
    path = directory / f"{record['trial_id']}.json"
    blob = json.dumps(record, indent=2, sort_keys=True, default=_json_default, allow_nan=True)
    try:
        write_atomic(path, blob, fsync=True)  # records are shared (clusters, teams): the umask's mode
    except OSError as e:
        if isinstance(e, RecordError):
            raise
        raise OSError(e.errno, f"cannot write record {path} ({e.strerror or e})") from e
    return path


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def load_record(path: str | Path) -> dict:
    """Load, validate and migrate one record.

    Raises:
        RecordError: naming the file, when it is truncated/corrupt, lacks required fields,
            or was written by a newer schema than this tokxfer understands.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RecordError(f"{path}: cannot read record ({e})") from None
    try:
        rec = json.loads(text)
    except json.JSONDecodeError as e:
        raise RecordError(f"{path}: truncated or corrupt JSON record ({e.msg} at char {e.pos}); delete it to re-run the trial") from None
    if not isinstance(rec, dict):
        raise RecordError(f"{path}: expected a JSON object")
    missing = [k for k in REQUIRED_FIELDS if k not in rec]
    if missing:
        raise RecordError(f"{path}: missing required field(s) {', '.join(missing)}")
    return migrate(rec, str(path))


def as_trial_records(records: Iterable[TrialRecord | Mapping]) -> list[TrialRecord]:
    """Records given as :class:`TrialRecord` values or as their JSON mappings (tests, ``json.load``), as
    :class:`TrialRecord` values: the one place a mapping becomes a record (:meth:`TrialRecord.from_json`).
    Every entry point that takes records (leaderboards, tracking) calls it once; everything after it
    reads typed fields.

    Example:
        >>> [r.trial_id for r in as_trial_records([{"trial_id": "a", "status": "ok"}, TrialRecord("b", "ok")])]
        ['a', 'b']
    """
    return [r if isinstance(r, TrialRecord) else TrialRecord.from_json(r) for r in records]


def read_record(path: str | Path) -> TrialRecord:
    """:func:`load_record` as a :class:`TrialRecord` that knows its file (errors name the file)."""
    return dataclasses.replace(TrialRecord.from_json(load_record(path), where=str(path)), path=Path(path))


def folder_experiment(directory: str | Path) -> str | None:
    """The experiment a records folder belongs to: ``<experiment>`` of ``…/<experiment>/records``
    (``None`` for a folder not named ``records``).

    Example:
        >>> folder_experiment("runs/quickstart/records"), folder_experiment("somewhere")
        ('quickstart', None)
    """
    directory = Path(directory)
    return directory.parent.name if directory.name == "records" and directory.parent.name else None


def check_identity(rec: Mapping, path: Path, experiment: str | None = None) -> None:
    """Refuse a record that is not what its file says it is.

    A record is untrusted input: its ``trial_id`` must have the shape of a trial id
    (:data:`TRIAL_ID_RE`) and equal its file name (``records/<trial_id>.json``), and its
    ``experiment`` (when it names one) must be the experiment whose folder holds it.

    Raises:
        RecordError: naming the file, the field and what was expected.
    """
    tid = rec.get("trial_id")
    if not isinstance(tid, str) or not TRIAL_ID_RE.match(tid):
        raise RecordError(f"{path}: trial_id {tid!r} is not a trial id (letters, digits and _ . + -, e.g. 16 hex digits)")
    if path.stem != tid:
        raise RecordError(f"{path}: holds trial {tid!r}, but a record is named after its trial ({tid}.json); "
                          f"was it copied or renamed? Move it away")
    exp = rec.get("experiment")
    if experiment is not None and exp is not None and exp != experiment:
        raise RecordError(f"{path}: a record of experiment {exp!r} in the folder of experiment {experiment!r}; "
                          f"was it copied from another experiment? Move it away")


def iter_record_files(directory: str | Path, *, strict: bool = True) -> Iterator[tuple[Path, dict]]:
    """Yield ``(path, record)`` for a records directory (or an experiment dir containing ``records/``).

    Temp files of atomic writes in progress are ignored. Every record must be what its file says
    (:func:`check_identity`: its trial id is its file name, its experiment its folder's). With
    ``strict=False`` unreadable or foreign files are skipped with a warning instead of raising
    :class:`RecordError`.
    """
    import warnings

    directory = Path(directory)
    if (directory / "records").is_dir():
        directory = directory / "records"
    if not directory.is_dir():
        raise FileNotFoundError(f"no records directory at {directory}")
    experiment = folder_experiment(directory)
    for p in sorted(directory.glob("*.json")):
        if p.name.startswith("."):
            continue
        try:
            rec = load_record(p)
            check_identity(rec, p, experiment)
        except RecordError as e:
            if strict:
                raise
            warnings.warn(str(e), stacklevel=2)
            continue
        yield p, rec


def iter_records(directory: str | Path, *, strict: bool = True) -> Iterator[dict]:
    """Yield the records of a records directory (see :func:`iter_record_files`)."""
    for _, rec in iter_record_files(directory, strict=strict):
        yield rec


def read_records(directory: str | Path, *, strict: bool = True) -> list[TrialRecord]:
    """The records of a records directory as :class:`TrialRecord` values that know their files
    (checked as :func:`iter_record_files` checks them); what leaderboards and tracking read."""
    return [dataclasses.replace(TrialRecord.from_json(rec, where=str(p)), path=p)
            for p, rec in iter_record_files(directory, strict=strict)]


def completed_trial_ids(directory: Path) -> set[str]:
    """Trial ids whose record exists, validates and finished with status ``ok``.

    Unreadable records are left out (see :func:`trial_state` for the check that resume uses,
    which refuses to treat them as missing).
    """
    out = set()
    directory = Path(directory)
    if not directory.is_dir():
        return out
    for p in directory.glob("*.json"):
        try:
            rec = load_record(p)
        except RecordError:
            continue
        if rec.get("status") == "ok":
            out.add(rec["trial_id"])
    return out


TRIAL_STATES = ("missing", "complete", "failed", "incomplete")


def trial_state(path: str | Path, *, languages: list[str] | tuple[str, ...] = (),
                required_metrics: list[str] | tuple[str, ...] = ()) -> tuple[str, str]:
    """What resume should do with a trial's record file: ``(state, why)``.

    States: ``missing`` (no file: run it), ``complete`` (status ok and every metric there: skip
    it), ``failed`` (status failed: run it again), ``incomplete`` (status ok, but a language or a
    metric the task declares is missing: run it again).

    Args:
        path: ``records/<trial_id>.json``.
        languages: languages the trial evaluates; each needs a non-empty ``metrics[language]``.
        required_metrics: metric names the task declares; each must be in every language's metrics.

    Raises:
        RecordError: the file exists but cannot be read, is corrupt, lacks required fields, or is
            from a newer schema. Resume must stop then: re-running would overwrite it.
    """
    path = Path(path)
    if not path.exists():
        return "missing", ""
    rec = load_record(path)
    if rec.get("status") != "ok":
        return "failed", f"status {rec.get('status')!r}"
    metrics = rec.get("metrics")
    if not isinstance(metrics, dict):
        return "incomplete", "no metrics"
    for lang in languages:
        got = metrics.get(lang)
        if not isinstance(got, dict) or not got:
            return "incomplete", f"no metrics for language {lang!r}"
        absent = [m for m in required_metrics if m not in got]
        if absent:
            return "incomplete", f"metric(s) {', '.join(absent)} missing for language {lang!r}"
    return "complete", ""
