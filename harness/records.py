"""Trial records: one versioned JSON file per trial, written atomically, loaded with migrations.

Records on disk are the source of truth; MLflow and the leaderboards read them.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> p = write_record(d, {"trial_id": "abc", "status": "ok", "metrics": {}})
    >>> load_record(p)["schema_version"] == SCHEMA_VERSION
    True
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
REQUIRED_FIELDS = ("schema_version", "trial_id", "status")


class RecordError(ValueError):
    """A record file is unreadable, truncated, or from a newer schema."""


# migrations[n] turns a record of schema n into schema n+1. Old records kept in
# tests/fixtures/records/ must keep loading through these.
# Optional fields added without a version bump (old records simply lack them; readers treat a
# missing field as unknown): ``flags`` — the sanity guards' findings (harness/sanity.py).
MIGRATIONS: dict[int, Callable[[dict], dict]] = {}


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def package_version() -> str:
    try:
        from importlib.metadata import version

        return version("tokxfer")
    except Exception:
        return "0+unknown"


def git_info(path: Path | None = None) -> dict:
    """``{"sha": ..., "dirty": bool}`` of the checkout tokxfer runs from (nulls outside git)."""
    root = Path(path or Path(__file__).resolve().parent.parent)
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return {"sha": None, "dirty": None}
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True, timeout=5)
        return {"sha": sha.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"sha": None, "dirty": None}


def environment() -> dict:
    """Library versions, device and host of this process."""
    import numpy
    import torch

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "numpy": numpy.__version__,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "n_gpus": torch.cuda.device_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    for lib in ("transformers", "tokenizers", "datasets", "fasttext", "entmax", "sacrebleu", "seqeval", "mlflow"):
        try:
            from importlib.metadata import version

            name = {"fasttext": "fasttext-numpy2"}.get(lib, lib)
            env[lib] = version(name)
        except Exception:
            env[lib] = None
    return env


def write_record(directory: Path, record: dict) -> Path:
    """Write ``record`` to ``directory/<trial_id>.json`` atomically (temp file + fsync + rename)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    record = dict(record)
    record.setdefault("schema_version", SCHEMA_VERSION)
    if "trial_id" not in record:
        raise RecordError("record has no 'trial_id'")
    path = directory / f"{record['trial_id']}.json"
    blob = json.dumps(record, indent=2, sort_keys=True, default=_json_default, allow_nan=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{record['trial_id']}.", suffix=".tmp", dir=directory)
    try:
        # mkstemp makes the file private (0600); records are shared (clusters, teams): use the umask
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError) and not isinstance(e, RecordError):
            raise OSError(e.errno, f"cannot write record {path} ({e.strerror or e})") from e
        raise
    return path


def _umask() -> int:
    """The process umask (read without changing it where ``/proc`` allows)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # no /proc: read it by setting it, then put it back
    os.umask(mask)
    return mask


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
    v = rec["schema_version"]
    if not isinstance(v, int) or v < 1:
        raise RecordError(f"{path}: schema_version must be a positive integer, got {v!r}")
    if v > SCHEMA_VERSION:
        raise RecordError(
            f"{path}: record has schema_version {v}, newer than this tokxfer understands ({SCHEMA_VERSION}); upgrade tokxfer"
        )
    while rec["schema_version"] < SCHEMA_VERSION:
        rec = MIGRATIONS[rec["schema_version"]](rec)
    return rec


def iter_record_files(directory: str | Path, *, strict: bool = True) -> Iterator[tuple[Path, dict]]:
    """Yield ``(path, record)`` for a records directory (or an experiment dir containing ``records/``).

    Temp files of atomic writes in progress are ignored. With ``strict=False`` unreadable files
    are skipped with a warning instead of raising :class:`RecordError`.
    """
    import warnings

    directory = Path(directory)
    if (directory / "records").is_dir():
        directory = directory / "records"
    if not directory.is_dir():
        raise FileNotFoundError(f"no records directory at {directory}")
    for p in sorted(directory.glob("*.json")):
        if p.name.startswith("."):
            continue
        try:
            yield p, load_record(p)
        except RecordError as e:
            if strict:
                raise
            warnings.warn(str(e), stacklevel=2)


def iter_records(directory: str | Path, *, strict: bool = True) -> Iterator[dict]:
    """Yield the records of a records directory (see :func:`iter_record_files`)."""
    for _, rec in iter_record_files(directory, strict=strict):
        yield rec


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
