"""Code-switched copies of the extra languages' text for the built-in multilingual sources.

A multilingual model transfers across languages when their words meet in shared contexts: shared
strings ("anchors": numbers, names, cognates) and, with TLM, translations side by side. On the
built-in world, ``near`` shares many words with the source language and transfers; ``far``,
``script`` and ``agglu`` share almost none, and a 2,000-step MLM + TLM source leaves them nearly
unaligned (bitext retrieval of a few percent) and cross-lingual XNLI at chance. Dictionary-based
code-switching (as in code-switched pretraining, e.g. Yang et al. 2020, and the dictionary anchors
of multilingual BERT studies) gives those languages anchors: a copy of a target-language line in which
some words are replaced by their source-language translations, so a source word and its translation
share contexts. ``PretrainConfig.codeswitch`` is the probability that a word is replaced.
Measured on the small world (2000 MLM + TLM steps, bf16; ``benchmarks/results/xlp_probe_*_cs0{3,6}_bf16.json``):
at 0.3 and 0.6 it did *not* improve alignment (bitext retrieval far 5 %, script 2 %, agglu 5-6 %, as
without it) nor XNLI transfer; it stays an option, off by default.

The translations come from the world's gold word map (``World.word_map``: target word form ->
source word form with counts over the parallel text; a full-form bilingual dictionary, the kind of
resource MUSE publishes for real languages). A form with several source forms takes its most
frequent one. Words are found by :data:`harness.words.WORD_PATTERN`; everything between them
(spaces, punctuation) is kept as it is. A form missing from the map is looked up lower-cased, and
the translation is then capitalized like the original. Every draw comes from the given generator.

Example:
    >>> import torch
    >>> switch("Tam yanqam peinen.", {"tam": "tram", "yanqam": "tram"}, 1.0, torch.Generator().manual_seed(0))
    'Tram tram peinen.'
"""

from __future__ import annotations

from pathlib import Path

import torch

from harness.words import WORD_PATTERN

__all__ = ["read_word_map", "switch", "switched_copies"]


def read_word_map(path: str | Path) -> dict[str, str]:
    """``{target form: its most frequent source form}`` from a ``target<TAB>source<TAB>count`` file.

    Raises:
        ValueError: a line without three tab-separated fields or with a count that is not an integer
            (the file and line are named).

    Example:
        >>> import tempfile
        >>> p = Path(tempfile.mkdtemp()) / "word_map.tsv"
        >>> _ = p.write_text("aho\\tka\\t3\\naho\\tle\\t5\\nzam\\tpom\\t2\\n", encoding="utf-8")
        >>> read_word_map(p)
        {'aho': 'le', 'zam': 'pom'}
    """
    best: dict[str, tuple[int, str]] = {}
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 3 or not fields[2].lstrip("-").isdigit() or not fields[0] or not fields[1]:
                raise ValueError(f"{path}:{number}: expected 'target<TAB>source<TAB>count', got {line.rstrip()!r}")
            target, source, count = fields[0], fields[1], int(fields[2])
            if target not in best or count > best[target][0]:
                best[target] = (count, source)
    return {target: source for target, (_, source) in best.items()}


def _translation(word: str, word_map: dict[str, str]) -> str | None:
    if word in word_map:
        return word_map[word]
    lower = word.lower()
    if lower != word and lower in word_map:
        source = word_map[lower]
        return source[:1].upper() + source[1:]
    return None


def _switched(line: str, word_map: dict[str, str], probability: float,
              generator: torch.Generator) -> tuple[str, int, int]:  # fmt: skip
    """``(switched line, word matches, words replaced)``: one uniform draw per word match (translatable or
    not), so a line's draws do not depend on the map's coverage of its earlier words."""
    matches = list(WORD_PATTERN.finditer(line))
    if not matches:
        return line, 0, 0
    draws = torch.rand(len(matches), generator=generator).tolist()
    out, last, replaced = [], 0, 0
    for match, draw in zip(matches, draws, strict=True):
        word = match.group()
        new = _translation(word, word_map) if draw < probability else None
        out.append(line[last : match.start()])
        out.append(word if new is None else new)
        replaced += new is not None
        last = match.end()
    out.append(line[last:])
    return "".join(out), len(matches), replaced


def switch(line: str, word_map: dict[str, str], probability: float, generator: torch.Generator) -> str:
    """``line`` with each word that has a translation replaced by it with ``probability``."""
    return _switched(line, word_map, probability, generator)[0]


def switched_copies(lines: list[str], word_map: dict[str, str], probability: float,
                    generator: torch.Generator) -> tuple[list[str], dict[str, int]]:  # fmt: skip
    """The code-switched copy of every line, and counts: ``words`` (word matches), ``switched``.

    Example:
        >>> import torch
        >>> copies, n = switched_copies(["Zam qy.", "Qy zam!"], {"zam": "pom", "qy": "le"}, 0.5,
        ...                             torch.Generator().manual_seed(1))
        >>> n["words"], 0 <= n["switched"] <= 4
        (6, True)
    """
    copies, words, switched = [], 0, 0
    for line in lines:
        new, n, k = _switched(line, word_map, probability, generator)
        copies.append(new)
        words, switched = words + n, switched + k
    return copies, {"words": words, "switched": switched}
