"""Words and bilingual dictionaries: the word tokenizer every method's word-level step uses, and the
reader of ``target_word<TAB>source_word`` dictionaries (re-exported by :mod:`harness.vocab`)."""

from __future__ import annotations

import re
from pathlib import Path

WORD_PATTERN = re.compile(r"\w+(?:['’\-]\w+)*|[^\w\s]", re.UNICODE)
"""Words for word-level fastText: runs of word characters (with inner apostrophes/hyphens), or
single other non-space characters. Case is kept."""


def word_tokenize(line: str) -> list[str]:
    """Split raw text into the words word-level fastText is trained on (case kept).

    Example:
        >>> word_tokenize("Das Haus's Dach, 3,5 m-hoch!")
        ['Das', "Haus's", 'Dach', ',', '3', ',', '5', 'm-hoch', '!']
    """
    return WORD_PATTERN.findall(line)


def read_dictionary(path: str | Path) -> tuple[list[tuple[str, str]], int]:
    """Read a bilingual dictionary: ``target_word<TAB>source_word`` per line.

    Lines without a tab are split on whitespace when they have exactly two fields (as the
    reference code does); blank lines are skipped; any other line is counted as malformed.
    Columns beyond the second (e.g. a count) are ignored.

    Args:
        path: the TSV file.

    Returns:
        ``(pairs, n_malformed)``: ``(target, source)`` word pairs in file order, and how many
        non-blank lines could not be parsed.

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "d.tsv"
        >>> _ = p.write_text("Haus\\thouse\\nHund dog\\nkaputt\\n")
        >>> read_dictionary(p)
        ([('Haus', 'house'), ('Hund', 'dog')], 1)
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"bilingual dictionary not found: {path}")
    pairs: list[tuple[str, str]] = []
    malformed = 0
    with open(path, encoding="utf-8", newline="\n") as f:
        for line in f:
            line = line.rstrip("\r\n")
            if not line.strip():
                continue
            parts = [p.strip() for p in line.split("\t")] if "\t" in line else line.split()
            if len(parts) < 2 or not parts[0] or not parts[1] or ("\t" not in line and len(parts) != 2):
                malformed += 1
                continue
            pairs.append((parts[0], parts[1]))
    return pairs, malformed

__all__ = ["WORD_PATTERN", "word_tokenize", "read_dictionary"]
