"""Experiment configuration: YAML values → frozen dataclasses → ``key=value`` overrides → trial specs.

An experiment YAML holds values only (no includes, no code, no templating)::

    # tokxfer run harness/configs/quickstart.yaml
    name: quickstart
    world: {size: small, seed: 0}            # the built-in world that "world:" resources live in
    source: {model: "world:mlm"}             # or a local model directory, or a hub id
    targets:
      - language: near
        tokenizer: {algorithm: unigram, vocab_size: 4000}   # trained on the target's text
    methods: [random, overlap, {id: focus-cbow, name: focus, config: {aux_model: cbow}}]
    tasks: [mlm-at-init]
    seeds: [1, 2, 3]

Overrides use dotted paths into that structure, values parsed as YAML:
``seeds=[1]``, ``world.size=tiny``, ``tasks.0.config.max_eval_examples=50``.

``stage_sets`` (instead of ``stages``) makes the stage chain a grid axis: a mapping of set id →
stage list, e.g. LAPT budgets ``{lapt-0: [], lapt-30: [{name: lapt, config: {max_steps: 30}}], …}``
(harness/configs/warmup-budget.yaml); each trial runs one set, and its resolved config names it
(``stage_set``), so leaderboards can select by it.

Every method/encoding/stage/task section is validated against its registered config dataclass
(unknown keys fail, naming the key and the file); the *resolved* config (all defaults filled in)
is what identifies a trial.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness import inputs, registry
from harness.cache import content_hash
from harness.errors import TokxferError
from harness.extension import DEFAULT_EXTEND_TOP_N
from harness.inputs import name_problem
from harness.registry import MAX_VOCAB_SIZE

TOP_LEVEL_KEYS = (
    "name", "description", "world", "source", "targets", "methods", "encodings", "stages", "stage_sets", "tasks",
    "seeds", "hold_seeds", "mode", "extend_top_n",
)
SEED_COMPONENTS = ("source", "init", "stages", "task")
"""The random sources of a trial, each seeded from the trial seed unless held fixed: the built-in source
model's pretraining (``source.pretrain.seed`` holds it), the initialization (method, fallback rows, a
language encoding's new parameters), the stages (LAPT data order, masks, dropout) and the task
(fine-tuning data order, head, dropout). ``hold_seeds: {init: 0}`` holds the others."""
HOLDABLE = SEED_COMPONENTS[1:]
"""Components ``hold_seeds`` may name (the source is held in its own block: ``source.pretrain.seed``)."""
NOT_KEYS = {
    # Accepted and ignored before issue 25: it never did anything (the grid's languages are its targets,
    # each task's evaluation languages are in its config), so a file that set it got a grid it did
    # not ask for. Now an error pointing at the keys that do what it seems to say.
    "languages": "the languages of a grid are its targets (targets: [near, far]); a task's evaluation "
                 "languages go in its config (e.g. eval_languages)",
}
"""Top-level keys users write that are not settings, with the hint their error gives."""


class ConfigError(TokxferError, ValueError):
    """An experiment configuration is invalid; the message names the file and the field."""


def _check(check: Any, value: Any, field: str) -> Any:
    """Run one of the shared checks (:mod:`harness.inputs`, :func:`harness.registry.check_seed`)
    on a field's value; its error becomes a :class:`ConfigError`."""
    try:
        return check(value, field)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _check_tokenizer_path(value: str, field: str) -> None:
    """A tokenizer named by a local path must be a directory (what ``save_pretrained`` writes)."""
    path = Path(value).expanduser()
    kind = inputs.file_kind(path)
    if kind is None:
        raise ConfigError(f"{field}: {path} is a file; expected a tokenizer directory (written by save_pretrained)")
    if kind not in ("missing", "a directory"):
        raise ConfigError(f"{field}: {path} is {kind}; expected a tokenizer directory")


@dataclass(frozen=True)
class WorldSpec:
    """Which built-in world ``world:`` resources refer to."""

    size: str = "small"
    """``tiny`` (tests) or ``small`` (quickstart)."""
    seed: int = 0
    """Generator seed of the world (independent of trial seeds: the world is the data, not the trial)."""

    def __post_init__(self) -> None:
        if self.size not in ("tiny", "small"):
            raise ConfigError(f"world.size: expected 'tiny' or 'small', got {self.size!r}")
        _check(registry.check_seed, self.seed, "world.seed")

    @property
    def languages(self) -> list[str]:
        """The world's languages (source first), known without building it."""
        from harness.world.config import world_config

        return world_config(self.size).languages


@dataclass(frozen=True)
class SourceSpec:
    """The source model."""

    model: str = "world:mlm"
    """``world:mlm`` / ``world:clm`` (built-in, pretrained and cached by the harness), a local
    model directory, or a hub id such as ``xlm-roberta-base``."""
    tokenizer: str | None = None
    """Tokenizer path or hub id when it differs from ``model``."""
    pretrain: dict = field(default_factory=dict)
    """Overrides of :class:`harness.world.pretrain.PretrainConfig` for ``world:`` models. Its ``seed``
    follows the trial seed unless given: each seed of a grid then pretrains its own source model (a
    replication of the whole procedure); ``seed: 0`` holds one source for every trial."""

    def __post_init__(self) -> None:
        kind = self.world_kind
        if kind is None:
            _check(functools.partial(inputs.check_model_dir, missing_ok=True), self.model, "model")
            if self.pretrain:
                raise ConfigError(
                    f"pretrain: applies to the built-in world:mlm / world:clm models only; source.model "
                    f"{self.model!r} is loaded as it is (remove 'pretrain')"
                )
        if self.tokenizer is not None:
            _check_tokenizer_path(self.tokenizer, "tokenizer")
        if self.pretrain:
            self.pretrain_config()  # unknown keys, types and ranges of every pretraining setting

    def for_trial(self, seed: int) -> SourceSpec:
        """This source as trial ``seed`` uses it: a ``world:`` model's pretraining seed resolved.

        The pretraining seed is ``pretrain.seed`` when given (held), else the trial seed. It is
        written into ``pretrain`` (and so into the trial id) unless it is 0, the pretraining default,
        so a trial on a source held at 0 keeps the id it had before seeds varied the source.

        Example:
            >>> SourceSpec().for_trial(3).pretrain, SourceSpec(pretrain={"seed": 0}).for_trial(3).pretrain
            ({'seed': 3}, {})
        """
        if self.world_kind is None:
            return self
        pretrain = dict(self.pretrain)
        held = pretrain.pop("seed", None)
        effective = seed if held is None else held
        if effective != 0:
            pretrain["seed"] = effective
        return dataclasses.replace(self, pretrain=pretrain)

    @property
    def world_kind(self) -> str | None:
        """``mlm`` / ``clm`` for ``world:mlm`` / ``world:clm``, ``None`` for a path or hub id."""
        if not self.model.startswith("world:"):
            return None
        kind = self.model.split(":", 1)[1]
        if kind not in ("mlm", "clm"):
            raise ConfigError(f"model: unknown world model {self.model!r}; expected world:mlm or world:clm")
        return kind

    def pretrain_config(self, encoding: str | None = None) -> Any:
        """The :class:`harness.world.pretrain.PretrainConfig` of a ``world:`` model.

        Args:
            encoding: the trial's language encoding, for ``pretrain: {encoding: trial}``; ``None``
                while validating (the trial's encoding is a registered component either way).

        Raises:
            ConfigError: naming the ``pretrain`` key (unknown keys with a close match, wrong
                types, values out of range, a ``kind`` that contradicts ``model``).
        """
        from harness.world.pretrain import PretrainConfig

        kind = self.world_kind
        values = dict(self.pretrain)
        if values.get("kind", kind) != kind:
            raise ConfigError(f"pretrain.kind: {values['kind']!r} contradicts model {self.model!r} (give one of them)")
        if values.get("encoding") == "trial":
            values["encoding"] = encoding
        try:
            return registry.build_config(PretrainConfig, {**values, "kind": kind}, where="pretrain")
        except ValueError as e:
            msg = str(e).replace("pretrain: PretrainConfig.", "pretrain.").replace("PretrainConfig.", "pretrain.")
            raise ConfigError(msg if msg.startswith("pretrain") else f"pretrain: {msg}") from None


@dataclass(frozen=True)
class TokenizerSpec:
    """The target tokenizer: a path/hub id, or trained by the harness from the target corpus."""

    path: str | None = None
    algorithm: str = "unigram"
    vocab_size: int = 8000
    lowercase: bool = False

    def __post_init__(self) -> None:
        if self.path is None and self.algorithm not in ("unigram", "bpe", "bytelevel-bpe", "wordpiece"):
            raise ConfigError(
                f"tokenizer.algorithm: expected unigram|bpe|bytelevel-bpe|wordpiece, got {self.algorithm!r}"
            )
        if self.vocab_size < 50:
            raise ConfigError(f"tokenizer.vocab_size: expected >= 50, got {self.vocab_size}")
        if self.vocab_size > MAX_VOCAB_SIZE:
            raise ConfigError(
                f"tokenizer.vocab_size: {self.vocab_size} is larger than any vocabulary in use "
                f"(at most {MAX_VOCAB_SIZE}: MAX_VOCAB_SIZE)"
            )
        if self.path is not None:
            _check_tokenizer_path(self.path, "tokenizer.path")


@dataclass(frozen=True)
class TargetSpec:
    """One target language with its tokenizer and (optional) resources.

    Corpora and dictionaries default to the built-in world's files when a world is configured;
    explicit paths override them.
    """

    language: str
    tokenizer: TokenizerSpec = field(default_factory=TokenizerSpec)
    corpus: str | None = None
    source_corpus: str | None = None
    parallel_corpus: str | None = None
    dictionary: str | None = None
    source_word_vectors: str | None = None
    target_word_vectors: str | None = None
    helper_model: str | None = None
    """A small model in the target vocabulary (CLP's helper; OMP's donor space): a local model
    directory, a ``real:`` name, or ``world:mlm`` / ``world:clm`` — pretrained by the harness on this
    target's corpus (the world's, or ``corpus``) with this target's tokenizer settings and the
    source's ``pretrain`` settings (:func:`harness.run.resources.helper_model_dir`; cached)."""
    helper_pretrain: dict | None = None
    """Overrides of :class:`harness.world.pretrain.PretrainConfig` for a ``world:`` helper, over the
    source's ``pretrain`` settings (e.g. a helper smaller than the source: a real source model has no
    pretraining settings, so its helper starts from the defaults). A ``seed`` here holds the helper's
    pretraining seed; else it follows the source's (built-in source) or the trial's init seed."""

    CORPORA = ("corpus", "source_corpus", "parallel_corpus")
    """Fields naming text corpora (checked to start with text); the other path fields name files."""
    FILES = ("dictionary", "source_word_vectors", "target_word_vectors")
    NEW_FIELDS_OMITTED_WHEN_NONE = ("helper_model", "helper_pretrain")
    """Left out of the resolved config while unset, so targets written before the field keep their trial ids."""
    WORLD_HELPERS = ("world:mlm", "world:clm")

    def __post_init__(self) -> None:
        # what is there and wrong is refused; a missing file may still be downloaded before the run
        # (the real presets name data/… files that `validate` must accept on a clean clone)
        for names, check in ((self.CORPORA, inputs.check_corpus_head), (self.FILES, inputs.check_input_file)):
            for name in names:
                if getattr(self, name) is not None:
                    _check(functools.partial(check, missing_ok=True), getattr(self, name), name)
        helper = self.helper_model
        if self.helper_pretrain is not None:
            self.helper_pretrain_config()  # a dict of known PretrainConfig keys, and only for a world: helper
        if helper is None:
            return
        if not isinstance(helper, str) or not helper:
            raise ConfigError(f"helper_model: expected a model directory, a real: name or world:mlm|world:clm, got {helper!r}")
        if helper.startswith("world:"):
            if helper not in self.WORLD_HELPERS:
                raise ConfigError(f"helper_model: unknown world model {helper!r}; expected world:mlm or world:clm")
            if self.tokenizer.path is not None or self.tokenizer.lowercase:
                raise ConfigError(
                    f"helper_model: {helper} is pretrained with a tokenizer trained like this target's; that needs "
                    "tokenizer settings (algorithm, vocab_size), not tokenizer.path or lowercase (give a model "
                    "directory trained in your tokenizer instead)"
                )
        elif not helper.startswith("real:"):
            _check(functools.partial(inputs.check_model_dir, missing_ok=True), helper, "helper_model")

    def helper_pretrain_config(self, base: dict | None = None) -> Any:
        """The :class:`harness.world.pretrain.PretrainConfig` of a ``world:`` helper: ``base`` (the
        source's pretraining settings), then ``helper_pretrain``, with the helper's kind and this
        target's tokenizer settings.

        Raises:
            ConfigError: ``helper_pretrain`` without a ``world:`` helper, not a mapping, or an unknown
                or invalid key (named as ``helper_pretrain.<key>``).
        """
        from harness.world.pretrain import PretrainConfig

        extra = self.helper_pretrain or {}
        if self.helper_pretrain is not None:
            if not isinstance(extra, dict):
                raise ConfigError(f"helper_pretrain: expected a mapping of pretraining settings, got {extra!r}")
            if self.helper_model not in self.WORLD_HELPERS:
                raise ConfigError(f"helper_pretrain: only a helper the harness pretrains (helper_model: world:mlm or "
                                  f"world:clm) has pretraining settings, got helper_model {self.helper_model!r}")
            fixed = sorted(set(extra) & {"kind", "vocab_size", "tokenizer_algorithm"})
            if fixed:
                raise ConfigError(f"helper_pretrain.{fixed[0]}: set by helper_model and the target's tokenizer, not here")
        kind = (self.helper_model or "world:mlm").split(":", 1)[1]
        values = {**(base or {}), **extra, "kind": kind, "vocab_size": self.tokenizer.vocab_size,
                  "tokenizer_algorithm": self.tokenizer.algorithm}
        try:
            return registry.build_config(PretrainConfig, values, where="helper_pretrain")
        except ValueError as e:
            msg = str(e).replace("PretrainConfig.", "")
            raise ConfigError(msg if msg.startswith("helper_pretrain") else f"helper_pretrain: {msg}") from None

    def resolved(self) -> dict:
        """The target as the resolved trial config (and the init cache key) hold it (see
        :data:`NEW_FIELDS_OMITTED_WHEN_NONE`)."""
        return resolved_fields(self)


@dataclass(frozen=True)
class ComponentSpec:
    """A registered component with its resolved config: a method, encoding, stage or task."""

    id: str
    name: str
    config: dict
    built: Any = field(default=None, compare=False, hash=False, repr=False)
    """The validated config dataclass ``config`` was resolved from (set when an experiment file is
    loaded, so :func:`component_config` does not validate it again); None for specs read back from
    records. Never pickled: a spec sent to another process carries only its resolved dict."""

    def as_dict(self) -> dict:
        return {"id": self.id, "name": self.name, "config": self.config}

    def __reduce__(self):
        return (ComponentSpec, (self.id, self.name, self.config))


@dataclass(frozen=True)
class ExperimentConfig:
    """A validated, frozen experiment."""

    name: str
    source: SourceSpec
    targets: tuple[TargetSpec, ...]
    methods: tuple[ComponentSpec, ...]
    tasks: tuple[ComponentSpec, ...]
    encodings: tuple[ComponentSpec, ...] = ()
    stages: tuple[ComponentSpec, ...] = ()
    seeds: tuple[int, ...] = (1, 2, 3, 4, 5)
    world: WorldSpec | None = None
    mode: str = "replace"
    extend_top_n: int = DEFAULT_EXTEND_TOP_N
    description: str = ""
    path: str | None = None
    hold_seeds: tuple[tuple[str, int], ...] = ()
    """Components whose seed is held fixed for every trial (``{init: 0}``; :data:`HOLDABLE`), as sorted pairs."""
    stage_sets: tuple[tuple[str, tuple[ComponentSpec, ...]], ...] = ()
    """The stage axis: ``((set id, stages), …)`` in file order; empty: every trial runs ``stages``."""

    def __post_init__(self) -> None:
        for name, value in self.hold_seeds:
            if name not in HOLDABLE:
                hint = ("; hold the source model with source.pretrain.seed" if name == "source"
                        else "".join(f"; did you mean {c!r}?" for c in difflib.get_close_matches(str(name), HOLDABLE, n=1)))
                raise ConfigError(f"hold_seeds: unknown component {name!r}{hint} (holdable: {', '.join(HOLDABLE)})")
            _check(registry.check_seed, value, f"hold_seeds.{name}")
        seeds = self.seeds
        if (not isinstance(seeds, (tuple, list)) or not seeds
                or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)):
            raise ConfigError(f"seeds: expected a non-empty list of integers, got {list(seeds)!r}")
        for i, s in enumerate(seeds):
            _check(registry.check_seed, s, f"seeds.{i}")
        dups = sorted({s for s in seeds if seeds.count(s) > 1})
        if dups:
            raise ConfigError(f"seeds: seed(s) {dups} listed twice; each seed is one trial, list it once")
        if self.mode not in ("replace", "extend"):
            raise ConfigError(f"mode: expected 'replace' or 'extend', got {self.mode!r}")
        n = self.extend_top_n
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_VOCAB_SIZE:
            raise ConfigError(f"extend_top_n: expected a positive integer of at most {MAX_VOCAB_SIZE} "
                              f"(MAX_VOCAB_SIZE), got {n!r}")
        for i, t in enumerate(self.targets):
            if self.world is None and t.helper_model in TargetSpec.WORLD_HELPERS and t.corpus is None:
                raise ConfigError(f"targets.{i}.helper_model: {t.helper_model!r} is pretrained on the target's corpus: "
                                  "give targets[].corpus or a 'world:' section in the experiment")
        if self.world is not None:
            known = self.world.languages
            for i, t in enumerate(self.targets):
                if t.language not in known:
                    close = difflib.get_close_matches(str(t.language), known, n=1)
                    hint = f"; did you mean {close[0]!r}?" if close else ""
                    raise ConfigError(
                        f"targets.{i}.language: {t.language!r} is not a language of the built-in world{hint} "
                        f"(its languages: {', '.join(known)}); without 'world:' targets are real languages"
                    )
        elif self.source.world_kind is not None:
            raise ConfigError(f"source.model: {self.source.model!r} needs a 'world:' section in the experiment")

    def trials(self) -> list[TrialSpec]:
        """Expand the grid: target × method × encoding × stage set × task × seed (``stages`` apply to all
        when there are no ``stage_sets``)."""
        out = []
        encodings = self.encodings or (ComponentSpec("none", "none", {}),)
        sets: tuple[tuple[str | None, tuple[ComponentSpec, ...]], ...] = self.stage_sets or ((None, self.stages),)
        for target in self.targets:
            for method in self.methods:
                for enc in encodings:
                    for set_id, stages in sets:
                        for task in self.tasks:
                            for seed in self.seeds:
                                out.append(
                                    TrialSpec(
                                        experiment=self.name, world=self.world, source=self.source.for_trial(seed),
                                        target=target, method=method, encoding=enc, stages=stages, task=task,
                                        seed=seed, mode=self.mode, extend_top_n=self.extend_top_n,
                                        hold_seeds=self.hold_seeds, stage_set=set_id,
                                    )
                                )
        return out


@dataclass(frozen=True)
class TrialSpec:
    """One trial: everything that determines its record."""

    experiment: str
    world: WorldSpec | None
    source: SourceSpec
    target: TargetSpec
    method: ComponentSpec
    encoding: ComponentSpec
    stages: tuple[ComponentSpec, ...]
    task: ComponentSpec
    seed: int
    mode: str = "replace"
    extend_top_n: int = DEFAULT_EXTEND_TOP_N
    hold_seeds: tuple[tuple[str, int], ...] = ()
    stage_set: str | None = None
    """The id of the experiment's stage set this trial runs (``stage_sets``); ``None`` without them."""

    def component_seed(self, component: str) -> int | None:
        """The seed a random source of this trial draws from (:data:`SEED_COMPONENTS`): the trial seed
        unless held; for ``source`` the built-in model's pretraining seed (``None`` for another model).

        Example:
            >>> from harness.run.config import TrialSpec
            >>> t = TrialSpec("e", None, SourceSpec().for_trial(2), TargetSpec("near"), ComponentSpec("r", "r", {}),
            ...               ComponentSpec("none", "none", {}), (), ComponentSpec("t", "t", {}), 2,
            ...               hold_seeds=(("init", 0),))
            >>> [t.component_seed(c) for c in SEED_COMPONENTS]
            [2, 0, 2, 2]
        """
        if component not in SEED_COMPONENTS:
            raise KeyError(f"unknown seed component {component!r} (known: {', '.join(SEED_COMPONENTS)})")
        if component == "source":
            return int(self.source.pretrain.get("seed", 0)) if self.source.world_kind is not None else None
        return dict(self.hold_seeds).get(component, self.seed)

    def component_seeds(self) -> dict[str, int | None]:
        """Every component's seed (what the record's ``seeds`` holds)."""
        return {c: self.component_seed(c) for c in SEED_COMPONENTS}

    def reads_helper_model(self) -> bool:
        """Whether the method reads ``targets[].helper_model``: what its class declares in ``needs`` (CLP
        always, OMP with ``donor: helper``), else whether its module reads ``inputs.helper_model`` at all
        (:func:`harness.registry.reads_input`; a plugin that says nothing gets the helper). ``False``
        without a helper."""
        if self.target.helper_model is None:
            return False
        entry = registry.get("method", self.method.name)
        return registry.reads_input(entry.cls, component_config("method", self.method), "helper_model")

    def resolved(self) -> dict:
        """The canonical resolved config (JSON-able), stored in the record. ``hold_seeds`` appears only
        when a component is held, so every trial that holds none keeps its id."""
        target = self.target.resolved()
        if not self.reads_helper_model():  # a helper the method never reads does not move the trial's id
            target = {k: v for k, v in target.items() if k not in ("helper_model", "helper_pretrain")}
        out = {
            "world": dataclasses.asdict(self.world) if self.world else None,
            "source": dataclasses.asdict(self.source),
            "target": target,
            "method": self.method.as_dict(),
            "mode": self.mode,
            "extend_top_n": self.extend_top_n if self.mode == "extend" else None,
            "encoding": self.encoding.as_dict(),
            "stages": [s.as_dict() for s in self.stages],
            "task": self.task.as_dict(),
            "seed": self.seed,
        }
        if self.hold_seeds:
            out["hold_seeds"] = dict(self.hold_seeds)
        if self.stage_set is not None:  # only when the experiment has stage sets: other trials keep their ids
            out["stage_set"] = self.stage_set
        return out

    @property
    def trial_id(self) -> str:
        """Hash of the canonical resolved config (the experiment's name is not part of it): version
        :data:`TRIAL_ID_VERSION` of the id."""
        return config_hash(self.resolved())

    def describe(self) -> str:
        stages = f" @{self.stage_set}" if self.stage_set is not None else ""
        return f"{self.method.id} → {self.target.language}{stages} / {self.task.id} / seed {self.seed}"


TRIAL_ID_VERSION = 1
"""What a trial id covers, versioned: version 1 is :func:`config_hash` of :meth:`TrialSpec.resolved`
(a new field enters ``resolved()`` only when set, :data:`NEW_FIELDS_OMITTED_WHEN_NONE`, so older ids
stay valid). A change that would move existing ids bumps this number and adds a migration in
``harness/run/records.py``; tests/run/test_trial_ids.py pins ids of a packaged config so such a change
cannot go unnoticed."""


def config_hash(obj: Any) -> str:
    """The first 16 hex digits of :func:`harness.cache.content_hash` of ``obj`` (ASCII-escaped text).

    ``ascii=True`` and ``allow_nan=True`` reproduce the text trial ids were first defined on, so
    existing trial ids (and the records named by them) stay valid.

    Example:
        >>> config_hash({"seed": 1, "method": {"name": "focus"}})
        '5f6f645dad51b722'
    """
    return content_hash(obj, ascii=True, allow_nan=True)[:16]


# --------------------------------------------------------------------------------------------
# loading


def load_experiment(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """Read an experiment YAML, apply ``key=value`` overrides and validate everything.

    Raises:
        ConfigError: naming the file and the offending key/value.
    """
    path = Path(path)
    try:
        raw = inputs.load_yaml(inputs.read_text_file(path, "experiment file"))
    except inputs.InputFileError as e:
        raise ConfigError(str(e)) from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML: {inputs.one_line(e)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
    raw = apply_overrides(raw, overrides, where=str(path))
    return parse_experiment(raw, where=str(path))


def apply_overrides(raw: dict, overrides: list[str] | tuple[str, ...], *, where: str = "overrides") -> dict:
    """Apply dotted ``key=value`` overrides (values parsed as YAML) to a raw config dict."""
    raw = copy.deepcopy(raw)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"override {item!r}: expected key=value")
        key, value = item.split("=", 1)
        parts = key.strip().split(".")
        if parts[0] not in TOP_LEVEL_KEYS:
            raise ConfigError(f"override {item!r}: {_unknown_top_level(parts[0])}")
        node: Any = raw
        for i, p in enumerate(parts[:-1]):
            if isinstance(node, list):
                try:
                    node = node[int(p)]
                except (ValueError, IndexError):
                    raise ConfigError(f"override {item!r}: {'.'.join(parts[: i + 1])} is not a valid list index") from None
                if isinstance(node, str):  # shorthand "random" → {"name": "random"}
                    raise ConfigError(f"override {item!r}: write that entry as a mapping in {where} to override its fields")
            elif isinstance(node, dict):
                node = node.setdefault(p, {})
                if node is None:
                    node = raw_parent_fix(raw, parts[: i + 1])
            else:
                raise ConfigError(f"override {item!r}: {'.'.join(parts[:i])} is {node!r}, not a mapping or list")
        last = parts[-1]
        try:
            parsed = inputs.load_yaml(value) if value != "" else ""
        except yaml.YAMLError as e:
            raise ConfigError(f"override {item!r}: value is not valid YAML ({inputs.one_line(e)})") from None
        if isinstance(node, list):
            try:
                node[int(last)] = parsed
            except (ValueError, IndexError):
                raise ConfigError(f"override {item!r}: {key} is not a valid list index") from None
        elif isinstance(node, dict):
            node[last] = parsed
        else:
            raise ConfigError(f"override {item!r}: {'.'.join(parts[:-1])} is {node!r}, not a mapping or list")
    return raw


def raw_parent_fix(raw: dict, path: list[str]) -> dict:
    """Replace a ``null`` on an override's path by an empty mapping (``world: null`` + ``world.size=tiny``)."""
    node: Any = raw
    for p in path[:-1]:
        node = node[int(p)] if isinstance(node, list) else node[p]
    fresh: dict = {}
    if isinstance(node, list):
        node[int(path[-1])] = fresh
    else:
        node[path[-1]] = fresh
    return fresh


def parse_experiment(raw: dict, *, where: str = "<experiment>") -> ExperimentConfig:
    """Validate a raw experiment mapping into an :class:`ExperimentConfig`."""
    unknown = [k for k in raw if k not in TOP_LEVEL_KEYS]
    if unknown:
        raise ConfigError(f"{where}: {_unknown_top_level(unknown[0])}")
    for req in ("name", "targets", "methods", "tasks"):
        if req not in raw:
            raise ConfigError(f"{where}: missing required key {req!r}")
    try:
        world = _dc(WorldSpec, raw["world"], f"{where}: world") if raw.get("world") is not None else None
        source = _dc(SourceSpec, raw.get("source") or {}, f"{where}: source")
        if not isinstance(raw["targets"], list) or not raw["targets"]:
            raise ConfigError(f"{where}: targets: expected a non-empty list")
        targets = []
        for i, t in enumerate(raw["targets"]):
            if isinstance(t, str):
                t = {"language": t}
            if not isinstance(t, dict):
                raise ConfigError(f"{where}: targets.{i}: expected a language code or a mapping, got {t!r}")
            t = dict(t)
            tok = t.get("tokenizer") or {}
            if isinstance(tok, str):
                tok = {"path": tok}
            t["tokenizer"] = _dc(TokenizerSpec, tok, f"{where}: targets.{i}.tokenizer")
            targets.append(_dc(TargetSpec, t, f"{where}: targets.{i}"))
        methods = _components("method", raw["methods"], f"{where}: methods", required=True)
        tasks = _components("task", raw["tasks"], f"{where}: tasks", required=True)
        encodings = _components("encoding", raw.get("encodings") or [], f"{where}: encodings")
        stages = _components("stage", raw.get("stages") or [], f"{where}: stages")
        stage_sets = _stage_sets(raw.get("stage_sets"), bool(raw.get("stages")), where)
        # Settings the file leaves out take ExperimentConfig's own defaults (spelled there only).
        given: dict[str, Any] = {k: raw[k] for k in ("mode", "extend_top_n") if k in raw}
        if "description" in raw:
            given["description"] = str(raw["description"])
        if "seeds" in raw:
            seeds = raw["seeds"]
            if isinstance(seeds, int) and not isinstance(seeds, bool):
                seeds = [seeds]
            if not isinstance(seeds, list):
                raise ConfigError(f"seeds: expected a non-empty list of integers, got {seeds!r}")
            given["seeds"] = tuple(seeds)
        hold = raw.get("hold_seeds") or {}
        if not isinstance(hold, dict):
            raise ConfigError(f"hold_seeds: expected a mapping of component to seed (e.g. {{init: 0}}), got {hold!r}")
        return ExperimentConfig(
            name=check_name(raw["name"], where), source=source, targets=tuple(targets), methods=tuple(methods),
            tasks=tuple(tasks), encodings=tuple(encodings), stages=tuple(stages), stage_sets=stage_sets, world=world,
            path=None if where.startswith("<") else where,
            hold_seeds=tuple(sorted(hold.items(), key=lambda kv: str(kv[0]))), **given,
        )
    except (ValueError, TypeError, KeyError) as e:
        msg = str(e)
        raise ConfigError(msg if msg.startswith(where) else f"{where}: {msg}") from None


def _stage_sets(raw: Any, has_stages: bool, where: str) -> tuple[tuple[str, tuple[ComponentSpec, ...]], ...]:
    """Parse ``stage_sets`` (a mapping of set id → stage list; an empty list runs no stage)."""
    if raw is None:
        return ()
    if has_stages:
        raise ConfigError(f"{where}: give 'stages' or 'stage_sets', not both (a stage set lists its whole chain)")
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{where}: stage_sets: expected a mapping of set id to a list of stages, got {raw!r}")
    out = []
    for set_id, items in raw.items():
        problem = name_problem(set_id) if isinstance(set_id, str) else "not a text"
        if problem:
            raise ConfigError(f"{where}: stage_sets: set id {set_id!r}: {problem}")
        if not isinstance(items, list):
            raise ConfigError(f"{where}: stage_sets.{set_id}: expected a list of stages ([] for none), got {items!r}")
        out.append((set_id, tuple(_components("stage", items, f"{where}: stage_sets.{set_id}"))))
    return tuple(out)


def _unknown_top_level(key: Any) -> str:
    """The error text for a top-level key that is not a setting (with a hint or a close match)."""
    if key in NOT_KEYS:
        return f"{key!r} is not a setting: {NOT_KEYS[key]}"
    close = difflib.get_close_matches(str(key), TOP_LEVEL_KEYS, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key {key!r}{hint} (known keys: {', '.join(TOP_LEVEL_KEYS)})"


def check_name(name: Any, where: str = "<experiment>") -> str:
    """The experiment ``name`` as a safe single path component (records go to ``RUNS_DIR/<name>/``).

    Refused: non-strings (numbers are accepted as text), empty or blank names, ``.``/``..``,
    path separators, a leading ``.`` or ``-`` (hidden folders, names read as options), control
    characters, surrounding spaces, more than 200 characters.

    Example:
        >>> check_name("quickstart-tiny")
        'quickstart-tiny'
    """
    if isinstance(name, bool) or not isinstance(name, (str, int)):
        raise ConfigError(f"{where}: name: expected a text naming the experiment, got {name!r}")
    name = str(name)
    why = name_problem(name)
    if why:
        raise ConfigError(
            f"{where}: name: {name!r} cannot be a folder name under the runs dir ({why}); "
            f"use letters, digits and - _ . + (e.g. my-experiment)"
        )
    return name


def _dc(cls: type, values: Any, where: str) -> Any:
    if not isinstance(values, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(values).__name__}")
    try:
        return registry.build_config(cls, values, where=where)
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _components(kind: str, items: Any, where: str, *, required: bool = False) -> list[ComponentSpec]:
    if not isinstance(items, list):
        raise ConfigError(f"{where}: expected a list, got {type(items).__name__}")
    if required and not items:
        raise ConfigError(f"{where}: expected a non-empty list (an empty one makes a grid of 0 trials)")
    out, seen = [], set()
    for i, item in enumerate(items):
        if isinstance(item, str):
            item = {"name": item}
        if not isinstance(item, dict) or "name" not in item:
            raise ConfigError(f"{where}.{i}: expected a name or a mapping with 'name'")
        extra = set(item) - {"id", "name", "config"}
        if extra:
            raise ConfigError(f"{where}.{i}: unknown key {sorted(extra)[0]!r} (known: id, name, config)")
        try:
            entry = registry.get(kind, item["name"])
        except registry.RegistryError as e:
            raise ConfigError(f"{where}.{i}: {e}") from None
        cfg = registry.build_config(entry.config_cls, item.get("config") or {}, where=f"{where}.{i}.config")
        cid = str(item.get("id") or item["name"])
        if cid in seen:
            raise ConfigError(f"{where}.{i}: duplicate id {cid!r}; give each entry a distinct 'id'")
        seen.add(cid)
        out.append(ComponentSpec(cid, entry.name, _jsonable(resolved_fields(cfg)), cfg))
    return out


def resolved_fields(cfg: Any) -> dict[str, Any]:
    """A component config as the dict stored in the resolved trial config (and hashed into its id).

    Fields a config class lists in ``NEW_FIELDS_OMITTED_WHEN_NONE`` (a class attribute) are left out
    while they are ``None``: options added after records exist, so every existing experiment keeps
    its trial ids (and resumes) as long as it does not use them. The keys of a nested block named
    in ``FLAT_BLOCKS`` (:func:`harness.registry.flat_blocks`; every fine-tuning task's ``train``)
    are stored flat: the block's listed keys always, its other keys only when they differ from the
    block's default.

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass(frozen=True)
        ... class C:
        ...     NEW_FIELDS_OMITTED_WHEN_NONE = ("extra",)
        ...     lr: float = 1e-3
        ...     extra: int | None = None
        >>> resolved_fields(C()), resolved_fields(C(extra=2))
        ({'lr': 0.001}, {'lr': 0.001, 'extra': 2})
    """
    out = dataclasses.asdict(cfg)
    for name in getattr(type(cfg), "NEW_FIELDS_OMITTED_WHEN_NONE", ()):
        if out.get(name, 0) is None:
            del out[name]
    fields = {f.name: f for f in dataclasses.fields(cfg)}
    for block, always in registry.flat_blocks(type(cfg)).items():
        default = dataclasses.asdict(registry.field_default(fields[block]))
        for k, v in out.pop(block).items():
            if k in always or v != default[k]:
                out[k] = v
    return out


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def component_config(kind: str, spec: ComponentSpec) -> Any:
    """The frozen config dataclass of a component: the one validated when the experiment was loaded,
    else rebuilt from its resolved dict (a spec read back from a record or sent to another process)."""
    if spec.built is not None:
        return spec.built
    entry = registry.get(kind, spec.name)
    return registry.build_config(entry.config_cls, spec.config, where=f"{kind} {spec.id!r}")
