"""One registry for methods, encodings and tasks.

Built-ins and third-party plugins are found the same way: through the entry-point groups
``tokxfer.methods``, ``tokxfer.encodings``, ``tokxfer.tasks`` and ``tokxfer.stages``. tokxfer's own
``pyproject.toml`` declares its packages ``methods``, ``methods.encodings`` and ``tasks`` there; each
package's ``__init__`` imports every module explicitly, so loading the entry point registers them
all. The registry loads every entry point on first lookup (tokxfer's own first), so nothing depends
on who imported what first, and the harness itself never names the built-in packages. A Python
file passed with ``--plugin`` registers the same way, with the same decorators.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class MyConfig:
    ...     scale: float = 1.0
    >>> @register_method("doc-example", config=MyConfig, description="an example")
    ... class MyMethod:
    ...     def __init__(self, config): self.config = config
    ...     def initialize(self, inputs, rng): ...
    >>> get("method", "doc-example").config_cls is MyConfig
    True
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.metadata
import importlib.util
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.errors import TokxferError, UserInputError

KINDS = ("method", "encoding", "task", "stage")
ENTRY_POINT_GROUPS = {
    "method": "tokxfer.methods",
    "encoding": "tokxfer.encodings",
    "task": "tokxfer.tasks",
    "stage": "tokxfer.stages",
}
DISTRIBUTION = "tokxfer"
"""The distribution whose entry points are the built-ins (loaded before any other plugin's)."""

MAX_SEED = 2**32 - 1
"""Largest seed (trial seeds, the world's seed, every config field named ``seed`` or ``*_seed``):
the range every seeded library accepts (numpy's legacy ``RandomState``, which some libraries still
call, refuses larger seeds); component seeds are derived from it by ``SeedSequence``."""
MAX_VOCAB_SIZE = 2_000_000
"""Largest vocabulary a tokenizer may be trained to, a source model pretrained with, or a grid extend
by. The largest vocabularies in use are about 256k (Gemma, mT5 250k); a 10^9 vocabulary would need
an embedding matrix of 10^9 x hidden floats (terabytes) and fail hours into a trial."""
MAX_INT_SETTING = 2**63 - 1
"""Largest magnitude of an integer setting: torch, numpy and sqlite hold integers in 64 bits, and a
larger value overflows (or raises) there, hours into a trial instead of at ``validate``."""


class RegistryError(TokxferError, KeyError):
    """Unknown or duplicate registry name."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0])


@dataclass(frozen=True)
class Entry:
    """A registered object: its name, class, config dataclass and one-line description."""

    kind: str
    name: str
    cls: type
    config_cls: type
    description: str
    origin: str

    def make(self, config: Any = None) -> Any:
        """Instantiate with a config (a config-dataclass instance, a dict of overrides, or None)."""
        if config is None:
            config = self.config_cls()
        elif isinstance(config, dict):
            config = build_config(self.config_cls, config, where=f"{self.kind} '{self.name}'")
        return self.cls(config)


_REGISTRY: dict[str, dict[str, Entry]] = {k: {} for k in KINDS}
_loaded = {"entry_points": False}


def _register(kind: str, name: str, config: type, description: str | None) -> Callable[[type], type]:
    if not dataclasses.is_dataclass(config):
        raise TypeError(f"register_{kind}('{name}'): config must be a dataclass, got {config!r}")

    def deco(cls: type) -> type:
        if name in _REGISTRY[kind]:
            prev = _REGISTRY[kind][name]
            raise RegistryError(
                f"{kind} '{name}' is already registered by {prev.origin}; refusing to replace it with "
                f"{cls.__module__}.{cls.__qualname__} (choose another name)"
            )
        doc = description or ((cls.__doc__ or "").strip().splitlines() or [""])[0]
        _REGISTRY[kind][name] = Entry(kind, name, cls, config, doc, f"{cls.__module__}.{cls.__qualname__}")
        cls.registry_name = name
        cls.config_cls = config
        return cls

    return deco


def register_method(name: str, *, config: type, description: str | None = None) -> Callable[[type], type]:
    """Register an :class:`~harness.protocols.EmbeddingInitializer` under ``name``."""
    return _register("method", name, config, description)


def register_encoding(name: str, *, config: type, description: str | None = None) -> Callable[[type], type]:
    """Register a :class:`~harness.protocols.LanguageEncoding` under ``name``."""
    return _register("encoding", name, config, description)


def register_task(name: str, *, config: type, description: str | None = None) -> Callable[[type], type]:
    """Register a :class:`~harness.protocols.Task` under ``name``."""
    return _register("task", name, config, description)


def register_stage(name: str, *, config: type, description: str | None = None) -> Callable[[type], type]:
    """Register an adaptation stage (e.g. ``lapt``) that runs between initialization and the task."""
    return _register("stage", name, config, description)


def code_hash(kind: str, name: str) -> str:
    """sha256 over the Python source a registered component's results depend on (memoized per process).

    The component's top-level package (every ``*.py`` under it: ``methods/`` for a built-in method,
    whose private helpers it shares) or, for a plugin module outside a package, its file; plus the
    harness modules a method's numbers are computed with (:data:`RESULT_HELPERS`: canonical forms,
    word splitting, seeding, random rows). Part of the init
    cache key, so a change to a method's code never serves a mapping computed by the old code (any
    edit counts, a comment too: a cache miss costs time, a stale hit costs correctness).
    """
    import hashlib
    import sys

    key = (kind, name)
    if key in _CODE_HASHES:
        return _CODE_HASHES[key]
    module = sys.modules[get(kind, name).cls.__module__]
    top = sys.modules.get(module.__name__.split(".")[0], module)
    if getattr(top, "__path__", None):
        files = sorted(p for d in top.__path__ for p in Path(d).rglob("*.py"))
    else:
        files = [Path(module.__file__)]
    files += [Path(__file__).with_name(name) for name in RESULT_HELPERS]
    sources = tuple(files)
    if sources not in _SOURCE_HASHES:  # the built-in methods share one package: read it once
        h = hashlib.sha256()
        for f in sources:
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
        _SOURCE_HASHES[sources] = h.hexdigest()[:16]
    _CODE_HASHES[key] = _SOURCE_HASHES[sources]
    return _CODE_HASHES[key]


RESULT_HELPERS = ("vocab.py", "families.py", "words.py", "seeding.py", "random_rows.py")
"""The harness files every method's output may depend on, hashed into :func:`code_hash` (``families.py``
holds the canonical forms behind ``harness.vocab``: an edit there must not serve an old initialization)."""
_CODE_HASHES: dict[tuple[str, str], str] = {}
_SOURCE_HASHES: dict[tuple[Path, ...], str] = {}


def _imported_from(path: Path) -> str | None:
    """The name of an already imported module whose file is ``path`` (a plugin file imported as a module
    elsewhere, e.g. from ``sys.path``, has registered its names once; loading it again would collide)."""
    resolved = path.resolve()
    for name, module in list(sys.modules.items()):
        f = getattr(module, "__file__", None)
        if f and f.endswith(path.name) and Path(f).resolve() == resolved:
            return name
    return None


def load_builtins() -> None:
    """Load every entry point of the four groups (idempotent): tokxfer's built-ins, then plugins.

    Raises:
        PluginError: an entry point cannot be imported (naming it and its distribution), or the
            installed tokxfer metadata declares no entry points (an install older than the
            ``pyproject.toml`` it runs from: reinstall with ``pip install -e .``).
    """
    if _loaded["entry_points"]:
        return
    _loaded["entry_points"] = True
    found = [(group, ep) for group in ENTRY_POINT_GROUPS.values() for ep in importlib.metadata.entry_points(group=group)]
    # tokxfer's own first: a plugin that re-registers a built-in name is the one blamed
    found.sort(key=lambda item: _dist_name(item[1]) != DISTRIBUTION)
    if not any(_dist_name(ep) == DISTRIBUTION for _, ep in found):
        _loaded["entry_points"] = False
        raise PluginError(
            f"no built-in methods, encodings, tasks or stages: the installed {DISTRIBUTION!r} metadata declares "
            f"none of the entry-point groups {', '.join(ENTRY_POINT_GROUPS.values())} (an install older than its "
            f"pyproject.toml, or none at all); run `pip install -e .` in the tokxfer checkout"
        )
    for group, ep in found:
        try:
            ep.load()  # the module registers itself with the decorators
        except Exception as e:
            raise PluginError(
                f"entry point {ep.name} = {ep.value} (group {group}, distribution {_dist_name(ep)}): "
                f"{type(e).__name__}: {e}"
            ) from e


def _dist_name(ep: importlib.metadata.EntryPoint) -> str | None:
    dist = getattr(ep, "dist", None)
    return None if dist is None else dist.metadata["Name"]


class PluginError(TokxferError, ImportError):
    """A ``--plugin`` file is missing, does not compile, fails to import, or registers a taken name."""


def load_plugin(path: str | Path) -> None:
    """Load a Python file that registers methods/encodings/tasks (``--plugin FILE``).

    Built-ins are loaded first, so a plugin that re-registers a built-in name is the one blamed.

    Raises:
        PluginError: naming the file and what went wrong (missing, syntax error with its line,
            import error, a name already registered).
    """
    path = Path(path)
    where = f"--plugin {path}"
    if not path.is_file():
        raise PluginError(f"{where}: file not found" if not path.exists() else f"{where}: not a file")
    load_builtins()
    import hashlib

    # keyed by the file's resolved path: two plugin files with the same name are different plugins
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
    mod_name = f"tokxfer_plugin_{path.stem}_{digest}"
    if mod_name in sys.modules or _imported_from(path) is not None:  # its registrations exist already
        return
    try:
        source = path.read_text(encoding="utf-8")
        code = compile(source, str(path), "exec")
    except SyntaxError as e:
        raise PluginError(f"{where}: syntax error at line {e.lineno}: {e.msg}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise PluginError(f"{where}: cannot read it ({e})") from None
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    before = {k: dict(v) for k, v in _REGISTRY.items()}
    try:
        exec(code, module.__dict__)
    except BaseException as e:
        del sys.modules[mod_name]
        for k in KINDS:  # a half-loaded plugin leaves nothing registered
            _REGISTRY[k] = before[k]
        if isinstance(e, KeyboardInterrupt):
            raise
        if isinstance(e, RegistryError):
            raise PluginError(f"{where}: {e}") from None
        line = _plugin_line(e, path)
        raise PluginError(f"{where}: failed while loading{line}: {type(e).__name__}: {e}") from None


def _plugin_line(e: BaseException, path: Path) -> str:
    """`` (line N)`` of the innermost frame of ``e`` inside the plugin file, if any."""
    import traceback

    lines = [f.lineno for f in traceback.extract_tb(e.__traceback__) if Path(f.filename) == path]
    return f" (line {lines[-1]})" if lines else ""


def names(kind: str) -> list[str]:
    """Sorted registered names of a kind."""
    load_builtins()
    return sorted(_REGISTRY[kind])


def entries(kind: str) -> list[Entry]:
    """Registered entries of a kind, sorted by name."""
    load_builtins()
    return [_REGISTRY[kind][n] for n in sorted(_REGISTRY[kind])]


def get(kind: str, name: str) -> Entry:
    """Look up a registered entry; an unknown name raises with close matches."""
    if kind not in KINDS:
        raise ValueError(f"unknown registry kind {kind!r}; expected one of {KINDS}")
    load_builtins()
    try:
        return _REGISTRY[kind][name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_REGISTRY[kind]), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise RegistryError(
            f"unknown {kind} {name!r}{hint} (registered: {', '.join(sorted(_REGISTRY[kind])) or 'none'})"
        ) from None


def check_seed(value: Any, where: str) -> int:
    """A seed: an integer in ``[0, MAX_SEED]`` (``where`` names it in the error).

    Example:
        >>> check_seed(-1, "seeds.0")
        Traceback (most recent call last):
        ...
        harness.errors.UserInputError: seeds.0: expected a seed, an integer in [0, 4294967295], got -1
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise UserInputError(f"{where}: expected a seed, an integer in [0, {MAX_SEED}], got {value!r}")
    return value


def module_reads(cls: type, fields: Sequence[str]) -> list[str] | None:
    """Which of ``fields`` the module defining ``cls`` reads as ``inputs.<field>`` (from its source text;
    ``None`` when the source cannot be read). For methods that do not declare what they read.

    Example:
        >>> module_reads(get("method", "clp").cls, ["helper_model", "dictionary"])
        ['helper_model']
    """
    import inspect
    import re

    try:
        src = inspect.getsource(sys.modules[cls.__module__])
    except (OSError, TypeError, KeyError):
        return None
    return [f for f in fields if re.search(rf"\binputs\.{f}\b", src)]


def method_needs(cls: type) -> tuple | None:
    """The requirements a method class declares (its ``needs``: :class:`harness.protocols.Need` each),
    ``None`` when it declares none.

    Example:
        >>> [n.inputs for n in method_needs(get("method", "clp").cls)]
        [('helper_model',)]
    """
    needs = getattr(cls, "needs", None)
    return None if needs is None else tuple(needs)


def reads_input(cls: type, config: Any, field: str) -> bool:
    """Whether method ``cls`` with ``config`` reads the input ``field``: from its declared needs (one
    that holds under ``config`` names the field), else from its module's source (``inputs.<field>``;
    ``True`` when the source cannot be read, so a plugin that says nothing gets the input).

    Example:
        >>> omp = get("method", "omp")
        >>> reads_input(omp.cls, omp.config_cls(donor="helper"), "helper_model"), reads_input(omp.cls, omp.config_cls(), "helper_model")
        (True, False)
    """
    needs = method_needs(cls)
    if needs is not None:
        return any(field in n.inputs and n.applies(config) for n in needs)
    found = module_reads(cls, [field])
    return True if found is None else bool(found)


def is_seed_field(name: str) -> bool:
    """Config fields named ``seed`` or ``*_seed`` hold seeds (checked by :func:`check_seed`)."""
    return name == "seed" or name.endswith("_seed")


def build_config(config_cls: type, values: dict, *, where: str = "config") -> Any:
    """Build a config dataclass from a dict; unknown keys are errors naming the key and place.

    Nested dataclass fields accept dicts. Type coercion: ints are accepted for float fields,
    lists for tuple fields. Refused for every config class: NaN and infinite numbers, integers
    beyond 64 bits (:data:`MAX_INT_SETTING`), and fields named ``seed`` / ``*_seed`` outside
    ``[0, MAX_SEED]``.
    """
    if not isinstance(values, dict):
        raise UserInputError(f"{where}: expected a mapping of config values, got {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    values = _nest_flat_keys(config_cls, values, fields, where)
    unknown = [k for k in values if k not in fields]
    if unknown:
        k = unknown[0]
        close = difflib.get_close_matches(k, list(fields), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UserInputError(
            f"{where}: unknown key {k!r}{hint} (known keys: {', '.join(sorted(fields)) or 'none'})"
        )
    kwargs = {}
    hints = _type_hints(config_cls)
    for k, v in values.items():
        base = field_default(fields[k]) if isinstance(v, dict) else None
        if dataclasses.is_dataclass(base) and not isinstance(base, type):
            # a nested block overrides its field's default key by key (a task's own training
            # defaults stay in force for the keys the block does not name)
            v = {**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)}, **v}
        kwargs[k] = _coerce(hints.get(k), v, f"{where}.{k}")
        if is_seed_field(k) and kwargs[k] is not None:
            check_seed(kwargs[k], f"{where}.{k}")
    try:
        return config_cls(**kwargs)
    except (TypeError, ValueError) as e:
        raise UserInputError(f"{where}: {e}") from None


def field_default(f: dataclasses.Field) -> Any:
    """The default value of a dataclass field (calling its factory), or ``dataclasses.MISSING``."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def flat_blocks(config_cls: type) -> dict[str, tuple[str, ...]]:
    """A config class's ``FLAT_BLOCKS``: nested dataclass fields whose keys are stored flat.

    ``FLAT_BLOCKS = {"train": ("learning_rate", ...)}`` on a config class means: the field ``train``
    holds a nested config dataclass; its keys may also be written at the top level (``epochs: 3``
    as well as ``train: {epochs: 3}``, never both); and the resolved trial config stores them flat,
    always the listed keys and any other key only when it differs from the block's default (see
    :func:`harness.run.config.resolved_fields`), so that trial ids stay those of the flat layout.
    """
    return dict(getattr(config_cls, "FLAT_BLOCKS", None) or {})


def _nest_flat_keys(config_cls: type, values: dict, fields: dict, where: str) -> dict:
    """Move top-level keys of a ``FLAT_BLOCKS`` block into the block (the flat layout)."""
    blocks = flat_blocks(config_cls)
    if not blocks:
        return values
    out = dict(values)
    for block in blocks:
        base = field_default(fields[block])
        sub_names = {f.name for f in dataclasses.fields(base)} - set(fields)
        flat = {k: out.pop(k) for k in list(out) if k in sub_names}
        if not flat:
            continue
        nested = out.get(block)
        if nested is None:
            nested = {}
        elif not isinstance(nested, dict):
            raise UserInputError(f"{where}.{block}: expected a mapping of config values, got {nested!r}")
        both = sorted(set(flat) & set(nested))
        if both:
            raise UserInputError(
                f"{where}: {both[0]!r} is given both at the top level and in {block!r}; give it once (as {block}.{both[0]})"
            )
        out[block] = {**nested, **flat}
    return out


def _type_hints(cls: type) -> dict:
    import typing

    try:
        return typing.get_type_hints(cls)
    except Exception:  # unresolved forward refs: no coercion
        return {}


_FLOAT_TEXT = __import__("re").compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _type_name(tp: Any) -> str:
    import typing

    if typing.get_origin(tp) is typing.Literal:
        return " or ".join(repr(a) for a in typing.get_args(tp))
    return {int: "an integer", float: "a number", bool: "true or false", str: "a text", dict: "a mapping",
            list: "a list"}.get(tp, getattr(tp, "__name__", str(tp)))


def _coerce(tp: Any, v: Any, where: str) -> Any:
    """Check ``v`` against the field type ``tp`` (simple types, Literal, Optional, tuples) and coerce.

    Coercions: an integer for a float field; a list for a tuple field; a number written as text
    for a float field (YAML 1.1 reads ``1e-3`` as a string). Anything else of the wrong type is a
    :class:`ValueError` naming the field, the expected type and the value.
    """
    # Stays whole: one branch per field type, in the order of the rules above; split, the coercion rules scatter.
    import types
    import typing

    if tp is None or tp is Any:
        return v
    if dataclasses.is_dataclass(tp):
        if isinstance(v, dict):
            return build_config(tp, v, where=where)
        if isinstance(v, tp):
            return v
        raise UserInputError(f"{where}: expected a mapping, got {v!r}")
    origin = typing.get_origin(tp)
    if origin in (typing.Union, getattr(types, "UnionType", None)):
        args = typing.get_args(tp)
        if v is None:
            if type(None) in args:
                return None
            raise UserInputError(f"{where}: expected {' or '.join(_type_name(a) for a in args)}, got null")
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _coerce(rest[0], v, where)
        for a in rest:  # the first member that accepts the value
            try:
                return _coerce(a, v, where)
            except ValueError:
                continue
        raise UserInputError(f"{where}: expected {' or '.join(_type_name(a) for a in rest)}, got {v!r}")
    if origin is typing.Literal:
        if v not in typing.get_args(tp):
            raise UserInputError(f"{where}: expected {_type_name(tp)}, got {v!r}")
        return v
    if origin is tuple:
        if not isinstance(v, (list, tuple)):
            raise UserInputError(f"{where}: expected a list, got {v!r}")
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(args[0], x, f"{where}.{i}") for i, x in enumerate(v))
        return tuple(v)
    if origin in (list, dict):
        if not isinstance(v, origin):
            raise UserInputError(f"{where}: expected {_type_name(origin)}, got {v!r}")
        return v
    if tp is bool:
        if not isinstance(v, bool):
            raise UserInputError(f"{where}: expected true or false, got {v!r}")
        return v
    if tp is int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise UserInputError(f"{where}: expected an integer, got {v!r}")
        if abs(v) > MAX_INT_SETTING:
            raise UserInputError(f"{where}: {v} is beyond the 64-bit range (at most {MAX_INT_SETTING} in magnitude)")
        return v
    if tp is float:
        text = v
        if isinstance(v, str) and _FLOAT_TEXT.fullmatch(v.strip()):
            v = float(v)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise UserInputError(f"{where}: expected a number, got {v!r}")
        try:
            x = float(v)
        except OverflowError:  # an integer beyond the float range
            x = math.inf
        if not math.isfinite(x):
            raise UserInputError(f"{where}: expected a finite number, got {text!r}")
        return x
    if tp is str:
        if not isinstance(v, str):
            raise UserInputError(f"{where}: expected a text, got {v!r}")
        return v
    if tp in (dict, list):
        if not isinstance(v, tp):
            raise UserInputError(f"{where}: expected {_type_name(tp)}, got {v!r}")
        return v
    return v
