"""The run machinery: experiment config → trial specs → one trial → its record → the tracking mirror.

``config`` (YAML → frozen dataclasses, trial ids), ``experiment`` (a grid: resume, claims, executors),
``executors`` (where trials run), ``claims`` (between concurrent workers), ``runner`` (one trial →
one :class:`~harness.run.records.TrialRecord`), ``trial`` (its phases after initialization),
``resources`` (models, tokenizers, corpora by path, hub id or ``world:``/``real:`` name), ``sanity``
(guards on a finished trial), ``records`` (the versioned record: schema, atomic write, migrations),
``tracking`` (the MLflow mirror, never the source of truth).
"""
