"""Reading what users hand to tokxfer: YAML files and values, and the files an experiment names.

Everything here treats its input as untrusted and answers a bad one with a one-line message that
names the file (or field) and what was expected:

* :func:`load_yaml` is the one YAML loader of the project (experiments, ``key=value`` overrides,
  leaderboard specs, paper numbers, ``--slurm-param`` values). It is ``yaml.safe_load`` plus three
  refusals: a mapping key given twice (YAML would silently keep the last), aliases that expand to
  more than :data:`MAX_YAML_NODES` nodes (a "billion laughs" bomb of 2 KB), and nesting deeper
  than :data:`MAX_YAML_DEPTH`.
* :func:`read_text_file` reads a YAML file: a regular file, at most :data:`MAX_YAML_BYTES`, UTF-8.
* :func:`check_input_file` and :func:`check_corpus_head` check a named resource without reading
  more than its first block (never a device file to its end).
* :func:`check_model_dir` checks that a local source model folder holds a model.

Example:
    >>> load_yaml("seeds: [1, 2]")
    {'seeds': [1, 2]}
    >>> load_yaml("seeds: [1]\\nseeds: [2]")
    Traceback (most recent call last):
    ...
    harness.inputs.YAMLInputError: line 2: duplicate key 'seeds' (first at line 1); give each key once

Names that become file names, and paths that must stay inside a folder: experiment names,
leaderboard spec names and trial ids come from files a user (or someone else) wrote; each becomes one
path component under a folder tokxfer owns (``RUNS_DIR/<experiment>/``, ``--out/<spec>.md``,
``records/<trial_id>.json``). :func:`name_problem` says why a text cannot be such a component, and
:func:`require_inside` checks, after resolving every link, that a path tokxfer is about to write or
delete lies inside the folder it belongs to.
"""

from __future__ import annotations

import codecs
import os
import stat
from pathlib import Path
from typing import Any

import yaml
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, SequenceNode

from harness.errors import TokxferError

__all__ = [
    "MAX_YAML_BYTES",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "CORPUS_HEAD_BYTES",
    "YAMLInputError",
    "InputFileError",
    "load_yaml",
    "one_line",
    "read_text_file",
    "file_kind",
    "check_input_file",
    "check_corpus_head",
    "check_model_dir",
    "looks_local", "name_problem", "check_name", "inside", "require_inside", "UnsafePathError"
]

MAX_YAML_NODES = 100_000
"""Most nodes a YAML document may hold once its aliases are expanded. The largest packaged config
has well under 1,000; configs are written by hand, so 100x that is room to spare, while an alias
bomb (each level repeating the previous one 9 times) reaches it in 6 levels instead of expanding
to 10^9 nodes that deep-copying, hashing or printing the config would then walk."""
MAX_YAML_DEPTH = 64
"""Deepest nesting of lists and mappings. Packaged configs nest 6 levels; the limit keeps the
recursive composer (and every recursive walk of the config after it) far from Python's recursion
limit, so ``[[[[…]]]]`` is an error naming the line, not an internal error."""
MAX_YAML_BYTES = 8 * 1024 * 1024
"""Largest YAML file read. Every file is read whole; the largest packaged one is a few KB, and a
hand-written config of 8 MB is certainly something else (a corpus passed by mistake)."""
CORPUS_HEAD_BYTES = 64 * 1024
"""How much of a corpus ``validate`` reads to tell text from binary: enough for hundreds of lines,
little enough that checking every corpus of a grid costs nothing. The full UTF-8 check runs when
a trial reads the corpus (:func:`harness.run.resources.check_corpus`)."""


class YAMLInputError(yaml.YAMLError):
    """A YAML text that parses but is refused: a duplicate key, an alias bomb, too deep nesting.

    A :class:`yaml.YAMLError`, so every ``except yaml.YAMLError`` that reports a file's bad YAML
    reports these too; the message is one line and starts with the line number.
    """


class InputFileError(TokxferError, ValueError):
    """A named file is missing, not a regular file, too large, empty, or not text."""


def one_line(e: BaseException) -> str:
    """An exception's message with its whitespace (PyYAML's multi-line marks) collapsed."""
    return " ".join(str(e).split())


class _Loader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses duplicate keys and bounds alias expansion and nesting."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, int] = {}  # id(node) -> nodes it expands to (aliases counted in full)

    def compose_node(self, parent: Any, index: Any) -> Any:
        mark = self.peek_event().start_mark
        alias = self.check_event(AliasEvent)
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise YAMLInputError(f"line {mark.line + 1}: nested deeper than {MAX_YAML_DEPTH} levels")
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        size = self._sizes.get(id(node))
        if size is None:
            if alias:  # an alias to a node still being composed: the node would contain itself
                raise YAMLInputError(f"line {mark.line + 1}: an alias refers to a node that contains it")
            if isinstance(node, SequenceNode):
                size = 1 + sum(self._sizes[id(n)] for n in node.value)
            elif isinstance(node, MappingNode):
                size = 1 + sum(self._sizes[id(k)] + self._sizes[id(v)] for k, v in node.value)
            else:
                size = 1
            self._sizes[id(node)] = size
        if size > MAX_YAML_NODES:
            raise YAMLInputError(
                f"line {mark.line + 1}: aliases expand to more than {MAX_YAML_NODES} values "
                f"(an alias bomb?); write the values out instead of nesting aliases"
            )
        return node

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, MappingNode):
            first: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # '<<' merges: explicit keys override them
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = key in first
                except TypeError:  # unhashable: PyYAML's own error follows
                    continue
                if seen:
                    raise YAMLInputError(
                        f"line {key_node.start_mark.line + 1}: duplicate key {key!r} (first at line {first[key]}); "
                        f"give each key once"
                    )
                first[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """Parse one YAML document (values only) with :class:`_Loader`.

    Raises:
        yaml.YAMLError: invalid YAML, or a :class:`YAMLInputError` (duplicate key, alias
            expansion over :data:`MAX_YAML_NODES`, nesting over :data:`MAX_YAML_DEPTH`).

    Example:
        >>> load_yaml("a: &x [1, 2]\\nb: *x")
        {'a': [1, 2], 'b': [1, 2]}
    """
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def file_kind(path: str | os.PathLike) -> str | None:
    """What a path is when it is not a regular file (``"a directory"``, ``"a character device"`` …),
    ``"missing"`` when nothing is there, ``None`` for a regular file (symlinks are followed).

    Example:
        >>> file_kind("/dev/null"), file_kind("/")
        ('a character device', 'a directory')
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a broken symlink" if os.path.islink(path) else "missing"
    if stat.S_ISREG(mode):
        return None
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe"),
                       (stat.S_ISSOCK, "a socket")):  # fmt: skip
        if test(mode):
            return name
    return "not a regular file"


def read_text_file(path: str | os.PathLike, what: str) -> str:
    """The text of a YAML file: a regular file of at most :data:`MAX_YAML_BYTES` bytes of UTF-8.

    Args:
        path: the file.
        what: what it is, for messages (``"experiment file"``, ``"leaderboard spec"`` …).

    Raises:
        InputFileError: naming the file and what is wrong (``not found`` when it is missing).
    """
    path = Path(path)
    kind = file_kind(path)
    if kind == "missing":
        raise InputFileError(f"{path}: {what} not found")
    if kind is not None:
        raise InputFileError(f"{path}: {what} is {kind}, not a file")
    size = path.stat().st_size
    if size > MAX_YAML_BYTES:
        raise InputFileError(f"{path}: {what} is {size} bytes; a YAML file may have at most {MAX_YAML_BYTES}")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputFileError(f"{path}: not UTF-8 text ({e})") from None


def check_input_file(value: str | os.PathLike, field: str, *, missing_ok: bool = False) -> Path:
    """A file an experiment names (dictionary, word vectors, corpus): it exists and is a regular,
    non-empty file. Nothing is read.

    Args:
        value: the path.
        field: the config field, for messages.
        missing_ok: accept a path where nothing is (yet): ``validate`` refuses what is there and
            wrong, while data that a download or another machine provides may be missing here.

    Raises:
        InputFileError: ``<field>: <path> is a directory, not a file`` and the like.
    """
    path = Path(value).expanduser()
    kind = file_kind(path)
    if kind == "missing":
        if missing_ok:
            return path
        raise InputFileError(f"{field}: file not found: {path}")
    if kind is not None:
        raise InputFileError(f"{field}: {path} is {kind}, not a file")
    if path.stat().st_size == 0:
        raise InputFileError(f"{field}: {path} is empty")
    return path


def check_corpus_head(value: str | os.PathLike, field: str, head: int = CORPUS_HEAD_BYTES, *,
                      missing_ok: bool = False) -> Path:  # fmt: skip
    """A corpus an experiment names: a regular, non-empty file whose first ``head`` bytes are text
    (no NUL byte, valid UTF-8 up to a character cut by the end of the block). ``missing_ok`` as in
    :func:`check_input_file`.

    Raises:
        InputFileError: naming the field, the file and what it is (``binary`` with the offset of the
            first NUL or invalid byte).

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "c.bin"
        >>> _ = p.write_bytes(b"ab\\x00cd")
        >>> check_corpus_head(p, "targets.0.corpus")
        Traceback (most recent call last):
        ...
        harness.inputs.InputFileError: targets.0.corpus: ... is binary, not a text corpus (a NUL byte at offset 2)
    """
    path = check_input_file(value, field, missing_ok=missing_ok)
    if missing_ok and file_kind(path) == "missing":
        return path
    with open(path, "rb") as f:
        block = f.read(head)
    nul = block.find(b"\0")
    if nul >= 0:
        raise InputFileError(f"{field}: {path} is binary, not a text corpus (a NUL byte at offset {nul})")
    try:
        codecs.getincrementaldecoder("utf-8")(errors="strict").decode(block, final=len(block) < head)
    except UnicodeDecodeError as e:
        raise InputFileError(
            f"{field}: {path} is not UTF-8 text (invalid byte at offset {e.start}: {e.reason})"
        ) from None
    return path


def looks_local(name: str) -> bool:
    """Whether a model/tokenizer name is meant as a local path (absolute, ``./``, ``../``, ``~``, a
    hidden name, more than one ``/`` or a backslash); hub ids are ``name`` or ``org/name``.

    Example:
        >>> looks_local("/etc"), looks_local("./m"), looks_local("FacebookAI/xlm-roberta-base")
        (True, True, False)
    """
    return name.startswith(("/", "./", "../", "~", ".")) or name.count("/") > 1 or "\\" in name


def check_model_dir(value: str | os.PathLike, field: str = "source.model", *, missing_ok: bool = False) -> None:
    """A local source model: a directory with ``config.json`` and weights (``*.safetensors`` or
    ``*.bin``). A name that is not on disk and does not look like a path passes (a hub id), and so
    does a missing path with ``missing_ok`` (see :func:`check_input_file`).

    Raises:
        InputFileError: naming the field, the path and what is missing.
    """
    path = Path(value).expanduser()
    kind = file_kind(path)
    if kind == "missing":
        if looks_local(str(value)) and not missing_ok:
            raise InputFileError(f"{field}: {path} does not exist (a local model directory was meant)")
        return
    if kind is None:
        raise InputFileError(f"{field}: {path} is a file; expected a model directory (config.json and weights)")
    if kind != "a directory":
        raise InputFileError(f"{field}: {path} is {kind}; expected a model directory (config.json and weights)")
    if not (path / "config.json").is_file():
        raise InputFileError(f"{field}: {path}: not a model directory (no config.json)")
    if not any(path.glob("*.safetensors")) and not any(path.glob("*.bin")):
        raise InputFileError(
            f"{field}: {path}: model directory has no weights (*.safetensors or *.bin), so no embeddings to transfer"
        )


# --------------------------------------------------------------------------------------------
# names and paths

MAX_NAME = 200


class UnsafePathError(TokxferError, ValueError):
    """A name or path would leave the folder it belongs to; the message names both."""


def name_problem(name: Any) -> str | None:
    """Why ``name`` cannot be a single file or folder name tokxfer writes, or ``None`` when it can.

    Refused: non-text, empty or blank names, ``.``/``..``, path separators, a leading ``.`` or
    ``-`` (hidden files, names read as options), control characters, surrounding spaces, more
    than 200 characters.

    Example:
        >>> name_problem(".hidden"), name_problem("a/b"), name_problem("ok-1.2")
        ("it starts with '.'", "it is '.' or '..' or contains a path separator", None)
    """
    if not isinstance(name, str):
        return f"it is a {type(name).__name__}, not text"
    if not name.strip():
        return "it is empty"
    if name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        return "it is '.' or '..' or contains a path separator"
    if name[0] in ".-":
        return f"it starts with {name[0]!r}"
    if name != name.strip():
        return "it has leading or trailing spaces"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "it contains control characters"
    if len(name) > MAX_NAME:
        return f"it is longer than {MAX_NAME} characters"
    return None


def check_name(name: Any, what: str) -> str:
    """``name`` if :func:`name_problem` finds nothing, else :class:`UnsafePathError` naming ``what``.

    Example:
        >>> check_name("qs", "spec name")
        'qs'
    """
    why = name_problem(name)
    if why is not None:
        raise UnsafePathError(f"{what} {name!r} cannot be a file name ({why}); use letters, digits and - _ . +")
    return name


def inside(path: str | os.PathLike, folder: str | os.PathLike, *, resolve_folder: bool = True) -> bool:
    """Whether ``path`` lies in ``folder`` (or is it) once resolved (links, ``..``).

    Args:
        path: the path to check (resolved).
        folder: the folder it must lie in; resolved too unless ``resolve_folder`` is false (then it
            must already be the real path: a folder that is itself a link then does not count as itself).

    Example:
        >>> inside("/tmp/a/../b", "/tmp/a")
        False
    """
    real = Path(os.path.realpath(path))
    base = Path(os.path.realpath(folder)) if resolve_folder else Path(folder)
    return real == base or base in real.parents


def require_inside(path: str | os.PathLike, folder: str | os.PathLike, what: str, *,
                   resolve_folder: bool = True) -> Path:
    """``Path(path)`` if it lies in ``folder`` after resolving (see :func:`inside`), else
    :class:`UnsafePathError` naming both.

    Example:
        >>> require_inside("/tmp/x/y.md", "/tmp/x", "--out")
        PosixPath('/tmp/x/y.md')
    """
    if not inside(path, folder, resolve_folder=resolve_folder):
        raise UnsafePathError(
            f"{what}: {path} resolves to {os.path.realpath(path)}, outside {folder} (a symbolic link on the way?); "
            f"refusing to write or delete there"
        )
    return Path(path)
