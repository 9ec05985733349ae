"""The typed extension points of tokxfer and the small value types they exchange.

Methods, encodings, tasks, trackers and executors implement these protocols; nobody has to
inherit from a base class. Which harness modules ``methods`` and ``tasks`` may import is written
down in ``docs/ARCHITECTURE.md`` (and checked by ``tests/api/test_architecture.py``): this module,
:mod:`harness.registry`, :mod:`harness.seeding` and the public helpers such as :mod:`harness.vocab`.

An initialization method does not write embedding rows itself: it returns a :class:`TokenMapping`,
a sparse row-stochastic-or-not map from target token ids to source token ids plus, per target
token, its provenance. The harness then *materializes* that mapping identically for the input
embeddings, untied output embeddings and the MLM-head bias (see :func:`harness.model.surgery.materialize`),
which is how every method handles the output side the same way (METHODS.md, "Output side").
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

# Per-token provenance codes (stored as int8).
SPECIAL = 0
"""A special token (``<s>``, ``[CLS]`` …) matched by role and copied."""
COPIED = 1
"""A target token whose row is copied from exactly one source row (overlap, identity)."""
COMBINED = 2
"""A target token whose row is a weighted combination of several source rows."""
FALLBACK = 3
"""A target token that receives a random row (N(mean, std) of the source matrix)."""

PROVENANCE_NAMES = {SPECIAL: "special", COPIED: "copied", COMBINED: "combined", FALLBACK: "fallback"}


@dataclass
class TokenMapping:
    """Sparse map from target token ids to source token ids, in CSR layout.

    Row ``t`` of the new matrix is ``sum_j weights[j] * E_source[indices[j]]`` for
    ``j in range(indptr[t], indptr[t+1])``. Rows with provenance :data:`FALLBACK` have no
    entries and are drawn at random by the harness from the trial's generator.

    Attributes:
        n_target: number of target tokens (rows of the new matrix).
        n_source: number of source tokens (rows of the source matrix).
        indptr: int64 array of length ``n_target + 1``.
        indices: int64 source ids, length ``nnz``.
        weights: float32 weights, length ``nnz``.
        provenance: int8 array of length ``n_target`` with codes SPECIAL/COPIED/COMBINED/FALLBACK.

    Example:
        >>> m = TokenMapping.from_coo(3, 5, [0, 1, 1], [4, 0, 2], [1.0, 0.5, 0.5],
        ...                           provenance=[COPIED, COMBINED, FALLBACK])
        >>> m.row(1)
        (array([0, 2]), array([0.5, 0.5], dtype=float32))
    """

    n_target: int
    n_source: int
    indptr: np.ndarray
    indices: np.ndarray
    weights: np.ndarray
    provenance: np.ndarray

    def __post_init__(self) -> None:
        self.indptr = np.asarray(self.indptr, dtype=np.int64)
        self.indices = np.asarray(self.indices, dtype=np.int64)
        self.weights = np.asarray(self.weights, dtype=np.float32)
        self.provenance = np.asarray(self.provenance, dtype=np.int8)
        if self.indptr.shape != (self.n_target + 1,):
            raise ValueError(f"TokenMapping.indptr must have length n_target+1={self.n_target + 1}, got {self.indptr.shape}")
        if self.indices.shape != self.weights.shape or self.indices.shape[0] != self.indptr[-1]:
            raise ValueError("TokenMapping.indices/weights must both have length indptr[-1]")
        if self.provenance.shape != (self.n_target,):
            raise ValueError(f"TokenMapping.provenance must have length n_target={self.n_target}")
        if self.indices.size and (self.indices.min() < 0 or self.indices.max() >= self.n_source):
            raise ValueError(f"TokenMapping.indices out of range [0, {self.n_source})")
        if not np.all(np.isfinite(self.weights)):
            raise ValueError("TokenMapping.weights contain non-finite values")
        counts = np.diff(self.indptr)
        fb = self.provenance == FALLBACK
        if np.any(counts[fb] != 0):
            raise ValueError("TokenMapping: FALLBACK rows must have no entries")
        if np.any(counts[~fb] == 0):
            bad = int(np.flatnonzero((counts == 0) & ~fb)[0])
            raise ValueError(f"TokenMapping: target row {bad} has no entries but is not FALLBACK")

    @classmethod
    def from_coo(cls, n_target: int, n_source: int, rows, cols, weights, provenance) -> TokenMapping:
        """Build from (target row, source col, weight) triples in any order."""
        rows = np.asarray(rows, dtype=np.int64)
        cols = np.asarray(cols, dtype=np.int64)
        weights = np.asarray(weights, dtype=np.float32)
        order = np.lexsort((cols, rows))
        rows, cols, weights = rows[order], cols[order], weights[order]
        indptr = np.zeros(n_target + 1, dtype=np.int64)
        np.add.at(indptr, rows + 1, 1)
        return cls(n_target, n_source, np.cumsum(indptr), cols, weights, provenance)

    def row(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Source ids and weights of target row ``t``."""
        a, b = self.indptr[t], self.indptr[t + 1]
        return self.indices[a:b], self.weights[a:b]

    def counts(self) -> dict[str, int]:
        """Number of target tokens per provenance, by name."""
        return {name: int(np.sum(self.provenance == code)) for code, name in PROVENANCE_NAMES.items()}

    def fallback_ids(self) -> np.ndarray:
        """Ids of the :data:`FALLBACK` (random) rows, ascending."""
        return np.flatnonzero(self.provenance == FALLBACK)


@dataclass(frozen=True, kw_only=True)
class TransferResources:
    """The optional files (and the helper model directory) a transfer may use, as local paths (``None``: not given).

    The one spelling of these paths: the runner resolves them from a target's config
    (:func:`harness.run.resources.transfer_resources`), ``tokxfer init`` from its flags, and a method
    reads them on its :class:`TransferInputs` (which is a ``TransferResources`` plus the tokenizers
    and embeddings).

    Attributes:
        target_corpus: target-language text, one sentence/document per line (UTF-8).
        source_corpus: source-language text, same format (WECHSEL word vectors, TFR).
        parallel_corpus: JSON lines ``{"source": ..., "target": ...}`` sentence pairs.
        dictionary: bilingual dictionary, TSV ``target_word<TAB>source_word`` per line.
        source_word_vectors / target_word_vectors: fastText ``.bin`` files (optional; a method
            that needs them and finds ``None`` trains them from the corpora and says so).
        helper_model: a model directory (with its tokenizer) trained in the target language and
            vocabulary: CLP's helper, OMP's donor space (a directory, not a file).

    Example:
        >>> TransferResources(dictionary=Path("de-en.tsv")).as_dict()["dictionary"]
        PosixPath('de-en.tsv')
    """

    target_corpus: Path | None = None
    source_corpus: Path | None = None
    parallel_corpus: Path | None = None
    dictionary: Path | None = None
    source_word_vectors: Path | None = None
    target_word_vectors: Path | None = None
    helper_model: Path | None = None

    def as_dict(self) -> dict[str, Path | None]:
        """``{field name: path}`` of the resources, in declaration order."""
        return {f.name: getattr(self, f.name) for f in fields(TransferResources)}

    def resources(self) -> TransferResources:
        """Just the resource paths (also of a :class:`TransferInputs`)."""
        return TransferResources(**self.as_dict())


@dataclass(frozen=True)
class TransferInputs(TransferResources):
    """Everything a method may read. Paths are plain files; nothing here is downloaded.

    The resource paths (``target_corpus`` … ``helper_model``) are those of
    :class:`TransferResources`; they are keyword-only.

    Attributes:
        source_tokenizer: the source model's tokenizer (a ``PreTrainedTokenizerBase``).
        target_tokenizer: the new tokenizer whose rows are to be initialized.
        source_embeddings: float32 CPU tensor ``|Vs| x d`` (input embeddings of the source); read-only: it may share
            the source model's storage, so a method never writes into it (the contract tests check).
        source_language / target_language: language codes (world names or ISO codes).
        cache_dir: directory for content-hashed intermediate artifacts (aux embeddings …).
        extension_tokenizer: in extension mode (``target_tokenizer`` is the source tokenizer
            extended with target-language tokens), the language-specific target tokenizer the new
            tokens were taken from; ``None`` in replacement mode.
    """

    source_tokenizer: Any
    target_tokenizer: Any
    source_embeddings: Any
    source_language: str = "src"
    target_language: str = "tgt"
    cache_dir: Path | None = None
    extension_tokenizer: Any = None


RANDOM_ROW_DISTRIBUTIONS = ("diagonal", "full", "transformers")


@dataclass(frozen=True)
class RandomRows:
    """How the harness draws a mapping's :data:`FALLBACK` rows (each matrix from its own rows).

    Input embeddings, untied output embeddings and encoder/decoder copies are each drawn from the
    statistics of the matrix they replace (:mod:`harness.random_rows`); a vocabulary bias's random
    entries are the source bias's mean under every distribution (METHODS.md, "Output side").

    Attributes:
        distribution: ``"diagonal"`` (default; every method's fallback, METHODS.md "Baselines"):
            N(mean, std) per dimension. ``"full"``: N(mu, covariance_scale * Sigma) with mu and Sigma
            the mean and covariance (divided by the number of rows) of the source rows (Hewitt 2021;
            a singular Sigma is sampled exactly in its range). ``"transformers"``: what
            ``resize_token_embeddings(mean_resizing=True)`` does: float32 statistics, N(mu,
            covariance_scale * Sigma) when torch's positive-definiteness check of that matrix
            passes, every row mu when it fails.
        covariance_scale: the factor on Sigma (``full`` / ``transformers``; transformers uses 1e-9).

    Example:
        >>> RandomRows().distribution, RandomRows("transformers", 1e-9).covariance_scale
        ('diagonal', 1e-09)
    """

    distribution: str = "diagonal"
    covariance_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.distribution not in RANDOM_ROW_DISTRIBUTIONS:
            raise ValueError(f"RandomRows.distribution must be one of {RANDOM_ROW_DISTRIBUTIONS}, got {self.distribution!r}")
        scale = self.covariance_scale
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (0 < float(scale) < float("inf")):
            raise ValueError(f"RandomRows.covariance_scale must be a finite number > 0, got {scale!r}")


@dataclass(frozen=True)
class LowRank:
    """Rows installed through a rank-``rank`` factorization of each matrix (OFA: ``Es ≈ Fs · P`` by SVD).

    For each matrix the harness installs (input embeddings, untied output embeddings, encoder/decoder
    copies), with ``V`` the top ``rank`` right singular vectors of the source matrix (uncentered, as
    OFA's SVD): a mapped row becomes ``(W · Es) · V · Vᵀ`` — the mapping's weights applied to the
    coordinates ``Fs = U``, times the primitives ``P = S · Vᵀ`` — and a random row is drawn in the
    coordinate space (from the rows of ``Es · V``, by the result's ``random_rows``) and multiplied by
    ``Vᵀ``. Rows below ``first_row`` are installed as the mapping gives them (extension mode keeps the
    original rows). A vocabulary bias is a vector, not a factorized matrix: it is mapped as usual. A
    ``rank`` at or above a matrix's width changes nothing.

    Example:
        >>> LowRank(100).first_row
        0
    """

    rank: int
    first_row: int = 0

    def __post_init__(self) -> None:
        for name, least in (("rank", 1), ("first_row", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < least:
                raise ValueError(f"LowRank.{name} must be an integer >= {least}, got {v!r}")


@dataclass
class InitResult:
    """What a method returns.

    Attributes:
        mapping: the target → source map (see :class:`TokenMapping`).
        tokenizer: the tokenizer the new model uses (normally ``inputs.target_tokenizer``; the
            extended source tokenizer in extension mode; the source tokenizer for ``original``).
        info: JSON-serializable facts for ``init_info.json`` and the trial record (overlap
            sizes, logged fallbacks with their reasons, timings of sub-steps …).
        directives: instructions for later stages, e.g. ``{"reinitialize_body": True}``
            (from-scratch) or ``{"embeddings_only_fraction": 0.1}`` (TransInner).
        random_reasons: why rows are random: ``{reason: target ids}``, each id a :data:`FALLBACK`
            row of ``mapping`` under one reason (a short phrase a user can act on, e.g. "rarer than
            aux_min_count=10 in the target corpus: no auxiliary vector"). Optional: the harness
            *counts* random rows from ``mapping.provenance`` alone, and reports rows without a reason
            here as special tokens without a source role, or "no reason given by the method".
        random_rows: the distribution the harness draws the random rows from (default: N(mean, std)
            per dimension; ``multivariate`` asks for the full covariance, see :class:`RandomRows`).
        low_rank: ``None`` (default): rows are the mapping's sums of source rows. A :class:`LowRank`:
            they pass through a rank-``r`` factorization of each matrix (``ofa`` with ``rank < d``).
    """

    mapping: TokenMapping
    tokenizer: Any
    info: dict = field(default_factory=dict)
    directives: dict = field(default_factory=dict)
    random_reasons: dict[str, Any] = field(default_factory=dict)
    random_rows: RandomRows = field(default_factory=RandomRows)
    low_rank: LowRank | None = None


@dataclass(frozen=True)
class Need:
    """One requirement of a method beyond the two tokenizers and the source embeddings: any one of
    ``inputs`` (:class:`TransferInputs` resource fields, or config fields that name an input), when
    every ``(config field, value)`` of ``when`` holds (always, when empty). Declared by the method
    class (``needs``, see :class:`EmbeddingInitializer`); read by ``tokxfer init`` (which flags are
    missing, ``--explain``) and by the runner (whether a trial's helper model is pretrained).

    Example:
        >>> from types import SimpleNamespace
        >>> n = Need(("helper_model",), "its embeddings are the donor space", (("donor", "helper"),))
        >>> n.applies(SimpleNamespace(donor="helper")), n.applies(SimpleNamespace(donor="fasttext"))
        (True, False)
    """

    inputs: tuple[str, ...]
    why: str
    when: tuple[tuple[str, Any], ...] = ()

    def applies(self, cfg: Any) -> bool:
        return all(getattr(cfg, f) == v for f, v in self.when)


@runtime_checkable
class EmbeddingInitializer(Protocol):
    """An embedding-initialization method. Registered with ``@register_method(name, config=…)``.

    The registry constructs it as ``cls(config)``; ``initialize`` must draw every random number
    from ``rng`` (never the global RNGs).

    Optional hook: ``preflight(paths, source_tokenizer, target_tokenizer, *, n_source, mode, notes)``
    runs checks that need the method's own knowledge before the long work (``tokxfer init`` calls
    it when the method defines it). ``paths`` maps the :class:`TransferInputs` resource fields to
    local files or ``None``; ``notes`` has ``note(msg)`` and ``warn(msg)``. It returns a dict of
    findings, stored under ``checks`` in ``init_info.json``. It never changes what ``initialize``
    computes.

    Optional class attribute ``needs``: a tuple of :class:`Need`, the inputs the method reads beyond
    the two tokenizers and the source embeddings, and when (the one place this is written down:
    ``tokxfer init`` and the runner read it through :func:`harness.registry.method_needs`). A method
    without it has its module's source scanned for ``inputs.<field>`` instead.
    """

    def __init__(self, config: Any) -> None: ...

    def initialize(self, inputs: TransferInputs, rng: np.random.Generator) -> InitResult: ...


LANGUAGE_IDS_KEY = "language_ids"
"""Batch key of the language index of each sequence (LongTensor ``[batch]``; the encoder side)."""
DECODER_LANGUAGE_IDS_KEY = "decoder_language_ids"
"""Batch key of the decoder-side language index of each sequence (encoder–decoder models)."""
ADDED_POSITIONS_KEY = "added_positions"
"""Batch key of a bool ``[batch, length]`` mask of the positions an encoding inserted (``attached``);
per-token outputs are mapped back to the tokenizer's positions by dropping them."""


@runtime_checkable
class LanguageEncoding(Protocol):
    """A way of telling the model which language a sequence is in (none, additive, attached, XLP).

    ``wrap(model, languages, *, seed=None, pretrained=None)`` returns a model whose forward (and
    ``generate``) accepts the usual HF batch plus :data:`LANGUAGE_IDS_KEY` (a LongTensor of
    language indices, one per sequence) and, for ``attached``, :data:`ADDED_POSITIONS_KEY`; the
    ``none`` encoding returns the model unchanged. ``seed`` is the trial seed (random
    initialization of new languages); ``pretrained`` holds the encoding parameters a source model
    was pretrained with (languages present there keep them, new ones are initialized by the
    encoding's ``init`` option). ``prepare`` turns a tokenized batch and its language codes into
    that input for the model it last wrapped (inserting the language token for ``attached`` and
    keeping labels, masks and answer positions aligned).
    """

    def __init__(self, config: Any) -> None: ...

    def wrap(self, model: Any, languages: list[str], **options: Any) -> Any: ...

    def prepare(self, batch: dict, languages: list[str]) -> dict: ...


@dataclass
class TaskResult:
    """Metrics of one task run.

    Attributes:
        metrics: ``{language: {metric_name: value}}``.
        counts: ``{language: {"train": n, "dev": n, "test": n}}`` examples used.
        curves: named series of ``(step, value)`` pairs (loss curves) for the record and MLflow.
        info: other JSON-serializable facts (metric signatures, seqeval mode …).
        examples: ``{language: {metric: harness.examples.ExampleScores}}``, the per-example
            statistics behind ``metrics`` (test sets only), stored beside the record so tables can
            pair methods on the same examples and resample them. A task fills it by returning
            :class:`harness.examples.Scores` from its evaluation, or directly.
    """

    metrics: dict
    counts: dict = field(default_factory=dict)
    curves: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    examples: dict = field(default_factory=dict)


@dataclass
class TaskContext:
    """What a task receives besides the model.

    Attributes:
        model: the initialized (and possibly adapted) HF model, on ``device``.
        tokenizer: its tokenizer.
        languages: languages to evaluate (e.g. ``["near"]``).
        seed: the trial seed; derive generators with :func:`harness.seeding.derive`.
        device: torch device string.
        data_root: root of local data (the built-in world's directory), or ``None`` for hub data.
        encoding: the language encoding in use (``None`` for plain models).
        source_language: language of the source model (cross-lingual transfer settings).
        progress: whether to show progress bars.
        work_dir: a scratch directory owned by this trial.
        source_model: the *original* source model the trial started from (a local directory or hub
            id), for tasks that compare with it (``bitext-retrieval`` embeds the English side with
            it, ``teacher-agreement`` uses it as the teacher); ``None`` outside a trial.
        source_tokenizer: the original source tokenizer (loaded), ``None`` outside a trial.
    """

    model: Any
    tokenizer: Any
    languages: list[str]
    seed: int
    device: str = "cpu"
    data_root: Path | None = None
    encoding: Any = None
    source_language: str | None = None
    progress: bool = True
    work_dir: Path | None = None
    source_model: str | None = None
    source_tokenizer: Any = None


@runtime_checkable
class Task(Protocol):
    """A task adapter (mlm-at-init, xnli, qa, ner, perplexity, iwslt-bleu …).

    Optional class attribute ``needs_lm_head`` (also on stages): ``True`` when the task reads the
    source model's LM head (``mlm-at-init``, ``lapt``); the runner then refuses a checkpoint that
    lacks it instead of letting transformers add a random one.
    """

    model_kind: ClassVar[str]
    """Which source model the task needs: ``"mlm"`` (encoder with its masked-LM head), ``"clm"``
    (decoder), ``"seq2seq"`` or ``"encoder"`` (the transformer body alone, e.g. sentence embeddings)."""

    def __init__(self, config: Any) -> None: ...

    def run(self, ctx: TaskContext) -> TaskResult: ...


@runtime_checkable
class Stage(Protocol):
    """An adaptation stage between initialization and the task (LAPT).

    ``apply`` trains ``ctx.model`` in place or returns a new model; ``directives`` are the
    method's instructions (e.g. ``embeddings_only_fraction`` for TransInner). The returned
    :class:`TaskResult` carries its loss curves and facts for the record.

    ``cache_key`` is everything that determined the model the stage receives (the trial's init
    key plus the encoding and the stages before this one; ``None`` outside a trial): a stage that
    caches its result (LAPT) keys it on it, so tasks and seeds that share an adapted model reuse
    it; a stage that caches nothing ignores it.
    """

    def __init__(self, config: Any) -> None: ...

    def apply(self, ctx: TaskContext, directives: dict, *, cache_key: dict | None = None) -> tuple[Any, TaskResult]: ...


@runtime_checkable
class Tracker(Protocol):
    """Mirror of trial records to an experiment tracker (MLflow, or nothing)."""

    def log_trial(self, experiment: str, record: Any, artifacts: list[Path] | None = None) -> None:
        """Mirror one trial: ``record`` is its :class:`harness.run.records.TrialRecord` as written."""
        ...


@runtime_checkable
class Executor(Protocol):
    """Places trials on resources and runs them; failures are isolated and recorded.

    ``run`` executes every spec with the ``execute`` it is given (:func:`harness.run.runner.execute`,
    passed in by :func:`harness.run.experiment.run_experiment`: it runs the trial and writes its
    record), calls ``on_record(record)`` in the calling process as each one finishes, and returns
    the records (:class:`harness.run.records.TrialRecord` values, as ``execute`` returns them). ``claim(spec)`` is asked before a trial starts (``False``:
    another process runs it); ``lost(spec, reason, since)`` records a trial whose worker died.
    """

    def run(self, specs: list[Any], runs_dir: str, on_record: Any, *, execute: Any, claim: Any = None,
            lost: Any = None) -> list[dict]: ...
