"""Sentence embeddings for the no-training encoder tasks (``bitext-retrieval``, ``teacher-agreement``).

What both tasks share, measured one way:

* :class:`SentenceConfig` — the evaluation text and how a sentence becomes a vector (pooling as the
  model's card says: e5 mean-pools every token of ``"query: " + text``; the built-in world's models
  have no card, mean pooling and no prefix);
* :func:`embed` — L2-normalized pooled last hidden states of any encoder (a bare ``BertModel`` /
  ``XLMRobertaModel``, the body of an ``*ForMaskedLM`` after LAPT, or a language-encoded wrapper);
* :func:`teacher_embeddings` — the same for the trial's *original* source model and tokenizer
  (``TaskContext.source_model`` / ``source_tokenizer``), computed once for the same model,
  tokenizer, texts and pooling, so every method and seed of a grid compares with identical
  teacher vectors;
* :func:`student_embeddings` — :func:`embed` of the trial's model, kept under the sha256 of the
  model's weights and the tokenizer's content: the two tasks of a trial's initialization read
  the same target sentences (the real lane's ``test.txt`` is the target side of ``test.jsonl``, the
  world's teacher-agreement reads its translation pairs' target side), so the second computes nothing;

Both are kept per process and in tokxfer's cache (kind ``embeddings``, :func:`cached_embeddings`),
keyed by content — the model's weights, the tokenizer, the texts, the pooling, this code and the
library versions and thread count that decide the floating-point result — so the second task of an
initialization finds the first's vectors also when another ``tokxfer run`` worker ran it.
* :func:`read_pairs`, :func:`read_texts` — the evaluation data: JSON lines in the translation
  format ``{"translation": {SRC: …, LANG: …}}`` (the world's ``translation`` task files and the real
  lane's ``test.jsonl``), or plain text, one example a line;
* :func:`efficiency` — the tokenizer-efficiency metrics of :mod:`harness.efficiency` on the task's text.

``eval_file`` values may be ``real:`` names (``real:data/{lang}/test.jsonl``), resolved by
:func:`harness.real.resolve`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.cache import ProcessMemo, cached_dir
from harness.efficiency import tokenizer_efficiency
from harness.examples import Scores
from harness.protocols import TaskContext
from harness.vocab import tokenizer_key
from tasks.data import added_tokens, batch_preparer
from tasks.loop import length_batches, progress

__all__ = ["SentenceConfig", "POOLINGS", "embed", "teacher_embeddings", "student_embeddings", "model_fingerprint",
           "cached_embeddings", "EMBEDDINGS_CACHE_KIND", "read_pairs", "read_texts", "eval_path", "efficiency",
           "text_digest"]

POOLINGS = ("mean", "cls")


@dataclass(frozen=True)
class SentenceConfig:
    """Evaluation text and sentence pooling, shared by the sentence-embedding tasks."""

    eval_file: str | None = None
    """Evaluation file instead of the world's (``{lang}`` is replaced by each evaluated language; a
    ``real:`` name is resolved): translation JSON lines, or (teacher-agreement only) plain text."""
    split: str = "test"
    """World split used when ``eval_file`` is not given."""
    max_eval_examples: int | None = 500
    """Use the first N examples (None: all). 500 pairs keep a trial to seconds on 2 CPU cores; the
    number used is recorded in ``counts``."""
    pooling: str = "mean"
    """``mean``: average of the last hidden states over every token (specials included), as e5 and
    sentence-transformers' mean pooling; ``cls``: the first token's state."""
    prefix: str = ""
    """Text put before every sentence, on both sides (e5's card: ``"query: "`` for symmetric tasks)."""
    max_length: int = 128
    """Truncate each sentence to this many tokens, special tokens included."""
    batch_size: int = 64
    """Sentences per forward pass (does not change the embeddings beyond float rounding)."""

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}, got {self.pooling!r}")
        if self.max_length < 3:
            raise ValueError(f"max_length must be >= 3, got {self.max_length}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_eval_examples is not None and self.max_eval_examples < 2:
            raise ValueError(f"max_eval_examples must be >= 2 or None (retrieval needs candidates), got {self.max_eval_examples}")

    def pooling_facts(self) -> dict:
        """What the record says about how sentences were embedded."""
        return {"pooling": self.pooling, "prefix": self.prefix, "max_length": self.max_length}


def eval_path(task: str, cfg: SentenceConfig, ctx: TaskContext, lang: str, world_file: str) -> Path:
    """The evaluation file of ``lang``: ``cfg.eval_file`` (``real:`` names resolved) or the world's file.

    Args:
        world_file: ``"translation"`` (the world's translation pairs) or ``"text"`` (its plain text).
    """
    if cfg.eval_file is not None:
        name = cfg.eval_file.format(lang=lang)
        from harness.real import is_real_name, resolve  # the real lane's resources; imported lazily

        return resolve(name) if is_real_name(name) else Path(name)
    if ctx.data_root is None:
        raise ValueError(f"{task}: set config 'eval_file' (no world directory in the task context)")
    from harness.world import World  # the world generator room; imported lazily

    world = World(ctx.data_root)
    return Path(world.task_file(lang, "translation", cfg.split) if world_file == "translation" else world.text(lang, cfg.split))


def _jsonl(task: str, path: Path) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(f"{task}: evaluation file not found: {path}")
    rows = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{task}: {path}:{n}: not valid JSON ({e.msg})") from None
    return rows


def read_pairs(task: str, path: Path, source_language: str, language: str, limit: int | None) -> list[tuple[str, str]]:
    """``(source sentence, target sentence)`` pairs of a translation JSON-lines file, the first ``limit``.

    Raises:
        FileNotFoundError, ValueError: naming the file (and line) when it is missing, not JSON lines,
            or a line lacks ``translation[source_language]`` / ``translation[language]``.
    """
    out = []
    for n, row in enumerate(_jsonl(task, path), 1):
        tr = row.get("translation") if isinstance(row, dict) else None
        if not isinstance(tr, dict) or not isinstance(tr.get(source_language), str) or not isinstance(tr.get(language), str):
            raise ValueError(f"{task}: {path}: example {n} lacks translation.{source_language} / translation.{language} "
                             f"(expected {{\"translation\": {{\"{source_language}\": …, \"{language}\": …}}}})")
        out.append((tr[source_language].strip(), tr[language].strip()))
        if limit is not None and len(out) >= limit:
            break
    if len(out) < 2:
        raise ValueError(f"{task}: {path} has {len(out)} pair(s); retrieval needs at least 2")
    return out


def read_texts(task: str, path: Path, language: str, limit: int | None) -> list[str]:
    """Target-language texts: the ``translation[language]`` side of JSON lines, or the non-empty lines of text."""
    if path.suffix == ".jsonl":
        rows = _jsonl(task, path)
        texts = []
        for n, row in enumerate(rows, 1):
            tr = row.get("translation") if isinstance(row, dict) else None
            if not isinstance(tr, dict) or not isinstance(tr.get(language), str):
                raise ValueError(f"{task}: {path}: example {n} lacks translation.{language}")
            texts.append(tr[language].strip())
    else:
        if not path.is_file():
            raise FileNotFoundError(f"{task}: evaluation file not found: {path}")
        texts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = texts[:limit] if limit is not None else texts
    if len(texts) < 2:
        raise ValueError(f"{task}: {path} has {len(texts)} text(s); at least 2 are needed")
    return texts


def text_digest(texts: Sequence[str]) -> str:
    """sha256 of the texts (one per line): names the evaluation set in records and memo keys."""
    return hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()


def _hidden(model: Any, inputs: dict) -> torch.Tensor:
    """The last hidden states ``B x T x d`` of an encoder, an ``*ForMaskedLM`` or a language-encoded wrapper."""
    from transformers import PreTrainedModel

    if isinstance(model, PreTrainedModel):
        base = model.base_model  # the encoder body: a bare model is its own base model
        return base(**inputs).last_hidden_state
    out = model(**inputs, output_hidden_states=True)
    h = getattr(out, "last_hidden_state", None)
    return h if h is not None else out.hidden_states[-1]


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """L2-normalized sentence vectors (float32) from last hidden states: ``mean`` over the attention mask
    (specials included) or ``cls`` (the first token) — what :func:`embed` returns and what a training loss
    on sentence vectors (the ``distill`` stage) must compare with."""
    h = hidden.float()
    m = attention_mask.unsqueeze(-1).to(h.dtype)
    pooled = h[:, 0] if pooling == "cls" else (h * m).sum(1) / m.sum(1).clamp(min=1.0)
    return torch.nn.functional.normalize(pooled, dim=-1)


def embed(model: Any, tokenizer: Any, texts: Sequence[str], cfg: SentenceConfig, *, device: str = "cpu",
          encoding: Any = None, language: str | None = None, show_progress: bool = False,
          description: str = "embed") -> np.ndarray:
    """L2-normalized sentence embeddings (``len(texts) x d``, float32) of ``model`` under ``tokenizer``.

    Sentences are ``cfg.prefix + text``, truncated to ``cfg.max_length`` tokens (less the position a
    language token takes), batched by length; pooling per ``cfg.pooling`` over the attention mask.
    A language-encoded ``model`` prepares each batch with ``language`` (:func:`tasks.data.batch_preparer`).
    """
    prepare = batch_preparer(model, encoding)
    encoded = getattr(model, "prepare_batch", None) is not None or (
        encoding is not None and getattr(encoding, "registry_name", None) != "none")
    enc = tokenizer([cfg.prefix + t for t in texts], truncation=True, max_length=cfg.max_length - added_tokens(model))
    ids = enc["input_ids"]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    out = np.zeros((len(texts), 0), dtype=np.float32)
    was_training = getattr(model, "training", False)
    model.eval()
    try:
        with torch.inference_mode():
            for rows in progress(length_batches([len(x) for x in ids], cfg.batch_size), description=description,
                                 enabled=show_progress):
                width = max(len(ids[i]) for i in rows)
                input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for r, i in enumerate(rows):
                    input_ids[r, : len(ids[i])] = torch.tensor(ids[i])
                    mask[r, : len(ids[i])] = 1
                batch = {"input_ids": input_ids, "attention_mask": mask}
                if encoded:
                    batch = prepare(batch, [language] * len(rows))
                inputs = {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}
                pooled = pool(_hidden(model, inputs), inputs["attention_mask"], cfg.pooling).cpu().numpy()
                if out.shape[1] == 0:
                    out = np.zeros((len(texts), pooled.shape[1]), dtype=np.float32)
                out[np.asarray(rows)] = pooled
    finally:
        model.train(was_training)
    return out


MEMO_ENTRIES = 8
"""Teacher embedding sets kept per process (a grid of 4 languages needs 8: English and target text per language)."""
_TEACHER_MEMO = ProcessMemo(MEMO_ENTRIES)
_TEACHER_MODEL = ProcessMemo(1)
EMBEDDINGS_CACHE_KIND = "embeddings"
"""Cache kind (subdirectory of the cache root) of :func:`cached_embeddings`."""


def _load_teacher(path: str) -> tuple[Any, str]:
    """The original model (its body, ``AutoModel``) in eval mode, and its :func:`model_fingerprint`;
    read once per process (``_TEACHER_MODEL``)."""
    from transformers import AutoModel

    model = AutoModel.from_pretrained(path).eval()
    return model, model_fingerprint(model)


def _code_version() -> str:
    """sha256 of the code an embedding depends on: this module and the batch helpers of :mod:`tasks.data`."""
    import tasks.data

    h = hashlib.sha256()
    for f in (Path(__file__), Path(tasks.data.__file__)):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def cached_embeddings(key: dict, compute: Any) -> np.ndarray:
    """``compute()`` (an embedding matrix) through tokxfer's cache: a :func:`harness.cache.cached_dir`
    entry of kind :data:`EMBEDDINGS_CACHE_KIND` under ``key`` plus what decides the floating-point
    result besides it (this code, torch's and transformers' versions, torch's thread count)."""
    import transformers

    full = {**key, "code": _code_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "torch_threads": torch.get_num_threads()}
    fresh: dict[str, np.ndarray] = {}

    def build(d: Path) -> None:
        fresh["value"] = compute()
        np.save(d / "embeddings.npy", fresh["value"])

    d = cached_dir(EMBEDDINGS_CACHE_KIND, full, build)
    return fresh["value"] if "value" in fresh else np.load(d / "embeddings.npy")


def _pooling_key(cfg: SentenceConfig, texts: Sequence[str]) -> dict:
    return {"texts": text_digest(texts), "pooling": cfg.pooling, "prefix": cfg.prefix, "max_length": cfg.max_length,
            "batch_size": cfg.batch_size}


def teacher_embeddings(task: str, ctx: TaskContext, texts: Sequence[str], cfg: SentenceConfig, *,
                       description: str = "teacher") -> np.ndarray:
    """:func:`embed` with the trial's original source model and tokenizer, once per (model, tokenizer
    content, texts, pooling) — per process, and in the cache (:func:`cached_embeddings`, keyed by the
    model's weights). The model is a fresh copy of ``ctx.source_model`` (the trial's own copy has the
    new embeddings), kept for the next call.

    Raises:
        ValueError: the context carries no source model or tokenizer (outside a trial).
    """
    if ctx.source_model is None or ctx.source_tokenizer is None:
        raise ValueError(f"{task}: the task context has no source model/tokenizer (TaskContext.source_model); "
                         "it compares with the original model and runs inside a trial")
    state = tokenizer_key(ctx.source_tokenizer)
    key = None if state is None else (str(ctx.source_model), state, text_digest(texts), cfg.pooling, cfg.prefix,
                                      cfg.max_length, cfg.batch_size)

    def build() -> np.ndarray:
        model, fingerprint = _TEACHER_MODEL.get(str(ctx.source_model), lambda: _load_teacher(str(ctx.source_model)))
        model.to(ctx.device)

        def compute() -> np.ndarray:
            return embed(model, ctx.source_tokenizer, texts, cfg, device=ctx.device, show_progress=ctx.progress,
                         description=description)

        if state is None:
            return compute()
        return cached_embeddings({"model": fingerprint, "tokenizer": state, "device": str(ctx.device),
                                  **_pooling_key(cfg, texts)}, compute)

    return _TEACHER_MEMO.get(key, build)


_STUDENT_MEMO = ProcessMemo(MEMO_ENTRIES)


def model_fingerprint(model: Any) -> str:
    """sha256 of a model's state (every parameter and buffer, names, dtypes, shapes and bytes, in order).

    Example:
        >>> a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
        >>> _ = b.load_state_dict(a.state_dict())
        >>> model_fingerprint(a) == model_fingerprint(b)
        True
    """
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def student_embeddings(ctx: TaskContext, texts: Sequence[str], cfg: SentenceConfig, language: str, *,
                       description: str = "student") -> np.ndarray:
    """:func:`embed` of ``ctx.model`` under ``ctx.tokenizer``, kept per process and in the cache
    (:func:`cached_embeddings`) under the model's :func:`model_fingerprint`, the tokenizer's content,
    the language encoding, the language, the texts and the pooling (the same model state, tokenizer
    and texts give the same vectors, whichever task — or worker — asks)."""
    state = tokenizer_key(ctx.tokenizer)

    def compute() -> np.ndarray:
        return embed(ctx.model, ctx.tokenizer, texts, cfg, device=ctx.device, encoding=ctx.encoding, language=language,
                     show_progress=ctx.progress, description=description)

    if state is None:
        return compute()
    fingerprint = model_fingerprint(ctx.model)
    encoding = ctx.model.encoding_info() if getattr(ctx.model, "is_language_encoded", False) else None
    key = {"model": fingerprint, "tokenizer": state, "language": language, "encoding": encoding,
           "device": str(ctx.device), **_pooling_key(cfg, texts)}
    return _STUDENT_MEMO.get(json.dumps(key, sort_keys=True, default=str),
                             lambda: cached_embeddings(json.loads(json.dumps(key, default=str)), compute))


def efficiency(ctx: TaskContext, texts: Sequence[str]) -> Scores:
    """Tokens per word and bytes per token of the trial's tokenizer vs the source's on ``texts``
    (:func:`harness.efficiency.tokenizer_efficiency`)."""
    return tokenizer_efficiency(texts, ctx.tokenizer, ctx.source_tokenizer)
