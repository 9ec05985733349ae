"""``perplexity``: causal-LM perplexity and bits per byte on held-out target-language text.

The log-likelihoods come from lm-eval's ``loglikelihood_rolling`` (EleutherAI lm-evaluation-harness)
run on the in-memory model, through a custom task YAML written to a temporary directory that
points at a local JSON-lines copy of the evaluation text (FACTS.md: this is the recipe that works
offline). Each line of the evaluation file is one document; lm-eval scores every token of a
document given the tokens before it, in disjoint rolling windows of the model's context length,
the first token conditioned on the prefix token (BOS, else EOS).

Reported per language (METHODS.md, "Metrics"):

- ``token_perplexity`` — token-weighted: ``exp(sum NLL / #predicted tokens)``. The token count is
  computed with lm-eval's own ``HFLM.tok_encode`` on exactly the strings lm-eval scored, so it is
  the number of tokens whose log-probabilities were summed. Depends on the tokenizer: compare it
  only between runs that share one.
- ``bits_per_byte`` — ``sum NLL / (#UTF-8 bytes * ln 2)``; comparable across tokenizers.
- ``byte_perplexity`` (``2 ** bits_per_byte``) and ``word_perplexity`` (per whitespace-separated
  word), as lm-eval defines them.
- ``nll``, ``tokens``, ``bytes``, ``words`` — the corpus sums behind them (in ``counts``).

Our own ``bits_per_byte`` (from the per-document log-likelihoods) is checked against lm-eval's
aggregate; a disagreement raises, because it would mean the samples were misread.

lm-eval seeds Python's, NumPy's and torch's global RNGs inside ``simple_evaluate``; the call runs
under :func:`harness.seeding.seeded_globals`, which restores the caller's global state afterwards.

Language encodings (lm-eval scores plain transformers models only):

- ``additive`` and ``xlp`` change only the word embeddings, so lm-eval scores the wrapped
  transformers model itself while the encoding's hook applies the evaluated language to every
  sequence (``EncodedModel.fixed_language``) — the same numbers a model with the encoding folded
  into its embedding matrix gives, and the same lm-eval code path as the plain model
  (``info["method"] = "lm-eval"``).
- ``attached`` inserts a token, which lm-eval cannot do: :func:`own_rolling_perplexity` runs
  lm-eval's own rolling-window construction (``get_rolling_token_windows`` and
  ``make_disjoint_window``, windows one token shorter to leave room for the language token) and
  its token encoding (``HFLM.tok_encode``, prefix token, context length) through our forward
  loop, with the language token inserted at position 0 of every window and never scored
  (``info["method"] = "own-loop"``). The same token count, bytes and words enter the metrics;
  a test checks that the loop reproduces lm-eval's numbers on a plain model.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from harness.examples import ExampleScores, Scores, attach
from harness.protocols import TaskContext, TaskResult
from harness.registry import register_task
from harness.seeding import seeded_globals
from tasks import metrics

LM_EVAL_TASK = "tokxfer_perplexity"
"""Name of the generated lm-eval task (only our temporary directory is indexed)."""

_TASK_YAML = """\
task: {task}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
  cache_dir: {cache}
test_split: test
output_type: loglikelihood_rolling
doc_to_text: ""
doc_to_target: "{{{{text}}}}"
metric_list:
  - metric: word_perplexity
    aggregation: weighted_perplexity
    higher_is_better: false
  - metric: byte_perplexity
    aggregation: weighted_perplexity
    higher_is_better: false
  - metric: bits_per_byte
    aggregation: bits_per_byte
    higher_is_better: false
metadata:
  version: 1.0
"""


@dataclass(frozen=True)
class PerplexityConfig:
    """Configuration of :class:`Perplexity`."""

    eval_file: str | None = None
    """Text file (one document per line) to evaluate instead of the world's held-out text. May
    contain ``{lang}``, replaced by each evaluated language."""
    split: str = "test"
    """World text split used when ``eval_file`` is not given."""
    max_eval_examples: int | None = 2000
    """Use the first N non-empty lines (None: all). Bounded by default so the quickstart stays
    fast on 2 CPU cores; the number used is recorded in ``counts``."""
    batch_size: int = 8
    """lm-eval batch size (rolling windows per forward pass); does not change the result."""
    max_length: int | None = None
    """Rolling-window length in tokens; None: the model's context length as lm-eval resolves it
    (``n_positions`` / ``max_position_embeddings``)."""
    add_bos_token: bool = False
    """Passed to ``HFLM``: False scores the document's tokens without the tokenizer's specials
    (lm-eval's convention for GPT-2, the first token conditioned on the prefix token); True lets
    the tokenizer add its specials (e.g. ``<s> X </s>``), which are then scored too."""
    agreement_tolerance: float = 1e-6
    """Largest relative difference allowed between our bits per byte (from the per-document
    log-likelihoods) and lm-eval's aggregate before the task fails."""

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.max_length is not None and self.max_length < 2:
            raise ValueError(f"max_length must be >= 2 or None, got {self.max_length}")
        if self.max_eval_examples is not None and self.max_eval_examples < 1:
            raise ValueError(f"max_eval_examples must be >= 1 or None, got {self.max_eval_examples}")
        if not self.agreement_tolerance > 0:
            raise ValueError(f"agreement_tolerance must be > 0, got {self.agreement_tolerance}")


def read_documents(path: str | Path, limit: int | None = None) -> list[str]:
    """Non-empty, stripped lines of a UTF-8 text file (the first ``limit`` of them).

    Raises:
        FileNotFoundError: naming the file when it does not exist.
        ValueError: naming the file when it is not UTF-8 or has no non-empty line.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"perplexity: evaluation text file not found: {path}")
    docs: list[str] = []
    try:
        with path.open(encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line:
                    docs.append(line)
                    if limit is not None and len(docs) >= limit:
                        break
    except UnicodeDecodeError as e:
        raise ValueError(f"perplexity: {path} is not valid UTF-8 text ({e})") from None
    if not docs:
        raise ValueError(f"perplexity: {path} contains no non-empty line")
    return docs


@contextlib.contextmanager
def _quiet_lm_eval() -> Iterator[None]:
    """Silence lm-eval's info/warning chatter (it warns on every in-memory model) for the call."""
    loggers = [logging.getLogger(name) for name in ("lm_eval", "lm-eval")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def lm_eval_perplexity(
    model: Any,
    tokenizer: Any,
    documents: Sequence[str],
    *,
    batch_size: int = 8,
    max_length: int | None = None,
    add_bos_token: bool = False,
    seed: int = 0,
    work_dir: str | Path | None = None,
    agreement_tolerance: float = 1e-6,
) -> tuple[dict[str, float], dict[str, Any]]:
    """Score ``documents`` with lm-eval's ``loglikelihood_rolling`` on an in-memory causal LM.

    Args:
        model: a ``transformers`` causal LM (``*ForCausalLM`` / ``GPT2LMHeadModel``); its device is used.
        tokenizer: its tokenizer.
        documents: one string per document (no empty strings).
        batch_size: lm-eval batch size.
        max_length: rolling-window length (None: the model's context length).
        add_bos_token: see :attr:`PerplexityConfig.add_bos_token`.
        seed: the trial seed; lm-eval's global seeding runs under ``seeded_globals(seed, ...)`` and
            the caller's global RNG state is restored.
        work_dir: where the temporary task directory goes (None: the system temp dir).
        agreement_tolerance: see :attr:`PerplexityConfig.agreement_tolerance`.

    Returns:
        ``(scores, info)``: ``scores`` has ``token_perplexity``, ``bits_per_byte``,
        ``byte_perplexity``, ``word_perplexity``, ``nll`` (nats, summed), ``tokens``, ``bytes``,
        ``words`` and ``documents``; ``info`` has the lm-eval version, window length and lm-eval's
        own aggregate numbers.

    Raises:
        ValueError: on an empty document list or an empty document.
        RuntimeError: when our bits per byte and lm-eval's disagree beyond the tolerance.

    Example:
        >>> scores, info = lm_eval_perplexity(gpt2, tok, ["a b c", "d e"])   # doctest: +SKIP
        >>> scores["token_perplexity"] >= 1.0                                   # doctest: +SKIP
        True
    """
    # Stays whole: lm-eval runs on a task directory written to a temporary folder that must outlive its
    # evaluation, under the seeded globals; our sums are checked against lm-eval's aggregate right after.
    import lm_eval
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    if not documents:
        raise ValueError("perplexity: no documents to score")
    if any(not d for d in documents):
        raise ValueError("perplexity: empty documents cannot be scored (lm-eval predicts no token)")
    was_training = model.training
    if work_dir is not None:
        Path(work_dir).mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="tokxfer-ppl-", dir=work_dir) as tmp:
            tmp_path = Path(tmp)
            data = tmp_path / "documents.jsonl"
            with data.open("w", encoding="utf-8") as f:
                for doc in documents:
                    f.write(json.dumps({"text": doc}, ensure_ascii=False) + "\n")
            (tmp_path / f"{LM_EVAL_TASK}.yaml").write_text(
                _TASK_YAML.format(
                    task=LM_EVAL_TASK, data=json.dumps(str(data)), cache=json.dumps(str(tmp_path / "hf_cache"))
                ),
                encoding="utf-8",
            )
            with seeded_globals(seed, "task", "perplexity", "lm-eval"), _quiet_lm_eval():
                lm = HFLM(
                    pretrained=model,
                    tokenizer=tokenizer,
                    batch_size=batch_size,
                    max_length=max_length,
                    add_bos_token=add_bos_token,
                )
                out = simple_evaluate(
                    model=lm,
                    tasks=[LM_EVAL_TASK],
                    task_manager=TaskManager(include_path=str(tmp_path), include_defaults=False),
                    log_samples=True,
                    bootstrap_iters=0,
                )
            samples = sorted(out["samples"][LM_EVAL_TASK], key=lambda s: s["doc_id"])
            if len(samples) != len(documents):
                raise RuntimeError(f"perplexity: lm-eval scored {len(samples)} of {len(documents)} documents")
            targets = [s["target"] for s in samples]
            loglik = [float(_first(s["filtered_resps"])) for s in samples]
            doc_tokens = [len(lm.tok_encode(t)) for t in targets]
            n_tokens = sum(doc_tokens)
            window = int(lm.max_length)
    finally:
        model.train(was_training)

    agg = out["results"][LM_EVAL_TASK]
    nll = -math.fsum(loglik)
    n_bytes = metrics.utf8_bytes(targets)
    n_words = sum(len(t.split()) for t in targets)
    bpb = metrics.bits_per_byte(nll, n_bytes)
    theirs = float(agg["bits_per_byte,none"])
    if abs(bpb - theirs) > agreement_tolerance * max(1.0, abs(theirs)):
        raise RuntimeError(
            f"perplexity: our bits per byte {bpb:.8f} disagrees with lm-eval's {theirs:.8f}; "
            "the per-document log-likelihoods were misread"
        )
    scores = {
        "token_perplexity": metrics.perplexity(nll, n_tokens),
        "bits_per_byte": bpb,
        "byte_perplexity": float(agg["byte_perplexity,none"]),
        "word_perplexity": float(agg["word_perplexity,none"]),
        "nll": nll,
        "tokens": n_tokens,
        "bytes": n_bytes,
        "words": n_words,
        "documents": len(documents),
        "per_document": per_document_rows(loglik, doc_tokens, targets),
    }
    info = {
        "lm_eval_version": getattr(lm_eval, "__version__", None) or out.get("lm_eval_version"),
        "window": window,
        "add_bos_token": add_bos_token,
        "prefix_token_id": int(lm.prefix_token_id),
        "lm_eval_results": {
            k: v for k, v in agg.items() if not k.endswith("_stderr,none") and k not in ("name", "alias")
        },
    }
    return scores, info


PER_DOCUMENT = ("nll", "tokens", "bytes", "words")
"""Columns of the per-document statistics behind the perplexities."""


def per_document_rows(loglik: Sequence[float], tokens: Sequence[int], documents: Sequence[str]) -> np.ndarray:
    """Per document ``[nll (nats), tokens, UTF-8 bytes, whitespace words]`` (:data:`PER_DOCUMENT`)."""
    return np.array([[-ll, n, len(d.encode("utf-8")), len(d.split())] for ll, n, d in zip(loglik, tokens, documents)],
                    dtype=np.float64).reshape(-1, len(PER_DOCUMENT))


def perplexity_scores(scores: dict) -> Scores:
    """The four reported perplexities of :func:`lm_eval_perplexity` / :func:`own_rolling_perplexity`
    with the per-document statistics behind them (``Scores.examples``)."""
    rows = scores["per_document"]
    nll, tokens, n_bytes, words = (rows[:, [0, i]] for i in range(4))
    return Scores({k: scores[k] for k in ("token_perplexity", "bits_per_byte", "byte_perplexity", "word_perplexity")}, {
        "token_perplexity": ExampleScores("exp_ratio", tokens),
        "bits_per_byte": ExampleScores("bits_per_byte", n_bytes),
        "byte_perplexity": ExampleScores("pow2_bits_per_byte", n_bytes),
        "word_perplexity": ExampleScores("exp_ratio", words),
    })


def _first(resp: Any) -> Any:
    """lm-eval stores a response as a value or a one-element list (or tuple) depending on the version."""
    while isinstance(resp, (list, tuple)):
        resp = resp[0]
    return resp


def _plain_model(ctx: TaskContext) -> bool:
    """True when no language encoding wraps the model (``None`` or the ``none`` encoding)."""
    enc = ctx.encoding
    return enc is None or getattr(enc, "registry_name", None) == "none"


def own_rolling_perplexity(
    model: Any,
    tokenizer: Any,
    documents: Sequence[str],
    *,
    language: str | None = None,
    batch_size: int = 8,
    max_length: int | None = None,
    add_bos_token: bool = False,
) -> tuple[dict[str, float], dict[str, Any]]:
    """Token-weighted perplexity and bits per byte with lm-eval's rolling windows and our forward loop.

    Tokens, the prefix token and the context length come from an ``HFLM`` built on the
    transformers model (as :func:`lm_eval_perplexity` does); each document is cut with
    ``get_rolling_token_windows(tokens, prefix, window, 1)`` + ``make_disjoint_window``, and the
    log-probabilities of each window's continuation are summed as lm-eval sums them. A
    language-encoded ``model`` prepares every window batch for ``language`` (``attached``: the
    language token is inserted and the window is one token shorter, so the sequence still fits
    the context) and its inserted positions are dropped from the logits.

    Args:
        model: a causal LM, or an ``EncodedModel`` around one.
        tokenizer: its tokenizer.
        documents: non-empty strings.
        language: the documents' language (required for an encoded model).
        batch_size: windows per forward pass.
        max_length: context length (None: lm-eval's resolution from the model config).
        add_bos_token: see :attr:`PerplexityConfig.add_bos_token`.

    Returns:
        ``(scores, info)`` with the keys of :func:`lm_eval_perplexity`.
    """
    # Stays whole: the window loop follows lm-eval's rolling-window steps one for one, so the two read side by side.
    import torch
    from lm_eval import utils as lm_utils
    from lm_eval.models.huggingface import HFLM

    from tasks.data import added_tokens, strip_added

    if not documents or any(not d for d in documents):
        raise ValueError("perplexity: no documents, or an empty one, to score")
    encoded = getattr(model, "prepare_batch", None) is not None
    if encoded and language is None:
        raise ValueError("perplexity: a language-encoded model needs the documents' language")
    hf = model.model if encoded else model
    with _quiet_lm_eval():
        lm = HFLM(pretrained=hf, tokenizer=tokenizer, batch_size=batch_size, max_length=max_length,
                  add_bos_token=add_bos_token)  # fmt: skip
    window = int(lm.max_length) - added_tokens(model)
    if window < 1:
        raise ValueError(f"perplexity: a context of {lm.max_length} tokens leaves no room for the language token")
    rows: list[tuple[int, list[int], list[int]]] = []
    doc_tokens: list[int] = []
    for d, doc in enumerate(documents):
        tokens = lm.tok_encode(doc)
        doc_tokens.append(len(tokens))
        for context, cont in map(
            lm_utils.make_disjoint_window, lm_utils.get_rolling_token_windows(tokens, lm.prefix_token_id, window, 1)
        ):
            rows.append((d, (context + cont)[:-1], cont))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else lm.prefix_token_id
    device = next(hf.parameters()).device
    loglik = [0.0] * len(documents)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(rows), batch_size):
                chunk = rows[start : start + batch_size]
                width = max(len(inp) for _, inp, _ in chunk)
                ids = torch.full((len(chunk), width), pad, dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for i, (_, inp, _) in enumerate(chunk):
                    ids[i, : len(inp)] = torch.tensor(inp)
                    mask[i, : len(inp)] = 1
                batch = {"input_ids": ids, "attention_mask": mask}
                if encoded:
                    batch = model.prepare_batch(batch, [language] * len(chunk))
                on_device = {k: v.to(device) for k, v in batch.items()}
                logits = strip_added(batch, model(**on_device).logits).float()
                logp = torch.log_softmax(logits, dim=-1)
                for i, (d, inp, cont) in enumerate(chunk):
                    n = len(inp)
                    picked = logp[i, n - len(cont) : n].gather(-1, torch.tensor(cont, device=device).unsqueeze(-1))
                    loglik[d] += float(picked.sum())
    finally:
        model.train(was_training)
    n_tokens = sum(doc_tokens)
    nll = -math.fsum(loglik)
    n_bytes = metrics.utf8_bytes(documents)
    n_words = sum(len(t.split()) for t in documents)
    bpb = metrics.bits_per_byte(nll, n_bytes)
    scores = {
        "token_perplexity": metrics.perplexity(nll, n_tokens),
        "bits_per_byte": bpb,
        "byte_perplexity": 2.0**bpb,
        "word_perplexity": metrics.perplexity(nll, n_words),
        "nll": nll,
        "tokens": n_tokens,
        "bytes": n_bytes,
        "words": n_words,
        "documents": len(documents),
        "per_document": per_document_rows(loglik, doc_tokens, documents),
    }
    info = {"window": window, "context_length": int(lm.max_length), "add_bos_token": add_bos_token,
            "prefix_token_id": int(lm.prefix_token_id), "windows": len(rows)}  # fmt: skip
    return scores, info


@register_task(
    "perplexity",
    config=PerplexityConfig,
    description="causal-LM token perplexity and bits per byte (lm-eval) on held-out target text",
)
class Perplexity:
    """Token-weighted perplexity and bits per byte of a causal LM on held-out target-language text."""

    model_kind = "clm"
    metrics = ("token_perplexity", "bits_per_byte", "byte_perplexity", "word_perplexity")
    """Metrics every language of a complete record carries (resume re-runs a record lacking one)."""

    def __init__(self, config: PerplexityConfig) -> None:
        self.config = config

    def eval_path(self, ctx: TaskContext, lang: str) -> Path:
        """The text file evaluated for ``lang``: ``eval_file`` or the world's held-out split."""
        if self.config.eval_file is not None:
            return Path(self.config.eval_file.format(lang=lang))
        if ctx.data_root is None:
            raise ValueError("perplexity: set config 'eval_file' (no world directory in the task context)")
        from harness.world import World  # the world generator room; imported lazily

        return Path(World(ctx.data_root).text(lang, self.config.split))

    def run(self, ctx: TaskContext) -> TaskResult:
        """Score ``ctx.model`` on every language in ``ctx.languages``."""
        encoded = getattr(ctx.model, "is_language_encoded", False)
        if not encoded and not _plain_model(ctx):
            raise NotImplementedError(
                "perplexity: lm-eval scores plain transformers models only; the third-party encoding "
                f"{type(ctx.encoding).__name__} does not wrap the model as an EncodedModel"
            )
        cfg = self.config
        out = TaskResult(metrics={}, info={"eval_files": {}, "lm_eval": {}})
        for lang in ctx.languages:
            path = self.eval_path(ctx, lang)
            docs = read_documents(path, cfg.max_eval_examples)
            if encoded and ctx.model.added_tokens:
                scores, info = own_rolling_perplexity(
                    ctx.model, ctx.tokenizer, docs, language=lang, batch_size=cfg.batch_size,
                    max_length=cfg.max_length, add_bos_token=cfg.add_bos_token,
                )  # fmt: skip
                info["method"] = "own-loop"
            else:
                fixed = ctx.model.fixed_language(lang) if encoded else contextlib.nullcontext()
                with fixed:
                    scores, info = lm_eval_perplexity(
                        ctx.model.model if encoded else ctx.model,
                        ctx.tokenizer,
                        docs,
                        batch_size=cfg.batch_size,
                        max_length=cfg.max_length,
                        add_bos_token=cfg.add_bos_token,
                        seed=ctx.seed,
                        work_dir=ctx.work_dir,
                        agreement_tolerance=cfg.agreement_tolerance,
                    )
                info["method"] = "lm-eval"
            out.metrics[lang] = attach(out.examples, lang, perplexity_scores(scores))
            out.counts[lang] = {k: scores[k] for k in ("documents", "tokens", "bytes", "words")} | {
                "test": scores["documents"]
            }
            out.info["eval_files"][lang] = str(path)
            out.info["lm_eval"][lang] = info | {"nll": scores["nll"]}
        versions = [i["lm_eval_version"] for i in out.info["lm_eval"].values() if "lm_eval_version" in i]
        out.info["lm_eval_version"] = versions[0] if versions else None
        if encoded:
            out.info["encoding"] = {k: ctx.model.encoding_info()[k] for k in ("name", "sides", "parameters_added")}
        return out
