"""``qa``: extractive question answering (SQuAD format), scored by SQuAD exact match and F1.

Pre- and post-processing follow HF ``run_qa`` (which the FOCUS paper used): question and
context are tokenized as a pair, the context is cut into windows of ``max_length`` tokens
overlapping by ``doc_stride`` tokens; a training window whose span does not contain the (first)
gold answer is labelled with the CLS position. At evaluation, the ``n_best`` start and end
logits of every window are combined into spans of at most ``max_answer_length`` tokens inside
the context, mapped back to characters with the offset mapping, and the highest-scoring span
over all windows of a question is its prediction (SQuAD v1: always an answer). EM/F1 are in
[0, 100] (official SQuAD script).

With the ``attached`` language encoding, windows are cut to ``max_length - 1`` tokens; the
inserted language token shifts ``start_positions``/``end_positions`` in the batch and is dropped
from the start/end logits before they are matched with the windows' offsets.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.protocols import TaskContext, TaskResult
from harness.registry import register_task
from tasks import metrics
from tasks.data import added_tokens, encoded_once, language_collate, limit, load_task_splits, strip_added, token_lengths
from tasks.loop import (
    FINETUNE_KEYS,
    LanguageRun,
    TrainConfig,
    build_task_model,
    check_max_length,
    finetune,
    pad_collate,
    predict,
    resolve_device,
    run_per_language,
    train_block,
)


@dataclass(frozen=True)
class QaConfig:
    """Configuration of :class:`Qa`. Defaults: FOCUS Table 6 (QA column) and HF ``run_qa``."""

    FLAT_BLOCKS = {"train": FINETUNE_KEYS}
    """The ``train`` keys are stored flat in the resolved config (trial ids of the flat layout kept)."""

    dataset: str | None = None
    """Hub data set for real languages: ``germanquad`` or ``tydiqa`` (default: the language table's)."""
    files: str | None = None
    """Local SQuAD-format JSONL path template with ``{lang}`` and ``{split}``."""
    # FOCUS used the HF example default learning rate for QA (value lost in extraction; 3e-5 is the
    # run_qa README value, check against the PDF), batch 64, 5 epochs (footnote lost in extraction)
    train: TrainConfig = train_block(learning_rate=3e-5, batch_size=64, epochs=5)
    """Optimization (:class:`tasks.loop.TrainConfig`; its keys may also be given flat)."""
    max_length: int = 384
    """Tokens per question+context window (FOCUS/run_qa: 384)."""
    doc_stride: int = 128
    """Overlap between consecutive context windows, in tokens (run_qa: 128)."""
    max_answer_length: int = 30
    """Longest predicted answer in tokens (run_qa: 30)."""
    n_best: int = 20
    """Start/end candidates per window considered in post-processing (run_qa: 20)."""
    max_train_examples: int | None = None
    """First N questions for training (before windowing)."""
    max_eval_examples: int | None = None
    """First N dev and test questions (before windowing)."""

    def __post_init__(self) -> None:
        if not 0 <= self.doc_stride < self.max_length:
            raise ValueError(f"doc_stride must be in [0, max_length), got {self.doc_stride}")
        if self.max_answer_length < 1 or self.n_best < 1:
            raise ValueError("max_answer_length and n_best must be >= 1")


def _tokenize(tokenizer: Any, ds: Any, cfg: QaConfig) -> Any:
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError("qa: a fast tokenizer (offset mapping) is required")
    if tokenizer.padding_side != "right":
        raise ValueError("qa: the tokenizer must pad on the right (question first, context second)")
    questions = [q.lstrip() for q in ds["question"]]
    room = cfg.max_length - tokenizer.num_special_tokens_to_add(pair=True)
    q_lens = [len(ids) for ids in tokenizer(questions, add_special_tokens=False)["input_ids"]]
    longest = max(range(len(q_lens)), key=q_lens.__getitem__)
    if room - q_lens[longest] <= cfg.doc_stride:
        raise ValueError(
            f"qa: max_length={cfg.max_length} leaves {room - q_lens[longest]} context tokens for the question "
            f"{questions[longest][:80]!r} ({q_lens[longest]} tokens), not more than doc_stride={cfg.doc_stride}; "
            "raise max_length or lower doc_stride"
        )
    return tokenizer(
        questions,
        list(ds["context"]),
        truncation="only_second",
        max_length=cfg.max_length,
        stride=cfg.doc_stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )


def _keys(enc: Any) -> list[str]:
    return [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]


def encode_train(tokenizer: Any, ds: Any, cfg: QaConfig) -> list[dict]:
    """Windows of training questions with ``start_positions``/``end_positions`` (token indices)."""
    enc = _tokenize(tokenizer, ds, cfg)
    keys = _keys(enc)
    answers = ds["answers"]
    features = []
    for i, offsets in enumerate(enc["offset_mapping"]):
        ids = enc["input_ids"][i]
        cls_index = ids.index(tokenizer.cls_token_id) if tokenizer.cls_token_id in ids else 0
        seq = enc.sequence_ids(i)
        ans = answers[enc["overflow_to_sample_mapping"][i]]
        start_pos = end_pos = cls_index
        if ans["answer_start"]:
            start_char = ans["answer_start"][0]
            end_char = start_char + len(ans["text"][0])
            ctx_tokens = [t for t, s in enumerate(seq) if s == 1]
            if ctx_tokens and offsets[ctx_tokens[0]][0] <= start_char and offsets[ctx_tokens[-1]][1] >= end_char:
                start_pos = next(t for t in ctx_tokens if offsets[t][1] > start_char)
                end_pos = next(t for t in reversed(ctx_tokens) if offsets[t][0] < end_char)
        features.append({**{k: enc[k][i] for k in keys}, "start_positions": start_pos, "end_positions": end_pos})
    return features


def encode_eval(tokenizer: Any, ds: Any, cfg: QaConfig) -> tuple[list[dict], list[int], list[list]]:
    """Windows of evaluation questions.

    Returns:
        ``(features, example_index, context_offsets)``: model inputs; the question index of each
        window; per window, the character span of each token, ``None`` outside the context.
    """
    enc = _tokenize(tokenizer, ds, cfg)
    keys = _keys(enc)
    features, example_index, offsets = [], [], []
    for i, offs in enumerate(enc["offset_mapping"]):
        seq = enc.sequence_ids(i)
        features.append({k: enc[k][i] for k in keys})
        example_index.append(enc["overflow_to_sample_mapping"][i])
        offsets.append([tuple(o) if s == 1 else None for o, s in zip(offs, seq)])
    return features, example_index, offsets


def best_spans(
    start_logits: list[np.ndarray],
    end_logits: list[np.ndarray],
    example_index: list[int],
    offsets: list[list],
    contexts: list[str],
    *,
    n_best: int,
    max_answer_length: int,
) -> list[str]:
    """Highest-scoring answer text per question over all its windows ("" when no valid span).

    Example:
        >>> best_spans([np.array([0., 5., 1.])], [np.array([0., 1., 6.])], [0], [[None, (0, 3), (4, 7)]],
        ...            ["one two"], n_best=2, max_answer_length=5)
        ['one two']
    """
    best: list[tuple[float, str]] = [(-np.inf, "")] * len(contexts)
    for s_log, e_log, ex, offs in zip(start_logits, end_logits, example_index, offsets):
        starts = np.argsort(s_log)[::-1][:n_best]
        ends = np.argsort(e_log)[::-1][:n_best]
        for s in starts:
            if s >= len(offs) or offs[s] is None:
                continue
            for e in ends:
                if e >= len(offs) or offs[e] is None or e < s or e - s + 1 > max_answer_length:
                    continue
                score = float(s_log[s] + e_log[e])
                if score > best[ex][0]:
                    best[ex] = (score, contexts[ex][offs[s][0] : offs[e][1]])
    return [text for _, text in best]


@register_task("qa", config=QaConfig, description="Extractive QA (SQuAD EM/F1) with sliding windows")
class Qa:
    """Extractive QA on SQuAD-format data, fine-tuned with the shared loop."""

    model_kind = "mlm"
    metrics = ("exact_match", "f1")
    """Metrics every language of a complete record carries (resume re-runs a record lacking one)."""

    def __init__(self, config: QaConfig) -> None:
        self.config = config

    def _scores(self, model: Any, ds: Any, enc: tuple, collate: Any, device: str, show: bool, desc: str) -> dict:
        cfg = self.config
        features, example_index, offsets = enc

        def output_fn(batch: dict, out: Any) -> list:
            lengths = token_lengths(batch)
            s = strip_added(batch, out.start_logits).float().cpu().numpy()
            e = strip_added(batch, out.end_logits).float().cpu().numpy()
            return [(s[i, :n], e[i, :n]) for i, n in enumerate(lengths)]

        logits = predict(
            model,
            features,
            collate,
            output_fn,
            device=device,
            show_progress=show,
            **cfg.train.predict_options(features),
            description=desc,
        )
        texts = best_spans(
            [s for s, _ in logits],
            [e for _, e in logits],
            example_index,
            offsets,
            list(ds["context"]),
            n_best=cfg.n_best,
            max_answer_length=cfg.max_answer_length,
        )
        ids = [str(i) for i in ds["id"]]
        preds = dict(zip(ids, texts))
        refs = {qid: list(a["text"]) for qid, a in zip(ids, ds["answers"])}
        return metrics.squad_scores_with_examples(preds, refs)

    def run(self, ctx: TaskContext) -> TaskResult:
        """Fine-tune and score separately on every language of ``ctx.languages``."""
        check_max_length(ctx.model, self.config.max_length, "qa")
        out = TaskResult(metrics={}, info={"data": {}, "finetune": {}})
        return run_per_language(out, ctx.languages, lambda lang: LanguageRun(*self._run_language(ctx, lang)))

    def _run_language(self, ctx: TaskContext, lang: str) -> tuple[Any, dict, dict, dict]:
        from transformers import AutoModelForQuestionAnswering

        cfg = self.config
        device = resolve_device(ctx.device)
        tok = ctx.tokenizer
        data, info = load_task_splits("qa", lang, files=cfg.files, data_root=ctx.data_root, dataset=cfg.dataset)
        train_ds = limit(data["train"], cfg.max_train_examples)
        dev_ds, test_ds = limit(data["dev"], cfg.max_eval_examples), limit(data["test"], cfg.max_eval_examples)
        model, head = build_task_model(ctx.model, AutoModelForQuestionAnswering, seed=ctx.seed, device=device)
        collate = language_collate(pad_collate(tok.pad_token_id), model, lang, encoding=ctx.encoding)
        # windows leave room for an attached language token
        wcfg = dataclasses.replace(cfg, max_length=cfg.max_length - added_tokens(model))
        windows = {k: getattr(wcfg, k) for k in ("max_length", "doc_stride")}
        train = encoded_once("qa-train", tok, train_ds, windows, lambda: encode_train(tok, train_ds, wcfg))
        dev, test = (encoded_once("qa-eval", tok, ds, windows, lambda ds=ds: encode_eval(tok, ds, wcfg)) for ds in (dev_ds, test_ds))
        result = finetune(
            model,
            train,
            lambda m: self._scores(m, dev_ds, dev, collate, device, ctx.progress, f"qa dev {lang}"),
            lambda m: self._scores(m, test_ds, test, collate, device, ctx.progress, f"qa test {lang}"),
            cfg.train,
            ctx.seed,
            collate_fn=collate,
            select_metric="f1",
            device=device,
            show_progress=ctx.progress,
            description=f"qa {lang}",
        )
        counts = {
            "train": len(train_ds),
            "dev": len(dev_ds),
            "test": len(test_ds),
            "train_windows": len(train),
            "dev_windows": len(dev[0]),
            "test_windows": len(test[0]),
        }
        return result, counts, info, head
