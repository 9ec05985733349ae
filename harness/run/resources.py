"""Resources: models, tokenizers, corpora and auxiliary files, by local path, hub id or ``world:`` name.

``world:mlm`` / ``world:clm`` name the built-in source models (pretrained and cached by the harness);
``real:model/<name>`` and ``real:data/<lang>/<file>`` the real lane's converted models and text
(:mod:`harness.real`, fetched once by ``tokxfer real fetch``); anything else is a local path when it
exists, or a hub id handed to ``from_pretrained`` / ``datasets.load_dataset`` (which fails offline —
tests set ``HF_HUB_OFFLINE=1`` so it fails fast).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path
from typing import Any

from harness import inputs
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
                     encoding: str | None = None) -> str:  # fmt: skip
    """Resolve ``source.model`` to a local directory (pretraining world models) or a hub id.

    ``source.pretrain.encoding: trial`` pretrains the world model with the trial's ``encoding``
    (one cached source per encoding of the grid, as the XLP settings need).
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
    return str(pretrained_source(world_dir(world.size, world.seed), kind=kind, config=cfg, progress=progress))


def check_model_dir(path: str) -> None:
    """Raise when a local model path is not a model directory or holds no weights (a hub id passes)."""
    try:
        inputs.check_model_dir(path, field="source model")
    except inputs.InputFileError as e:
        raise ResourceError(str(e)) from None


def load_source_model(path: str, kind: str):
    """Load a source model of ``kind`` (mlm | clm | seq2seq | encoder) from a directory or hub id.

    ``encoder`` is the transformer body without a head (``AutoModel``): what sentence-embedding
    tasks use, and what a checkpoint saved without a head (a ``BertModel``) holds. A checkpoint that
    lacks the ``kind`` head gets a random one from transformers; :func:`harness.model.initialize.load_source`
    refuses that when a task or stage needs the head.
    """
    import transformers

    cls = {"mlm": transformers.AutoModelForMaskedLM, "clm": transformers.AutoModelForCausalLM,
           "seq2seq": transformers.AutoModelForSeq2SeqLM, "encoder": transformers.AutoModel}[kind]
    check_model_dir(path)
    try:
        return cls.from_pretrained(path)
    except OSError as e:
        raise ResourceError(f"source model {path!r}: cannot load as a {kind} model ({e})") from None


def load_tokenizer(name: str):
    """Load a tokenizer from a directory or hub id (fast tokenizers only)."""
    from harness.tokenizers import load_tokenizer as _load

    return _load(name)


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


def transfer_resources(target: TargetSpec, world: Any) -> TransferResources:
    """The corpora, dictionary and word vectors of a target, as local paths.

    Paths named in the target's config are checked to exist; a world target language gets the
    world's source corpus, parallel corpus and gold dictionary where the config names none.

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
    )
    if world is not None and lang in world.languages and lang != world.source_language:
        res = dataclasses.replace(
            res,
            source_corpus=res.source_corpus or world.text(world.source_language, "train"),
            parallel_corpus=res.parallel_corpus or world.parallel(lang),
            dictionary=res.dictionary or world.dictionary(lang),
        )
    return res
