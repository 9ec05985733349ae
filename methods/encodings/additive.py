"""``additive``: a learned vector per language added to the word embedding at every position (XLM).

``x_i + L[l]`` for every token ``i`` of a sentence in language ``l`` (METHODS.md, "Language
encodings"; XLP paper §2.2, "additive approach"). The vector is added to the output of the
word-embedding module, before the model adds positional embeddings (see
:mod:`harness.language_encoding`). Adds ``n_languages x d`` parameters. With ``init="zero"``
(default) the wrapped model computes exactly what the plain model computes until it is trained.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness import language_encoding as _wrapper
from harness.registry import register_encoding


@dataclass(frozen=True)
class AdditiveConfig:
    """Configuration of :class:`Additive`."""

    init: str = "zero"
    """How a language the source model has no vector for starts: ``zero``/``identity`` (the zero
    vector: outputs equal the plain model's), ``random`` (N(0, std)), ``mean`` of the source's
    language vectors, or ``copy:<lang>`` (the closest language the source was pretrained with)."""
    random_std: float | None = None
    """Std of ``random`` vectors; None: the std of the model's word-embedding matrix."""

    def __post_init__(self) -> None:
        _wrapper.check_init_options("additive", self.init, self.random_std)


@register_encoding("additive", config=AdditiveConfig,
                   description="learned language vector added to the word embeddings at every position (XLM)")  # fmt: skip
class Additive:
    """A learned vector per language added to the word embeddings."""

    def __init__(self, config: AdditiveConfig) -> None:
        self.config = config
        self.wrapped: Any = None

    def wrap(self, model: Any, languages: list[str], *, seed: int | None = None, pretrained: dict | None = None) -> Any:
        """Wrap ``model`` (see :func:`harness.language_encoding.wrap_model`)."""
        self.wrapped = _wrapper.wrap_model(model, languages, encoding="additive", config=self.config, seed=seed,
                                           pretrained=pretrained)  # fmt: skip
        return self.wrapped

    def prepare(self, batch: dict, languages: list[str]) -> dict:
        """Add ``language_ids`` to the batch."""
        return _wrapper.prepare_for(self, batch, languages)
