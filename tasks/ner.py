"""``ner``: named-entity recognition (token classification), scored by seqeval entity F1.

Labelling follows the HF ``run_ner`` convention the FOCUS paper used: the first subword of each
word carries the word's label, the other subwords and special tokens are ignored (-100) in the
loss, and the prediction of a word is the prediction at its first subword. Words cut off by
``max_length`` are predicted ``O`` (so their gold entities count as misses; the count of such
words is recorded in ``info``). The seqeval mode (``default`` or ``strict`` IOB2) is recorded.

With the ``attached`` language encoding, words are tokenized to ``max_length - 1`` tokens; the
inserted language token has label -100 and is dropped from the predictions before they are
matched with the words' first subwords.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.protocols import TaskContext, TaskResult
from harness.registry import register_task
from tasks import metrics
from tasks.data import (
    added_tokens,
    encoded_once,
    language_collate,
    limit,
    load_task_splits,
    ner_label_names,
    strip_added,
    token_lengths,
)
from tasks.loop import (
    FINETUNE_KEYS,
    IGNORE_INDEX,
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
class NerConfig:
    """Configuration of :class:`Ner`. Defaults: FOCUS Table 6 (WikiANN column)."""

    FLAT_BLOCKS = {"train": FINETUNE_KEYS}
    """The ``train`` keys are stored flat in the resolved config (trial ids of the flat layout kept)."""

    dataset: str = "wikiann"
    """Hub data set for real languages: ``wikiann``, ``masakhaner`` or ``germeval_14``."""
    files: str | None = None
    """Local JSONL path template with ``{lang}`` and ``{split}``; a ``labels.json`` next to the
    files names the tags (else WikiANN order)."""
    labels: tuple[str, ...] | None = None
    """Tag names by id, overriding the data's own."""
    seqeval_mode: str = "default"
    """``default`` (conlleval-compatible) or ``strict`` (IOB2)."""
    # FOCUS: the non-QA peak learning rate (value lost in extraction; 2e-5 as restated here), batch
    # 128, 5 epochs on WikiANN (25 on GermEval14 and MasakhaNER: override)
    train: TrainConfig = train_block(learning_rate=2e-5, batch_size=128, epochs=5)
    """Optimization (:class:`tasks.loop.TrainConfig`; its keys may also be given flat)."""
    max_length: int = 256
    """FOCUS: 256."""
    max_train_examples: int | None = None
    max_eval_examples: int | None = None

    def __post_init__(self) -> None:
        if self.seqeval_mode not in metrics.SEQEVAL_MODES:
            raise ValueError(f"seqeval_mode must be one of {metrics.SEQEVAL_MODES}, got {self.seqeval_mode!r}")
        if self.max_length < 4:
            raise ValueError(f"max_length must be >= 4, got {self.max_length}")


def encode_words(tokenizer: Any, ds: Any, max_length: int) -> tuple[list[dict], list[list[int | None]]]:
    """Tokenize pre-split words and label first subwords.

    Returns:
        ``(features, word_ids)``: model inputs with ``labels`` and, per feature, the word index of
        each token (None for special tokens).
    """
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError("ner: a fast tokenizer (word_ids) is required")
    enc = tokenizer(list(ds["tokens"]), is_split_into_words=True, truncation=True, max_length=max_length)
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
    features, all_word_ids = [], []
    for i, tags in enumerate(ds["ner_tags"]):
        word_ids = enc.word_ids(i)
        labels, previous = [], None
        for w in word_ids:
            labels.append(IGNORE_INDEX if w is None or w == previous else int(tags[w]))
            previous = w
        features.append({**{k: enc[k][i] for k in keys}, "labels": labels})
        all_word_ids.append(word_ids)
    return features, all_word_ids


def entity_scores(
    model: Any,
    features: list[dict],
    word_ids: list,
    gold: list[list[int]],
    names: list[str],
    cfg: NerConfig,
    collate: Any,
    device: str,
    show: bool,
    desc: str,
) -> tuple[dict, int]:
    """seqeval scores of ``model`` on encoded features; also the number of truncated words."""

    def output_fn(batch: dict, out: Any) -> list:
        lengths = token_lengths(batch)
        return [row[:n] for row, n in zip(strip_added(batch, out.logits.argmax(-1)).tolist(), lengths)]

    token_preds = predict(
        model,
        features,
        collate,
        output_fn,
        device=device,
        show_progress=show,
        **cfg.train.predict_options(features),
        description=desc,
    )
    y_true, y_pred, truncated = [], [], 0
    for preds, wids, tags in zip(token_preds, word_ids, gold):
        words = ["O"] * len(tags)
        seen = set()
        for p, w in zip(preds, wids):
            if w is not None and w not in seen:
                seen.add(w)
                words[w] = names[p]
        truncated += len(tags) - len(seen)
        y_true.append([names[t] for t in tags])
        y_pred.append(words)
    return metrics.seqeval_scores_with_examples(y_true, y_pred, mode=cfg.seqeval_mode), truncated


@register_task("ner", config=NerConfig, description="NER entity F1 (seqeval) on WikiANN-format data")
class Ner:
    """Token classification with first-subword labelling, fine-tuned with the shared loop."""

    model_kind = "mlm"
    metrics = ("f1", "precision", "recall")
    """Metrics every language of a complete record carries (resume re-runs a record lacking one)."""

    def __init__(self, config: NerConfig) -> None:
        self.config = config

    def run(self, ctx: TaskContext) -> TaskResult:
        """Fine-tune and score separately on every language of ``ctx.languages``."""
        check_max_length(ctx.model, self.config.max_length, "ner")
        mode = self.config.seqeval_mode
        out = TaskResult(
            metrics={},
            info={
                "seqeval": {"mode": mode, "scheme": "IOB2" if mode == "strict" else None},
                "data": {},
                "finetune": {},
            },
        )
        return run_per_language(out, ctx.languages, lambda lang: LanguageRun(*self._run_language(ctx, lang)))

    @staticmethod
    def _encode(tok: Any, ds: Any, length: int) -> tuple[list[dict], list[list[int | None]]]:
        return encoded_once("ner", tok, ds, {"max_length": length}, lambda: encode_words(tok, ds, length))

    def _run_language(self, ctx: TaskContext, lang: str) -> tuple[Any, dict, dict, dict]:
        from transformers import AutoModelForTokenClassification

        cfg = self.config
        device = resolve_device(ctx.device)
        tok = ctx.tokenizer
        data, info = load_task_splits("ner", lang, files=cfg.files, data_root=ctx.data_root, dataset=cfg.dataset)
        train_ds = limit(data["train"], cfg.max_train_examples)
        dev_ds, test_ds = limit(data["dev"], cfg.max_eval_examples), limit(data["test"], cfg.max_eval_examples)
        names = ner_label_names(data["train"], template_file=info.get("files", {}).get("train"), labels=cfg.labels)
        for ds in (dev_ds, test_ds):
            ner_label_names(ds, labels=tuple(names))  # tag ids must fit the label list
        model, head = build_task_model(
            ctx.model,
            AutoModelForTokenClassification,
            seed=ctx.seed,
            device=device,
            num_labels=len(names),
            id2label=dict(enumerate(names)),
            label2id={n: i for i, n in enumerate(names)},
        )
        collate = language_collate(pad_collate(tok.pad_token_id), model, lang, encoding=ctx.encoding)
        length = cfg.max_length - added_tokens(model)  # room for an attached language token
        train, _ = self._encode(tok, train_ds, length)
        dev, dev_wids = self._encode(tok, dev_ds, length)
        test, test_wids = self._encode(tok, test_ds, length)
        dev_gold, test_gold = list(dev_ds["ner_tags"]), list(test_ds["ner_tags"])
        truncated: dict[str, int] = {}

        def dev_eval(m: Any) -> dict:
            s, truncated["dev"] = entity_scores(
                m, dev, dev_wids, dev_gold, names, cfg, collate, device, ctx.progress, f"ner dev {lang}"
            )
            return s

        def test_eval(m: Any) -> dict:
            s, truncated["test"] = entity_scores(
                m, test, test_wids, test_gold, names, cfg, collate, device, ctx.progress, f"ner test {lang}"
            )
            return s

        result = finetune(
            model,
            train,
            dev_eval,
            test_eval,
            cfg.train,
            ctx.seed,
            collate_fn=collate,
            select_metric="f1",
            device=device,
            show_progress=ctx.progress,
            description=f"ner {lang}",
        )
        counts = {"train": len(train), "dev": len(dev), "test": len(test)}
        return result, counts, {**info, "labels": names, "truncated_words": truncated}, head
