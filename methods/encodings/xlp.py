"""``xlp``: Cross-lingual Language Projection — a learned ``d x d`` matrix per language.

``W_l x_i`` for the *word* embedding ``x_i`` of every token of a sentence in language ``l``,
applied before the positional embedding is added (XLP paper §3.2–3.3, Algorithm 1; METHODS.md).
The matrix multiplies the output of the word-embedding module (see
:mod:`harness.language_encoding`). Adds ``n_languages x d^2`` parameters.

The paper does not say how ``W_l`` is initialized: the default here is the identity (the wrapped
model then equals the plain model until trained); ``init="random"`` draws N(0, 1/d) entries.
The paper fixes the projections during XNLI fine-tuning ("we fix the language-specific projection
weights during fine-tuning", Appendix B.1): task fine-tuning (xnli, qa, ner) freezes them unless
``train_in_finetuning``; pretraining-like stages (LAPT) and the translation task (trained from
scratch, as the paper's MT models are) train them.

For a single language, :meth:`~harness.language_encoding.EncodedModel.fold` exports a plain
transformers model whose embedding rows are ``W_l e``.

Controls for the paper's claims (issue 28): ``decoder: false`` leaves the decoder of a translation
model without its XLP layer (a frozen identity; the paper puts one on both sides), and the
``xlp-shared`` encoding (:mod:`methods.encodings.xlp_shared`) is one ``d x d`` matrix for all languages
in the same place with the same init — capacity without language-specific projection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness import language_encoding as _wrapper
from harness.registry import register_encoding


@dataclass(frozen=True)
class XlpConfig:
    """Configuration of :class:`Xlp`."""

    init: str = "identity"
    """How a language the source model has no projection for starts: ``identity``/``zero`` (the
    identity matrix: outputs equal the plain model's), ``random`` (entries N(0, 1/d), or
    ``random_std``), ``mean`` of the source's projections, or ``copy:<lang>``."""
    random_std: float | None = None
    """Std of ``random`` matrix entries; None: ``1/sqrt(d)``."""
    train_in_finetuning: bool = False
    """Train the projections in task fine-tuning (xnli, qa, ner); the paper keeps them fixed."""
    decoder: bool = True
    """Encoder–decoders (``iwslt-bleu``): give the decoder its own XLP layer for the target language
    (the paper). ``false`` is the control without it: the decoder side stays a frozen identity, so only
    the encoder projects. Encoders and causal LMs have no decoder side; the option changes nothing there."""

    def __post_init__(self) -> None:
        _wrapper.check_init_options("xlp", self.init, self.random_std)
        if not isinstance(self.decoder, bool):
            raise ValueError(f"xlp.decoder must be true or false, got {self.decoder!r}")


@register_encoding("xlp", config=XlpConfig,
                   description="learned d x d projection per language on the word embeddings, before positions (XLP)")  # fmt: skip
class Xlp:
    """A learned linear projection of the word embeddings per language."""

    def __init__(self, config: XlpConfig) -> None:
        self.config = config
        self.wrapped: Any = None

    def wrap(self, model: Any, languages: list[str], *, seed: int | None = None, pretrained: dict | None = None) -> Any:
        """Wrap ``model`` (see :func:`harness.language_encoding.wrap_model`).

        Raises:
            ValueError: the source was pretrained with one shared projection (``xlp-shared``).
        """
        if shared_source(model, pretrained):
            raise ValueError("encoding 'xlp': the source model was pretrained with one shared projection "
                             "for all languages; use the encoding 'xlp-shared' (or a source pretrained with 'xlp')")
        self.wrapped = _wrapper.wrap_model(model, languages, encoding="xlp", config=self.config, seed=seed,
                                           pretrained=pretrained, train_in_finetuning=self.config.train_in_finetuning)  # fmt: skip
        return self.wrapped

    def prepare(self, batch: dict, languages: list[str]) -> dict:
        """Add ``language_ids`` to the batch."""
        return _wrapper.prepare_for(self, batch, languages)


def shared_source(model: Any, pretrained: dict | None) -> bool:
    """Whether ``model`` (an encoded model) or the ``pretrained`` encoding of its source is ``xlp-shared``'s."""
    config = getattr(model, "encoding_config", None) if getattr(model, "is_language_encoded", False) else None
    if config is None and pretrained is not None:
        config = pretrained["meta"].get("encoding_config")
    return bool((config or {}).get("shared", False))
