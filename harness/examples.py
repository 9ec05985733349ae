"""Per-example results: the statistics behind each metric of a trial, so tables can pair and resample.

A metric of a test set is a function of per-example *sufficient statistics*: accuracy is the mean of
0/1 rows, entity F1 is ``2·Σtp / (Σpred + Σgold)`` over per-sentence counts, corpus BLEU is a function
of the summed n-gram statistics of its segments, perplexity is ``exp(Σnll / Σtokens)``. Every metric
here is ``reducer(column sums of its rows)``, so a bootstrap that resamples examples (or a paired
comparison on the same examples) recomputes the metric exactly as the task defined it, from one
matrix product (:meth:`ExampleScores.resampled`).

A task attaches them to the metrics it returns through :class:`Scores` (a ``dict`` of metric values
that also carries ``.examples``); the runner stores them beside the record in one compressed file,
``<trial_id>.examples.npz``, whose name, sha256 and per-metric layout the record names under
``examples`` (:func:`write_examples`); leaderboards read them back with :func:`read_examples`, which
checks the hash.

Example:
    >>> import numpy as np
    >>> acc = ExampleScores("mean", np.array([[1.0], [0.0], [1.0], [1.0]]))
    >>> acc.value()
    0.75
    >>> f1 = ExampleScores("f1", np.array([[1, 2, 1], [1, 1, 2]], dtype=float))  # tp, predicted, gold
    >>> round(f1.value(), 4)
    0.6667
"""

from __future__ import annotations

import hashlib
import io
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.errors import TokxferError
from harness.files import write_atomic

__all__ = [
    "REDUCERS", "ExampleScores", "Scores", "ExamplesError", "examples_file_name", "write_examples", "read_examples",
    "attach",
]

EXAMPLES_VERSION = 1
"""Version of the per-example file layout (stored in the record's ``examples`` section)."""


class ExamplesError(TokxferError, ValueError):
    """A per-example file is missing, corrupt, or does not match its record."""


def _safe_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b > 0, a / np.where(b > 0, b, 1.0), 0.0)


def _bleu(sums: np.ndarray, n: np.ndarray, params: Mapping[str, Any]) -> np.ndarray:
    from sacrebleu.metrics import BLEU

    order = (sums.shape[1] - 2) // 2
    out = np.empty(sums.shape[0])
    for i, row in enumerate(np.rint(sums).astype(np.int64)):
        out[i] = BLEU.compute_bleu(
            correct=row[2:2 + order].tolist(), total=row[2 + order:].tolist(), sys_len=int(row[0]),
            ref_len=int(row[1]), smooth_method=params.get("smooth_method", "exp"),
            smooth_value=params.get("smooth_value"), effective_order=bool(params.get("effective_order", False)),
            max_ngram_order=order,
        ).score
    return out


REDUCERS: dict[str, tuple[int | None, Callable[[np.ndarray, np.ndarray, Mapping[str, Any]], np.ndarray]]] = {
    # name: (columns of a row, (column sums B x k, total weight B, params) -> B values)
    "mean": (1, lambda s, n, p: s[:, 0] / n),
    "ratio": (2, lambda s, n, p: _safe_div(s[:, 0], s[:, 1])),
    "f1": (3, lambda s, n, p: _safe_div(2.0 * s[:, 0], s[:, 1] + s[:, 2])),
    "exp_ratio": (2, lambda s, n, p: np.exp(np.minimum(_safe_div(s[:, 0], s[:, 1]), 700.0))),
    "bits_per_byte": (2, lambda s, n, p: _safe_div(s[:, 0], s[:, 1] * math.log(2))),
    "pow2_bits_per_byte": (2, lambda s, n, p: np.exp2(_safe_div(s[:, 0], s[:, 1] * math.log(2)))),
    "bleu": (None, _bleu),
}
"""How each kind of metric is recomputed from the column sums of its rows:

* ``mean`` — one value per example (accuracy 0/1, SQuAD EM/F1 per question);
* ``ratio`` — ``Σa / Σb`` (MLM loss: NLL and masked tokens per sequence; precision, recall);
* ``f1`` — ``2Σtp / (Σpredicted + Σgold)`` (micro entity F1 from per-sentence counts);
* ``exp_ratio`` — ``exp(Σnll / Σtokens)`` (perplexities); ``bits_per_byte`` and its power of two;
* ``bleu`` — sacreBLEU's corpus BLEU from summed ``[sys_len, ref_len, correct₁…ₙ, total₁…ₙ]``.
"""


@dataclass(frozen=True)
class ExampleScores:
    """One metric's per-example statistics on one test set.

    Attributes:
        reducer: a key of :data:`REDUCERS`.
        rows: ``n_examples x k`` float64 statistics, one row per example in the test set's order.
        scale: the metric is ``scale x reducer(...)`` (e.g. 100 for a percentage).
        params: the reducer's parameters (BLEU's smoothing), JSON values.
    """

    reducer: str
    rows: np.ndarray
    scale: float = 1.0
    params: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.reducer not in REDUCERS:
            raise ExamplesError(f"unknown reducer {self.reducer!r} (known: {', '.join(REDUCERS)})")
        rows = np.asarray(self.rows, dtype=np.float64)
        if rows.ndim == 1:
            rows = rows[:, None]
        width = REDUCERS[self.reducer][0]
        if rows.ndim != 2 or (width is not None and rows.shape[1] != width):
            raise ExamplesError(f"reducer {self.reducer!r} takes rows of {width} column(s), got shape {rows.shape}")
        if not np.all(np.isfinite(rows)):
            raise ExamplesError(f"reducer {self.reducer!r}: rows hold NaN or infinite values")
        object.__setattr__(self, "rows", rows)

    @property
    def n(self) -> int:
        """Number of examples."""
        return int(self.rows.shape[0])

    def values_of_sums(self, sums: np.ndarray, totals: np.ndarray) -> np.ndarray:
        """The metric for each row of column ``sums`` (``B x k``) with total example weight ``totals`` (``B``)."""
        fn = REDUCERS[self.reducer][1]
        return self.scale * fn(np.atleast_2d(sums), np.atleast_1d(totals).astype(np.float64), self.params)

    def value(self, weights: np.ndarray | None = None) -> float:
        """The metric over all examples (``weights``: per-example multiplicities, e.g. a resample)."""
        w = np.ones(self.n) if weights is None else np.asarray(weights, dtype=np.float64)
        return float(self.values_of_sums(w @ self.rows, np.array([w.sum()]))[0])

    def resampled(self, weights: np.ndarray, totals: np.ndarray | None = None) -> np.ndarray:
        """The metric under each row of ``weights`` (``B x n`` multiplicities): one matrix product.

        ``totals``: ``weights.sum(axis=1)`` when the caller has it already (a bootstrap scores every seed
        on the same resamples)."""
        w = np.asarray(weights, dtype=np.float64)
        return self.values_of_sums(w @ self.rows, w.sum(axis=1) if totals is None else totals)


class Scores(dict):
    """A task's metric values (a plain ``dict``) carrying the per-example statistics behind them.

    ``Scores({"accuracy": 0.75}, examples={"accuracy": ExampleScores(...)})`` is used wherever a
    metrics dict is (it *is* one); the runner picks ``.examples`` up (:func:`harness.examples.attach`).
    """

    def __init__(self, values: Mapping[str, Any], examples: Mapping[str, ExampleScores] | None = None) -> None:
        super().__init__(values)
        self.examples: dict[str, ExampleScores] = dict(examples or {})
        unknown = sorted(set(self.examples) - set(self))
        if unknown:
            raise ExamplesError(f"per-example statistics for metrics that are not reported: {unknown}")


def attach(examples: dict, language: str, metrics: Mapping[str, Any]) -> dict:
    """Copy ``metrics.examples`` (when ``metrics`` is a :class:`Scores`) into ``examples[language]``;
    returns ``metrics`` as a plain dict (what a record stores)."""
    per = getattr(metrics, "examples", None)
    if per:
        examples.setdefault(language, {}).update(per)
    return dict(metrics)


def examples_file_name(trial_id: str) -> str:
    """The per-example file of a trial, beside its record."""
    return f"{trial_id}.examples.npz"


def _key(language: str, metric: str) -> str:
    return f"{language}/{metric}"


def write_examples(directory: Path, trial_id: str, examples: Mapping[str, Mapping[str, ExampleScores]]) -> dict | None:
    """Write ``examples`` (``{language: {metric: ExampleScores}}``) atomically beside the record.

    Returns:
        The record's ``examples`` section: ``{"file", "sha256", "version", "metrics": {language:
        {metric: {"reducer", "n", "scale", "params"}}}}``; ``None`` when there is nothing to write.
    """
    if not any(examples.values()):
        return None
    arrays, layout = {}, {}
    for lang, per in sorted(examples.items()):
        for metric, ex in sorted(per.items()):
            arrays[_key(lang, metric)] = ex.rows
            layout.setdefault(lang, {})[metric] = {
                "reducer": ex.reducer, "n": ex.n, "scale": ex.scale, "params": dict(ex.params),
            }
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    blob = buf.getvalue()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / examples_file_name(trial_id)
    write_atomic(path, blob, fsync=True)
    return {"file": path.name, "sha256": hashlib.sha256(blob).hexdigest(), "version": EXAMPLES_VERSION,
            "metrics": layout}


def read_examples(records_dir: Path, trial_id: str, section: Mapping[str, Any] | None) -> dict[str, dict[str, ExampleScores]]:
    """The per-example statistics a record's ``examples`` ``section`` names, hash-checked.

    Returns ``{}`` for a record without them (``section`` ``None``).

    Raises:
        ExamplesError: naming the file, when it is missing, its sha256 differs from the record's, or
            its arrays do not match the record's layout.
    """
    if not section:
        return {}
    name = section.get("file")
    if name != examples_file_name(trial_id):
        raise ExamplesError(f"record {trial_id}: examples.file must be {examples_file_name(trial_id)!r}, got {name!r}")
    path = Path(records_dir) / name
    try:
        blob = path.read_bytes()
    except OSError as e:
        raise ExamplesError(f"{path}: cannot read the per-example results of record {trial_id} ({e.strerror or e})") from None
    if hashlib.sha256(blob).hexdigest() != section.get("sha256"):
        raise ExamplesError(f"{path}: sha256 differs from the one record {trial_id} names (changed or truncated)")
    out: dict[str, dict[str, ExampleScores]] = {}
    with np.load(io.BytesIO(blob), allow_pickle=False) as data:
        for lang, per in (section.get("metrics") or {}).items():
            for metric, meta in per.items():
                key = _key(lang, metric)
                if key not in data.files:
                    raise ExamplesError(f"{path}: no array {key!r} though record {trial_id} lists it")
                ex = ExampleScores(meta["reducer"], data[key], float(meta.get("scale", 1.0)), dict(meta.get("params") or {}))
                if ex.n != meta.get("n"):
                    raise ExamplesError(f"{path}: {key} has {ex.n} rows, record {trial_id} says {meta.get('n')}")
                out.setdefault(lang, {})[metric] = ex
    return out
