"""The plain model: no language information (the baseline of the XLP paper)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.registry import register_encoding


@dataclass(frozen=True)
class NoEncodingConfig:
    """No options."""


@register_encoding("none", config=NoEncodingConfig, description="plain model, no language information")
class NoEncoding:
    """Leaves the model and the batch as they are."""

    def __init__(self, config: NoEncodingConfig):
        self.config = config

    def wrap(self, model, languages: list[str], *, pretrained: dict | None = None, **options: Any):
        """Return ``model`` itself; refuse a source pretrained with an encoding (it would be dropped)."""
        if pretrained is not None:
            raise ValueError(
                f"encoding 'none': the source model was pretrained with the {pretrained['meta']['encoding']!r} "
                "encoding; use that encoding (or a plain source)"
            )
        return model

    def prepare(self, batch: dict, languages: list[str]) -> dict:
        return batch
