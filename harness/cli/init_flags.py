"""What ``tokxfer init`` knows about methods before running one: the flag of every input, which
method reads which input and when (the method class's ``needs``), and ``--explain``'s text from a method's
config dataclass. Read by :mod:`harness.cli.init_cmd` (the command) and by ``tokxfer ls``; imports no
model and no tokenizer."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import re
import sys
import textwrap
from dataclasses import dataclass
from typing import Any

from harness.protocols import Need

# --------------------------------------------------------------------------------------------
# inputs and their flags


@dataclass(frozen=True)
class InputFlag:
    """A file input of :class:`harness.protocols.TransferInputs` and its ``tokxfer init`` flag."""

    field: str
    metavar: str
    help: str
    directory: bool = False
    """A model directory (``--helper-model``), checked and recorded as one; the others are files."""

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
    InputFlag("helper_model", "DIR", "a small model trained in the target language with the target tokenizer "
              "(a save_pretrained directory with its tokenizer): CLP reads its embeddings; OMP uses them as its "
              "donor space", directory=True),
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


def need_condition(need: Need, cfg_cls: type, typed: dict[str, str] | None = None) -> str:
    """The condition of ``need`` in the user's words: as typed (``typed``: field -> spelling), else as a flag, else
    ``field=value``, marked ``(the default)`` where it is the config's default."""
    defaults = {f.name: _default(f) for f in dataclasses.fields(cfg_cls)}
    parts = []
    for f, v in need.when:
        if typed and f in typed:
            parts.append(typed[f])
            continue
        flag = next((c.flag for c in CONFIG_FLAGS if c.field == f), None)
        text = f"{flag} {v}" if flag else f"{f}={v}"
        parts.append(text + (" (the default)" if defaults.get(f) == v else ""))
    return " and ".join(parts)


def _flag_of(name: str) -> str:
    if name in INPUT_BY_FIELD:
        return INPUT_BY_FIELD[name].flag
    for c in CONFIG_FLAGS:
        if c.field == name:
            return c.flag
    return f"--config {name}=…"


def method_needs(name: str) -> tuple[Need, ...] | None:
    """The requirements method ``name`` declares (its class's ``needs``, the one place they are written
    down), ``None`` when it declares none: then it reads what its module's source reads (:func:`method_reads`;
    the test suite checks the declared needs against the ``inputs.<field>`` each module reads). Every
    method also needs ``--target-corpus`` with ``--mode extend``.

    Example:
        >>> [n.inputs for n in method_needs("tiktotok")], method_needs("overlap")
        ([('parallel_corpus',)], None)
    """
    from harness import registry

    return registry.method_needs(registry.get("method", name).cls)


def method_reads(cls: type) -> list[str]:
    """The file inputs a method reads: from its declared needs (:func:`method_needs`), else found in its module's source."""
    from harness import registry

    needs = registry.method_needs(cls)
    if needs is not None:
        return list(dict.fromkeys(i for n in needs for i in n.inputs if i in INPUT_BY_FIELD))

    return registry.module_reads(cls, [f.field for f in INPUT_FLAGS]) or []


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


def _option_wording(doc: str) -> str:
    """A config docstring with each option that has a flag of its own named with it: ``english_tokenizer`` (--english-tokenizer)."""
    for c in CONFIG_FLAGS:
        doc = re.sub(rf"``{c.field}``(?! \()", f"``{c.field}`` ({c.flag})", doc)
    return doc


def explain(name: str, width: int = 100) -> str:
    """What ``tokxfer init --method NAME`` needs, its options with defaults, and the paper behind them.

    Generated from the registry entry, the method module's docstring, its declared needs and the
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
    needs = registry.method_needs(entry.cls)
    if needs is not None:
        for n in needs:
            alts = " or ".join(_flag_of(i) for i in n.inputs)
            cond = f" [when {need_condition(n, entry.config_cls)}]" if n.when else " [always]"
            lines.append(wrap(f"{alts}: {n.why}{cond}", "  "))
    else:
        reads = method_reads(entry.cls)
        lines.append("  " + (", ".join(INPUT_BY_FIELD[r].flag for r in reads) + " (read by the method; requirements "
                                "not declared)" if reads else "none: only the two tokenizers and the source embeddings"))
    lines.append("  --target-corpus [when --mode extend: ranks the target tokens to add]")
    used = {i for n in needs or () for i in n.inputs} | set(method_reads(entry.cls))
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
            lines.append(wrap(" ".join(_option_wording(flag_wording(docs[f.name])).split()), "      "))
    presets = [m for m in ("reference",) if callable(getattr(entry.config_cls, m, None))]
    if presets:
        ref = entry.config_cls.reference
        first = (inspect.getdoc(ref) or "").split("\n\n")[0]
        diff = {f.name: getattr(ref(), f.name) for f in fields if getattr(ref(), f.name) != _default(f)}
        lines += ["", wrap(f"Preset 'reference' — {' '.join(first.split())} As flags: --config "
                          + " ".join(f"{k}={json.dumps(v)}" for k, v in diff.items()), "")]
    return "\n".join(lines)


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
