"""Resources: models, tokenizers, corpora and auxiliary files, by local path, hub id or ``world:`` name.

``world:mlm`` / ``world:clm`` name the built-in source models (pretrained and cached by the harness);
``real:model/<name>`` and ``real:data/<lang>/<file>`` the real lane's converted models and text
(:mod:`harness.real`, fetched once by ``tokxfer real fetch``); anything else is a local path when it
exists, or a hub id handed to ``from_pretrained`` / ``datasets.load_dataset`` (which fails offline —
tests set ``HF_HUB_OFFLINE=1`` so it fails fast).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
from pathlib import Path
from typing import Any

from harness import inputs
from harness.cache import ProcessMemo
from harness.errors import TokxferError
from harness.protocols import TransferResources
from harness.run.config import SourceSpec, TargetSpec, TokenizerSpec, WorldSpec


class ResourceError(TokxferError, ValueError):
    """A resource could not be found or loaded; the message names it and what was expected."""


def cache_dir() -> Path:
    """The user's tokxfer cache (:func:`harness.cache.cache_root`), created with its marker if missing
    (:func:`harness.cache.ensure_root`): what every writer of the cache is handed."""
    from harness.cache import ensure_root

    return ensure_root()


@functools.lru_cache(maxsize=8)
def world_dir(size: str, seed: int) -> Path:
    """Build (or reuse) the built-in world and return its directory."""
    from harness.world import build_world

    return Path(build_world(size=size, seed=seed))


def world_for(spec: WorldSpec | None) -> Any:
    """The :class:`harness.world.World` of a spec, or ``None``."""
    if spec is None:
        return None
    from harness.world import World

    return World(world_dir(spec.size, spec.seed))


def local_name(value: str) -> str:
    """``value`` with a ``real:`` name replaced by its local path (:func:`harness.real.resolve`); other values unchanged.

    Raises:
        ResourceError: a ``real:`` name that is malformed or not fetched yet (naming ``tokxfer real fetch``).
    """
    from harness.real import RealLaneError, is_real_name, resolve

    if not is_real_name(value):
        return value
    try:
        return str(resolve(value))
    except RealLaneError as e:
        raise ResourceError(str(e)) from None


def model_kind_of(name: str) -> str | None:
    """``mlm``/``clm`` for world model names, ``None`` for paths and hub ids."""
    if name.startswith("world:"):
        kind = name.split(":", 1)[1]
        if kind not in ("mlm", "clm"):
            raise ResourceError(f"source.model: unknown world model {name!r}; expected world:mlm or world:clm")
        return kind
    return None


def source_model_dir(source: SourceSpec, world: WorldSpec | None, *, progress: bool = True,
                     encoding: str | None = None, locate_only: bool = False) -> str:  # fmt: skip
    """Resolve ``source.model`` to a local directory (pretraining world models) or a hub id.

    ``source.pretrain.encoding: trial`` pretrains the world model with the trial's ``encoding``
    (one cached source per encoding of the grid, as the XLP settings need). ``locate_only``: pretrain
    nothing; a world model's cache directory, which exists once the model is built.
    """
    kind = model_kind_of(source.model)
    if kind is None:
        if source.model.startswith("real:"):
            return local_name(source.model)
        if not Path(source.model).exists() and "/" not in source.model and os.environ.get("HF_HUB_OFFLINE") == "1":
            raise ResourceError(f"source.model: {source.model!r} is neither a local path nor reachable on the hub (HF_HUB_OFFLINE=1)")
        return source.model
    if world is None:
        raise ResourceError(f"source.model: {source.model!r} needs a 'world:' section in the experiment")
    from harness.world.pretrain import pretrained_source

    if source.pretrain.get("encoding") == "trial" and encoding is None:
        raise ResourceError("source.pretrain.encoding: 'trial' follows the trial's encoding, and none was given")
    cfg = source.pretrain_config(encoding)
    where = {"locate_only": True} if locate_only else {}  # the plain call unchanged
    return str(pretrained_source(world_dir(world.size, world.seed), kind=kind, config=cfg, progress=progress, **where))


def check_model_dir(path: str) -> None:
    """Raise when a local model path is not a model directory or holds no weights (a hub id passes)."""
    try:
        inputs.check_model_dir(path, field="source model")
    except inputs.InputFileError as e:
        raise ResourceError(str(e)) from None


MODEL_MEMO_MAX_BYTES = 2 << 30
"""Largest model (bytes of weight files) :func:`load_source_model` keeps a pristine copy of per process.
Copying a kept model costs ~0.3 s of CPU where loading multilingual-e5-small (470 MB, 250k-row
embeddings) costs ~3 s, once per trial; above this size the copy's memory matters more than the time."""

_MODEL_MEMO = ProcessMemo(1)  # one source model per process: a grid reads one


def _memo_key(path: str, what: str, *, max_weights: int | None = None) -> tuple | None:
    """What a model or tokenizer loaded from ``path`` depends on: the directory and its files' names,
    sizes and mtimes (``None``: not memoized — not a directory, or weight files above ``max_weights`` bytes)."""
    d = Path(path).expanduser()
    if not d.is_dir():
        return None
    files = tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in d.iterdir() if p.is_file()))
    weights = sum(size for name, size, _ in files if name.endswith((".safetensors", ".bin")))
    return None if max_weights is not None and weights > max_weights else (str(d.resolve()), what, files)


def load_source_model(path: str, kind: str):
    """Load a source model of ``kind`` (mlm | clm | seq2seq | encoder) from a directory or hub id.

    ``encoder`` is the transformer body without a head (``AutoModel``): what sentence-embedding
    tasks use, and what a checkpoint saved without a head (a ``BertModel``) holds. A checkpoint that
    lacks the ``kind`` head gets a random one from transformers; :func:`harness.model.initialize.load_source`
    refuses that when a task or stage needs the head.

    A local directory's model is loaded once per process (while its files are unchanged, up to
    :data:`MODEL_MEMO_MAX_BYTES`) and every call returns a deep copy of it: a trial replaces the copy's
    embeddings and trains it, the kept model is never handed out.
    """
    check_model_dir(path)
    key = _memo_key(path, kind, max_weights=MODEL_MEMO_MAX_BYTES)
    return copy.deepcopy(_MODEL_MEMO.get(key, lambda: _load_model(path, kind))) if key else _load_model(path, kind)


def _load_model(path: str, kind: str):
    import transformers

    cls = {"mlm": transformers.AutoModelForMaskedLM, "clm": transformers.AutoModelForCausalLM,
           "seq2seq": transformers.AutoModelForSeq2SeqLM, "encoder": transformers.AutoModel}[kind]
    try:
        return cls.from_pretrained(path)
    except OSError as e:
        raise ResourceError(f"source model {path!r}: cannot load as a {kind} model ({e})") from None


_TOKENIZER_MEMO = ProcessMemo(2)


def load_tokenizer(name: str):
    """Load a tokenizer from a directory or hub id (fast tokenizers only).

    A local directory's tokenizer is read once per process (while its files are unchanged); every call
    returns a copy of the kept object (:func:`_hand_out`): its Python side deep-copied, its ``tokenizers``
    backend shared while that is still exactly as loaded — ~0.1 s for XLM-R's 250k pieces instead of ~0.8 s
    to rebuild the backend (~1.7 s to read it), once per trial.
    """
    from harness.tokenizers import load_tokenizer as _load

    key = _memo_key(name, "tokenizer")
    if not key:
        return _load(name)
    return _hand_out(_TOKENIZER_MEMO.get(key, lambda: _keep(_load(name))))


def _keep(tok: Any) -> tuple[Any, str | None]:
    backend = getattr(tok, "_tokenizer", None)
    return tok, backend.to_str() if backend is not None and hasattr(backend, "to_str") else None


def _hand_out(kept: tuple[Any, str | None]) -> Any:
    """A copy of a kept tokenizer whose state is its files'.

    The backend (the ``tokenizers`` object, whose rebuild is most of a copy's cost) is shared with
    earlier copies while its serialization is still exactly the one it was loaded with; once a caller
    changed it (truncation or padding left by a call, added tokens, a replaced post-processor …), the
    kept object gets a new backend rebuilt from the loaded serialization, and the caller keeps its own.
    So what one caller sets is never undone under it, and never reaches a later copy. Copies that share
    a backend are callers of one trial (sequential trials see a clean one): a tokenizer's ``__call__``
    sets the truncation and padding it asks for each time, so only direct backend calls could see
    another copy's call state.
    """
    tok, pristine = kept
    backend = getattr(tok, "_tokenizer", None)
    if pristine is None or backend is None:
        return copy.deepcopy(tok)
    if backend.to_str() != pristine:
        from tokenizers import Tokenizer

        tok._tokenizer = backend = Tokenizer.from_str(pristine)
    return copy.deepcopy(tok, {id(backend): backend})


def target_tokenizer(target: TargetSpec, world: Any, *, progress: bool = True):
    """The target tokenizer: loaded from ``tokenizer.path`` or trained on the target corpus."""
    tok: TokenizerSpec = target.tokenizer
    if tok.path:
        return load_tokenizer(local_name(tok.path))
    from harness.tokenizers import train_tokenizer

    corpus = target_corpus(target, world)
    if corpus is None:
        raise ResourceError(
            f"targets[{target.language}].tokenizer: no 'path' and no corpus to train on (set targets.corpus or a world)"
        )
    return train_tokenizer([corpus], algorithm=tok.algorithm, vocab_size=tok.vocab_size, lowercase=tok.lowercase,
                           cache_dir=cache_dir(), progress=progress)


def _file(value: str | None, field: str) -> Path | None:
    if value is None:
        return None
    try:
        return inputs.check_input_file(local_name(value), field)
    except inputs.InputFileError as e:
        raise ResourceError(str(e)) from None


def target_corpus(target: TargetSpec, world: Any) -> Path | None:
    if target.corpus:
        return check_corpus(_file(target.corpus, f"targets[{target.language}].corpus"))
    if world is not None and target.language in world.languages:
        return world.text(target.language, "train")
    return None


def check_corpus(path: Path, *, chunk_size: int = 1 << 20) -> Path:
    """Raise when a corpus file is empty or not UTF-8 (naming the file and the byte offset).

    The file is read in chunks through an incremental UTF-8 decoder, so a multibyte character
    split across a chunk boundary is decoded whole, an invalid byte anywhere (also in the last
    bytes of a chunk) is reported, and a character cut off by the end of the file is an error.

    Args:
        path: the corpus file.
        chunk_size: bytes read at a time (memory stays bounded by it).

    Returns:
        ``path``, unchanged.

    Raises:
        ResourceError: the file is empty, or not valid UTF-8 (with the absolute byte offset of
            the first invalid byte).

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "c.txt"
        >>> _ = p.write_bytes("héllo\\n".encode())
        >>> check_corpus(p, chunk_size=2) == p
        True
    """
    import codecs

    kind = inputs.file_kind(path)
    if kind == "missing":
        raise ResourceError(f"{path}: corpus not found")
    if kind is not None:  # never read a device or a pipe to its end
        raise ResourceError(f"{path}: corpus is {kind}, not a file")
    if path.stat().st_size == 0:
        raise ResourceError(f"{path}: corpus is empty")
    decoder = codecs.getincrementaldecoder("utf-8")(errors="strict")
    with open(path, "rb") as f:
        offset = 0  # bytes handed to the decoder before the current chunk
        while True:
            chunk = f.read(chunk_size)
            final = not chunk
            try:
                decoder.decode(chunk, final=final)
            except UnicodeDecodeError as e:
                # e.object is the decoder's pending bytes (carried over from earlier chunks) + chunk
                pending = len(e.object) - len(chunk)
                at = offset - pending + e.start
                raise ResourceError(f"{path}: not UTF-8 (invalid byte at offset {at}: {e.reason})") from None
            if final:
                break
            offset += len(chunk)
    return path


def helper_model_dir(target: TargetSpec, world: Any, source: SourceSpec | None = None, *,
                     progress: bool = True, seed: int | None = None) -> Path | None:
    """The target's helper model (``targets[].helper_model``) as a local directory, ``None`` if unset.

    ``world:mlm`` / ``world:clm``: a RoBERTa/GPT-2-like model pretrained on the target's corpus (the
    world's, or ``targets[].corpus``; the world's dev text for the held-out loss where there is one)
    with a tokenizer trained exactly as the target tokenizer is (same corpus, algorithm and size: the
    same vocabulary), with the source's ``pretrain`` settings (architecture, steps, seed) for a
    built-in source, ``PretrainConfig`` defaults for any other source, then the target's
    ``helper_pretrain`` overrides; cached by content (:func:`harness.world.pretrain.pretrain_on_files`).
    For a source that is not a built-in model the helper's seed is ``seed`` (the trial's init seed)
    unless ``helper_pretrain`` holds one, so each seed of a grid trains its own helper as each seed
    of a world grid pretrains its own source. Anything else is a local model directory or a ``real:`` name.

    Raises:
        ResourceError: no corpus to pretrain on, or a directory that is not a model.
    """
    value = target.helper_model
    if value is None:
        return None
    field = f"targets[{target.language}].helper_model"
    if value in TargetSpec.WORLD_HELPERS:
        corpus = target_corpus(target, world)
        if corpus is None:
            raise ResourceError(f"{field}: {value} is pretrained on the target's corpus, and there is none")
        from harness.world.pretrain import pretrain_on_files

        if source is not None and source.world_kind:
            base = {k: v for k, v in source.pretrain.items()
                    if k not in ("extra_languages", "extra_fraction", "encoding", "kind")}  # one language, plain
        else:
            base = {} if seed is None else {"seed": seed}
        cfg = target.helper_pretrain_config(base)
        dev = [world.text(target.language, "dev")] if world is not None and target.language in world.languages else []
        return Path(pretrain_on_files([corpus], cfg, dev_files=dev, cache_dir=cache_dir(), progress=progress))
    path = local_name(value)
    try:
        inputs.check_model_dir(path, field=field)
    except inputs.InputFileError as e:
        raise ResourceError(str(e)) from None
    if not Path(path).expanduser().is_dir():
        raise ResourceError(f"{field}: {path} is not a local model directory (the helper's embeddings are read from it)")
    return Path(path).expanduser()


def transfer_resources(target: TargetSpec, world: Any, *, source: SourceSpec | None = None,
                       progress: bool = True, helper: bool = True, seed: int | None = None) -> TransferResources:
    """The corpora, dictionary, word vectors and helper model of a target, as local paths.

    Paths named in the target's config are checked to exist; a world target language gets the
    world's source corpus, parallel corpus and gold dictionary where the config names none. A
    ``world:`` helper model is pretrained here on first use (:func:`helper_model_dir`, which reads
    ``source``'s pretraining settings, or ``seed`` for another source) — only with ``helper`` (the
    trial's method reads it): a grid whose other methods share the target does not pretrain one for them.

    Raises:
        ResourceError: a named file does not exist (naming the field), or a corpus is empty or
            not UTF-8.
    """
    lang = target.language
    res = TransferResources(
        target_corpus=target_corpus(target, world),
        source_corpus=_file(target.source_corpus, f"targets[{lang}].source_corpus"),
        parallel_corpus=_file(target.parallel_corpus, f"targets[{lang}].parallel_corpus"),
        dictionary=_file(target.dictionary, f"targets[{lang}].dictionary"),
        source_word_vectors=_file(target.source_word_vectors, f"targets[{lang}].source_word_vectors"),
        target_word_vectors=_file(target.target_word_vectors, f"targets[{lang}].target_word_vectors"),
        helper_model=helper_model_dir(target, world, source, progress=progress, seed=seed) if helper else None,
    )
    if world is not None and lang in world.languages and lang != world.source_language:
        res = dataclasses.replace(
            res,
            source_corpus=res.source_corpus or world.text(world.source_language, "train"),
            parallel_corpus=res.parallel_corpus or world.parallel(lang),
            dictionary=res.dictionary or world.dictionary(lang),
        )
    return res
