"""Real parallel text from gettext catalogues: X ↔ English UI messages, split into held-out test pairs and training text.

Widely used Python packages ship their translations as gettext ``.po`` catalogues
(``…/locale/<LANG>/LC_MESSAGES/*.po``): every entry pairs an English message (``msgid``) with its
translation (``msgstr``) by a human translator. :func:`read_po` parses one file (fuzzy, obsolete and
untranslated entries are skipped), :func:`collect` gathers the pairs of several packages per
language (the first package that translates a message wins), and :func:`build_language` splits one
language into

* ``test.jsonl`` — held-out pairs ``{"translation": {"en": …, LANG: …}}`` for the evaluation tasks:
  sentence-like messages (3–40 English words after cleaning, no placeholder or markup in either
  side, translation not equal to the English), each English and each translation once, the first
  ``n_test`` in the order of ``sha256(lang, english)``;
* ``test.txt`` — their target sides, one a line;
* ``train.txt`` — the target side of every other pair (placeholders and markup removed): the
  monolingual text for target tokenizers, fastText and LAPT;
* ``source.txt`` — English messages of every catalogue except this language's test English (the
  source-language corpus WECHSEL's word vectors train on);
* ``parallel.jsonl`` — the training pairs ``{"source": en, "target": x}`` (Tik-to-Tok);
* ``dictionary.tsv`` — ``target<TAB>english`` from training pairs whose both sides are one word.

No test pair's English or translation occurs in any training file of its language.

Example:
    >>> entries = read_po_text('msgid "Save"\\nmsgstr "Speichern"\\n\\n#, fuzzy\\nmsgid "Quit"\\nmsgstr "Ende"\\n', "x.po")
    >>> [(e.msgid, e.msgstrs) for e in entries]
    [('Save', ('Speichern',)), ('Quit', ('Ende',))]
    >>> [e.usable for e in entries]
    [True, False]
    >>> clean("Delete %(count)s <b>items</b>?")
    'Delete items?'
"""

from __future__ import annotations

import ast
import hashlib
import html
import json
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.errors import TokxferError

__all__ = ["PoEntry", "PoError", "read_po", "read_po_text", "locale_of", "collect", "clean", "has_markup", "is_word",
           "build_language", "LanguageData", "TEST_PAIRS", "MIN_TEST_PAIRS", "MIN_TRAIN_LINES"]

TEST_PAIRS = 500
"""Held-out test pairs per language (the same number for every language, so accuracies compare)."""
MIN_TEST_PAIRS = 200
"""A language with fewer eligible test pairs is left out."""
MIN_TRAIN_LINES = 500
"""A language with fewer training lines (after the test pairs are held out) is left out."""
MIN_WORDS, MAX_WORDS = 3, 40

_PLACEHOLDER = re.compile(
    r"%\([^)]*\)[#0+\-]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa]"  # %(name)s
    r"|%[#0+\-]*\d*(?:\.\d+)?[diouxXeEfFgGcrsa]"          # %s %d %.2f (not "100% sure")
    r"|\{[^{}\s]*\}"                                         # {name} {0} {}
    r"|\$\{?\w+\}?"                                          # $name ${name}
)
_MARKUP = re.compile(r"<[^>]*>")
_SPACE = re.compile(r"\s+")


class PoError(TokxferError, ValueError):
    """A ``.po`` file that cannot be parsed (the message names the file and line)."""


@dataclass
class PoEntry:
    """One catalogue entry."""

    msgid: str
    msgstrs: tuple[str, ...]
    msgid_plural: str | None = None
    msgctxt: str | None = None
    flags: frozenset[str] = field(default_factory=frozenset)
    obsolete: bool = False

    @property
    def usable(self) -> bool:
        """Translated, current and not fuzzy (the header, ``msgid ""``, is not a message)."""
        return bool(self.msgid) and not self.obsolete and "fuzzy" not in self.flags and bool(self.msgstrs and self.msgstrs[0])


_KEYWORD = re.compile(r'^(msgctxt|msgid_plural|msgid|msgstr(?:\[(\d+)\])?)\s+(".*")\s*$')


def read_po_text(text: str, where: str = "<po>") -> list[PoEntry]:
    """Parse the text of a ``.po`` file (gettext's format: comments, flags, ``msgctxt``, ``msgid``,
    ``msgid_plural``, ``msgstr``/``msgstr[n]``, continuation strings, ``#~`` obsolete entries)."""
    entries: list[PoEntry] = []
    cur: dict = {}
    flags: set[str] = set()
    obsolete = False
    last: str | None = None

    def flush() -> None:
        nonlocal cur, flags, obsolete, last
        if "msgid" in cur:
            strs = cur.get("msgstr", {})
            entries.append(PoEntry(cur["msgid"], tuple(strs[k] for k in sorted(strs)), cur.get("msgid_plural"),
                                   cur.get("msgctxt"), frozenset(flags), obsolete))
        cur, flags, obsolete, last = {}, set(), False, None

    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("#~|"):
            continue
        if line.startswith("#~"):
            obsolete = True
            line = line[2:].strip()
            if not line or line.startswith("#"):
                continue
        elif not line:
            flush()
            continue
        elif line.startswith("#,"):
            if "msgid" in cur and "msgstr" in cur:
                flush()
            flags.update(f.strip() for f in line[2:].split(",") if f.strip())
            continue
        elif line.startswith("#"):
            continue
        m = _KEYWORD.match(line)
        try:
            if m:
                key, index, value = m.group(1), m.group(2), ast.literal_eval(m.group(3))
                if key in ("msgctxt", "msgid") and "msgstr" in cur:  # a new entry without a blank line
                    flush()
                if key.startswith("msgstr"):
                    cur.setdefault("msgstr", {})[int(index or 0)] = value
                    last = f"msgstr[{int(index or 0)}]"
                else:
                    cur[key] = value
                    last = key
            elif line.startswith('"') and last is not None:
                value = ast.literal_eval(line)
                if last.startswith("msgstr["):
                    i = int(last[7:-1])
                    cur["msgstr"][i] += value
                else:
                    cur[last] += value
            else:
                raise PoError(f"{where}:{n}: unexpected line {raw[:60]!r}")
        except (SyntaxError, ValueError) as e:
            if isinstance(e, PoError):
                raise
            raise PoError(f"{where}:{n}: not a gettext string: {raw[:60]!r}") from None
    flush()
    return entries


def read_po(path: str | Path) -> list[PoEntry]:
    """Parse a ``.po`` file (UTF-8)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise PoError(f"{path}: not UTF-8 ({e.reason} at byte {e.start})") from None
    return read_po_text(text, str(path))


def locale_of(path: str | Path) -> str | None:
    """The locale of ``…/locale/<LANG>/LC_MESSAGES/<domain>.po`` (``None`` for other paths)."""
    parts = Path(path).parts
    for i in range(len(parts) - 2):
        if parts[i] == "locale" and parts[i + 2] == "LC_MESSAGES":
            return parts[i + 1]
    return None


def clean(text: str) -> str:
    """A message as plain text: placeholders and markup removed, whitespace collapsed."""
    text = _MARKUP.sub(" ", _PLACEHOLDER.sub(" ", text))
    text = html.unescape(text)
    text = _SPACE.sub(" ", text).strip()
    return re.sub(r"\s+([.,;:!?…])", r"\1", text)


def has_markup(text: str) -> bool:
    """Whether a message holds a placeholder or markup (such pairs are never test pairs)."""
    return bool(_PLACEHOLDER.search(text) or _MARKUP.search(text))


def collect(packages: Sequence[tuple[str, Path]]) -> tuple[dict[str, dict[str, tuple[str, str]]], list[str]]:
    """All usable pairs per locale over the packages' catalogues.

    Args:
        packages: ``(package name, directory)`` in order of preference; every ``*.po`` below a
            directory is read (files in sorted order).

    Returns:
        ``({locale: {msgid: (msgstr, package)}}, english)`` where a msgid a later package translates
        again keeps the earlier translation, and ``english`` lists every msgid (and msgid_plural) once,
        in the order met.
    """
    pairs: dict[str, dict[str, tuple[str, str]]] = {}
    english: dict[str, None] = {}
    for name, root in packages:
        for po in sorted(Path(root).rglob("*.po")):
            lang = locale_of(po.relative_to(root))
            if lang is None:
                continue
            for e in read_po(po):
                if not e.msgid:
                    continue
                english.setdefault(e.msgid)
                if e.msgid_plural:
                    english.setdefault(e.msgid_plural)
                if e.usable:
                    pairs.setdefault(lang, {}).setdefault(e.msgid, (e.msgstrs[0], name))
    return pairs, list(english)


def _order(lang: str, text: str) -> str:
    return hashlib.sha256(f"{lang}\t{text}".encode()).hexdigest()


@dataclass
class LanguageData:
    """What :func:`build_language` wrote for one language (counts for the manifest)."""

    language: str
    test_pairs: int
    train_lines: int
    train_words: int
    parallel_pairs: int
    dictionary_entries: int
    source_lines: int
    packages: dict[str, int]

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def build_language(lang: str, pairs: dict[str, tuple[str, str]], english: Iterable[str], out: Path,
                   *, n_test: int = TEST_PAIRS) -> LanguageData | None:
    """Split one language's pairs and write its files under ``out/<lang>/`` (see the module docstring).

    Returns:
        The counts, or ``None`` (nothing written) when the language has fewer than
        :data:`MIN_TEST_PAIRS` eligible test pairs or :data:`MIN_TRAIN_LINES` training lines.
    """
    candidates: list[tuple[str, str]] = []
    for en, (x, _) in pairs.items():
        if has_markup(en) or has_markup(x):
            continue
        ce, cx = clean(en), clean(x)
        if not MIN_WORDS <= len(ce.split()) <= MAX_WORDS or not cx or cx.casefold() == ce.casefold():
            continue
        candidates.append((ce, cx))
    candidates.sort(key=lambda p: _order(lang, p[0]))
    test: list[tuple[str, str]] = []
    seen_en: set[str] = set()
    seen_x: set[str] = set()
    for ce, cx in candidates:
        if len(test) >= n_test:
            break
        if ce.casefold() in seen_en or cx.casefold() in seen_x:
            continue
        seen_en.add(ce.casefold())
        seen_x.add(cx.casefold())
        test.append((ce, cx))
    if len(test) < min(n_test, MIN_TEST_PAIRS):
        return None
    train: list[tuple[str, str]] = []
    packages: dict[str, int] = {}
    for en, (x, pkg) in pairs.items():
        ce, cx = clean(en), clean(x)
        if not ce or not cx or ce.casefold() in seen_en or cx.casefold() in seen_x:
            continue
        train.append((ce, cx))
        packages[pkg] = packages.get(pkg, 0) + 1
    lines = list(dict.fromkeys(cx for _, cx in train))
    if len(lines) < MIN_TRAIN_LINES:
        return None
    d = out / lang
    d.mkdir(parents=True, exist_ok=True)
    _write_lines(d / "test.txt", [x for _, x in test])
    _write_lines(d / "test.jsonl", [json.dumps({"translation": {"en": e, lang: x}}, ensure_ascii=False) for e, x in test])
    _write_lines(d / "train.txt", lines)
    _write_lines(d / "parallel.jsonl", [json.dumps({"source": e, "target": x}, ensure_ascii=False) for e, x in train])
    dictionary = list(dict.fromkeys(f"{x}\t{e}" for e, x in train if is_word(e) and is_word(x)))
    _write_lines(d / "dictionary.tsv", dictionary)
    source = [c for c in dict.fromkeys(clean(e) for e in english) if c and c.casefold() not in seen_en]
    _write_lines(d / "source.txt", source)
    return LanguageData(lang, len(test), len(lines), sum(len(x.split()) for x in lines), len(train), len(dictionary),
                        len(source), dict(sorted(packages.items())))


def is_word(text: str) -> bool:
    """One word: letters, digits and combining marks only (Tamil's and Devanagari's vowel signs are marks).

    Example:
        >>> is_word("தமிழ்"), is_word("Speichern"), is_word("two words"), is_word("e-mail")
        (True, True, False, False)
    """
    return bool(text) and all(c.isalnum() or unicodedata.category(c).startswith("M") for c in text)


def _write_lines(path: Path, lines: Sequence[str]) -> None:
    path.write_text("".join(line.replace("\n", " ") + "\n" for line in lines), encoding="utf-8")
