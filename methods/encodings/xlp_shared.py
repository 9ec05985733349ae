"""``xlp-shared``: XLP's control — one learned ``d x d`` projection shared by every language.

The XLP paper attributes its gains to *language-specific* projections (``W_l x``). XLP also adds
capacity: a linear map on the word embeddings (on both sides of a translation model) that the
language-embedding baselines do not have. This encoding keeps everything of :mod:`methods.encodings.xlp`
— placement (on the word embeddings, before positions; decoder side of encoder–decoders), identity
init, frozen in task fine-tuning — except that all languages use **one** matrix ``W``. Each sentence
passes through one ``d x d`` map either way; XLP beating this control is evidence for the
language-specific part of the claim, not for the extra layer.

The tables keep one row per language (so saving, loading, language ids and every task work as for
``xlp``), tied to one parameter through a :mod:`torch.nn.utils.parametrize` parametrization: the
rows are views of one ``1 x d x d`` tensor, and gradients from every language update it. A source
pretrained with ``xlp-shared`` (``source.pretrain: {encoding: trial}`` with this encoding) saves
identical rows and the marker ``shared: true`` in its encoding config; ``xlp`` refuses such a
source and this encoding refuses a per-language one. A language the source never saw uses the
shared matrix (``init`` applies only when there is no pretrained matrix).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.utils import parametrize

from harness import language_encoding as _wrapper
from harness.registry import register_encoding
from methods.encodings.xlp import shared_source


@dataclass(frozen=True)
class XlpSharedConfig:
    """Configuration of :class:`XlpShared` (the fields of ``xlp``'s config; one matrix for all languages)."""

    init: str = "identity"
    """How the shared matrix starts when the source has none: ``identity``/``zero`` (outputs equal the
    plain model's) or ``random`` (entries N(0, 1/d)). ``mean``/``copy:<lang>`` of a pretrained
    ``xlp-shared`` source give the shared matrix itself."""
    random_std: float | None = None
    """Std of ``random`` matrix entries; None: ``1/sqrt(d)``."""
    train_in_finetuning: bool = False
    """Train the shared matrix in task fine-tuning (xnli, qa, ner); fixed by default, as ``xlp``'s."""
    decoder: bool = True
    """Encoder–decoders: give the decoder its own (target-language) matrix, as ``xlp`` does."""

    def __post_init__(self) -> None:
        _wrapper.check_init_options("xlp-shared", self.init, self.random_std)
        if not isinstance(self.decoder, bool):
            raise ValueError(f"xlp-shared.decoder must be true or false, got {self.decoder!r}")


class _Tied(nn.Module):
    """Parametrization ``[1, d, d] -> [n, d, d]``: every language's row is the one shared matrix."""

    def __init__(self, rows: int) -> None:
        super().__init__()
        self.rows = rows

    def forward(self, shared: torch.Tensor) -> torch.Tensor:
        return shared.expand(self.rows, *shared.shape[1:])

    def right_inverse(self, weight: torch.Tensor) -> torch.Tensor:
        return weight[:1].clone()  # the first language's matrix (all rows are equal when it matters)


def tie_languages(table: nn.Module) -> None:
    """Make the rows of an ``xlp`` :class:`~harness.language_encoding.LanguageTable` one shared parameter."""
    if not parametrize.is_parametrized(table, "weight"):
        parametrize.register_parametrization(table, "weight", _Tied(int(table.weight.shape[0])), unsafe=True)


@register_encoding("xlp-shared", config=XlpSharedConfig,
                   description="control for xlp: one d x d projection shared by all languages, same place and init")  # fmt: skip
class XlpShared:
    """One learned linear projection of the word embeddings, shared by every language."""

    def __init__(self, config: XlpSharedConfig) -> None:
        self.config = config
        self.wrapped: Any = None

    def wrap(self, model: Any, languages: list[str], *, seed: int | None = None, pretrained: dict | None = None) -> Any:
        """Wrap ``model`` like ``xlp`` and tie its languages to one matrix.

        Raises:
            ValueError: the source was pretrained with per-language ``xlp`` projections.
        """
        kind = model.encoding if getattr(model, "is_language_encoded", False) else (pretrained or {}).get("meta", {}).get("encoding")
        if kind == "xlp" and not shared_source(model, pretrained):  # another kind: wrap_model names it
            raise ValueError("encoding 'xlp-shared': the source model was pretrained with a projection per "
                             "language; use a source pretrained with 'xlp-shared' (or the encoding 'xlp')")
        config = {**asdict(self.config), "shared": True}
        self.wrapped = _wrapper.wrap_model(model, languages, encoding="xlp", config=config, seed=seed,
                                           pretrained=pretrained, train_in_finetuning=self.config.train_in_finetuning)  # fmt: skip
        tie_languages(self.wrapped.tables["input"])
        return self.wrapped

    def prepare(self, batch: dict, languages: list[str]) -> dict:
        """Add ``language_ids`` to the batch."""
        return _wrapper.prepare_for(self, batch, languages)
