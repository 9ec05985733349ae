"""``mean-of-pieces`` (FVT-style): copy the overlap; other tokens average their source pieces."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from harness import progress as _progress
from harness.protocols import InitResult, TransferInputs
from harness.registry import register_method
from harness.vocab import (
    assemble_mapping,
    canonical_vocab,
    compute_overlap,
    decode_canon,
    encode_canon,
    family_spec,
    show_canon,
    special_ids,
    vocab_size,
)

SEGMENTATIONS = ("model", "encode")
_MAX_LOGGED = 50
RANDOM_REASONS = {
    "no_pieces": "the source tokenizer gives no pieces for its string (not valid UTF-8 on its own, e.g. a byte piece)",
    "only_unk": "the source tokenizer splits it into <unk> only (characters the source vocabulary lacks)",
}
"""Why a ``mean-of-pieces`` row is random, by the reason code of ``info["pieces"]``/``info["fallbacks"]``."""


@dataclass(frozen=True)
class MeanOfPiecesConfig:
    """Configuration of ``mean-of-pieces``."""

    fuzzy: bool = True
    """Copy fuzzy overlap matches too (as the ``overlap`` baseline does by default), instead of
    averaging their pieces."""

    segmentation: str = "model"
    """How a token's string is split into source pieces.
    ``"model"`` (default): the source normalizer and model on the canonical form, so a word-start
    token gets word-start pieces and a continuation token continuation pieces.
    ``"encode"``: FVT's reference behaviour — ``source_tokenizer.encode(token_string)`` without
    specials, with a leading space for word-start tokens when the source is byte-level
    (SentencePiece tokenizers add their own ``▁``, so continuation tokens become word starts)."""

    def __post_init__(self) -> None:
        if not isinstance(self.fuzzy, bool):
            raise ValueError(f"MeanOfPiecesConfig.fuzzy must be a bool, got {self.fuzzy!r}")
        if self.segmentation not in SEGMENTATIONS:
            raise ValueError(
                f"MeanOfPiecesConfig.segmentation must be one of {SEGMENTATIONS}, got {self.segmentation!r}"
            )


@register_method(
    "mean-of-pieces",
    config=MeanOfPiecesConfig,
    description="copy overlapping rows; average the source pieces of every other token (FVT)",
)
class MeanOfPiecesInit:
    """Mean of source pieces.

    Overlap tokens are COPIED. Every other target token's string is segmented by the source
    tokenizer (see ``segmentation``); its row is the mean of those pieces' rows — COMBINED, or
    COPIED when there is a single piece (a repeated piece counts with its multiplicity). Unknown
    pieces are dropped; tokens with no pieces (not valid UTF-8 on their own, e.g. a lone byte) or
    only unknown pieces are FALLBACK. ``info["pieces"]`` counts each case and lists the first
    FALLBACK tokens with their reason; ``random_reasons`` has every one (:data:`RANDOM_REASONS`).
    """

    combines = True
    """Rows of non-overlap tokens are combinations of source rows (read by :mod:`harness.run.sanity`)."""

    def __init__(self, config: MeanOfPiecesConfig) -> None:
        self.config = config

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult:
        """Return the mapping: specials SPECIAL, overlap COPIED, pieces COMBINED/COPIED, rest FALLBACK."""
        src, tgt = inputs.source_tokenizer, inputs.target_tokenizer
        n_source = int(inputs.source_embeddings.shape[0])
        ov = compute_overlap(src, tgt, n_source=n_source)
        copied = ov.pairs(fuzzy=self.config.fuzzy)
        done = set(copied[:, 0].tolist())
        spec = family_spec(src)
        drop = special_ids(src)  # includes unk
        combined: dict[int, tuple[list[int], list[float]]] = {}
        stats = Counter()
        logged: list[dict] = []
        random_ids: dict[str, list[int]] = {}
        for t, canon in enumerate(_progress.iterate(canonical_vocab(tgt), "mean of pieces (target tokens)")):
            if canon is None or t in done:
                continue
            if self.config.segmentation == "model":
                pieces = encode_canon(src, canon, spec=spec)
            else:
                s = decode_canon(canon)
                if s and canon.word_start and spec.family == "bytelevel":
                    s = " " + s
                pieces = list(src.encode(s, add_special_tokens=False)) if s else []
            kept = [p for p in pieces if p not in drop and p < n_source]
            if not kept:
                reason = "no_pieces" if not pieces else "only_unk"
                stats[f"fallback_{reason}"] += 1
                random_ids.setdefault(RANDOM_REASONS[reason], []).append(t)
                if len(logged) < _MAX_LOGGED:
                    logged.append({"id": t, "token": show_canon(canon), "reason": reason})
                continue
            if len(kept) < len(pieces):
                stats["partial_unk"] += 1
            counts = Counter(kept)
            ids = sorted(counts)
            combined[t] = (ids, [counts[i] / len(kept) for i in ids])
            stats["single_piece" if len(ids) == 1 else "combined"] += 1
        mapping = assemble_mapping(vocab_size(tgt), n_source, special=ov.specials, copied=copied, combined=combined)
        info = {
            "overlap": ov.report(),
            "fuzzy_used": self.config.fuzzy,
            "segmentation": self.config.segmentation,
            "pieces": {
                k: int(stats[k])
                for k in ("combined", "single_piece", "partial_unk", "fallback_no_pieces", "fallback_only_unk")
            },
            "fallbacks": logged,
        }
        return InitResult(mapping, tgt, info, random_reasons=random_ids)
