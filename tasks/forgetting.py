"""Forgetting: how much source-language ability a LAPT stage cost (used by :mod:`tasks.lapt`).

Every LAPT stage scores the model on a fixed, bounded set of *held-out source-language*
sentences (the world's source language, ``test`` split; or ``forgetting_file``) three times:

(a) ``source_loss_original`` — the original source model with its own tokenizer (the ability the
    transfer started from);
(b) ``source_loss_before`` — the transferred model right after initialization (the model the stage
    receives, language encoding included), with the trial's tokenizer;
(c) ``source_loss_after`` — the same model after LAPT, same tokenizer, same masks.

The objective follows the model: masked-LM loss (nats per masked token, 15 % of the non-special
tokens selected, 80/10/10) for encoders; causal-LM loss (nats per predicted token; its exponential,
the token perplexity, is recorded beside it) for decoders.

**Forgetting** (``source_forgetting``) is ``(c) - (b)``: the change LAPT itself made to the
model's source-language loss. It answers "how much source-language ability did LAPT cost"
(positive: LAPT made the source language worse; negative: LAPT on the target also helped the
source). It is *not* ``(c) - (a)``: (a) is a loss per token of *another* tokenizer (the source's),
and per-token losses of two tokenizations of the same text are not on one scale (a tokenizer with
longer pieces has fewer, harder tokens), so the difference would mix the tokenizer swap into the
number. (a) is recorded as the reference point of the original ability; (b) - (a) is likewise only
indicative. All raw numbers are recorded.

Determinism: the sentences are the first ``n`` non-empty lines of the file; the MLM masks of (b)
and (c) are identical (example ``i`` is masked with ``derive(seed, "lapt", "forgetting", "mask", i)``
under the trial's *stages* seed, by :func:`tasks.mlm_at_init.mask_example`'s own generator); no
global RNG is read. The measurement is therefore recomputed on a LAPT cache hit (the cache keeps
the weights, the measurement follows from them) and gives the numbers of the miss.

Cost: three forward passes (no backward) over ``n`` sentences (default 256) — a few LAPT steps'
worth of compute.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.files import text_lines
from harness.protocols import TaskContext
from harness.seeding import derive
from tasks.data import added_tokens, batch_preparer, strip_added
from tasks.mlm_at_init import mask_example, masked_lm_scores

DEFAULT_EXAMPLES = 256
"""Held-out source sentences scored when ``LaptConfig.forgetting_examples`` is unset: enough for a
loss stable to about 0.01 nats on the world, a few LAPT steps of compute."""
MAX_LENGTH = 128
"""Tokens per scored sentence (specials included); longer sentences are truncated."""
BATCH_SIZE = 32
DEFINITION = "source_forgetting = source_loss_after - source_loss_before (same model tokenizer, same masks)"
"""One line stored in every record beside the numbers."""


@dataclass(frozen=True)
class Probe:
    """The held-out source sentences of one stage and what scores them.

    Attributes:
        lines: the sentences (the first ``n`` non-empty lines of ``path``).
        path: the text file.
        language: the source language (for a language-encoded model's batches).
        kind: ``"mlm"`` or ``"clm"``.
        seed: the stages seed (masks).
    """

    lines: tuple[str, ...]
    path: Path
    language: str | None
    kind: str
    seed: int

    def score(self, model: Any, tokenizer: Any, *, encoding: Any = None, device: str = "cpu") -> dict[str, float]:
        """``{"loss", "perplexity", "tokens"}`` of ``model`` (under ``tokenizer``) on the sentences."""
        width = MAX_LENGTH - added_tokens(model)
        if self.kind == "mlm":
            examples = masked_examples(tokenizer, self.lines, self.seed, width)
            scores = masked_lm_scores(model, examples, pad_id=tokenizer.pad_token_id, batch_size=BATCH_SIZE,
                                      device=device, encoding=encoding, language=self.language, show_progress=False)  # fmt: skip
            return {"loss": float(scores["loss"]), "perplexity": float(scores["perplexity"]),
                    "tokens": int(scores["masked_tokens"])}  # fmt: skip
        return causal_scores(
            model, tokenizer, self.lines, width, encoding=encoding, language=self.language, device=device
        )


def probe_for(ctx: TaskContext, kind: str, n: int | None, path: str | None) -> tuple[Probe | None, str | None]:
    """The stage's probe, or ``(None, why not)``: turned off (``n == 0``) or no source text known.

    ``path`` (``LaptConfig.forgetting_file``) wins; else the world's source language, ``test`` split.

    Raises:
        FileNotFoundError, ValueError: ``path`` names a missing or empty file (the message names it).
    """
    n = DEFAULT_EXAMPLES if n is None else n
    if n == 0:
        return None, "off (forgetting_examples=0)"
    if path is None:
        if ctx.data_root is None or ctx.source_language is None:
            return None, "no held-out source text: no world in the trial; set lapt config 'forgetting_file'"
        from harness.world import World  # the world generator room; imported lazily

        path = str(World(ctx.data_root).text(ctx.source_language, "test"))
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(f"lapt: forgetting_file not found: {file}")
    lines = tuple(text_lines(file, strip=True, limit=n, what="lapt: forgetting_file"))
    if not lines:
        raise ValueError(f"lapt: forgetting_file {file} contains no non-empty line")
    return Probe(lines, file, ctx.source_language, kind, derive(ctx.seed, "lapt", "forgetting")), None


def masked_examples(
    tokenizer: Any, lines: Sequence[str], seed: int, max_length: int
) -> list[tuple[list[int], list[int]]]:
    """Tokenize and mask ``lines``; example ``i`` draws from ``derive(seed, "mask", i)`` only."""
    if tokenizer.mask_token_id is None or tokenizer.pad_token_id is None:
        raise ValueError("lapt: the forgetting measurement of a masked LM needs a tokenizer with mask and pad tokens")
    specials = set(tokenizer.all_special_ids)
    replacement = torch.tensor([i for i in range(len(tokenizer)) if i not in specials], dtype=torch.long)
    enc = tokenizer(list(lines), truncation=True, max_length=max_length, return_special_tokens_mask=True)
    return [
        mask_example(
            ids,
            special,
            seed=derive(seed, "mask", str(i)),
            mask_token_id=tokenizer.mask_token_id,
            replacement_ids=replacement,
        )  # fmt: skip
        for i, (ids, special) in enumerate(zip(enc["input_ids"], enc["special_tokens_mask"]))
    ]


def causal_scores(model: Any, tokenizer: Any, lines: Sequence[str], max_length: int, *, encoding: Any = None,
                  language: str | None = None, device: str = "cpu") -> dict[str, float]:  # fmt: skip
    """Token-weighted causal-LM loss of ``model`` on ``lines``: each sentence on its own (tokenized with
    the tokenizer's specials, truncated to ``max_length``), every token after the first predicted."""
    prepare = batch_preparer(model, encoding)
    encoded = getattr(model, "prepare_batch", None) is not None or (
        encoding is not None and getattr(encoding, "registry_name", None) != "none"
    )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rows = [ids for ids in tokenizer(list(lines), truncation=True, max_length=max_length)["input_ids"] if len(ids) > 1]
    if not rows:
        raise ValueError("lapt: no held-out source sentence has two tokens to score")
    nll, count = 0.0, 0
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            for start in range(0, len(rows), BATCH_SIZE):
                chunk = rows[start : start + BATCH_SIZE]
                width = max(map(len, chunk))
                ids = torch.full((len(chunk), width), pad, dtype=torch.long)
                mask = torch.zeros_like(ids)
                for i, r in enumerate(chunk):
                    ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
                batch = {"input_ids": ids, "attention_mask": mask}
                if encoded:
                    batch = prepare(batch, [language] * len(chunk))
                logits = strip_added(batch, model(**{k: v.to(device) for k, v in batch.items()}).logits).float()
                gold = ids[:, 1:].to(logits.device)
                keep = mask[:, 1:].bool().to(logits.device)
                token_nll = torch.nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), gold, reduction="none")
                nll += float(token_nll[keep].sum(dtype=torch.float64))
                count += int(keep.sum())
    finally:
        model.train(was_training)
    loss = nll / count
    return {"loss": loss, "perplexity": math.exp(loss) if loss < 700 else math.inf, "tokens": count}


def original_scores(ctx: TaskContext, probe: Probe, model_cls: type, device: str) -> dict[str, float] | None:
    """(a): the source model the trial started from, with its own tokenizer; ``None`` outside a trial."""
    if ctx.source_model is None or ctx.source_tokenizer is None:
        return None
    from harness.language_encoding import ENCODING_FILE, load_encoded

    src = Path(ctx.source_model)
    with torch.random.fork_rng(devices=[]):  # loading may draw from the global RNG; the caller's stays put
        if (src / ENCODING_FILE).is_file():  # a source pretrained with a language encoding keeps it
            model = load_encoded(src, model_cls, device)
        else:
            model = model_cls.from_pretrained(src).to(device)
    return probe.score(model, ctx.source_tokenizer, device=device)


def summary(probe: Probe, original: dict | None, before: dict, after: dict, seconds: float) -> tuple[dict, dict]:
    """``(metrics, info)`` of a measurement: the flat numbers for the stage's metrics, the details for its info."""
    metrics = {
        "source_loss_original": None if original is None else original["loss"],
        "source_loss_before": before["loss"],
        "source_loss_after": after["loss"],
        "source_forgetting": after["loss"] - before["loss"],
    }
    info = {
        "definition": DEFINITION,
        "objective": probe.kind,
        "file": str(probe.path),
        "language": probe.language,
        "sentences": len(probe.lines),
        "max_length": MAX_LENGTH,
        "original": original,
        "before": before,
        "after": after,
        "seconds": round(seconds, 3),
    }
    return metrics, info


@dataclass
class Measurement:
    """Runs the three scores around a stage: :meth:`before` on the received model, :meth:`after` on the result."""

    probe: Probe | None
    reason: str | None
    device: str
    _original: dict | None = None
    _before: dict | None = None
    _seconds: float = 0.0

    def before(self, ctx: TaskContext, model_cls: type) -> None:
        """Score (a) and (b); call before the stage trains ``ctx.model`` in place."""
        if self.probe is None:
            return
        t0 = time.perf_counter()
        self._original = original_scores(ctx, self.probe, model_cls, self.device)
        self._before = self.probe.score(ctx.model, ctx.tokenizer, encoding=ctx.encoding, device=self.device)
        self._seconds += time.perf_counter() - t0

    def after(self, ctx: TaskContext, model: Any) -> tuple[dict, dict]:
        """Score (c); ``(metrics to merge into the stage's metrics, the record's info["forgetting"])``."""
        if self.probe is None or self._before is None:
            return {}, {"skipped": self.reason}
        t0 = time.perf_counter()
        after = self.probe.score(model, ctx.tokenizer, encoding=ctx.encoding, device=self.device)
        return summary(self.probe, self._original, self._before, after, self._seconds + time.perf_counter() - t0)


__all__ = ["DEFAULT_EXAMPLES", "DEFINITION", "Probe", "probe_for", "Measurement", "summary"]
