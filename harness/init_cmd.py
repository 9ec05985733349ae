"""``tokxfer init``: initialize a source model's embeddings for a new tokenizer, from local files.

The command line (:func:`add_arguments`), the explanation of a method (:func:`explain`), the
input checks that run *before* the source model is loaded (:func:`run_checks`), the provenance
written to ``init_info.json`` and the summary table printed at the end (:func:`run`).

Inputs. Every file a method can read has a flag (:data:`INPUT_FLAGS`); three method options that
name inputs have one too (:data:`CONFIG_FLAGS`: ``--aux-model``, ``--english-tokenizer``,
``--source-tokens``). Which method needs which input, and when, is :data:`METHOD_NEEDS`.

Column order. Every two-column file tokxfer reads puts the **target language first**: a
dictionary is ``TARGET_WORD<TAB>SOURCE_WORD``, a TSV parallel corpus ``TARGET<TAB>SOURCE``.
(WECHSEL's reference dictionaries are ``english<TAB>target``: the other way round.) Before any
long work, ``tokxfer init`` counts how many words of each column occur on each side (the target
and source corpora, or how well each tokenizer splits them); a file whose columns look swapped is
an **error** that names the flag and the fix (``--swap-dictionary`` / ``--swap-parallel``), never a
silent swap: a wrong guess would silently change the rows. A parallel corpus may be JSON lines
``{"source": …, "target": …}`` or TSV; the format is sniffed from its first non-blank line, and a
TSV is converted to JSON lines in the cache (kind ``inputs``) for the method.

Provenance categories. A method labels each target row special / copied / combined / fallback
(:data:`harness.protocols.PROVENANCE_NAMES`), but the labels do not mean the same across methods:
Tik-to-Tok, VIPI and mean-of-pieces call a row built from *one* source row "copied" even when that
row belongs to a different token (a one-word alignment), while FOCUS and WECHSEL call such a row
"combined". The summary and ``init_info.json`` therefore also count rows by what the mapping *is*,
the same way for every method (:data:`PROVENANCE_CATEGORIES`, computed by :func:`categorize`);
the method's own counts are kept under ``counts``.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import logging
import re
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("tokxfer.init")

INIT_INFO_VERSION = 2
"""Version of the ``init_info.json`` layout (1: counts, info and provenance only; 2: adds the provenance
of a trial record — versions, git, inputs with hashes, timings, warnings, new head, categories)."""


class InitInputError(ValueError):
    """An input of ``tokxfer init`` is missing, malformed or inconsistent; the message names the flag."""


# --------------------------------------------------------------------------------------------
# inputs and their flags


@dataclass(frozen=True)
class InputFlag:
    """A file input of :class:`harness.protocols.TransferInputs` and its ``tokxfer init`` flag."""

    field: str
    metavar: str
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")


INPUT_FLAGS: tuple[InputFlag, ...] = (
    InputFlag("target_corpus", "TXT", "target-language text, UTF-8, one sentence or document per line "
              "(FOCUS trains its auxiliary fastText on it; WECHSEL trains target word vectors on it when "
              "--target-word-vectors is not given; --mode extend ranks new tokens with it)"),
    InputFlag("source_corpus", "TXT", "source-language text, same format (WECHSEL trains source word vectors on it "
              "when --source-word-vectors is not given)"),
    InputFlag("source_word_vectors", "BIN", "source-language fastText word vectors: a .bin with character n-grams "
              "(e.g. cc.en.300.bin), or a text .vec/.vec.gz (no n-grams: variant tfr only)"),
    InputFlag("target_word_vectors", "BIN", "target-language fastText word vectors, same formats"),
    InputFlag("dictionary", "TSV", "bilingual dictionary, one pair per line: TARGET_WORD<TAB>SOURCE_WORD (target "
              "language FIRST; WECHSEL's reference files are english<TAB>target, i.e. reversed: pass --swap-dictionary "
              "for those). Checked before the run: swapped columns are an error"),
    InputFlag("parallel_corpus", "FILE", 'sentence pairs: JSON lines {"source": ..., "target": ...} or TSV '
              "TARGET_SENTENCE<TAB>SOURCE_SENTENCE (format sniffed from the first line; --swap-parallel if the "
              "sides are the other way round)"),
)
"""File inputs, in the order of ``--help``."""

INPUT_BY_FIELD = {f.field: f for f in INPUT_FLAGS}


@dataclass(frozen=True)
class ConfigFlag:
    """A method option that names an input, with a flag of its own (it sets ``--config FIELD=VALUE``)."""

    flag: str
    field: str
    metavar: str
    help: str
    is_path: bool = True
    choices: tuple[str, ...] | None = None


CONFIG_FLAGS: tuple[ConfigFlag, ...] = (
    ConfigFlag("--aux-model", "aux_model_path", "BIN", "FOCUS: a trained fastText .bin to use instead of training "
               "the auxiliary embeddings on --target-corpus (sets --config aux_model_path)"),
    ConfigFlag("--english-tokenizer", "english_tokenizer", "DIR", "WECHSEL with --source-tokens english-only: an "
               "English tokenizer (directory or hub id) whose vocabulary defines the English tokens of a "
               "multilingual source (sets --config english_tokenizer)"),
    ConfigFlag("--source-tokens", "source_tokens", "{all,english-only}", "WECHSEL: which source tokens may be "
               "neighbours. 'all' (paper, default); 'english-only' (FOCUS paper) keeps only the English tokens "
               "of a multilingual source such as XLM-R, whose other tokens get meaningless n-gram vectors from "
               "English word vectors (sets --config source_tokens)", is_path=False, choices=("all", "english-only")),
)


def _config_has(cfg_cls: type, field: str) -> bool:
    return any(f.name == field for f in dataclasses.fields(cfg_cls))


# --------------------------------------------------------------------------------------------
# what each method needs


@dataclass(frozen=True)
class Need:
    """One requirement of a method: any one of ``inputs`` (input fields or config fields), when ``when`` holds."""

    inputs: tuple[str, ...]
    why: str
    when: Callable[[Any], bool] = lambda cfg: True
    when_text: str = ""


def _flag_of(name: str) -> str:
    if name in INPUT_BY_FIELD:
        return INPUT_BY_FIELD[name].flag
    for c in CONFIG_FLAGS:
        if c.field == name:
            return c.flag
    return f"--config {name}=…"


METHOD_NEEDS: dict[str, tuple[Need, ...]] = {
    "focus": (
        Need(("target_corpus", "aux_model_path"), "text to train the auxiliary token-level fastText on (or a trained one)",
             lambda c: c.aux == "token-fasttext", "aux=token-fasttext (default)"),
        Need(("target_word_vectors", "aux_model_path", "target_corpus"),
             "word-level fastText vectors of the target language (or text to train them on)",
             lambda c: c.aux == "word-fasttext", "aux=word-fasttext"),
    ),
    "wechsel": (
        Need(("source_word_vectors", "source_corpus"), "source-language word vectors (trained on the corpus if no vectors)"),
        Need(("target_word_vectors", "target_corpus"), "target-language word vectors (trained on the corpus if no vectors)"),
        Need(("dictionary",), "word pairs for the Procrustes alignment of the two vector spaces",
             lambda c: c.alignment == "procrustes", "alignment=procrustes (default)"),
        Need(("source_corpus",), "the source tokens seen in source-language text are the 'English' ones",
             lambda c: c.source_tokens == "english-only" and c.english_tokens == "source-corpus",
             "source_tokens=english-only with english_tokens=source-corpus"),
        Need(("english_tokenizer",), "its vocabulary defines the English tokens of the source",
             lambda c: c.source_tokens == "english-only" and c.english_tokens == "tokenizer-overlap",
             "source_tokens=english-only with english_tokens=tokenizer-overlap (default)"),
    ),
    "tiktotok": (
        Need(("parallel_corpus",), "sentence pairs to word-align"),
    ),
}
"""Requirements of the built-in methods that read more than the two tokenizers and the source embeddings.

A method not listed reads nothing else (the test suite checks this against the ``inputs.<field>``
each method's module reads). Every method also needs ``--target-corpus`` with ``--mode extend``."""


def method_reads(name: str, cls: type) -> list[str]:
    """The file inputs a method reads: from :data:`METHOD_NEEDS`, else found in its module's source."""
    if name in METHOD_NEEDS:
        seen = [i for n in METHOD_NEEDS[name] for i in n.inputs if i in INPUT_BY_FIELD]
        return list(dict.fromkeys(seen))
    try:
        src = inspect.getsource(sys.modules[cls.__module__])
    except (OSError, TypeError, KeyError):
        return []
    return [f.field for f in INPUT_FLAGS if re.search(rf"\binputs\.{f.field}\b", src)]


# --------------------------------------------------------------------------------------------
# --explain


def config_field_docs(cfg_cls: type) -> dict[str, str]:
    """The attribute docstrings of a config dataclass (the string literal after each field)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cfg_cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    out: dict[str, str] = {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    for a, b in zip(body, body[1:]):
        if (isinstance(a, ast.AnnAssign) and isinstance(a.target, ast.Name) and isinstance(b, ast.Expr)
                and isinstance(b.value, ast.Constant) and isinstance(b.value.value, str)):
            out[a.target.id] = inspect.cleandoc(b.value.value)
    return out


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return "(required)"


def _paper(cls: type) -> str:
    """The first paragraph of the method module's docstring (it names the paper)."""
    doc = inspect.getdoc(sys.modules.get(cls.__module__)) or inspect.getdoc(cls) or ""
    return " ".join(doc.split("\n\n")[0].split())


def explain(name: str, width: int = 100) -> str:
    """What ``tokxfer init --method NAME`` needs, its options with defaults, and the paper behind them.

    Generated from the registry entry, the method module's docstring, :data:`METHOD_NEEDS` and the
    attribute docstrings of the method's config dataclass.

    Example:
        >>> "dictionary" in explain("wechsel") and "--swap-dictionary" in explain("wechsel")
        True
    """
    from harness import registry

    entry = registry.get("method", name)
    wrap = lambda text, ind: textwrap.fill(text, width, initial_indent=ind, subsequent_indent=ind,  # noqa: E731
                                           break_on_hyphens=False, break_long_words=False)
    lines = [f"{name}: {entry.description}", "", wrap(_paper(entry.cls), "  "), "", "Inputs (besides --source and --target-tokenizer):"]
    if name in METHOD_NEEDS:
        for n in METHOD_NEEDS[name]:
            alts = " or ".join(_flag_of(i) for i in n.inputs)
            cond = f" [when {n.when_text}]" if n.when_text else " [always]"
            lines.append(wrap(f"{alts}: {n.why}{cond}", "  "))
    else:
        reads = method_reads(name, entry.cls)
        lines.append("  " + (", ".join(INPUT_BY_FIELD[r].flag for r in reads) + " (read by the method; requirements "
                                "not declared)" if reads else "none: only the two tokenizers and the source embeddings"))
    lines.append("  --target-corpus [when --mode extend: ranks the target tokens to add]")
    used = {i for n in METHOD_NEEDS.get(name, ()) for i in n.inputs} | set(method_reads(name, entry.cls))
    formats = [f for f in INPUT_FLAGS if f.field in used]
    if formats:
        lines += ["", "Formats:"]
        lines += [wrap(f"{f.flag} {f.metavar}: {f.help}", "  ") for f in formats]
    docs = config_field_docs(entry.config_cls)
    fields = dataclasses.fields(entry.config_cls)
    lines += ["", f"Options (--config KEY=VALUE; defaults from {entry.config_cls.__name__}):"]
    if not fields:
        lines.append("  none")
    for f in fields:
        flag = next((c.flag for c in CONFIG_FLAGS if c.field == f.name), None)
        lines.append(f"  {f.name} = {_default(f)!r}" + (f"   (also {flag})" if flag else ""))
        if f.name in docs:
            lines.append(wrap(" ".join(flag_wording(docs[f.name]).split()), "      "))
    presets = [m for m in ("reference",) if callable(getattr(entry.config_cls, m, None))]
    if presets:
        ref = entry.config_cls.reference
        first = (inspect.getdoc(ref) or "").split("\n\n")[0]
        diff = {f.name: getattr(ref(), f.name) for f in fields if getattr(ref(), f.name) != _default(f)}
        lines += ["", wrap(f"Preset 'reference' — {' '.join(first.split())} As flags: --config "
                          + " ".join(f"{k}={json.dumps(v)}" for k, v in diff.items()), "")]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# the command line


def add_arguments(sp: argparse.ArgumentParser) -> None:
    """The flags of ``tokxfer init`` (every input a method can take, with its format)."""
    sp.formatter_class = argparse.RawDescriptionHelpFormatter
    sp.description = (
        "Initialize the embeddings of --source for --target-tokenizer with one method and save the model\n"
        "(a Hugging Face directory that AutoModel loads) plus init_info.json (provenance) in --out.\n"
        "`tokxfer init --method M --explain` prints what M needs, its options and defaults.\n"
        "Inputs are checked before the model is loaded; swapped dictionary or parallel columns are an error."
    )
    sp.add_argument("--method", required=True, help="initialization method (`tokxfer ls methods`)")
    sp.add_argument("--explain", action="store_true", help="print what --method needs, its options with defaults "
                    "and the paper behind them, then exit")
    sp.add_argument("--source", help="source model: a directory written by save_pretrained, or a hub id")
    sp.add_argument("--source-tokenizer", default=None, help="source tokenizer (default: the one in --source)")
    sp.add_argument("--target-tokenizer", help="the new tokenizer: a directory (see `tokxfer tokenizer train`) or hub id")
    g = sp.add_argument_group("method inputs (which method needs which: --explain)")
    for f in INPUT_FLAGS:
        g.add_argument(f.flag, default=None, metavar=f.metavar, help=f.help)
    for c in CONFIG_FLAGS:
        g.add_argument(c.flag, default=None, metavar=c.metavar if not c.choices else None, choices=c.choices, help=c.help)
    g.add_argument("--swap-dictionary", action="store_true",
                   help="--dictionary has the source word first (SOURCE<TAB>TARGET, as WECHSEL's reference files)")
    g.add_argument("--swap-parallel", action="store_true",
                   help="--parallel-corpus has its sides the other way round (TSV SOURCE<TAB>TARGET, or JSON fields swapped)")
    g = sp.add_argument_group("model")
    g.add_argument("--kind", default="mlm", choices=["mlm", "clm"], help="the source's head: masked or causal LM (default mlm)")
    g.add_argument("--new-head", action="store_true", help="accept a source checkpoint without the --kind head "
                   "(e.g. a plain encoder): the head is initialized at random from --seed and init_info.json says so")
    g.add_argument("--mode", default="replace", choices=["replace", "extend"],
                   help="replace the vocabulary (default), or extend the source vocabulary with target tokens")
    g.add_argument("--extend-top-n", type=int, default=30000, help="--mode extend: how many target tokens to add")
    g.add_argument("--bias", default="map", choices=["map", "zero", "keep"], help="the MLM output bias of new tokens")
    g.add_argument("--seed", type=int, default=1, help="seed of every random number (default 1)")
    g.add_argument("--config", nargs="*", metavar="KEY=VALUE", help="method options (see --explain), e.g. k=10 temperature=0.1")
    sp.add_argument("--plugin", action="append", help="Python file registering extra methods")
    sp.add_argument("--out", help="output directory (new or empty, unless --overwrite)")
    sp.add_argument("--overwrite", action="store_true", help="write into a non-empty --out directory")
    sp.add_argument("--quiet", action="store_true", help="no notes or progress (warnings and the summary still print)")


# --------------------------------------------------------------------------------------------
# messages


class Notes:
    """Notes and warnings of one ``tokxfer init`` run: printed to stderr and kept for init_info.json."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.t0 = time.perf_counter()

    def note(self, msg: str) -> None:
        self.notes.append(msg)
        if not self.quiet:
            print(f"[{time.perf_counter() - self.t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)
        print(f"tokxfer: warning: {msg}", file=sys.stderr, flush=True)


_INPUT_NAME = re.compile(r"\binputs\.(\w+)")


def flag_wording(msg: str) -> str:
    """A method's message with ``inputs.<field>`` replaced by the ``tokxfer init`` flag that sets it.

    Example:
        >>> flag_wording("WECHSEL needs inputs.source_word_vectors (a fastText .bin)")
        'WECHSEL needs --source-word-vectors (a fastText .bin)'
    """
    def sub(m: re.Match) -> str:
        f = m.group(1)
        if f in INPUT_BY_FIELD:
            return INPUT_BY_FIELD[f].flag
        if f == "extension_tokenizer":
            return "--target-tokenizer (with --mode extend)"
        if f == "target_tokenizer":
            return "--target-tokenizer"
        if f == "source_tokenizer":
            return "--source-tokenizer"
        return m.group(0)

    return _INPUT_NAME.sub(sub, msg)


# --------------------------------------------------------------------------------------------
# checks


def _existing_file(value: str | None, flag: str) -> Path | None:
    if value is None:
        return None
    p = Path(value).expanduser()
    if not p.exists():
        raise InitInputError(f"{flag} {value}: file not found")
    if not p.is_file():
        raise InitInputError(f"{flag} {value}: not a file")
    if p.stat().st_size == 0:
        raise InitInputError(f"{flag} {value}: the file is empty")
    return p.resolve()


def missing_inputs(name: str, cfg: Any, given: set[str]) -> list[str]:
    """One message per unmet requirement of method ``name`` under ``cfg`` (empty: all met)."""
    out = []
    for n in METHOD_NEEDS.get(name, ()):
        if not n.when(cfg) or any(i in given for i in n.inputs):
            continue
        alts = " or ".join(_flag_of(i) for i in n.inputs)
        cond = f" (with {n.when_text})" if n.when_text else ""
        out.append(f"--method {name} needs {alts}{cond}: {n.why}")
    return out


_WORD = re.compile(r"\w+(?:['’-]\w+)*")
_SAMPLE_BYTES = 32 << 20  # corpus text read to collect its vocabulary (enough for every check)


def corpus_vocabulary(path: Path, max_bytes: int = _SAMPLE_BYTES) -> Counter:
    """Lower-cased word counts of the first ``max_bytes`` of a corpus (words: runs of letters/digits)."""
    counts: Counter = Counter()
    read = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            counts.update(w.lower() for w in _WORD.findall(line))
            read += len(line)
            if read >= max_bytes:
                break
    return counts


def _fertility(tok: Any, words: list[str]) -> float:
    """Mean number of tokens per word (each word tokenized alone, as a word of running text)."""
    if not words:
        return float("nan")
    enc = tok([" " + w for w in words], add_special_tokens=False)["input_ids"]
    return sum(len(e) for e in enc) / len(words)


@dataclass
class Orientation:
    """How the two columns of a two-column file match the target and source sides.

    Attributes:
        verdict: ``"ok"`` (first column = target), ``"swapped"`` or ``"unknown"`` (no evidence either way).
        evidence: the numbers behind it, per side and column, and which resources were used.
    """

    verdict: str
    evidence: dict


def orientation(first: list[str], second: list[str], *, target_vocab: Counter | None, source_vocab: Counter | None,
                target_tok: Any = None, source_tok: Any = None) -> Orientation:
    """Decide whether ``first`` holds target-language words and ``second`` source-language words.

    With corpora: the share of each column's distinct words that occur in the target corpus (and
    in the source corpus). The columns are *swapped* when the second column's share in the target
    corpus exceeds the first's by at least 0.1 and by half (and the source corpus, if given, does
    not say the opposite), or the mirror image in the source corpus. Without corpora: how many
    pieces the target tokenizer needs per word of each column, relative to the source tokenizer (a
    tokenizer trained on the target language splits its words less); swapped when the first
    column's ratio exceeds the second's by a quarter.
    """
    a = list(dict.fromkeys(w.lower() for w in first if w))[:20000]
    b = list(dict.fromkeys(w.lower() for w in second if w))[:20000]
    ev: dict[str, Any] = {"distinct_first": len(a), "distinct_second": len(b)}

    def share(words: list[str], vocab: Counter) -> float:
        return sum(1 for w in words if w in vocab) / max(len(words), 1)

    votes = []
    for side, vocab in (("target", target_vocab), ("source", source_vocab)):
        if vocab is None:
            continue
        sa, sb = share(a, vocab), share(b, vocab)
        ev[f"{side}_corpus"] = {"first_column_share": round(sa, 4), "second_column_share": round(sb, 4)}
        mine, other = (sa, sb) if side == "target" else (sb, sa)  # the column that should be this side's
        if other - mine >= 0.1 and other >= 1.5 * mine:
            votes.append("swapped")
        elif mine - other >= 0.1 and mine >= 1.5 * other:
            votes.append("ok")
    if not votes and target_tok is not None and source_tok is not None and target_vocab is None and source_vocab is None:
        sample_a, sample_b = a[:2000], b[:2000]
        ra = _fertility(target_tok, sample_a) / max(_fertility(source_tok, sample_a), 1e-9)
        rb = _fertility(target_tok, sample_b) / max(_fertility(source_tok, sample_b), 1e-9)
        ev["tokenizers"] = {"first_column_ratio": round(ra, 4), "second_column_ratio": round(rb, 4),
                            "ratio": "target-tokenizer pieces per word / source-tokenizer pieces per word"}
        if ra >= 1.25 * rb:
            votes.append("swapped")
        elif rb >= 1.25 * ra:
            votes.append("ok")
    verdict = "unknown" if not votes or len(set(votes)) > 1 else votes[0]
    ev["votes"] = votes
    return Orientation(verdict, ev)


def _evidence_text(ev: dict) -> str:
    parts = []
    for side in ("target", "source"):
        if f"{side}_corpus" in ev:
            e = ev[f"{side}_corpus"]
            parts.append(f"{e['first_column_share']:.0%} of the first column's words and {e['second_column_share']:.0%} "
                         f"of the second's occur in --{side}-corpus")
    if "tokenizers" in ev:
        e = ev["tokenizers"]
        parts.append(f"--target-tokenizer splits the first column's words {e['first_column_ratio']:.2f}x and the "
                     f"second's {e['second_column_ratio']:.2f}x as finely as the source tokenizer")
    return "; ".join(parts)


def read_pairs(path: Path, flag: str, limit: int | None = None) -> tuple[list[tuple[str, str]], str]:
    """Read a two-sided file: JSON lines ``{"source", "target"}`` or TSV; returns ``(first, second)`` pairs and the format.

    For JSON lines the pairs are ``(target, source)``, for TSV the columns in file order, so both
    read as *target first* when the file follows tokxfer's convention.

    Raises:
        InitInputError: a line that does not fit the sniffed format (file, line and what was expected).
    """
    pairs: list[tuple[str, str]] = []
    fmt = None
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            if fmt is None:
                fmt = "jsonl" if line.lstrip().startswith("{") else "tsv"
            if fmt == "jsonl":
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise InitInputError(f"{flag} {path}:{lineno}: not valid JSON ({e.msg}); the file was sniffed as JSON "
                                         "lines from its first line") from None
                if not (isinstance(obj, dict) and isinstance(obj.get("source"), str) and isinstance(obj.get("target"), str)):
                    raise InitInputError(f'{flag} {path}:{lineno}: expected an object with string fields "source" and "target"')
                pairs.append((obj["target"], obj["source"]))
            else:
                parts = line.split("\t")
                if len(parts) < 2 or not parts[0].strip() or not parts[1].strip():
                    raise InitInputError(f"{flag} {path}:{lineno}: expected two tab-separated fields TARGET<TAB>SOURCE "
                                         "(or JSON lines {\"source\": ..., \"target\": ...}), got "
                                         f"{len([p for p in parts if p.strip()])} field(s)")
                pairs.append((parts[0].strip(), parts[1].strip()))
            if limit is not None and len(pairs) >= limit:
                break
    if not pairs:
        raise InitInputError(f"{flag} {path}: contains no pairs")
    return pairs, fmt or "tsv"


def _words(texts: Iterable[str]) -> list[str]:
    return [w for t in texts for w in _WORD.findall(t)]


def _write_converted(kind_key: dict, write: Callable[[Path], None]) -> Path:
    """A converted input in the cache (``<cache>/inputs/<hash>/``), built once per content."""
    from harness.cache import cached_dir
    from harness.resources import cache_dir

    d = cached_dir("inputs", kind_key, lambda out: write(out / "data"), root=cache_dir())
    return d / "data"


def prepare_dictionary(path: Path, swap: bool, ctx: dict, notes: Notes) -> tuple[Path, dict]:
    """Check the dictionary's orientation; returns the file for the method (swapped copy with ``--swap-dictionary``)."""
    from methods._wordvectors import read_dictionary

    pairs, malformed = read_dictionary(path)
    if not pairs:
        raise InitInputError(f"--dictionary {path}: no TARGET<TAB>SOURCE pairs ({malformed} malformed line(s))")
    first, second = [p[0] for p in pairs], [p[1] for p in pairs]
    if swap:
        first, second = second, first
    o = orientation(first, second, **ctx)
    info = {"pairs": len(pairs), "malformed_lines": malformed, "swapped_by_flag": swap, "orientation": o.verdict,
            "evidence": o.evidence}
    if o.verdict == "swapped":
        fix = ("drop --swap-dictionary" if swap else
               "pass --swap-dictionary (or swap the columns: awk -F'\\t' -v OFS='\\t' '{print $2,$1}')")
        raise InitInputError(f"--dictionary {path}: the columns look swapped — tokxfer reads TARGET_WORD<TAB>SOURCE_WORD, but "
                             f"{_evidence_text(o.evidence)}; {fix}")
    if o.verdict == "unknown":
        notes.note(f"--dictionary: could not tell the column order from the corpora/tokenizers ({_evidence_text(o.evidence) or 'no evidence'}); "
                   "read as TARGET<TAB>SOURCE" + (" after --swap-dictionary" if swap else ""))
    else:
        notes.note(f"--dictionary: {len(pairs)} pairs, TARGET<TAB>SOURCE order confirmed ({_evidence_text(o.evidence)})")
    if not swap:
        return path, info

    def write(out: Path) -> None:
        with open(out, "w", encoding="utf-8") as f:
            for t, s in zip(first, second):
                f.write(f"{t}\t{s}\n")

    from harness.cache import file_hash

    conv = _write_converted({"what": "dictionary-swapped", "sha256": file_hash(path)}, write)
    info["converted"] = str(conv)
    return conv, info


def prepare_parallel(path: Path, swap: bool, ctx: dict, notes: Notes) -> tuple[Path, dict]:
    """Sniff the parallel corpus (JSON lines or TSV), check its orientation; JSON lines for the method."""
    pairs, fmt = read_pairs(path, "--parallel-corpus")
    tgt_side, src_side = [p[0] for p in pairs], [p[1] for p in pairs]
    if swap:
        tgt_side, src_side = src_side, tgt_side
    sample = slice(0, 5000)
    o = orientation(_words(tgt_side[sample]), _words(src_side[sample]), **ctx)
    info = {"format": fmt, "pairs": len(pairs), "swapped_by_flag": swap, "orientation": o.verdict, "evidence": o.evidence}
    what = "TARGET<TAB>SOURCE columns" if fmt == "tsv" else '"target"/"source" fields'
    if o.verdict == "swapped":
        fix = "drop --swap-parallel" if swap else "pass --swap-parallel"
        raise InitInputError(f"--parallel-corpus {path}: the sides look swapped — tokxfer reads {what}, but "
                             f"{_evidence_text(o.evidence).replace('column', 'side')}; {fix}")
    notes.note(f"--parallel-corpus: {len(pairs)} sentence pairs, {'JSON lines' if fmt == 'jsonl' else 'TSV'}"
               + (f", order confirmed ({_evidence_text(o.evidence).replace('column', 'side')})" if o.verdict == "ok" else
                  ", order could not be checked (no evidence either way)"))
    if fmt == "jsonl" and not swap:
        return path, info

    def write(out: Path) -> None:
        with open(out, "w", encoding="utf-8") as f:
            for t, s in zip(tgt_side, src_side):
                f.write(json.dumps({"source": s, "target": t}, ensure_ascii=False) + "\n")

    from harness.cache import file_hash

    conv = _write_converted({"what": "parallel-jsonl", "sha256": file_hash(path), "swap": swap}, write)
    info["converted"] = str(conv)
    return conv, info


# -- the source model's head


def _checkpoint_keys(d: Path) -> set[str] | None:
    """Tensor names in a model directory's weights, read without loading them (``None``: unknown format)."""
    idx = next((p for p in (d / "model.safetensors.index.json", d / "pytorch_model.bin.index.json") if p.is_file()), None)
    if idx is not None:
        return set(json.loads(idx.read_text()).get("weight_map", {}))
    st = sorted(d.glob("*.safetensors"))
    if st:
        from safetensors import safe_open

        keys: set[str] = set()
        for p in st:
            with safe_open(str(p), "pt") as f:
                keys.update(f.keys())
        return keys
    bins = sorted(d.glob("*.bin"))
    if bins:
        import torch

        keys = set()
        for p in bins:
            keys.update(torch.load(p, map_location="cpu", mmap=True, weights_only=True).keys())
        return keys
    return None


def missing_head(source: str, kind: str) -> tuple[list[str], list[str]] | None:
    """Parameters of the ``kind`` head that the source checkpoint lacks, and its ``architectures``.

    Builds the model on the meta device (no memory) and compares its head parameters (those
    outside the base model) with the tensor names in the checkpoint; a head parameter tied to a
    present one (the decoder weight to the input embeddings when the config ties them, the decoder
    bias to the head bias) counts as present. ``None`` when the source is not a local directory.
    """
    import torch
    import transformers

    d = Path(source).expanduser()
    if not d.is_dir():
        return None
    keys = _checkpoint_keys(d)
    if keys is None:
        return None
    keys = {re.sub(r"\.gamma$", ".weight", re.sub(r"\.beta$", ".bias", k)) for k in keys}
    config = transformers.AutoConfig.from_pretrained(d)
    cls = {"mlm": transformers.AutoModelForMaskedLM, "clm": transformers.AutoModelForCausalLM}[kind]
    try:
        with torch.device("meta"):
            model = cls.from_config(config)
    except ValueError as e:  # no such head class for this architecture
        raise InitInputError(f"--source {source}: a {type(config).__name__} has no --kind {kind} model class ({' '.join(str(e).split())[:200]})") from None
    prefix = model.base_model_prefix
    expected = list(model.state_dict().keys())
    present = keys | {f"{prefix}.{k}" for k in keys}
    tied = getattr(model, "_tied_weights_keys", None) or {}
    text_cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    ties_embeddings = bool(getattr(text_cfg, "tie_word_embeddings", True))
    head = [k for k in expected if not k.startswith(prefix + ".")]
    missing = []
    for k in head:
        if k in present:
            continue
        if isinstance(tied, dict):
            partners = {v for kk, v in tied.items() if kk == k} | {kk for kk, v in tied.items() if v == k}
            ok = any(p in present and (not p.startswith(prefix + ".") or ties_embeddings) for p in partners)
        else:  # older transformers: a list of tied names, partners unknown
            ok = any(re.fullmatch(t, k) or t == k for t in tied)
        if not ok:
            missing.append(k)
    return missing, list(getattr(config, "architectures", None) or [])


# -- WECHSEL with a multilingual source


def fasttext_bin_words(path: Path, limit: int) -> tuple[list[str], int, int]:
    """The ``limit`` most frequent words of a fastText ``.bin`` and its ``minn``/``maxn``, without loading the matrix.

    Reads fastText's header (magic, version, the arguments) and the dictionary entries, which come
    sorted by decreasing frequency.
    """
    import struct

    with open(path, "rb") as f:
        magic, _version = struct.unpack("<ii", f.read(8))
        if magic != 793712314:
            raise InitInputError(f"--source-word-vectors {path}: not a fastText .bin (bad magic number)")
        args = struct.unpack("<12id", f.read(12 * 4 + 8))
        minn, maxn = args[9], args[10]
        size, _nwords, _nlabels = struct.unpack("<iii", f.read(12))
        f.read(16)  # ntokens, pruneidx_size
        words = []
        buf = b""
        for _ in range(min(size, limit)):
            while b"\0" not in buf:
                chunk = f.read(1 << 16)
                if not chunk:
                    raise InitInputError(f"--source-word-vectors {path}: truncated fastText dictionary")
                buf += chunk
            w, buf = buf.split(b"\0", 1)
            while len(buf) < 9:
                buf += f.read(1 << 16)
            buf = buf[9:]  # count (int64), entry type (int8)
            words.append(w.decode("utf-8", errors="replace"))
    return words, minn, maxn


def _grams(s: str, minn: int, maxn: int) -> set[str]:
    """A token string's character n-grams of lengths ``minn..maxn`` (the string itself when shorter)."""
    if len(s) < minn:
        return {s}
    return {s[i:i + n] for n in range(minn, maxn + 1) for i in range(len(s) - n + 1)}


def ngram_coverage(source_tok: Any, words: list[str], minn: int, maxn: int) -> dict:
    """How many source tokens have their character n-grams in the source word vectors' vocabulary.

    A source token's WECHSEL vector is the sum of the vectors of its character n-grams. fastText
    hashes every n-gram into a bucket, so a token whose n-grams never occur in the text the vectors
    were trained on still gets a vector, made of buckets that unrelated n-grams trained: noise.
    Counted here, with ``words`` (the vectors' vocabulary) standing for that text and n-grams taken
    inside the strings (without fastText's ``<``/``>`` word boundaries, which would count every
    word-internal piece as unseen): tokens none of whose n-grams occur inside a word
    (``none_seen``) and tokens most of whose n-grams do not (``mostly_unseen``). A monolingual
    source scores near zero; the other-language tokens of a multilingual source (other scripts
    above all) make up most of the count.
    """
    from methods import _canon

    seen: set[str] = set()
    for w in words:
        seen |= {w[i:i + n] for n in range(1, maxn + 1) for i in range(len(w) - n + 1)}
    specials = _canon.special_ids(source_tok)
    n = none = mostly = 0
    for i in range(len(source_tok)):
        if i in specials:
            continue
        s = _canon.token_string(source_tok, i)
        if not s or not s.strip():
            continue
        grams = _grams(s, minn, maxn)
        n += 1
        k = sum(1 for g in grams if g in seen)
        none += k == 0
        mostly += 2 * k < len(grams)
    return {"tokens": n, "none_seen": none, "mostly_unseen": mostly, "words": len(words), "minn": minn, "maxn": maxn}


def check_wechsel_source(cfg: Any, paths: dict, source_tok: Any, notes: Notes) -> dict | None:
    """Warn when WECHSEL with ``source_tokens=all`` would give many source tokens n-gram noise vectors."""
    if cfg.source_tokens != "all" or cfg.variant != "subword":
        return None
    vec = paths.get("source_word_vectors")
    if vec is not None:
        name = vec.name.lower()
        if not name.endswith(".bin"):
            return None  # text vectors have no n-grams
        words, minn, maxn = fasttext_bin_words(vec, 100_000)
        origin = "the 100,000 most frequent words of --source-word-vectors"
    elif paths.get("source_corpus") is not None:
        counts = corpus_vocabulary_cased(paths["source_corpus"])
        words = [w for w, c in counts.most_common(100_000) if c >= cfg.min_count]
        minn, maxn = cfg.minn, cfg.maxn
        origin = f"the words of --source-corpus seen >= min_count={cfg.min_count} times"
    else:
        return None
    if maxn <= 0:
        return None
    cov = ngram_coverage(source_tok, words, minn, maxn)
    cov["vocabulary"] = origin
    share_none, share_mostly = cov["none_seen"] / max(cov["tokens"], 1), cov["mostly_unseen"] / max(cov["tokens"], 1)
    cov.update(share_none_seen=round(share_none, 4), share_mostly_unseen=round(share_mostly, 4))
    msg = (f"WECHSEL: {cov['none_seen']:,} of {cov['tokens']:,} source tokens ({share_none:.0%}) have none of their character "
           f"{minn}-{maxn}-grams in {origin}, and {cov['mostly_unseen']:,} ({share_mostly:.0%}) miss most of them; with "
           "source_tokens=all their vectors are sums of n-gram buckets trained on other words (noise), yet they compete as "
           "neighbours. For a multilingual source (XLM-R …) pass --source-tokens english-only --english-tokenizer DIR "
           "(FOCUS paper), or --config source_tokens=english-only english_tokens=source-corpus")
    if share_mostly >= 0.2:
        notes.warn(msg)
    else:
        notes.note(f"WECHSEL: {share_mostly:.0%} of the source tokens miss most of their n-grams in {origin} (fine)")
    return cov


def corpus_vocabulary_cased(path: Path, max_bytes: int = _SAMPLE_BYTES) -> Counter:
    """Word counts (case kept, fastText-style words) of the first ``max_bytes`` of a corpus."""
    from methods._wordvectors import word_tokenize

    counts: Counter = Counter()
    read = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            counts.update(word_tokenize(line))
            read += len(line)
            if read >= max_bytes:
                break
    return counts


# -- FOCUS: how many new tokens will be random


def focus_forecast(cfg: Any, paths: dict, source_tok: Any, target_tok: Any, n_source: int, notes: Notes) -> dict | None:
    """Before training: how many of FOCUS's additional tokens occur too rarely to get an auxiliary vector.

    Pre-tokenizes ``--target-corpus`` exactly as FOCUS does (the result is cached and reused by the
    method), counts every token, and applies FOCUS's overlap rules to find the additional tokens. A
    token gets an auxiliary vector iff it occurs at least ``aux_min_count`` times (fastText's
    ``minCount``), so the forecast equals the method's ``fallback_no_aux`` count.
    """
    if cfg.aux != "token-fasttext" or cfg.aux_model_path or paths.get("target_corpus") is None:
        return None
    import tempfile

    import numpy as np

    from harness.resources import cache_dir
    from methods import _canon, _fasttext

    ov = _canon.compute_overlap(source_tok, target_tok, fuzzy=cfg.fuzzy, n_source=n_source, symbolic_rule=cfg.symbolic_rule)
    pairs = ov.pairs(fuzzy=cfg.fuzzy)
    if cfg.overlap == "symbolic" and len(pairs):
        canon = _canon.canonical_vocab(target_tok)
        pairs = pairs[[canon[t] is not None and _canon.is_symbolic(canon[t], cfg.symbolic_rule) for t in pairs[:, 0]]]
    n_target = _canon.vocab_size(target_tok)
    additional = np.ones(n_target, dtype=bool)
    additional[pairs[:, 0] if len(pairs) else []] = False
    additional[ov.specials[:, 0] if len(ov.specials) else []] = False
    with tempfile.TemporaryDirectory(prefix="tokxfer-init-") as tmp:
        pretok = _fasttext.pretokenize_cached(paths["target_corpus"], target_tok, cache_dir(), Path(tmp),
                                              token_format=cfg.aux_token_format)
        counts: Counter = Counter()
        with open(pretok, encoding="utf-8", newline="\n") as f:
            for line in f:
                counts.update(line.split())
    words = _fasttext.fasttext_words(target_tok, cfg.aux_token_format)
    freq = np.array([counts.get(w, 0) for w in words[:n_target]] + [0] * max(0, n_target - len(words)), dtype=np.int64)
    add_ids = np.flatnonzero(additional)
    f_add = freq[add_ids]
    total = int(len(add_ids))
    thresholds = sorted({1, 2, 3, 5, cfg.aux_min_count})
    table = {m: int((f_add < m).sum()) for m in thresholds}
    fb = table[cfg.aux_min_count]
    share = fb / max(total, 1)
    lower = [m for m in thresholds if m < cfg.aux_min_count]
    alt = ", ".join(f"aux_min_count={m}: {table[m]:,} ({table[m] / max(total, 1):.0%})" for m in lower)
    msg = (f"FOCUS: {fb:,} of {total:,} new (non-overlap) tokens ({share:.0%}) occur fewer than aux_min_count="
           f"{cfg.aux_min_count} times in --target-corpus and will get random rows"
           + (f"; {alt} (--config aux_min_count=N; fewer occurrences give noisier vectors), or more text" if alt else ""))
    if total and share >= 1 - cfg.min_aux_coverage:
        notes.warn(msg)
    else:
        notes.note(msg)
    return {"additional": total, "fallback_forecast": fb, "share": round(share, 4), "by_aux_min_count": table}


# --------------------------------------------------------------------------------------------
# provenance categories, the same for every method

PROVENANCE_CATEGORIES: dict[str, str] = {
    "special": "special token, copied: the row of the source special token of the same role (<s>/[CLS], </s>/[SEP], "
               "<pad>, <unk>, <mask>)",
    "copied": "same token, copied: the source row of the same token (equal after removing the word-start marker and "
              "ignoring case): the overlap of the two vocabularies",
    "single-source": "another token's row: the row of one different source token, i.e. a combination with a single "
                     "member (a one-word Tik-to-Tok alignment or a one-piece VIPI/mean-of-pieces partition, which those "
                     "methods count as 'copied'; a FOCUS/WECHSEL combination with all weight on one token, which those "
                     "count as 'combined')",
    "combined": "combination of source rows: a weighted sum of two or more source rows",
    "fallback": "random: drawn from N(mean, std) of the source embeddings with --seed; nothing was known about the token",
}
"""The provenance categories of ``tokxfer init``'s summary and ``init_info.json`` (``categories``),
computed from the mapping alone, the same way for every method (:func:`categorize`)."""


def categorize(mapping: Any, source_tok: Any, target_tok: Any) -> dict[str, int]:
    """Count a mapping's target rows by :data:`PROVENANCE_CATEGORIES`.

    Example:
        >>> from harness.protocols import COMBINED, COPIED, FALLBACK, TokenMapping
        >>> from tokenizers import Tokenizer, models
        >>> from transformers import PreTrainedTokenizerFast
        >>> tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordPiece({"a": 0, "b": 1, "c": 2}, unk_token="a")))
        >>> m = TokenMapping.from_coo(3, 3, [0, 1, 1], [0, 2, 1], [1, .5, .5], [COPIED, COMBINED, FALLBACK])
        >>> categorize(m, tok, tok)
        {'special': 0, 'copied': 1, 'single-source': 0, 'combined': 1, 'fallback': 1}
    """
    import numpy as np

    from harness.protocols import FALLBACK, SPECIAL
    from methods import _canon

    out = dict.fromkeys(PROVENANCE_CATEGORIES, 0)
    prov = np.asarray(mapping.provenance)
    nnz = np.diff(mapping.indptr)
    out["special"] = int((prov == SPECIAL).sum())
    out["fallback"] = int((prov == FALLBACK).sum())
    rest = (prov != SPECIAL) & (prov != FALLBACK)
    out["combined"] = int((rest & (nnz > 1)).sum())
    single = np.flatnonzero(rest & (nnz == 1))
    if len(single):
        tc, sc = _canon.canonical_vocab(target_tok), _canon.canonical_vocab(source_tok)

        def key(c: Any) -> bytes | None:
            return None if c is None else c.text.lower()

        src_ids = mapping.indices[mapping.indptr[single]]
        same = sum(1 for t, s in zip(single.tolist(), src_ids.tolist())
                   if t < len(tc) and s < len(sc) and key(tc[t]) is not None and key(tc[t]) == key(sc[s]))
        out["copied"] = int(same)
        out["single-source"] = int(len(single) - same)
    return out


WECHSEL_FALLBACK_REASONS = {
    "empty": "empty or not valid UTF-8 on their own (byte pieces)",
    "short": "shorter than minn-2={short_below} characters, so without any character n-gram (minn={minn})",
    "untrained": "whose n-grams the target word vectors never trained (their buckets are still zero)",
}
"""Why a WECHSEL target token has a zero subword vector, as :func:`wechsel_fallbacks` tells them apart."""


def wechsel_fallbacks(mapping: Any, target_tok: Any, cfg: Any, paths: dict) -> dict:
    """Split WECHSEL's random rows by why the token's subword vector is zero (see :data:`WECHSEL_FALLBACK_REASONS`).

    fastText wraps a string in ``<``/``>`` and sums its n-grams of ``minn..maxn`` characters: a
    string of fewer than ``minn - 2`` characters has none (punctuation and digits with the Common
    Crawl vectors' ``minn=5``), and an n-gram never met in training keeps a zero bucket.
    """
    import numpy as np

    from harness.protocols import FALLBACK
    from methods import _canon

    minn = cfg.minn
    vec = paths.get("target_word_vectors")
    if vec is not None and vec.name.lower().endswith(".bin"):
        minn = fasttext_bin_words(vec, 0)[1]
    specials = _canon.special_ids(target_tok)
    out = {"empty": 0, "short": 0, "untrained": 0}
    for t in np.flatnonzero(np.asarray(mapping.provenance) == FALLBACK).tolist():
        if t in specials or t >= len(target_tok):
            continue
        s = _canon.token_string(target_tok, t)
        out["empty" if not s else "short" if len(s) + 2 < minn else "untrained"] += 1
    return {**out, "minn": minn, "short_below": max(minn - 2, 0)}


# --------------------------------------------------------------------------------------------
# provenance of inputs


def _input_record(p: Path, flag: str) -> dict:
    from harness.cache import file_hash

    return {"flag": flag, "path": str(Path(p).resolve()), "bytes": Path(p).stat().st_size, "sha256": file_hash(p)}


def _model_record(name: str, flag: str) -> dict:
    """Absolute path and content hash of a model/tokenizer directory; a hub id as given (with its cached revision)."""
    from harness.cache import content_hash

    p = Path(name).expanduser()
    if p.is_dir():
        files = sorted(q for q in p.rglob("*") if q.is_file())
        return {"flag": flag, "path": str(p.resolve()), "bytes": sum(q.stat().st_size for q in files),
                "sha256": content_hash(p), "hash_of": "every file in the directory (relative path + contents)"}
    return {"flag": flag, "hub_id": name}


# --------------------------------------------------------------------------------------------
# the command


def _config_values(args: argparse.Namespace, cfg_cls: type, method: str) -> dict:
    import yaml

    values: dict[str, Any] = {}
    for item in args.config or []:
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise ValueError(f"--config {item!r}: expected KEY=VALUE")
        try:
            values[k.strip()] = yaml.safe_load(v)
        except yaml.YAMLError as e:
            raise ValueError(f"--config {item!r}: value is not valid YAML ({' '.join(str(e).split())})") from None
    for c in CONFIG_FLAGS:
        v = getattr(args, c.flag[2:].replace("-", "_"))
        if v is None:
            continue
        if not _config_has(cfg_cls, c.field):
            from harness import registry

            users = [e.name for e in registry.entries("method") if _config_has(e.config_cls, c.field)]
            raise InitInputError(f"{c.flag}: method {method!r} has no option {c.field} (it is for: {', '.join(users)})")
        if c.field in values and values[c.field] != v:
            raise InitInputError(f"{c.flag} {v} and --config {c.field}={values[c.field]} disagree; give one of them")
        if c.is_path and Path(v).expanduser().exists():
            v = str(Path(v).expanduser().resolve())
        elif c.is_path and c.field == "aux_model_path":
            raise InitInputError(f"{c.flag} {v}: file not found")
        values[c.field] = v
    return values


def _print_summary(console: Any, init: Any, categories: dict, timings: dict, out: Path, method_counts: dict,
                   warnings: list[str], new_head: dict | None, breakdown: dict | None) -> None:
    from rich.table import Table

    n = max(sum(categories.values()), 1)
    t = Table(title=f"{out}: {sum(categories.values()):,} target tokens", title_justify="left")
    t.add_column("provenance", style="bold")
    t.add_column("tokens", justify="right")
    t.add_column("share", justify="right")
    t.add_column("meaning")
    for k, v in categories.items():
        t.add_row(k, f"{v:,}", f"{v / n:.1%}", PROVENANCE_CATEGORIES[k].split(":")[0])
    console.print(t)
    console.print("the method's own counts: " + ", ".join(f"{k} {v:,}" for k, v in method_counts.items()))
    for fb in (init.result.info.get("fallbacks") or []):
        if isinstance(fb, dict) and fb.get("count"):
            console.print(f"random rows: {fb['count']:,} — {fb.get('reason', '?')}")
    if breakdown:
        console.print("  of the WECHSEL random rows (zero subword vectors): " + ", ".join(
            f"{v:,} {WECHSEL_FALLBACK_REASONS[k].format(**breakdown)}" for k, v in breakdown.items() if k in WECHSEL_FALLBACK_REASONS and v))
    steps = Table(title="time per step", title_justify="left")
    steps.add_column("step")
    steps.add_column("seconds", justify="right")
    for k, v in timings.items():
        steps.add_row(k, f"{v:.1f}")
    sub = init.result.info.get("timings") or {}
    for k, v in sub.items():
        if isinstance(v, (int, float)) and k != "total_s":
            steps.add_row(f"  method: {k.removesuffix('_s')}", f"{v:.1f}")
    console.print(steps)
    if new_head:
        console.print(f"[bold]new head[/]: {len(new_head['missing'])} head tensors were initialized at random (--new-head)")
    if warnings:
        console.print(f"{len(warnings)} warning(s), recorded in init_info.json")
    console.print(f"wrote {out} (model, tokenizer, init_info.json)")


def run(args: argparse.Namespace) -> int:
    """``tokxfer init``: checks, initialization, save, ``init_info.json``, summary. Returns the exit status."""
    from harness import records, registry
    from harness.registry import build_config

    if args.explain:
        try:
            print(explain(args.method))
        except registry.RegistryError as e:
            raise registry.RegistryError(f"--method: {e}") from None
        return 0
    for flag in ("source", "target_tokenizer", "out"):
        if not getattr(args, flag):
            raise InitInputError(f"--{flag.replace('_', '-')} is required (unless --explain)")
    started = records.now_iso()
    t_start = time.perf_counter()
    notes = Notes(quiet=args.quiet)
    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not args.overwrite:
        raise FileExistsError(
            f"--out {out}: {'exists and is not a directory' if not out.is_dir() else 'is not empty'}; "
            f"choose a new directory or pass --overwrite"
        )
    try:
        entry = registry.get("method", args.method)
    except registry.RegistryError as e:
        raise registry.RegistryError(f"--method: {e}") from None
    cfg_values = _config_values(args, entry.config_cls, args.method)
    cfg = build_config(entry.config_cls, cfg_values, where=f"--config of method {args.method!r}")

    # -- files and requirements (no tokenizer or model loaded yet)
    paths: dict[str, Path | None] = {f.field: _existing_file(getattr(args, f.field), f.flag) for f in INPUT_FLAGS}
    for field in ("target_corpus", "source_corpus"):
        if paths[field] is not None:
            from harness.resources import ResourceError, check_corpus

            try:
                check_corpus(paths[field])
            except ResourceError as e:
                raise InitInputError(f"{INPUT_BY_FIELD[field].flag} {e}") from None
    given = {k for k, v in paths.items() if v is not None} | {k for k, v in cfg_values.items() if v}
    problems = missing_inputs(args.method, cfg, given)
    if args.mode == "extend" and paths["target_corpus"] is None:
        problems.append("--mode extend needs --target-corpus (it ranks the target tokens to add)")
    if problems:
        raise InitInputError(problems[0] + (f" (and {len(problems) - 1} more: " + "; ".join(problems[1:]) + ")" if len(problems) > 1 else "")
                             + f". See `tokxfer init --method {args.method} --explain`")
    reads = set(method_reads(args.method, entry.cls)) | ({"target_corpus"} if args.mode == "extend" else set())
    method_paths = {k: (v if k in reads else None) for k, v in paths.items()}
    for k, v in paths.items():
        if v is not None and k not in reads:
            notes.warn(f"{INPUT_BY_FIELD[k].flag} is not read by --method {args.method} (used only to check the other inputs)")

    # -- tokenizers (seconds), then the source checkpoint's head (no weights loaded)
    from harness import resources

    t0 = time.perf_counter()
    tgt = resources.load_tokenizer(args.target_tokenizer)
    resources.check_model_dir(args.source)
    src_tok = resources.load_tokenizer(args.source_tokenizer or args.source)
    head = missing_head(args.source, args.kind)
    new_head = None
    if head is not None and head[0]:
        missing, archs = head
        if not args.new_head:
            raise InitInputError(
                f"--source {args.source}: the checkpoint ({', '.join(archs) or 'no architectures listed'}) has no --kind {args.kind} "
                f"head ({len(missing)} tensors missing, e.g. {missing[0]}); the saved model would carry a random head. Pass "
                "--new-head to accept that (recorded in init_info.json), or use a checkpoint with the head")
        new_head = {"missing": missing, "architectures": archs, "seed": args.seed,
                    "note": "initialized by transformers' default initialization under a generator seeded from --seed"}
        notes.warn(f"--new-head: {len(missing)} head tensors of the --kind {args.kind} model are not in the checkpoint "
                   f"({', '.join(archs)}) and will be random")
    elif head is None:
        notes.note(f"--source {args.source}: not a local directory; its --kind {args.kind} head was not checked")

    # -- input files vs the tokenizers and corpora
    ctx_kw = {
        "target_vocab": corpus_vocabulary(paths["target_corpus"]) if paths["target_corpus"] is not None else None,
        "source_vocab": corpus_vocabulary(paths["source_corpus"]) if paths["source_corpus"] is not None else None,
        "target_tok": tgt, "source_tok": src_tok,
    }
    input_info: dict[str, Any] = {}
    if method_paths["dictionary"] is not None:
        method_paths["dictionary"], input_info["dictionary"] = prepare_dictionary(paths["dictionary"], args.swap_dictionary, ctx_kw, notes)
    elif args.swap_dictionary:
        raise InitInputError("--swap-dictionary without --dictionary")
    if method_paths["parallel_corpus"] is not None:
        method_paths["parallel_corpus"], input_info["parallel_corpus"] = prepare_parallel(
            paths["parallel_corpus"], args.swap_parallel, ctx_kw, notes)
    elif args.swap_parallel:
        raise InitInputError("--swap-parallel without --parallel-corpus")
    n_source = _source_rows(args.source, src_tok)
    if args.method == "wechsel":
        input_info["wechsel_source_ngrams"] = check_wechsel_source(cfg, method_paths, src_tok, notes)
    if args.method == "focus" and args.mode == "replace":
        input_info["focus_forecast"] = focus_forecast(cfg, method_paths, src_tok, tgt, n_source, notes)
    t_checks = time.perf_counter() - t0

    # -- the long part
    from harness import seeding
    from harness.runner import init_summary, initialize_model, provenance_string
    from methods import _fasttext, _progress

    notes.note(f"loading {args.source} and running {args.method} (fastText training, if any, prints its progress)")
    import contextlib

    seeded = seeding.seeded_globals(args.seed, "init", "new-head") if new_head else contextlib.nullcontext()
    try:
        with seeded, _fasttext.training_progress(not args.quiet), _progress.reporting(_bar_factory(args.quiet)):
            init = initialize_model(
                source_model=args.source, source_tokenizer=args.source_tokenizer, target_tok=tgt, method_name=args.method,
                method_config=cfg, seed=args.seed, model_kind=args.kind, transfer_paths=method_paths, mode=args.mode,
                extend_top_n=args.extend_top_n, bias=args.bias,
            )
    except Exception as e:  # a method's message about inputs.<field> is reworded with the flag
        text = str(e.args[0]) if isinstance(e, KeyError) and e.args else str(e)
        worded = flag_wording(text)
        if worded != text:
            raise InitInputError(" ".join(worded.split())) from e
        raise
    t0 = time.perf_counter()
    notes.note(f"saving to {out}")
    out.mkdir(parents=True, exist_ok=True)
    init.model.save_pretrained(out)
    init.tokenizer.save_pretrained(out)
    t_save = time.perf_counter() - t0
    categories = categorize(init.result.mapping, init.source_tokenizer, init.tokenizer)
    if args.method == "wechsel" and cfg.variant == "subword":
        input_info["wechsel_fallbacks"] = wechsel_fallbacks(init.result.mapping, init.tokenizer, cfg, paths)
    timings = {"checks_s": t_checks, **init.timings, "save_s": t_save, "total_s": time.perf_counter() - t_start}

    info = init_summary(init)
    from harness.protocols import PROVENANCE_NAMES

    info.update({
        "init_info_version": INIT_INFO_VERSION,
        "tokxfer_version": records.package_version(),
        "git": records.git_info(),
        "command": ["tokxfer", *sys.argv[1:]] if Path(sys.argv[0]).name in ("tokxfer", "cli.py", "__main__.py") else None,
        "method": args.method,
        "config": dataclasses.asdict(cfg),
        "seed": args.seed,
        "kind": args.kind, "mode": args.mode, "extend_top_n": args.extend_top_n if args.mode == "extend" else None,
        "bias": args.bias,
        "source": _model_record(args.source, "--source"),
        "source_tokenizer": _model_record(args.source_tokenizer or args.source, "--source-tokenizer"),
        "target_tokenizer": _model_record(args.target_tokenizer, "--target-tokenizer"),
        "inputs": {k: {**_input_record(v, INPUT_BY_FIELD[k].flag), "read_by_method": method_paths[k] is not None,
                       **(input_info.get(k) or {})} for k, v in paths.items() if v is not None},
        "checks": {k: v for k, v in input_info.items() if k not in paths and v is not None},
        "new_head": new_head,
        "warnings": notes.warnings,
        "categories": categories,
        "category_meanings": PROVENANCE_CATEGORIES,
        "provenance_codes": {str(k): v for k, v in PROVENANCE_NAMES.items()},
        "provenance": provenance_string(init.result.mapping),
        "timings": {k: round(v, 3) for k, v in timings.items()},
        "environment": records.environment(),
        "started_at": started,
        "finished_at": records.now_iso(),
    })
    from harness.records import _json_default  # noqa: PLC2701 - the records' own JSON encoding

    (out / "init_info.json").write_text(json.dumps(info, indent=2, default=_json_default) + "\n")
    from rich.console import Console

    _print_summary(Console(soft_wrap=True), init, categories, timings, out.resolve(), info["counts"], notes.warnings, new_head,
                   info["checks"].get("wechsel_fallbacks"))
    return 0


def _bar_factory(quiet: bool) -> Callable[[str, int | None], Any]:
    """Progress bars of long method steps (:mod:`methods._progress`): tqdm on stderr, or none with --quiet."""
    from tqdm.auto import tqdm

    return lambda desc, total: tqdm(total=total, desc=desc, file=sys.stderr, disable=quiet, dynamic_ncols=True)


def _source_rows(source: str, src_tok: Any) -> int:
    """Rows of the source embedding matrix, from the model config (no weights loaded)."""
    try:
        import transformers

        cfg = transformers.AutoConfig.from_pretrained(source)
        text = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        v = getattr(text, "vocab_size", None)
        return int(v) if v else len(src_tok)
    except (OSError, ValueError):
        return len(src_tok)


# --------------------------------------------------------------------------------------------
# `tokxfer tokenizer train`


def add_tokenizer_arguments(sp: argparse.ArgumentParser) -> None:
    """``tokxfer tokenizer train CORPUS… --vocab-size N [--like SOURCE] [--algorithm A] --out DIR``."""
    sub = sp.add_subparsers(dest="action", required=True)
    t = sub.add_parser("train", help="train a tokenizer on target-language text, like the source model's")
    t.description = (
        "Train a subword tokenizer on CORPUS for use as `tokxfer init --target-tokenizer`. With --like SOURCE the\n"
        "algorithm, the special tokens and the lowercasing follow the source model's tokenizer family\n"
        "(SentencePiece Unigram/BPE: <s> <pad> </s> <unk> <mask> and NFKC, as XLM-R; byte-level BPE as RoBERTa/GPT-2;\n"
        "WordPiece: [PAD] [UNK] [CLS] [SEP] [MASK], as BERT). Trained tokenizers are cached by content."
    )
    t.formatter_class = argparse.RawDescriptionHelpFormatter
    from harness.tokenizers import ALGORITHMS

    t.add_argument("corpus", nargs="+", help="UTF-8 text files, one sentence or document per line")
    t.add_argument("--algorithm", choices=ALGORITHMS, default=None,
                   help="default: the algorithm of --like's tokenizer (required without --like)")
    t.add_argument("--vocab-size", type=int, required=True, help="vocabulary size, special tokens included")
    t.add_argument("--like", default=None, metavar="SOURCE",
                   help="source model (or tokenizer) directory or hub id whose tokenizer family to follow")
    t.add_argument("--lowercase", action=argparse.BooleanOptionalAction, default=None,
                   help="lowercase the text (default: as --like's tokenizer does; off without --like)")
    t.add_argument("--out", required=True, help="output directory (new or empty, unless --overwrite)")
    t.add_argument("--overwrite", action="store_true", help="write into a non-empty --out directory")


def _family_algorithm(tok: Any) -> tuple[str, bool]:
    """The :func:`harness.tokenizers.train_tokenizer` algorithm of a tokenizer's family, and whether it lowercases."""
    from methods import _canon

    family = _canon.tokenizer_family(tok)
    backend = getattr(tok, "backend_tokenizer", None)
    model = type(backend.model).__name__ if backend is not None else ""
    algo = {"bytelevel": "bytelevel-bpe", "wordpiece": "wordpiece"}.get(family) or ("bpe" if model == "BPE" else "unigram")
    norm = getattr(backend, "normalizer", None) if backend is not None else None
    lowercase = bool(norm is not None and norm.normalize_str("ABC Ä") == "abc ä")
    return algo, lowercase


def train_tokenizer_command(args: argparse.Namespace) -> int:
    """``tokxfer tokenizer train``: a tokenizer for ``tokxfer init --target-tokenizer``."""
    from harness import resources
    from harness.tokenizers import tokenizer_info, train_tokenizer
    from methods import _canon

    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not args.overwrite:
        raise FileExistsError(f"--out {out}: {'exists and is not a directory' if not out.is_dir() else 'is not empty'}; "
                              "choose a new directory or pass --overwrite")
    paths = [Path(c).expanduser() for c in args.corpus]
    for p in paths:
        if not p.is_file():
            raise InitInputError(f"CORPUS {p}: file not found")
    like = None
    algorithm, lowercase = args.algorithm, bool(args.lowercase)
    if args.like:
        like = resources.load_tokenizer(args.like)
        fam_algo, fam_lower = _family_algorithm(like)
        if algorithm is None:
            algorithm = fam_algo
        elif algorithm != fam_algo:
            print(f"tokxfer: warning: --algorithm {algorithm} differs from --like's family ({fam_algo}); special tokens are "
                  "matched by role, but the target will not be tokenized like the source", file=sys.stderr)
        if args.lowercase is None:
            lowercase = fam_lower
    elif algorithm is None:
        raise InitInputError("--algorithm is required without --like (unigram, bpe, bytelevel-bpe or wordpiece)")
    t0 = time.perf_counter()
    tok = train_tokenizer(paths, algorithm, args.vocab_size, lowercase=lowercase, cache_dir=resources.cache_dir(),
                          progress=sys.stderr.isatty())
    seconds = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(out)
    info = tokenizer_info(tok)
    roles = _canon.special_roles(tok)
    line = (f"wrote {out}: {algorithm} tokenizer, {len(tok):,} tokens{' (lowercased)' if lowercase else ''}, trained on "
            f"{sum(p.stat().st_size for p in paths) / 1e6:.1f} MB in {seconds:.1f}s"
            + (" (cached)" if seconds < 0.5 * float(info.get('train_seconds') or 0) else ""))
    print(line)
    print("special tokens: " + ", ".join(f"{r} {tok.convert_ids_to_tokens(i)}" for r, i in sorted(roles.items(), key=lambda x: x[1])))
    if like is not None:
        src_roles = _canon.special_roles(like)
        lost = sorted(set(src_roles) - set(roles))
        print(f"like {args.like}: family {_canon.tokenizer_family(like)}, {len(like):,} tokens"
              + (f"; roles the source has and this tokenizer lacks: {', '.join(lost)}" if lost else "; every special role matched"))
        sample = []
        with open(paths[0], encoding="utf-8", errors="replace") as f:
            for line_text in f:
                sample.append(line_text.strip())
                if len(sample) >= 2000:
                    break
        words = _words(sample)[:20000]
        if words:
            print(f"pieces per word on {len(words):,} words of {paths[0].name}: {_fertility(tok, words):.2f} "
                  f"(source tokenizer: {_fertility(like, words):.2f})")
    return 0


# --------------------------------------------------------------------------------------------
# `tokxfer cache ls | prune`


def add_cache_arguments(sp: argparse.ArgumentParser) -> None:
    """``tokxfer cache ls`` and ``tokxfer cache prune``."""
    sub = sp.add_subparsers(dest="action", required=True)
    ls = sub.add_parser("ls", help="list the cache's entries: kind, size, age")
    ls.add_argument("--kind", action="append", help="only this kind (repeatable), e.g. fasttext")
    pr = sub.add_parser("prune", help="delete cache entries (everything in the cache can be rebuilt)")
    pr.add_argument("--kind", action="append", help="entries of this kind (repeatable), e.g. fasttext, inits")
    pr.add_argument("--older-than", default=None, metavar="AGE", help="entries built longer ago than AGE, e.g. 30d, 12h, 90m")
    pr.add_argument("--all", action="store_true", help="every entry")
    pr.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    for p in (ls, pr):
        p.description = ("The cache lives in $TOKXFER_CACHE, else $XDG_CACHE_HOME/tokxfer, else ~/.cache/tokxfer. "
                         "Entries are named by the content hash of what they were built from; a deleted entry is "
                         "rebuilt when needed. Do not prune while a run that uses the cache is going on.")


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _age(seconds: float) -> str:
    for unit, s in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= s:
            return f"{seconds / s:.0f}{unit}"
    return f"{seconds:.0f}s"


def cache_command(args: argparse.Namespace) -> int:
    """``tokxfer cache ls | prune``."""
    from rich.console import Console
    from rich.table import Table

    from harness.cache import cache_root, list_entries, parse_age, remove_entries

    root = cache_root()
    entries = list_entries(root)
    now = time.time()
    kinds = sorted({e.kind for e in entries})
    for k in getattr(args, "kind", None) or []:
        if k not in kinds:
            raise InitInputError(f"--kind {k!r}: no such kind in the cache {root} (kinds: {', '.join(kinds) or 'none, the cache is empty'})")
    con = Console(soft_wrap=True)
    if args.action == "ls":
        chosen = [e for e in entries if not args.kind or e.kind in args.kind]
        t = Table(title=f"tokxfer cache {root}", title_justify="left")
        for c, j in (("kind", "left"), ("entry", "left"), ("what", "left"), ("size", "right"), ("age", "right")):
            t.add_column(c, justify=j)
        for e in chosen:
            t.add_row(e.kind, e.path.name + (" (partial)" if e.partial else ""), e.what, _size(e.bytes), _age(now - e.mtime))
        con.print(t)
        per_kind = Counter()
        for e in chosen:
            per_kind[e.kind] += e.bytes
        con.print(f"{len(chosen)} entries, {_size(sum(per_kind.values()))}"
                  + (": " + ", ".join(f"{k} {_size(v)}" for k, v in sorted(per_kind.items())) if per_kind else ""))
        return 0
    if not (args.all or args.kind or args.older_than):
        raise InitInputError("cache prune: say what to delete: --kind K, --older-than AGE, --all (with --dry-run to look first)")
    older = parse_age(args.older_than) if args.older_than else None
    chosen = [e for e in entries if (args.all or not args.kind or e.kind in args.kind)
              and (older is None or now - e.mtime > older)]
    total = sum(e.bytes for e in chosen)
    if args.dry_run:
        for e in chosen:
            con.print(f"would delete {e.kind}/{e.path.name} ({e.what}, {_size(e.bytes)}, {_age(now - e.mtime)} old)")
        con.print(f"dry run: {len(chosen)} of {len(entries)} entries, {_size(total)} would be freed in {root}")
        return 0
    freed = remove_entries(chosen)
    con.print(f"deleted {len(chosen)} of {len(entries)} entries, freed {_size(freed)} in {root}")
    return 0
