"""The plain model: no language information (the baseline of the XLP paper)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.registry import register_encoding


@dataclass(frozen=True)
class NoEncodingConfig:
    """No options."""


@register_encoding("none", config=NoEncodingConfig, description="plain model, no language information")
class NoEncoding:
    """Leaves the model and the batch as they are."""

    def __init__(self, config: NoEncodingConfig):
        self.config = config

    def wrap(self, model, languages: list[str]):
        return model

    def prepare(self, batch: dict, languages: list[str]) -> dict:
        return batch
