"""Sanity guards: checks that catch a trial whose numbers look plausible and are not.

A benchmark's worst failure is a number that looks right and is wrong. These guards run on every
trial; what they find goes into the record's top-level ``flags`` list, is logged once as a
warning, and marks the trial's leaderboard cells (see :mod:`leaderboards.aggregate`). A flag is a
suspicion, not a verdict: the number is kept. Only a state that can only be a bug is refused.

Flags (``{"code": ..., "message": ...}``):

- ``loss_at_uniform`` — a language-model loss measured right after initialization (no stage ran)
  lies within :data:`UNIFORM_TOLERANCE` (2 %) of ``ln |V|``, the loss of a uniform guess over the
  ``|V|`` = ``init.n_target`` rows: the model predicts no better than chance, the symptom of an
  initialization that transferred nothing (a FOCUS run with no usable anchors, rows installed in
  the wrong order …) — or of a source model that is itself at chance (the CI-sized world). Not raised where chance level is the expected result: the method's class
  sets ``uninformed = True`` (a control such as a random mapping), the method re-initializes the
  whole model (``directives["reinitialize_body"]``, from-scratch), or no row was copied or
  combined (``random``, TransInner).
- ``loss_near_zero`` — an evaluation loss below :data:`NEAR_ZERO_LOSS` nats per token: the model
  sees what it must predict (future tokens visible to a causal model, labels leaked into inputs).
- ``all_fallback`` — a method that should combine source rows (class attribute ``combines =
  True``: FOCUS, WECHSEL, VIPI, Tik-to-Tok, mean-of-pieces) returned a mapping whose non-special
  rows are all random fallbacks: it transferred nothing.
- ``no_combined_rows`` — such a method combined no row at all while some rows fell back (its
  combination step produced nothing, e.g. no auxiliary vectors, no alignments).
- ``row_norm`` — initialized rows whose norm is over :data:`harness.model.diagnostics.NORM_BOUND` (10) times
  the largest source row's, or not finite (``init.diagnostics``: ``rows_over_norm_bound``,
  ``rows_nonfinite``): a combination that extrapolated (weights normalized by a near-zero sum, as CLP's
  can be); such rows dominate the softmax of a tied head, so losses at init and early in LAPT are tens of
  nats. Not raised for a method that re-initializes the whole model.
- ``nondeterministic:<component>`` — the method reports in ``init.info["nondeterministic"]`` that
  a component of its result cannot be reproduced from the seed (e.g. the eflomal aligner).

Refused (:class:`SanityError`): token ids beyond the embedding matrix (:func:`check_ids`).

Language-model losses are read from the record's per-language metrics by name: ``loss`` (nats
per predicted token, ``mlm-at-init``) and ``token_perplexity`` (its ``ln`` is the loss,
``perplexity``); these are the metrics whose softmax runs over the target vocabulary.

Example:
    >>> rec = {"config": {"stages": []}, "metrics": {"de": {"loss": 9.2}},
    ...        "init": {"n_target": 10000, "counts": {"special": 5, "copied": 10, "combined": 900,
    ...                 "fallback": 85}, "info": {}, "directives": {}}}
    >>> [f["code"] for f in check_record(rec)]
    ['loss_at_uniform']
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from harness.errors import TokxferError

__all__ = [
    "NEAR_ZERO_LOSS",
    "UNIFORM_TOLERANCE",
    "SanityError",
    "check_ids",
    "check_record",
    "flag",
    "log_flags",
]

log = logging.getLogger("tokxfer")

UNIFORM_TOLERANCE = 0.02
"""Relative distance to ``ln |V|`` within which a loss at initialization counts as a uniform guess."""

NEAR_ZERO_LOSS = 0.01
"""An evaluation loss (nats per token) below this is implausible for natural text."""

LOSS_METRICS = ("loss", "token_perplexity")
"""Per-language metric names read as language-model losses (``token_perplexity`` through its log)."""


class SanityError(TokxferError, RuntimeError):
    """A state that can only be a bug (e.g. token ids beyond the embedding matrix)."""


def flag(code: str, message: str) -> dict:
    """One flag as stored in a record.

    Example:
        >>> flag("loss_near_zero", "loss 0.001")
        {'code': 'loss_near_zero', 'message': 'loss 0.001'}
    """
    return {"code": code, "message": message}


def _get(obj: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(obj, Mapping) or p not in obj:
            return None
        obj = obj[p]
    return obj


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _num(x: Any) -> str:
    return f"{x:.4g}" if _is_number(x) else str(x)


def _losses(metrics: Mapping) -> list[tuple[str, str, float]]:
    """``(language, metric, loss in nats)`` for every language-model loss of a record."""
    out = []
    for lang in sorted(metrics or {}, key=str):
        m = metrics[lang]
        if not isinstance(m, Mapping):
            continue
        for name in LOSS_METRICS:
            v = m.get(name)
            if not _is_number(v):
                continue
            if name == "token_perplexity":
                if v <= 0:
                    continue
                v = math.log(v)
            out.append((str(lang), name, float(v)))
            break  # one loss per language (mlm-at-init reports loss and its perplexity)
    return out


def _uniform_expected(init: Mapping, method_cls: Any) -> bool:
    counts = init.get("counts") or {}
    transferred = int(counts.get("copied", 0) or 0) + int(counts.get("combined", 0) or 0)
    return (
        bool(getattr(method_cls, "uninformed", False))
        or bool((init.get("directives") or {}).get("reinitialize_body"))
        or (bool(counts) and transferred == 0)
    )


def check_record(record: Mapping, method_cls: Any = None) -> list[dict]:
    """The sanity flags of a finished trial's record (pure: no logging, no I/O).

    Args:
        record: the record as assembled by :func:`harness.run.runner.run_trial` (uses ``config.stages``,
            ``metrics``, ``init.n_target``, ``init.counts``, ``init.info``, ``init.directives``).
        method_cls: the registered method's class; its ``combines`` and ``uninformed`` class
            attributes (read with ``getattr``, default ``False``) select the checks.

    Returns:
        Flags in a fixed order (see the module docstring), ``[]`` when nothing is suspicious.
    """
    flags: list[dict] = []
    init = record.get("init") or {}
    losses = _losses(record.get("metrics") or {})
    stages = _get(record, "config", "stages")
    n_target = init.get("n_target")
    if not stages and _is_number(n_target) and n_target > 1 and not _uniform_expected(init, method_cls):
        uniform = math.log(n_target)
        for lang, name, loss in losses:
            if abs(loss - uniform) <= UNIFORM_TOLERANCE * uniform:
                flags.append(flag(
                    "loss_at_uniform",
                    f"{lang}: {name} at initialization is {loss:.4f} nats, within {UNIFORM_TOLERANCE:.0%} of "
                    f"ln|V| = ln {int(n_target)} = {uniform:.4f}: the model predicts like a uniform guess "
                    "(the initialization transferred nothing usable, or the source model is itself at chance)",
                ))
    for lang, name, loss in losses:
        if loss < NEAR_ZERO_LOSS:
            flags.append(flag(
                "loss_near_zero",
                f"{lang}: evaluation {name} is {loss:.2e} nats per token (< {NEAR_ZERO_LOSS}): the model "
                "probably sees what it predicts (future tokens visible, labels leaked)",
            ))
    counts = init.get("counts") or {}
    if getattr(method_cls, "combines", False) and counts:
        copied, combined = int(counts.get("copied", 0) or 0), int(counts.get("combined", 0) or 0)
        fallback = int(counts.get("fallback", 0) or 0)
        if fallback and copied + combined == 0:
            flags.append(flag(
                "all_fallback",
                f"all {fallback} non-special rows are random fallbacks although the method combines "
                "source rows: it transferred nothing",
            ))
        elif fallback and combined == 0:
            flags.append(flag(
                "no_combined_rows",
                f"no row was combined ({copied} copied, {fallback} random fallbacks) although the method "
                "combines source rows: its combination step produced nothing",
            ))
    diag = init.get("diagnostics") or {}
    over, nonfinite = int(diag.get("rows_over_norm_bound") or 0), int(diag.get("rows_nonfinite") or 0)
    if (over or nonfinite) and not (init.get("directives") or {}).get("reinitialize_body"):
        from harness.model.diagnostics import NORM_BOUND

        flags.append(flag(
            "row_norm",
            f"{over} initialized rows have norms over {NORM_BOUND:g}x the largest source row's (max "
            f"{_num(diag.get('row_norm_max'))} vs {_num(diag.get('row_norm_source_max'))}) and {nonfinite} are not finite: "
            "the method extrapolated (e.g. weights normalized by a near-zero sum); losses at init and early in "
            "LAPT are dominated by these rows",
        ))
    nondet = (init.get("info") or {}).get("nondeterministic") or []
    if isinstance(nondet, str):
        nondet = [nondet]
    for name in sorted({str(n) for n in nondet}):
        flags.append(flag(
            f"nondeterministic:{name}",
            f"the component {name!r} is not reproducible from the seed: re-running this trial may give "
            "other numbers",
        ))
    return flags


def log_flags(record: Mapping) -> None:
    """Log each flag of a record once, as a warning naming the trial."""
    for f in record.get("flags") or []:
        log.warning("trial %s: sanity flag %s: %s", record.get("trial_id"), f["code"], f["message"])


def check_ids(tokenizer: Any, model: Any) -> None:
    """Refuse a tokenizer that can produce ids beyond the model's embedding matrices.

    Such ids index past the input embeddings (an index error on CPU, a device-side assert or
    silently wrong rows elsewhere) or past an untied output matrix; either can only be a bug.

    Args:
        tokenizer: the tokenizer the trial evaluates with.
        model: the model after the initialization was installed.

    Raises:
        SanityError: naming the largest id and the number of rows.
    """
    vocab = tokenizer.get_vocab()
    n_ids = max(len(tokenizer), max(vocab.values(), default=-1) + 1)
    emb = model.get_input_embeddings()
    n_in = int(emb.weight.shape[0])
    if n_ids > n_in:
        raise SanityError(
            f"the tokenizer produces ids up to {n_ids - 1} but the input embedding matrix has only {n_in} rows "
            "(ids beyond it would index past the matrix); the initialization installed too few rows"
        )
    out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(out, "weight", None)
    if weight is not None and int(weight.shape[0]) < n_ids:
        raise SanityError(
            f"the tokenizer produces ids up to {n_ids - 1} but the output embedding matrix has only "
            f"{int(weight.shape[0])} rows; the initialization installed too few output rows"
        )
