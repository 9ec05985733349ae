"""Task data loaders: world/local JSONL files or the real hub data sets, in one format per task.

Every loader returns ``datasets.Dataset`` objects whose columns follow docs/CONTRACTS.md, whatever
the source:

- ``xnli``: ``premise``, ``hypothesis``, ``label`` (0 entailment, 1 neutral, 2 contradiction);
- ``ner``: ``tokens``, ``ner_tags`` (ints; names from :func:`ner_label_names`);
- ``qa``: ``id``, ``title``, ``context``, ``question``, ``answers`` (SQuAD format);
- ``translation``: ``translation`` (``{lang: text, ...}``).

Sources, in order of precedence (:func:`load_task_splits`):

1. ``files``: a path template with ``{lang}`` and ``{split}`` (e.g. ``data/{lang}/ner/{split}.jsonl``);
2. ``data_root``: a world directory, through ``World(data_root).task_file(lang, task, split)``
   (used for world languages);
3. the hub, through ``datasets.load_dataset(hub_id, config, split=...)`` with the ids of
   :data:`tasks.languages.HUB_DATASETS` (needs network or a filled HF cache).

Missing dev splits follow the FOCUS protocol: a random 10% of the training set, drawn with a
fixed seed (:data:`DEV_SPLIT_SEED`) so that every trial sees the same dev set.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from harness.cache import ProcessMemo
from harness.errors import TokxferError
from tasks.languages import HUB_DATASETS, LANGUAGES, get_language, hub_config

TASK_COLUMNS: dict[str, tuple[str, ...]] = {
    "xnli": ("premise", "hypothesis", "label"),
    "ner": ("tokens", "ner_tags"),
    "qa": ("id", "context", "question", "answers"),
    "translation": ("translation",),
}
"""Columns each task's examples must have."""

SPLITS = ("train", "dev", "test")
WIKIANN_LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC")
"""Label order of WikiANN (and of the world's NER files unless ``labels.json`` says otherwise)."""
DEV_SPLIT_SEED = 42
"""Seed of the 10% dev sample carved from train when a data set has no dev split; fixed, not the
trial seed, so all methods and seeds are selected on the same dev examples."""
DEV_FRACTION = 0.1


T = TypeVar("T")
FEATURE_MEMO_ENTRIES = 12
"""Encoded splits kept per process (a trial encodes three: train, dev, test; a grid's trials that share a
target tokenizer and a task reuse them); the least recently used is dropped beyond that."""
_FEATURE_MEMO = ProcessMemo(FEATURE_MEMO_ENTRIES)


class DataError(TokxferError, ValueError):
    """A data file or data set that cannot be used; the message names the file or the hub id."""


# ----------------------------------------------------------------------------- local files


def load_jsonl(path: str | Path, *, task: str | None = None) -> Any:
    """Load a JSON-lines file with ``datasets.load_dataset("json", ...)``.

    Args:
        path: the file.
        task: when given, the columns of :data:`TASK_COLUMNS` are required.

    Returns:
        A ``datasets.Dataset``.

    Raises:
        FileNotFoundError: the file does not exist (message names it).
        DataError: the file is empty, not valid JSON lines (message names the first bad line),
            or lacks required columns.
    """
    import datasets

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    try:
        ds = datasets.load_dataset("json", data_files=str(path), split="train")
    except Exception as e:  # datasets raises several types; find the real cause for the message
        raise DataError(f"cannot read {path}: {_diagnose_jsonl(path) or f'{type(e).__name__}: {e}'}") from e
    if len(ds) == 0:
        raise DataError(f"{path} contains no examples")
    if task is not None:
        missing = [c for c in TASK_COLUMNS[task] if c not in ds.column_names]
        if missing:
            raise DataError(f"{path} is not a {task} file: missing column(s) {missing} (has {ds.column_names})")
    return ds


def _diagnose_jsonl(path: Path) -> str | None:
    try:
        with path.open(encoding="utf-8") as f:
            n_rows = 0
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    return f"line {n} is not valid JSON ({e.msg})"
                if not isinstance(row, dict):
                    return f"line {n} is not a JSON object"
                n_rows += 1
    except UnicodeDecodeError as e:
        return f"not UTF-8 ({e})"
    return "file is empty" if n_rows == 0 else None


def local_file(template: str, lang: str, split: str) -> Path:
    """Fill a ``{lang}``/``{split}`` path template (``{task}`` is not needed: one template per task)."""
    try:
        return Path(template.format(lang=lang, split=split))
    except (KeyError, IndexError) as e:
        raise DataError(f"file template {template!r} may only use {{lang}} and {{split}} ({e})") from None


def world_file(data_root: str | Path, lang: str, task: str, split: str) -> Path:
    """The world's file for ``(lang, task, split)`` (see ``harness.world.World.task_file``)."""
    from harness.world import World  # the world generator room; imported lazily

    return Path(World(data_root).task_file(lang, task, split))


# ------------------------------------------------------------------------------------- hub


def _hub_load(key: str, config: str | None, split: str) -> Any:
    import datasets

    spec = HUB_DATASETS[key]
    config = spec.get("config", config) if config is None else config
    try:
        return datasets.load_dataset(spec["path"], config, split=split, revision=spec.get("revision"))
    except Exception as e:
        raise DataError(
            f"cannot load hub data set {spec['path']!r} (config {config!r}, split {split!r}): "
            f"{type(e).__name__}: {e}. Offline? Pass local files with the task's 'files' option."
        ) from e


def load_hub_split(task: str, lang: str, split: str, *, dataset: str | None = None) -> Any | None:
    """One split of the real data set for ``task`` in ``lang``, converted to the task's columns.

    Args:
        task: ``xnli``, ``ner``, ``qa`` or ``translation``.
        lang: a real language code of :mod:`tasks.languages`.
        split: ``train``, ``dev`` or ``test``.
        dataset: which data set (NER: ``wikiann`` (default), ``masakhaner``, ``germeval_14``;
            QA: ``germanquad`` or ``tydiqa``, default from the language table).

    Returns:
        The split, or ``None`` when the data set has no such split (dev: see
        :func:`load_task_splits`; TyDiQA-GoldP's test split is its validation split).
    """
    info = get_language(lang)
    hub_split = {"train": "train", "dev": "validation", "test": "test"}[split]
    if task == "xnli":
        return _hub_load("xnli", hub_config(lang, "xnli"), hub_split)
    if task == "ner":
        key = dataset or "wikiann"
        if key == "germeval_14":
            if not info.germeval:
                raise DataError(f"GermEval 2014 is German only, not {lang!r}")
            return _hub_load(key, None, hub_split)
        if key not in ("wikiann", "masakhaner"):
            raise DataError(f"unknown NER data set {key!r}; expected wikiann, masakhaner or germeval_14")
        return _hub_load(key, hub_config(lang, key), hub_split)
    if task == "qa":
        key = dataset or info.qa
        if key == "germanquad":  # train/test only
            return None if split == "dev" else _hub_load(key, None, hub_split)
        if key == "tydiqa":  # GoldP = secondary task: train/validation, all languages in one config
            if split == "dev":
                return None
            if info.tydiqa is None:
                raise DataError(f"TyDiQA-GoldP has no {lang!r}")
            ds = _hub_load(key, None, "train" if split == "train" else "validation")
            prefix = f"{info.tydiqa}-"
            return ds.filter(lambda ex: ex["id"].startswith(prefix))
        raise DataError(f"no QA data set for {lang!r}; expected dataset 'germanquad' or 'tydiqa', got {key!r}")
    if task == "translation":
        return _hub_load("iwslt2017", hub_config(lang, "iwslt2017"), hub_split)
    raise DataError(f"unknown task {task!r}; expected one of {sorted(TASK_COLUMNS)}")


def _ds_ident(ds: Any) -> dict:
    """Name, config and version of a hub split, for the trial record's revisions."""
    i = ds.info
    return {"dataset": i.dataset_name, "config": i.config_name, "version": str(i.version) if i.version else None}


# ---------------------------------------------------------------------------------- splits


def train_dev_split(train: Any, fraction: float = DEV_FRACTION, seed: int = DEV_SPLIT_SEED) -> tuple[Any, Any]:
    """Carve a random ``fraction`` of ``train`` as dev (FOCUS, when no dev split exists).

    Example:
        >>> import datasets
        >>> tr, dv = train_dev_split(datasets.Dataset.from_list([{"x": i} for i in range(20)]))
        >>> len(tr), len(dv)
        (18, 2)
    """
    if len(train) < 2:
        raise DataError(f"cannot carve a dev split from {len(train)} training example(s)")
    n_dev = max(1, round(len(train) * fraction))
    parts = train.train_test_split(test_size=n_dev, seed=seed, shuffle=True)
    return parts["train"], parts["test"]


def limit(ds: Any, n: int | None) -> Any:
    """The first ``n`` examples of ``ds`` (all when ``n`` is None), as ``max_*_examples`` asks."""
    if n is None or n >= len(ds):
        return ds
    if n < 1:
        raise ValueError(f"example limit must be >= 1 or None, got {n}")
    return ds.select(range(n))


def resolve_source(lang: str, *, files: str | None, data_root: str | Path | None) -> str:
    """Which source serves ``lang``: ``"files"``, ``"world"`` or ``"hub"``."""
    if files is not None:
        return "files"
    known = LANGUAGES.get(lang)
    if data_root is not None and (known is None or known.world):
        return "world"
    if known is None:
        raise DataError(f"language {lang!r} is not in tasks/languages.py and no data_root/files were given")
    if known.world:
        raise DataError(f"world language {lang!r} needs data_root (a world directory) or files")
    return "hub"


def load_task_splits(
    task: str,
    lang: str,
    *,
    splits: tuple[str, ...] = SPLITS,
    files: str | None = None,
    data_root: str | Path | None = None,
    dataset: str | None = None,
) -> tuple[dict[str, Any], dict]:
    """Load the requested splits of ``task`` in ``lang`` from files, the world or the hub.

    A missing dev split (no file, or none on the hub) is carved from train (10%, fixed seed);
    then train is the remaining 90%.

    Args:
        task: ``xnli``, ``ner``, ``qa`` or ``translation``.
        lang: language code.
        splits: which of ``train``, ``dev``, ``test`` to return.
        files: path template with ``{lang}`` and ``{split}``.
        data_root: world directory.
        dataset: hub data set choice (see :func:`load_hub_split`).

    Returns:
        ``(splits, info)``: ``{split: Dataset}`` and ``{"source", "files"|"hub", "dev_from_train"}``.
    """
    if task not in TASK_COLUMNS:
        raise DataError(f"unknown task {task!r}; expected one of {sorted(TASK_COLUMNS)}")
    source = resolve_source(lang, files=files, data_root=data_root)
    info: dict[str, Any] = {"source": source, "dev_from_train": False}
    need = set(splits) | ({"train"} if "dev" in splits else set())
    loaded: dict[str, Any] = {}
    for split in sorted(need, key=SPLITS.index):
        if source == "hub":
            ds = load_hub_split(task, lang, split, dataset=dataset)
            info.setdefault("hub", {})[split] = None if ds is None else _ds_ident(ds)
        else:
            path = local_file(files, lang, split) if source == "files" else world_file(data_root, lang, task, split)
            if split == "dev" and not path.is_file():
                ds = None
            else:
                ds = load_jsonl(path, task=task)
                info.setdefault("files", {})[split] = str(path)
        if ds is not None:
            loaded[split] = ds
    if "dev" in splits and "dev" not in loaded:
        loaded["train"], loaded["dev"] = train_dev_split(loaded["train"])
        info["dev_from_train"] = True
    if source == "hub":
        for split, ds in loaded.items():
            missing = [c for c in TASK_COLUMNS[task] if c not in ds.column_names]
            if missing:
                raise DataError(f"hub data for {task}/{lang}/{split} lacks column(s) {missing} (has {ds.column_names})")
    return {s: loaded[s] for s in splits}, info


def ner_label_names(
    ds: Any, *, template_file: str | Path | None = None, labels: tuple[str, ...] | None = None
) -> list[str]:
    """The NER label names of ``ds``, by priority: ``labels``, the data set's ClassLabel feature,
    a ``labels.json`` next to ``template_file``, then :data:`WIKIANN_LABELS`.

    Raises:
        DataError: when a tag id in ``ds`` is outside the label list.
    """
    names: list[str] | None = list(labels) if labels else None
    if names is None:
        feature = getattr(getattr(ds, "features", {}).get("ner_tags", None), "feature", None)
        names = list(feature.names) if hasattr(feature, "names") else None
    if names is None and template_file is not None:
        candidate = Path(template_file).parent / "labels.json"
        if candidate.is_file():
            try:
                names = list(json.loads(candidate.read_text(encoding="utf-8")))
            except json.JSONDecodeError as e:
                raise DataError(f"{candidate} is not valid JSON ({e.msg})") from None
    names = names or list(WIKIANN_LABELS)
    top = max((max(tags) for tags in ds["ner_tags"] if tags), default=-1)
    if top >= len(names):
        raise DataError(f"NER tag id {top} is outside the {len(names)} labels {names}")
    return names


# ------------------------------------------------------------------------- language encodings


def batch_preparer(model: Any, encoding: Any = None) -> Any:
    """``(batch, languages) -> batch`` that readies a collated batch for ``model``'s language encoding.

    A language-encoded model (``harness.language_encoding.EncodedModel``) prepares its own
    batches (language ids; the inserted token of ``attached``); otherwise a third-party
    ``encoding``'s ``prepare`` is used; a plain model gets the batch unchanged.
    """
    prepare = getattr(model, "prepare_batch", None)
    if prepare is not None:
        return prepare
    if encoding is not None and getattr(encoding, "registry_name", None) != "none":
        return encoding.prepare
    return lambda batch, languages: batch


def ensure_languages(model: Any, encoding: Any, languages: Any, seed: int) -> tuple[Any, list[str]]:
    """``model`` able to encode every language of ``languages``: ``(model, languages added)``.

    A language-encoded model that lacks some of them is copied and wrapped again with the trial's
    ``encoding`` (its languages kept, the new ones initialized by the encoding's ``init`` option —
    ``identity``/``zero``, ``random``, ``mean``, ``copy:<lang>`` — from the trial ``seed``), so a
    multilingual evaluation can test languages the source was not pretrained or wrapped with.
    Plain models and models that know every language are returned as they are.

    Raises:
        ValueError: the model is encoded but the trial's encoding cannot wrap it.
    """
    if not getattr(model, "is_language_encoded", False):
        return model, []
    known = list(model.languages)
    missing = [lang for lang in dict.fromkeys(languages) if lang not in known]
    if not missing:
        return model, []
    if encoding is None or not hasattr(encoding, "wrap"):
        raise ValueError(f"the model's language encoding knows {known}, not {missing}, and the trial has no encoding to add them")
    import copy

    return encoding.wrap(copy.deepcopy(model), known + missing, seed=seed), missing


def added_tokens(model: Any) -> int:
    """Positions a model's language encoding inserts per sequence (1 for ``attached``, else 0).

    Tasks tokenize with ``max_length - added_tokens(model)`` so the prepared sequence fits ``max_length``.
    """
    return int(getattr(model, "added_tokens", 0) or 0)


def language_collate(collate: Any, model: Any, language: str | None = None, *, encoding: Any = None,
                     decoder_language: str | None = None) -> Any:  # fmt: skip
    """Wrap ``collate`` so that its batches carry the language of every sequence.

    Args:
        collate: ``features -> batch`` (e.g. :func:`tasks.loop.pad_collate`).
        model: the model the batches are for (see :func:`batch_preparer`).
        language: the language of every feature; None: each feature's ``"language"`` key (removed
            before ``collate``), for batches that mix languages.
        encoding: the trial's encoding object (used only for third-party encodings).
        decoder_language: the decoder-side language of an encoder–decoder (translation target).

    Returns:
        The collate itself for a plain model, else a collate whose batches have ``language_ids``
        (and ``added_positions`` for ``attached``).

    Example:
        >>> collate = language_collate(lambda f: {"n": len(f)}, model=object())
        >>> collate([{"x": 1}])
        {'n': 1}
    """
    prepare = getattr(model, "prepare_batch", None)
    if prepare is None and (encoding is None or getattr(encoding, "registry_name", None) == "none"):
        return collate

    def fn(features: list[dict]) -> dict:
        if language is None:
            missing = [i for i, f in enumerate(features) if "language" not in f]
            if missing:
                raise DataError(f"feature {missing[0]} has no 'language' and the collate was given none")
            langs = [f["language"] for f in features]
            features = [{k: v for k, v in f.items() if k != "language"} for f in features]
        else:
            langs = [language] * len(features)
        batch = collate(features)
        if prepare is None:
            return encoding.prepare(batch, langs)
        if decoder_language is not None:
            return prepare(batch, langs, [decoder_language] * len(langs))
        return prepare(batch, langs)

    return fn


def strip_added(batch: dict, values: Any) -> Any:
    """Drop the positions a language encoding inserted from a per-token output ``[batch, length, ...]``.

    With no ``added_positions`` in ``batch`` the values are returned unchanged; otherwise every
    row must have the same number of inserted positions.

    Example:
        >>> import torch
        >>> b = {"added_positions": torch.tensor([[False, True, False]])}
        >>> strip_added(b, torch.tensor([[7, 9, 8]])).tolist()
        [[7, 8]]
    """

    added = batch.get("added_positions")
    if added is None:
        return values
    keep = ~added.to(values.device)
    n, length = keep.shape
    per_row = keep.sum(1)
    if not bool((per_row == per_row[0]).all()):
        raise ValueError("strip_added: rows have different numbers of inserted positions")
    return values[keep].reshape(n, int(per_row[0]), *values.shape[2:]) if n else values[:, : length - 1]


def token_lengths(batch: dict) -> list[int]:
    """Real (non-padding) tokens per row, not counting positions a language encoding inserted."""
    lengths = batch["attention_mask"].sum(-1)
    added = batch.get("added_positions")
    if added is not None:
        lengths = lengths - added.to(lengths.device).sum(-1)
    return lengths.tolist()


def encoded_once(what: str, tokenizer: Any, ds: Any, settings: Any, encode: Callable[[], T]) -> T:
    """``encode()``, computed once per process for the same tokenizer, data and settings.

    The key is ``what`` (the task and split kind), :func:`harness.tokenizers.tokenizer_state` of
    ``tokenizer``, the data set's fingerprint (``datasets`` derives it from the files and every
    transform, ``select`` included) and ``settings`` (JSON: everything else the encoding depends on,
    e.g. ``max_length``). Every trial of a grid that shares a target tokenizer then encodes a task's
    splits once. Without a tokenizer state or a fingerprint nothing is memoized. Callers must not
    modify what they get (the same objects go to the next trial).
    """
    from harness.tokenizers import tokenizer_state

    state, fingerprint = tokenizer_state(tokenizer), getattr(ds, "_fingerprint", None)
    key = None
    if state is not None and fingerprint is not None:
        key = (what, state, fingerprint, json.dumps(settings, sort_keys=True, default=str))
    return _FEATURE_MEMO.get(key, encode)
