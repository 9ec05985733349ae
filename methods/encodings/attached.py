"""``attached``: one learned language token prepended to the sequence (``<2de>``-style).

The XLP paper's "attaching approach" (§2.2; Johnson et al. 2017, mBART): a language symbol with
a learned embedding at the beginning of the sentence. :meth:`prepare` inserts one position per
sequence at column ``insert_at`` — after the leading ``[CLS]``/``<s>`` of encoders (whose
classification heads read position 0), at 0 for causal LMs — and the word-embedding hook puts the
language's vector there; the model then adds its positional (and token-type) embedding as for any
token. Attention masks get a 1, ``labels`` get -100 at the new position (it is never predicted),
extractive-QA ``start_positions``/``end_positions`` move one to the right, and per-token outputs
are mapped back by dropping ``added_positions`` (:func:`tasks.data.strip_added`), so QA offsets
and NER first-subword labels stay aligned. Tasks tokenize with one token less than their
``max_length`` so that the sequence with its language token fits the same budget.

For an encoder–decoder (``iwslt-bleu``), the encoder input gets the source language's token as
above; on the decoder side the target language's vector replaces the decoder-start token's
embedding (fairseq's ``--decoder-langtok``: the language token begins the target sequence), which
leaves beam search unchanged. Adds ``n_languages x d`` parameters per side.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness import language_encoding as _wrapper
from harness.registry import register_encoding


@dataclass(frozen=True)
class AttachedConfig:
    """Configuration of :class:`Attached`."""

    init: str = "random"
    """How a language the source model has no token for starts: ``random`` (N(0, std), std of the
    word-embedding matrix unless ``random_std``), ``zero``/``identity`` (the zero vector),
    ``mean`` of the source's language tokens, or ``copy:<lang>``."""
    random_std: float | None = None
    """Std of ``random`` vectors; None: the std of the model's word-embedding matrix."""
    insert_at: int | None = None
    """Column of the language token; None: 1 for encoders (after [CLS]/<s>), 0 for causal LMs."""

    def __post_init__(self) -> None:
        _wrapper.check_init_options("attached", self.init, self.random_std)
        if self.insert_at is not None and self.insert_at < 0:
            raise ValueError(f"attached.insert_at must be >= 0 or None, got {self.insert_at}")


@register_encoding("attached", config=AttachedConfig,
                   description="one learned language token prepended to the sequence (target-language token on a decoder)")  # fmt: skip
class Attached:
    """A learned language token inserted at the start of every sequence."""

    def __init__(self, config: AttachedConfig) -> None:
        self.config = config
        self.wrapped: Any = None

    def wrap(self, model: Any, languages: list[str], *, seed: int | None = None, pretrained: dict | None = None) -> Any:
        """Wrap ``model`` (see :func:`harness.language_encoding.wrap_model`)."""
        at = self.config.insert_at
        if at is None:
            at = pretrained["meta"].get("insert_at") if pretrained and "insert_at" in pretrained["meta"] else None
            at = _wrapper.default_insert_at(model) if at is None else at
        self.wrapped = _wrapper.wrap_model(model, languages, encoding="attached", config=self.config, seed=seed,
                                           pretrained=pretrained, insert_at=at)  # fmt: skip
        return self.wrapped

    def prepare(self, batch: dict, languages: list[str]) -> dict:
        """Insert the language-token column and add ``language_ids`` (see ``EncodedModel.prepare_batch``)."""
        return _wrapper.prepare_for(self, batch, languages)
