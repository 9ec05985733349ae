"""my_method.py — initialize every new token as the mean of the overlap rows (the README walkthrough; tests/api/test_plugin_example.py runs it)."""
from dataclasses import dataclass
import numpy as np
from harness.protocols import COPIED, COMBINED, InitResult, TokenMapping
from harness.registry import register_method
from harness.vocab import compute_overlap

@dataclass(frozen=True)
class OverlapMeanConfig:
    fuzzy: bool = True

@register_method("overlap-mean", config=OverlapMeanConfig, description="overlap copy, mean of overlap rows elsewhere")
class OverlapMean:
    def __init__(self, config): self.config = config
    def initialize(self, inputs, rng):
        ov = compute_overlap(inputs.source_tokenizer, inputs.target_tokenizer, fuzzy=self.config.fuzzy)
        pairs = np.concatenate([ov.specials, ov.pairs(fuzzy=self.config.fuzzy)])
        n_t, n_s = len(inputs.target_tokenizer), inputs.source_embeddings.shape[0]
        rest = np.setdiff1d(np.arange(n_t), pairs[:, 0])
        anchors = np.unique(pairs[:, 1])
        rows = np.concatenate([pairs[:, 0], np.repeat(rest, len(anchors))])
        cols = np.concatenate([pairs[:, 1], np.tile(anchors, len(rest))])
        w = np.concatenate([np.ones(len(pairs)), np.full(len(rest) * len(anchors), 1 / len(anchors))])
        prov = np.full(n_t, COMBINED, dtype=np.int8); prov[pairs[:, 0]] = COPIED
        return InitResult(TokenMapping.from_coo(n_t, n_s, rows, cols, w, prov), inputs.target_tokenizer)
