"""``mlm-at-init``: masked-LM loss and accuracy of a model right after initialization.

The evaluation masks are a function of the *evaluation* seed (``mask_seed``), the example index
and the tokenized example only — never of the trial seed, the model, the batch size or padding —
so every initialization method that uses the same tokenizer is scored on identical masks
(METHODS.md, "Metrics"). Loss and accuracy are token-weighted: the sum over all masked positions
of the evaluation set divided by their number.

Speed without changing the numbers: the masked examples of a (tokenizer, evaluation file, config)
are built once per process and reused by every later trial with the same content
(:func:`evaluation_examples`); batches group examples of similar length; the LM head runs only
at the masked positions. Per-token losses are summed in float64, so the scores agree with a
full-logits evaluation of every position to float32 rounding (tests: within 1e-6).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.cache import ProcessMemo, file_hash
from harness.examples import ExampleScores, Scores, attach
from harness.files import text_lines
from harness.protocols import TaskContext, TaskResult
from harness.registry import register_task
from harness.seeding import derive
from harness.tokenizers import tokenizer_state
from tasks.data import added_tokens, batch_preparer
from tasks.loop import HeadAtPositions, length_batches, progress

IGNORE_INDEX = -100


@dataclass(frozen=True)
class MlmAtInitConfig:
    """Configuration of :class:`MlmAtInit`."""

    eval_file: str | None = None
    """Text file (one example per line) to evaluate on instead of the world's held-out text.
    May contain ``{lang}``, replaced by each evaluated language."""
    split: str = "test"
    """World text split used when ``eval_file`` is not given."""
    max_eval_examples: int | None = 2000
    """Use the first N non-empty lines (None: all). Bounded by default so the quickstart stays
    fast on 2 CPU cores; the number actually used is recorded in ``counts``."""
    max_length: int = 128
    """Truncate each example to this many tokens, special tokens included."""
    batch_size: int = 32
    """Evaluation batch size (does not affect the masks or the result)."""
    mask_seed: int = 1234
    """Evaluation seed for the mask positions; independent of the trial seed on purpose."""
    mlm_probability: float = 0.15
    """Fraction of (non-special) tokens selected for prediction (BERT/RoBERTa: 15%)."""
    mask_token_fraction: float = 0.8
    """Of the selected tokens, the fraction replaced by the mask token (BERT: 80%)."""
    random_token_fraction: float = 0.1
    """Of the selected tokens, the fraction replaced by a random non-special token (BERT: 10%);
    the rest (10%) keep their original token."""

    def __post_init__(self) -> None:
        if self.max_length < 3:
            raise ValueError(f"max_length must be >= 3, got {self.max_length}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_eval_examples is not None and self.max_eval_examples < 1:
            raise ValueError(f"max_eval_examples must be >= 1 or None, got {self.max_eval_examples}")
        if not 0.0 < self.mlm_probability < 1.0:
            raise ValueError(f"mlm_probability must be in (0, 1), got {self.mlm_probability}")
        if (
            self.mask_token_fraction < 0
            or self.random_token_fraction < 0
            or self.mask_token_fraction + self.random_token_fraction > 1
        ):
            raise ValueError(
                "mask_token_fraction and random_token_fraction must be >= 0 and sum to <= 1, "
                f"got {self.mask_token_fraction} and {self.random_token_fraction}"
            )


def read_lines(path: Path, limit: int | None = None) -> list[str]:
    """Non-empty, stripped lines of a UTF-8 text file (the first ``limit`` of them).

    Raises:
        FileNotFoundError: naming the file when it does not exist.
        ValueError: naming the file when it is not UTF-8 or has no non-empty line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"mlm-at-init: evaluation text file not found: {path}")
    lines = list(text_lines(path, strip=True, limit=limit, what="mlm-at-init: evaluation text file"))
    if not lines:
        raise ValueError(f"mlm-at-init: {path} contains no non-empty line")
    return lines


def mask_example(
    input_ids: list[int],
    special_mask: list[int],
    *,
    seed: int,
    mask_token_id: int,
    replacement_ids: torch.Tensor,
    mlm_probability: float = 0.15,
    mask_token_fraction: float = 0.8,
    random_token_fraction: float = 0.1,
) -> tuple[list[int], list[int]]:
    """Apply 80/10/10 BERT masking to one tokenized example with its own generator.

    Three draws of the example's length are always made, in a fixed order, from a generator
    seeded with ``seed``; the result therefore depends only on ``seed`` and the example, not on
    batching. Special tokens (and padding, which is added later) are never selected.

    Args:
        input_ids: token ids of the example, special tokens included.
        special_mask: 1 where ``input_ids`` holds a special token.
        seed: seed of this example's generator.
        mask_token_id: id of the tokenizer's mask token.
        replacement_ids: 1-D LongTensor of the ids random replacements are drawn from.
        mlm_probability: selection probability per non-special token.
        mask_token_fraction: fraction of selected tokens replaced by the mask token.
        random_token_fraction: fraction of selected tokens replaced by a random token.

    Returns:
        ``(masked_input_ids, labels)`` with labels ``-100`` at unselected positions.

    Example:
        >>> ids, labels = mask_example([0, 5, 6, 7, 2], [1, 0, 0, 0, 1], seed=3, mask_token_id=4,
        ...                            replacement_ids=torch.tensor([5, 6, 7]), mlm_probability=0.99)
        >>> labels[0], labels[-1]
        (-100, -100)
    """
    n = len(input_ids)
    g = torch.Generator().manual_seed(seed)
    select_u = torch.rand(n, generator=g)
    action_u = torch.rand(n, generator=g)
    random_pick = torch.randint(len(replacement_ids), (n,), generator=g)
    ids = torch.tensor(input_ids, dtype=torch.long)
    selected = (select_u < mlm_probability) & (torch.tensor(special_mask, dtype=torch.long) == 0)
    labels = torch.where(selected, ids, torch.full_like(ids, IGNORE_INDEX))
    to_mask = selected & (action_u < mask_token_fraction)
    to_random = selected & (action_u >= mask_token_fraction) & (action_u < mask_token_fraction + random_token_fraction)
    out = ids.clone()
    out[to_mask] = mask_token_id
    out[to_random] = replacement_ids[random_pick[to_random]]
    return out.tolist(), labels.tolist()


def build_masked_examples(tokenizer: Any, texts: list[str], cfg: MlmAtInitConfig) -> list[tuple[list[int], list[int]]]:
    """Tokenize and mask ``texts`` deterministically (see :func:`mask_example`).

    Example ``i`` is masked with the seed ``derive(cfg.mask_seed, "mlm-at-init", "mask", str(i))``.
    """
    if tokenizer.mask_token_id is None:
        raise ValueError("mlm-at-init: the tokenizer has no mask token")
    if tokenizer.pad_token_id is None:
        raise ValueError("mlm-at-init: the tokenizer has no padding token")
    specials = set(tokenizer.all_special_ids)
    replacement_ids = torch.tensor([i for i in range(len(tokenizer)) if i not in specials], dtype=torch.long)
    enc = tokenizer(texts, truncation=True, max_length=cfg.max_length, return_special_tokens_mask=True)
    out = []
    for i, (ids, special) in enumerate(zip(enc["input_ids"], enc["special_tokens_mask"])):
        out.append(
            mask_example(
                ids,
                special,
                seed=derive(cfg.mask_seed, "mlm-at-init", "mask", str(i)),
                mask_token_id=tokenizer.mask_token_id,
                replacement_ids=replacement_ids,
                mlm_probability=cfg.mlm_probability,
                mask_token_fraction=cfg.mask_token_fraction,
                random_token_fraction=cfg.random_token_fraction,
            )
        )
    return out


def _collate(examples: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids`` (``pad_id``), ``attention_mask`` and ``labels`` (``-100``) of a batch.

    Filled with one numpy assignment per array (a tensor per row cost more than the rest of the batch's
    bookkeeping); the integers are the same either way.

    Example:
        >>> b = _collate([((5, 6, 7), (-100, 6, -100)), ((8,), (8,))], pad_id=1)
        >>> b["input_ids"].tolist(), b["attention_mask"].tolist(), b["labels"].tolist()
        ([[5, 6, 7], [8, 1, 1]], [[1, 1, 1], [1, 0, 0]], [[-100, 6, -100], [8, -100, -100]])
    """
    n = len(examples)
    id_lens = np.fromiter((len(ids) for ids, _ in examples), dtype=np.int64, count=n)
    lab_lens = np.fromiter((len(lab) for _, lab in examples), dtype=np.int64, count=n)
    width = int(id_lens.max())
    cols = np.arange(width)
    in_ids, in_lab = cols < id_lens[:, None], cols < lab_lens[:, None]
    input_ids = np.full((n, width), pad_id, dtype=np.int64)
    labels = np.full((n, width), IGNORE_INDEX, dtype=np.int64)
    input_ids[in_ids] = np.fromiter((t for ids, _ in examples for t in ids), dtype=np.int64, count=int(id_lens.sum()))
    labels[in_lab] = np.fromiter((t for _, lab in examples for t in lab), dtype=np.int64, count=int(lab_lens.sum()))
    return {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(in_ids.astype(np.int64)),
            "labels": torch.from_numpy(labels)}


def masked_lm_scores(
    model: Any,
    examples: Sequence[tuple[Sequence[int], Sequence[int]]],
    *,
    pad_id: int,
    batch_size: int = 32,
    device: str = "cpu",
    encoding: Any = None,
    language: str | None = None,
    show_progress: bool = True,
) -> dict[str, float]:
    """Token-weighted MLM loss and accuracy of ``model`` on pre-masked examples.

    Batches hold examples of similar length (:func:`tasks.loop.length_batches`), the forward runs
    under ``torch.inference_mode`` and the LM head is applied only at the masked positions
    (:class:`tasks.loop.HeadAtPositions`). Per-token losses are summed in float64, so the result
    does not depend on the batching beyond float32 rounding of the logits (tests compare it with
    the full-logits evaluation of every position to 1e-6).

    A language-encoded ``model`` prepares each batch itself (language ids; the inserted token of
    ``attached``, labelled -100); a third-party ``encoding`` goes through
    ``encoding.prepare(batch, languages)``, which must return ``labels`` aligned with its
    ``input_ids`` (``-100`` at added positions). See :func:`tasks.data.batch_preparer`.

    Returns:
        ``{"loss", "accuracy", "perplexity", "masked_tokens"}`` as :class:`harness.examples.Scores`
        carrying each example's NLL, hits and masked tokens behind the first three.
    """
    prepare = batch_preparer(model, encoding)
    encoded = getattr(model, "prepare_batch", None) is not None or (
        encoding is not None and getattr(encoding, "registry_name", None) != "none"
    )
    was_training = model.training
    model.eval()
    total_nll, total_correct, total_count = 0.0, 0, 0
    per_example = np.zeros((len(examples), 3))  # nll, correct, masked tokens of each example
    batches = length_batches([len(ids) for ids, _ in examples], batch_size)
    try:
        with torch.inference_mode(), HeadAtPositions(model) as head:
            for rows in progress(batches, description=f"mlm-at-init {language or ''}".strip(), enabled=show_progress):
                batch = _collate([examples[i] for i in rows], pad_id)
                if encoded:
                    batch = prepare(batch, [language] * batch["input_ids"].shape[0])
                    if "labels" not in batch or batch["labels"].shape != batch["input_ids"].shape:
                        raise ValueError("mlm-at-init: encoding.prepare must keep 'labels' aligned with 'input_ids'")
                labels = batch.pop("labels").to(device)
                sel = labels != IGNORE_INDEX
                if not bool(sel.any()):
                    continue
                inputs = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
                picked = head.logits(model, inputs, sel).float()
                gold = labels[sel]
                nll = torch.nn.functional.cross_entropy(picked, gold, reduction="none")
                hit = picked.argmax(-1) == gold
                total_nll += float(nll.sum(dtype=torch.float64))
                total_correct += int(hit.sum())
                total_count += int(sel.sum())
                owner = sel.nonzero()[:, 0].cpu()  # batch row of each masked token (row-major, as sel picks)
                sums = torch.zeros(len(rows), 3, dtype=torch.float64)
                sums.index_add_(0, owner, torch.stack([nll.detach().double().cpu(), hit.double().cpu(),
                                                       torch.ones_like(owner, dtype=torch.float64)], dim=1))
                per_example[np.asarray(rows)] += sums.numpy()
    finally:
        model.train(was_training)
    if total_count == 0:
        raise ValueError("mlm-at-init: no token was masked; the evaluation set is empty or too short")
    loss = total_nll / total_count
    nll_rows, hit_rows = per_example[:, [0, 2]], per_example[:, [1, 2]]
    return Scores({
        "loss": loss,
        "accuracy": total_correct / total_count,
        "perplexity": math.exp(loss) if loss < 700 else float("inf"),
        "masked_tokens": total_count,
    }, {"loss": ExampleScores("ratio", nll_rows), "accuracy": ExampleScores("ratio", hit_rows),
        "perplexity": ExampleScores("exp_ratio", nll_rows)})


# Evaluation sets of this process, keyed by what determines them (see :func:`evaluation_examples`):
# every trial of a grid that shares a tokenizer and a language scores the same masked examples.
MEMO_ENTRIES = 8
"""Evaluation sets kept per process (a quickstart grid has four: two target tokenizers and the
source tokenizer, on two languages); the least recently used is dropped beyond that."""
_EXAMPLES_MEMO = ProcessMemo(MEMO_ENTRIES)


def evaluation_examples(
    tokenizer: Any, path: Path, cfg: MlmAtInitConfig
) -> tuple[tuple[tuple[tuple[int, ...], tuple[int, ...]], ...], int]:
    """The masked evaluation examples of ``path`` (and the number of lines used), built once per process.

    A memo keyed by the sha256 of the file's bytes, :func:`tokenizer_state` and the config fields
    that shape the examples (everything but ``batch_size``) returns the examples of an earlier
    trial when all of them agree; the examples are a pure function of these (see
    :func:`build_masked_examples`), so a trial gets exactly what it would have built.

    Raises:
        FileNotFoundError, ValueError: as :func:`read_lines`.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"mlm-at-init: evaluation text file not found: {path}")
    state = tokenizer_state(tokenizer)
    key = None
    if state is not None:
        fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "batch_size"}
        key = hashlib.sha256(json.dumps([file_hash(path), state, fields], sort_keys=True).encode()).hexdigest()

    def build() -> tuple[tuple[tuple[tuple[int, ...], tuple[int, ...]], ...], int]:
        texts = read_lines(path, cfg.max_eval_examples)
        examples = tuple((tuple(ids), tuple(labels)) for ids, labels in build_masked_examples(tokenizer, texts, cfg))
        return examples, len(texts)

    return _EXAMPLES_MEMO.get(key, build)


@register_task(
    "mlm-at-init",
    config=MlmAtInitConfig,
    description="MLM loss/accuracy right after initialization on held-out target text",
)
class MlmAtInit:
    """Masked-LM loss and accuracy on held-out target-language text, with fixed evaluation masks."""

    model_kind = "mlm"
    needs_lm_head = True
    """Scores the source model's own masked-LM head: a checkpoint without one is refused (never a random head)."""
    metrics = ("loss", "accuracy", "perplexity")
    """Metrics every language of a complete record carries (resume re-runs a record lacking one)."""

    def __init__(self, config: MlmAtInitConfig) -> None:
        self.config = config

    def eval_path(self, ctx: TaskContext, lang: str) -> Path:
        """The text file evaluated for ``lang``: ``eval_file`` or the world's held-out split."""
        if self.config.eval_file is not None:
            return Path(self.config.eval_file.format(lang=lang))
        if ctx.data_root is None:
            raise ValueError("mlm-at-init: set config 'eval_file' (no world directory in the task context)")
        from harness.world import World  # the world generator room; imported lazily

        return Path(World(ctx.data_root).text(lang, self.config.split))

    def run(self, ctx: TaskContext) -> TaskResult:
        """Score ``ctx.model`` on every language in ``ctx.languages``."""
        cfg = self.config
        metrics: dict[str, dict[str, float]] = {}
        counts: dict[str, dict[str, int]] = {}
        files: dict[str, str] = {}
        examples_out: dict = {}
        for lang in ctx.languages:
            path = self.eval_path(ctx, lang)
            # an attached language token takes one of the max_length positions
            ecfg = dataclasses.replace(cfg, max_length=cfg.max_length - added_tokens(ctx.model))
            examples, n_texts = evaluation_examples(ctx.tokenizer, path, ecfg)
            scores = masked_lm_scores(
                ctx.model,
                examples,
                pad_id=ctx.tokenizer.pad_token_id,
                batch_size=cfg.batch_size,
                device=ctx.device,
                encoding=ctx.encoding,
                language=lang,
                show_progress=ctx.progress,
            )
            n_masked = int(scores.pop("masked_tokens"))
            metrics[lang] = attach(examples_out, lang, scores)
            counts[lang] = {"test": n_texts, "masked_tokens": n_masked}
            files[lang] = str(path)
        return TaskResult(metrics=metrics, counts=counts, info={"eval_files": files, "mask_seed": cfg.mask_seed},
                          examples=examples_out)
