"""Content-hashed, crash-safe cache directories shared by the harness.

Everything tokxfer builds that is expensive and deterministic (trained tokenizers, pretrained
source models, fastText vectors, generated worlds) lives in a directory named by the content
hash of *what it was built from*: the bytes of the input files, the resolved config and a code
version. Changing any input gives a new directory; nothing is ever invalidated in place.

A cache entry is built in a temporary sibling directory and renamed into place in one atomic
step, so a crash never leaves a half-written entry, and two processes building the same entry
at once are safe (the loser discards its copy and uses the winner's).

Example:
    >>> import tempfile
    >>> root = Path(tempfile.mkdtemp())
    >>> def build(d: Path) -> None:
    ...     (d / "answer.txt").write_text("42")
    >>> p = cached_dir("demo", {"question": "everything"}, build, root=root)
    >>> (p / "answer.txt").read_text()
    '42'
    >>> cached_dir("demo", {"question": "everything"}, build, root=root) == p
    True
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.errors import TokxferError
from harness.files import write_atomic

log = logging.getLogger("tokxfer")

__all__ = ["cache_root", "ensure_root", "cache_subdir", "is_cache_root", "adopt_root", "CacheError", "MARKER",
           "content_hash", "canonical_json", "file_hash", "cached_dir", "cache_target", "KEY_FILE", "CacheEntry",
           "list_entries", "remove_entries", "parse_age", "ProcessMemo"]

KEY_FILE = "tokxfer_cache_key.json"
"""Name of the file, inside every cache entry, that records the (canonicalized) key it was built from."""

_CHUNK = 1 << 20  # stream files in 1 MiB chunks: bounded memory for corpora of any size
_KIND_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
_HASH_DIR_CHARS = 20  # 80 bits of the sha256 in directory names: short, and collisions are negligible

# (resolved path, size, mtime_ns, inode) -> sha256 hex; a file is hashed once per process
# unless it changes. Keyed on metadata, so an edited file is rehashed.
_FILE_HASH_MEMO: dict[tuple[str, int, int, int], str] = {}


class ProcessMemo:
    """A bounded in-process memo: values computed once per key, the least recently used dropped
    beyond ``entries``; a ``None`` key is never memoized (the value is computed every time).

    Example:
        >>> memo = ProcessMemo(1)
        >>> memo.get("a", lambda: 1), memo.get("a", lambda: 2), memo.get("b", lambda: 3), memo.get("a", lambda: 4)
        (1, 1, 3, 4)
    """

    def __init__(self, entries: int) -> None:
        self.entries = entries
        self._values: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable | None, compute: Callable[[], Any]) -> Any:
        if key is None:
            return compute()
        if key in self._values:
            self._values.move_to_end(key)
            return self._values[key]
        value = self._values[key] = compute()
        while len(self._values) > self.entries:
            self._values.popitem(last=False)
        return value

    def clear(self) -> None:
        self._values.clear()

    def __len__(self) -> int:
        return len(self._values)


class CacheError(TokxferError, ValueError):
    """The cache location or a cache folder cannot be used as asked; the message names the folder."""


CACHE_ENV = ("TOKXFER_CACHE", "XDG_CACHE_HOME")
"""The environment variables that place the cache, in order of precedence."""
MARKER = ".tokxfer-cache"
"""The file that makes a folder a tokxfer cache: written when tokxfer creates the cache root (or by
``tokxfer cache init``); ``tokxfer cache ls | prune`` refuse a folder without it."""


def _env_dir(name: str) -> Path | None:
    """The absolute folder an environment variable names (``~`` expanded), ``None`` when unset or empty.

    Raises:
        CacheError: for a relative value, which would name a different folder in every process
            that runs from another directory.
    """
    value = os.environ.get(name)
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_absolute():
        raise CacheError(f"{name}={value!r}: the cache location must be an absolute path (or start with ~), "
                         f"e.g. {name}={Path.cwd() / value}")
    return Path(os.path.normpath(path))


def cache_root() -> Path:
    """The root of tokxfer's cache, as an absolute, normalized path.

    In order: ``$TOKXFER_CACHE`` if set and non-empty; else ``$XDG_CACHE_HOME/tokxfer`` if
    ``XDG_CACHE_HOME`` is set and non-empty; else ``~/.cache/tokxfer``. Both variables are honoured
    the same way: ``~`` is expanded, and a relative value is refused (:class:`CacheError`), since
    it would name a different folder for every process that runs from another directory.

    Read on every call (never cached), so tests can monkeypatch the environment variables; the
    command line calls it once at start so that a bad value stops a command before it does anything.

    Example:
        >>> cache_root().is_absolute()
        True
    """
    env = _env_dir("TOKXFER_CACHE")
    if env is not None:
        return env
    xdg = _env_dir("XDG_CACHE_HOME")
    if xdg is not None:
        return xdg / "tokxfer"
    return Path("~/.cache/tokxfer").expanduser()


_MARKED: set[str] = set()  # roots this process has seen marked (or created); checked once each


def is_cache_root(root: str | os.PathLike) -> bool:
    """Whether ``root`` is a folder tokxfer created as its cache (it holds :data:`MARKER`)."""
    marker = Path(root) / MARKER
    return marker.is_file() and not marker.is_symlink()


def _write_marker(root: Path, how: str) -> None:
    from harness.about import now_iso, package_version

    text = json.dumps({"tokxfer_cache": 1, how: now_iso(), "tokxfer_version": package_version()}) + "\n"
    write_atomic(root / MARKER, text)


def ensure_root(root: str | os.PathLike | None = None) -> Path:
    """The cache root, created (with its :data:`MARKER`) when it does not exist yet or is empty.

    Every writer of the cache goes through this (directly or through :func:`cached_dir`). A folder
    that exists, is not empty and has no marker (a cache of an older tokxfer, or a folder that is
    not a cache at all) is used as it is and never marked here: only ``tokxfer cache init`` adopts
    an existing folder, so ``tokxfer cache prune`` never deletes in a folder it was pointed at by mistake.

    Args:
        root: the cache root; :func:`cache_root` if None.

    Example:
        >>> import tempfile
        >>> r = ensure_root(Path(tempfile.mkdtemp()) / "c")
        >>> is_cache_root(r)
        True
    """
    root = Path(root if root is not None else cache_root()).expanduser()
    key = str(root)
    if key in _MARKED and (root / MARKER).is_file():
        return root
    if not root.exists():
        root.mkdir(parents=True, exist_ok=True)
    if is_cache_root(root):
        _MARKED.add(key)
    elif root.is_dir() and not any(root.iterdir()):
        _write_marker(root, "created")
        _MARKED.add(key)
    return root


def cache_subdir(kind: str, root: str | os.PathLike | None = None) -> Path:
    """``<root>/<kind>``, created (the root through :func:`ensure_root`): where writers put entries of ``kind``."""
    if not _KIND_RE.match(kind) or kind.startswith("."):
        raise ValueError(f"cache kind must match {_KIND_RE.pattern} and not start with '.', got {kind!r}")
    d = ensure_root(root) / kind
    d.mkdir(parents=True, exist_ok=True)
    return d


def file_hash(path: Path) -> str:
    """The sha256 hex digest of a file's contents, streamed in 1 MiB chunks.

    Args:
        path: a regular file.

    Returns:
        64 lowercase hex characters.

    Raises:
        FileNotFoundError: naming the file, if it does not exist.
        IsADirectoryError: if ``path`` is a directory (use :func:`content_hash`, which hashes trees).
    """
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise FileNotFoundError(f"cannot hash {str(path)!r}: no such file") from None
    if path.is_dir():
        raise IsADirectoryError(f"file_hash expects a file, got directory {str(path)!r}")
    memo_key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    cached = _FILE_HASH_MEMO.get(memo_key)
    if cached is not None:
        return cached
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    digest = h.hexdigest()
    _FILE_HASH_MEMO[memo_key] = digest
    return digest


def _tree_hash(path: Path) -> str:
    """sha256 over the sorted relative paths and contents of every file under a directory."""
    h = hashlib.sha256()
    for p in sorted(q for q in path.rglob("*") if q.is_file()):
        h.update(p.relative_to(path).as_posix().encode("utf-8") + b"\0")
        h.update(file_hash(p).encode("ascii") + b"\0")
    return h.hexdigest()


def _canonical(obj: Any, allow_nan: bool = False) -> Any:
    """Turn ``obj`` into plain JSON values; :class:`~pathlib.Path` values become content digests."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        if not allow_nan and not math.isfinite(obj):
            raise ValueError(f"content_hash cannot hash the non-finite float {obj!r}")
        return obj
    if isinstance(obj, Path):
        # Contents only, not the name: a moved or renamed file keeps its hash.
        if obj.is_dir():
            return {"__tree_sha256__": _tree_hash(obj)}
        return {"__file_sha256__": file_hash(obj)}
    if isinstance(obj, (bytes, bytearray)):
        return {"__bytes_sha256__": hashlib.sha256(obj).hexdigest()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        return {"__dataclass__": type(obj).__qualname__, **{k: _canonical(v, allow_nan) for k, v in fields.items()}}
    if isinstance(obj, Mapping):
        out = {}
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"content_hash needs string dict keys, got {k!r} ({type(k).__name__})")
            out[k] = _canonical(v, allow_nan)
        return out
    if isinstance(obj, (list, tuple)):
        return [_canonical(v, allow_nan) for v in obj]
    raise TypeError(
        f"content_hash cannot hash a {type(obj).__name__}; use dicts, lists, str, numbers, bool, None, Path or dataclasses"
    )


def canonical_json(obj: Any, *, ascii: bool = False, allow_nan: bool = False) -> str:
    """The canonical JSON text that :func:`content_hash` hashes (sorted keys, no spaces, files as digests).

    This is tokxfer's one canonical JSON form: cache keys, trial ids
    (:func:`harness.run.config.config_hash`) and record digests (:func:`harness.run.tracking.record_digest`)
    all hash it.

    Args:
        obj: see :func:`content_hash`.
        ascii: write non-ASCII characters as ``\\uXXXX`` escapes (trial ids were first defined on
            that text; it stays, so existing trial ids stay valid).
        allow_nan: accept NaN and infinities (written ``NaN``/``Infinity``, as records store them)
            instead of raising.

    Example:
        >>> canonical_json({"b": 1, "a": [1.5, None]})
        '{"a":[1.5,null],"b":1}'
        >>> canonical_json({"é": 1}, ascii=True) == '{"\\\\u00e9":1}'
        True
    """
    return json.dumps(_canonical(obj, allow_nan), sort_keys=True, separators=(",", ":"), ensure_ascii=ascii,
                      allow_nan=allow_nan)


def content_hash(obj: Any, *, ascii: bool = False, allow_nan: bool = False) -> str:
    """sha256 hex digest of ``obj``'s canonical JSON, with :class:`~pathlib.Path` values hashed by content.

    Dict key order does not matter; tuples and lists hash alike; ``1`` and ``1.0`` and ``True`` differ.
    A ``Path`` to a file contributes the sha256 of its bytes (streamed, never loaded at once), a
    ``Path`` to a directory the hash of its tree; the file *name* does not contribute.

    Args:
        obj: dicts with string keys, lists, tuples, str, int, float (finite), bool, None, bytes,
            ``Path`` or frozen dataclasses of those.
        ascii: see :func:`canonical_json`.
        allow_nan: see :func:`canonical_json`.

    Returns:
        64 lowercase hex characters.

    Raises:
        TypeError: for unsupported values (naming the type).
        FileNotFoundError: for a ``Path`` that does not exist (naming it).

    Example:
        >>> content_hash({"a": 1, "b": [2, 3]}) == content_hash({"b": (2, 3), "a": 1})
        True
    """
    return hashlib.sha256(canonical_json(obj, ascii=ascii, allow_nan=allow_nan).encode("utf-8")).hexdigest()


def cached_dir(kind: str, key_obj: Any, build_fn: Callable[[Path], None], *, root: Path | None = None) -> Path:
    """Return the cache directory for ``key_obj``, building it with ``build_fn`` if absent.

    The entry lives at ``<root>/<kind>/<hash>`` with ``root`` defaulting to :func:`cache_root`.
    On a miss, ``build_fn(tmp)`` fills a fresh temporary directory created next to the target; it
    is then renamed to the target atomically. If ``build_fn`` raises, the temporary directory is
    removed and nothing is cached. If another process finished the same entry meanwhile, ours is
    discarded and theirs returned. Every entry also holds :data:`KEY_FILE` with the canonical key.

    Args:
        kind: a subdirectory name such as ``"tokenizers"`` (letters, digits, ``._-``).
        key_obj: everything the contents depend on (see :func:`content_hash`).
        build_fn: writes the entry's files into the directory it is given.
        root: cache root; :func:`cache_root` if None.

    Returns:
        The path of the complete cache entry.

    Example:
        >>> import tempfile
        >>> calls = []
        >>> build = lambda d: calls.append(d)
        >>> root = Path(tempfile.mkdtemp())
        >>> a = cached_dir("x", {"k": 1}, build, root=root); b = cached_dir("x", {"k": 1}, build, root=root)
        >>> a == b and len(calls) == 1
        True
    """
    key_json, digest, target = _entry_address(kind, key_obj, root)
    if target.is_dir():  # renames are atomic: an existing target is always complete
        return target
    parent = cache_subdir(kind, target.parent.parent)
    with build_lock(parent.parent, kind, digest):
        if target.is_dir():  # built by the process we waited for
            return target
        return _build_entry(target, parent, key_json, build_fn)


def cache_target(kind: str, key_obj: Any, *, root: Path | None = None) -> Path:
    """Where the cache entry of ``key_obj`` lives (as :func:`cached_dir` would return it), built or not; builds
    nothing. The entry is complete once the directory exists (entries appear by an atomic rename).

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp())
        >>> where = cache_target("x", {"k": 1}, root=root)
        >>> where.is_dir(), cached_dir("x", {"k": 1}, lambda d: None, root=root) == where, where.is_dir()
        (False, True, True)
    """
    return _entry_address(kind, key_obj, root)[2]


def _entry_address(kind: str, key_obj: Any, root: Path | None) -> tuple[str, str, Path]:
    """The canonical key, its sha256 and the entry's directory (:func:`cached_dir`, :func:`cache_target`)."""
    if not _KIND_RE.match(kind):
        raise ValueError(f"cache kind must match {_KIND_RE.pattern}, got {kind!r}")
    key_json = canonical_json(key_obj)
    digest = hashlib.sha256(key_json.encode("utf-8")).hexdigest()
    return key_json, digest, Path(root if root is not None else cache_root()).expanduser() / kind / digest[:_HASH_DIR_CHARS]


@contextlib.contextmanager
def build_lock(root: str | os.PathLike, kind: str, name: str) -> Iterator[None]:
    """Hold the build lock of entry ``name`` of ``kind`` under cache root ``root`` (``<root>/.locks``) for the block.

    :func:`cached_dir` builds under it, and so do caches that write their own files (fastText models): two workers asking for the same uncached entry then build it once; the second waits (with a
    heartbeat) and finds it done.
    """
    if not _KIND_RE.match(kind):
        raise ValueError(f"cache kind must match {_KIND_RE.pattern}, got {kind!r}")
    locks = Path(root).expanduser() / LOCKS_DIR  # outside the kind folders: never listed or pruned as an entry
    locks.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _build_lock(locks / f"{kind}-{name[:_HASH_DIR_CHARS]}.lock", f"{kind} entry {name[:_HASH_DIR_CHARS]}"):
        yield


_HELD = threading.local()
"""The build locks this thread holds (re-entry by the same thread skips the lock)."""
LOCKS_DIR = ".locks"
"""Folder of the build locks under the cache root (dot-named: ``tokxfer cache ls`` skips it)."""


def _only_locks(path: Path) -> bool:
    """Whether ``path`` is a real folder holding nothing but build-lock files."""
    return (not path.is_symlink() and path.is_dir()
            and all(q.is_file() and not q.is_symlink() and q.name.endswith(".lock") for q in path.iterdir()))


def build_once(root: str | os.PathLike, kind: str, name: str, find: Callable[[], Any], build: Callable[[], Any]) -> Any:
    """``find()`` if it finds the entry (not ``None``), else ``build()`` under :func:`build_lock`, looking again
    once the lock is held: two workers wanting one uncached file entry build it once, the second waits and
    finds the first's. For caches that store a file rather than a :func:`cached_dir` folder.

    Example:
        >>> import tempfile
        >>> root, store = Path(tempfile.mkdtemp()), {}
        >>> build_once(root, "x", "k1", lambda: store.get("k1"), lambda: store.setdefault("k1", "built"))
        'built'
        >>> build_once(root, "x", "k1", lambda: store.get("k1"), lambda: "built again")
        'built'
    """
    found = find()
    if found is not None:
        return found
    with build_lock(root, kind, name):
        found = find()  # stored by the worker we waited for
        return found if found is not None else build()


QUIET_WAIT_S = 2.0
"""How long a process waits for another's build lock before saying so: two workers of a grid often ask
for one small entry (a memoized embedding, a tokenizer) a moment apart, and a warning for each such wait
buried the lines that matter; a longer wait is still said, with a heartbeat."""


def _lock_within(fd: int, seconds: float) -> bool:
    """Take the exclusive ``flock`` on ``fd`` if it comes free within ``seconds`` (polling); False if not."""
    import fcntl

    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


@contextlib.contextmanager
def _build_lock(path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` while one process builds an entry (others wait, then reuse it).

    Two workers of a grid asking for the same uncached source model would otherwise both build it
    (minutes each; only one result is kept). ``flock`` is released by the kernel when its holder
    dies, so a killed builder never blocks the next one. Where ``fcntl`` is missing the lock is skipped
    (the rename below still keeps entries whole).
    """
    try:
        import fcntl
    except ImportError:  # not POSIX: concurrent builders stay correct, only wasteful
        yield
        return
    held = _HELD.__dict__.setdefault("paths", set())
    if str(path) in held:  # this thread already builds this entry (a build that asks for itself): never self-deadlock
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    held.add(str(path))
    try:
        if not _lock_within(fd, QUIET_WAIT_S):  # said once, then a heartbeat while we wait: never a silent stall
            from harness import progress

            log.warning("waiting for another process building the %s (lock %s)", what, path)
            with progress.heartbeat(f"waiting for the {what}"):
                fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        held.discard(str(path))
        os.close(fd)  # releases the lock


def _build_entry(target: Path, parent: Path, key_json: str, build_fn: Callable[[Path], None]) -> Path:
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=parent))
    try:
        build_fn(tmp)
        (tmp / KEY_FILE).write_text(
            json.dumps(json.loads(key_json), indent=1, sort_keys=True, ensure_ascii=False) + "\n"
        )
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # a concurrent builder won; use its entry
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


# --------------------------------------------------------------------------------------------
# Listing and pruning (``tokxfer cache ls | prune``)

_KIND_NOTES = {
    "tokenizers": "trained tokenizer",
    "sources": "pretrained built-in source model",
    "world": "generated built-in world",
    "inits": "a trial's method output (mapping + info)",
    "alignments": "Tik-to-Tok word alignment",
    "wordvectors": "word-level fastText vectors",
    "wechsel": "word-tokenized corpus (WECHSEL's fastText input)",
    "inputs": "converted `tokxfer init` input (TSV parallel corpus as JSON lines, swapped dictionary)",
}


# What tokxfer writes under ``<root>/<kind>/``. Directory entries: a :func:`cached_dir` entry
# (``<20 hex>`` holding :data:`KEY_FILE`) or a built-in world (``<size>-s<seed>-<hash>`` holding
# ``world.json``). File entries of the kinds whose writers store single files (methods/_fasttext.py,
# methods/_tiktotok_knn.py, methods/_align.py, methods/_wordvectors.py). Temporary entries: ``.`` +
# the final name + ``.`` + a random suffix (``tempfile.mkstemp``/``mkdtemp`` beside the target).
_HEX = "[0-9a-f]"
_DIR_ENTRY_RE = re.compile(rf"^(?:{_HEX}{{{_HASH_DIR_CHARS}}}|[A-Za-z0-9_.-]+-s[0-9]+-{_HEX}{{12}})$")
_FILE_ENTRY_RES = {
    "fasttext": re.compile(rf"^(?:pretok-{_HEX}{{24}}\.txt|{_HEX}{{64}}\.bin|{_HEX}{{64}}\.vectors\.npz"
                           rf"|tokspace-{_HEX}{{32}}\.npz)$"),
    "alignments": re.compile(rf"^{_HEX}{{32}}\.npz$"),
    "wechsel": re.compile(rf"^words-{_HEX}{{24}}\.txt$"),
}
_DIR_MARKERS = (KEY_FILE, "world.json")  # harness.world.build.MANIFEST


_TMP_DIR_RE = re.compile(r"^\.(?P<final>.+)\.tmp-[A-Za-z0-9_]+$")  # mkdtemp(prefix=".<final>.tmp-")
_TMP_FILE_RE = re.compile(r"^\.(?P<final>.+?)\.[A-Za-z0-9_]{8}(?:\.tmp\.npz)?$")  # mkstemp(prefix=".<final>.")


def _temporary_of(name: str, directory: bool) -> str | None:
    """The final name a temporary entry stands for (``None``: not a temporary)."""
    m = (_TMP_DIR_RE if directory else _TMP_FILE_RE).match(name)
    return m.group("final") if m else None


def _owned(kind: str, path: Path, st: os.stat_result) -> bool:
    """Whether ``<root>/<kind>/<name>`` has the shape of something tokxfer wrote there."""
    import stat as _stat

    name = path.name
    if _stat.S_ISDIR(st.st_mode):
        final = _temporary_of(name, True)
        if final is not None:
            return bool(_DIR_ENTRY_RE.match(final))
        return bool(_DIR_ENTRY_RE.match(name)) and any((path / m).is_file() for m in _DIR_MARKERS)
    if _stat.S_ISREG(st.st_mode):
        kind_re = _FILE_ENTRY_RES.get(kind)
        if kind_re is None:
            return False
        final = _temporary_of(name, False)
        return bool(kind_re.match(final if final is not None else name))
    return False


@dataclasses.dataclass(frozen=True)
class CacheEntry:
    """One entry of the cache: a file or directory directly under ``<root>/<kind>/``.

    Attributes:
        kind: the subdirectory it lives in (``tokenizers``, ``fasttext``, ``inits`` …).
        path: its absolute path (``<root>/<kind>/<name>``, never resolved through a link).
        bytes: disk space it takes (allocated blocks, so sparse files count what they use; a link: the link).
        mtime: when it was built (modification time of the entry itself, seconds since the epoch).
        what: a short description (``fastText model``, ``pre-tokenized corpus`` …).
        partial: a temporary entry (name starting with ``.``): a build in progress, or one a crash left.
        owned: it has the shape of something tokxfer writes there (see ``_owned``); prune removes
            only these, and symbolic links (the link itself, never what it points to).
        link: a symbolic link (tokxfer never writes one).
    """

    kind: str
    path: Path
    bytes: int
    mtime: float
    what: str
    partial: bool
    owned: bool = True
    link: bool = False


def _disk_bytes(path: Path) -> int:
    def usage(st: os.stat_result) -> int:
        blocks = getattr(st, "st_blocks", None)
        return blocks * 512 if blocks is not None else st.st_size

    st = path.lstat()
    if not path.is_dir() or path.is_symlink():
        return usage(st)
    total = usage(st)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            try:
                total += usage(os.lstat(os.path.join(dirpath, name)))
            except FileNotFoundError:  # removed while we walked
                pass
    return total


def _what(kind: str, path: Path) -> str:
    if kind == "fasttext":
        if path.name.startswith("pretok-"):
            return "pre-tokenized corpus"
        if path.name.endswith(".vectors.npz"):  # methods._fasttext.COMPACT_SUFFIX
            return "fastText vectors (compact)"
        if path.name.startswith("tokspace-"):  # methods._tiktotok_knn.TOKEN_SPACE_PREFIX
            return "Tik-to-Tok token vectors"
        return "fastText model" if path.suffix == ".bin" else "fastText file"
    return _KIND_NOTES.get(kind, kind)


def _require_cache(root: Path, command: str) -> None:
    if not is_cache_root(root):
        raise CacheError(
            f"{command}: {root} is not a tokxfer cache (it has no {MARKER} file, which tokxfer writes when it creates "
            f"its cache); tokxfer lists and prunes only folders it created. If it is the cache of an older tokxfer, "
            f"adopt it with `tokxfer cache init`; otherwise point TOKXFER_CACHE at a folder of tokxfer's own"
        )


def list_entries(root: Path | None = None, *, command: str = "cache ls") -> list[CacheEntry]:
    """Every entry of the cache, sorted by kind and then oldest first.

    Kind folders that are symbolic links are not entered; an entry that is a link is listed as a
    link (``link=True``), never followed; entries tokxfer does not write are listed with ``owned=False``.

    Args:
        root: the cache root; :func:`cache_root` if None.
        command: names the command in the error for a folder that is not a cache.

    Returns:
        One :class:`CacheEntry` per file or directory under ``<root>/<kind>/`` (a missing root: none).

    Raises:
        CacheError: ``root`` exists but is not a tokxfer cache (no :data:`MARKER`).

    Example:
        >>> import tempfile
        >>> root = Path(tempfile.mkdtemp()) / "c"
        >>> _ = cached_dir("demo", {"k": 1}, lambda d: (d / "x.txt").write_text("x"), root=root)
        >>> [(e.kind, e.partial, e.owned) for e in list_entries(root)]
        [('demo', False, True)]
    """
    root = Path(root if root is not None else cache_root()).expanduser()
    if not root.exists() and not root.is_symlink():
        return []
    _require_cache(root, command)
    root = Path(os.path.abspath(root))
    out: list[CacheEntry] = []
    for kind_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and _KIND_RE.match(p.name)
                           and not p.name.startswith(".")):
        for p in kind_dir.iterdir():
            try:
                st = p.lstat()
                link = p.is_symlink()
                owned = not link and _owned(kind_dir.name, p, st)
                what = ("symbolic link (not written by tokxfer)" if link
                        else _what(kind_dir.name, p) if owned else "not written by tokxfer")
                out.append(CacheEntry(kind_dir.name, p, _disk_bytes(p), st.st_mtime, what, p.name.startswith("."),
                                      owned=owned, link=link))
            except FileNotFoundError:  # removed meanwhile (a concurrent build renamed its temp entry)
                continue
    return sorted(out, key=lambda e: (e.kind, e.mtime, e.path.name))


def adopt_root(root: str | os.PathLike | None = None) -> tuple[Path, str]:
    """``tokxfer cache init``: make ``root`` a tokxfer cache, creating it or adopting an older tokxfer's cache.

    A missing or empty folder is created and marked; a folder already marked is left alone; a
    folder with contents is adopted only when everything in it has tokxfer's layout (kind folders
    of entries tokxfer writes), so that a home directory or a project folder is never made prunable.

    Returns:
        ``(root, what happened)``: ``"created"``, ``"already"`` or ``"adopted N entries"``.

    Raises:
        CacheError: naming the first thing in the folder that tokxfer does not write.
    """
    root = Path(root if root is not None else cache_root()).expanduser()
    if is_cache_root(root):
        return root, "already"
    if root.exists() and not root.is_dir():
        raise CacheError(f"cache init: {root} exists and is not a folder")
    if not root.exists() or not any(root.iterdir()):
        ensure_root(root)
        return root, "created"
    foreign = []
    for p in sorted(root.iterdir()):
        if p.name == LOCKS_DIR and _only_locks(p):  # build locks (cached_dir)
            continue
        if p.is_symlink() or not p.is_dir() or not _KIND_RE.match(p.name) or p.name.startswith("."):
            foreign.append(p)
            continue
        foreign += [q for q in sorted(p.iterdir()) if q.is_symlink() or not _owned(p.name, q, q.lstat())]
    if foreign:
        raise CacheError(
            f"cache init: {root} is not laid out like a tokxfer cache: {foreign[0]} is not something tokxfer writes"
            f"{f' (and {len(foreign) - 1} more)' if len(foreign) > 1 else ''}; refusing to adopt it, so that "
            f"`tokxfer cache prune` never deletes in it (move those away, or point TOKXFER_CACHE at a folder of its own)"
        )
    _write_marker(root, "adopted")
    kinds = [k for k in root.iterdir() if k.is_dir() and k.name != LOCKS_DIR]
    return root, f"adopted {sum(1 for k in kinds for _ in k.iterdir())} entries"


_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """Seconds in an age such as ``30d``, ``12h``, ``90m``, ``2w`` or ``45s``.

    Raises:
        ValueError: for anything else (naming the text and the accepted form).

    Example:
        >>> parse_age("2d"), parse_age("90m")
        (172800.0, 5400.0)
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", str(text))
    if not m:
        raise CacheError(f"--older-than {text!r}: expected a number and a unit s, m, h, d or w, e.g. 30d or 12h")
    return float(m.group(1)) * _AGE_UNITS[m.group(2)]


def remove_entries(entries: list[CacheEntry], root: Path | None = None) -> int:
    """Delete the given entries of the cache at ``root``; returns the bytes freed (entries already gone count 0).

    Only entries tokxfer wrote (``owned``) and symbolic links are removed: a link is unlinked
    itself, never followed. Each entry must still be what was listed (a link is still a link, a
    folder still a folder) and lie directly in ``<root>/<kind>/`` once every link on the way is
    resolved, else it is left alone.

    Raises:
        CacheError: ``root`` is not a tokxfer cache.
    """
    import stat as _stat

    root = Path(root if root is not None else cache_root()).expanduser()
    _require_cache(root, "cache prune")
    real_root = Path(os.path.realpath(root))
    freed = 0
    for e in entries:
        if not (e.owned or e.link) or e.path.parent.parent != Path(os.path.abspath(root)):
            continue
        kind_dir = e.path.parent
        if kind_dir.is_symlink() or Path(os.path.realpath(kind_dir)) != real_root / e.kind:
            continue  # the kind folder was swapped for a link since it was listed
        try:
            st = e.path.lstat()
        except FileNotFoundError:
            continue
        if _stat.S_ISLNK(st.st_mode):
            if e.link:
                e.path.unlink(missing_ok=True)
                freed += e.bytes
            continue
        if e.link or not _owned(e.kind, e.path, st):
            continue  # replaced since it was listed
        if _stat.S_ISDIR(st.st_mode):
            shutil.rmtree(e.path, ignore_errors=True)  # removes links inside as links (never follows them)
        else:
            e.path.unlink(missing_ok=True)
        freed += e.bytes
    return freed
