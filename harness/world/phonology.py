"""Sound inventories, pseudo-word generation, cognate spelling changes and scripts.

Words are built from syllables (onset + vowel + coda) drawn from a weighted inventory, so they look
like plausible words of one language. Cognates are made by applying a language's ordered list of
systematic spelling changes (regular expressions) to the source form. Non-Latin scripts are a
deterministic letter-by-letter transliteration of the Latin spelling.

Example:
    >>> import random
    >>> w = pseudo_word(random.Random(0), PHONOLOGY["src"], syllables=2)
    >>> w.isalpha() and w.islower()
    True
    >>> transliterate("shala", "cyrillic")
    'шала'
"""

from __future__ import annotations

import random
import re
from bisect import bisect
from dataclasses import dataclass
from itertools import accumulate

VOWELS = frozenset("aeiouy")


@dataclass(frozen=True)
class Inventory:
    """Weighted syllable parts of one phonology (``""`` is an empty onset/coda)."""

    onsets: tuple[tuple[str, float], ...]
    vowels: tuple[tuple[str, float], ...]
    codas: tuple[tuple[str, float], ...]
    linker: str
    """Consonant inserted where an affix would put two vowels side by side."""

    def __post_init__(self) -> None:
        for part in ("onsets", "vowels", "codas"):
            items = getattr(self, part)
            object.__setattr__(self, f"_{part}_keys", tuple(k for k, _ in items))
            object.__setattr__(self, f"_{part}_cum", tuple(accumulate(w for _, w in items)))

    def pick(self, rng: random.Random, part: str) -> str:
        """One weighted draw from ``onsets``, ``vowels`` or ``codas``."""
        cum = getattr(self, f"_{part}_cum")
        return getattr(self, f"_{part}_keys")[bisect(cum, rng.random() * cum[-1])]


def _w(spec: str) -> tuple[tuple[str, float], ...]:
    """Parse ``"a:5 b:1 :3"`` into ``(("a", 5.0), ("b", 1.0), ("", 3.0))``."""
    out = []
    for item in spec.split():
        k, w = item.rsplit(":", 1)
        out.append((k, float(w)))
    return tuple(out)


PHONOLOGY: dict[str, Inventory] = {
    # The source: a soft Romance/Finnic-looking language, open syllables preferred.
    "src": Inventory(
        onsets=_w("p:3 t:5 k:5 b:3 d:4 g:2 m:5 n:5 l:5 r:4 s:5 v:3 f:2 h:1 j:1 tr:1 pl:1 kr:1 st:1 br:1 :4"),
        vowels=_w("a:6 e:5 i:4 o:5 u:3"),
        codas=_w(":14 n:3 r:2 l:2 s:2 m:1 k:1 t:1"),
        linker="n",
    ),
    # New words of the near language: same feel, a few different letters (c, z, w).
    "near": Inventory(
        onsets=_w("p:3 t:4 c:4 b:3 d:4 g:2 m:5 n:5 l:5 r:4 s:4 z:2 w:2 f:2 h:1 tr:1 pl:1 cr:1 :4"),
        vowels=_w("a:6 e:5 i:4 o:5 u:3"),
        codas=_w(":12 n:3 r:2 l:2 s:2 z:1 m:1 c:1"),
        linker="s",
    ),
    # The far language: different consonants (q, x, z, sh, kh), closed syllables, y as a vowel.
    "far": Inventory(
        onsets=_w("q:4 x:3 z:3 w:3 y:2 k:3 t:2 n:3 m:3 sh:3 kh:3 dh:2 h:2 ng:1 :3"),
        vowels=_w("a:6 i:4 u:5 e:2 o:2 y:2 aa:1 uu:1"),
        codas=_w(":6 q:2 n:3 x:1 ng:2 m:2 sh:1 k:1 z:1"),
        linker="n",
    ),
    # Names: richer codas, so they look different from common words.
    "names": Inventory(
        onsets=_w("p:2 t:3 k:3 b:3 d:3 g:2 m:4 n:3 l:4 r:3 s:4 v:3 f:1 h:2 j:2 z:1 br:1 st:1 :3"),
        vowels=_w("a:6 e:5 i:4 o:4 u:2"),
        codas=_w(":10 n:4 r:3 l:3 s:2 m:1 k:1 t:1"),
        linker="n",
    ),
}
"""The built-in inventories by name (see :data:`harness.world.config.PHONOLOGIES`)."""


def syllable(rng: random.Random, inv: Inventory) -> str:
    """One syllable."""
    return inv.pick(rng, "onsets") + inv.pick(rng, "vowels") + inv.pick(rng, "codas")


def pseudo_word(rng: random.Random, inv: Inventory, syllables: int, min_len: int = 2) -> str:
    """A lowercase pseudo-word of ``syllables`` syllables and at least ``min_len`` letters."""
    while True:
        w = "".join(syllable(rng, inv) for _ in range(syllables))
        if len(w) >= min_len and not _bad_cluster(w):
            return w


_TRIPLE = re.compile(r"[^aeiouy]{4}|(.)\1\1")


def _bad_cluster(w: str) -> bool:
    """Reject unpronounceable spellings: four consonants in a row or a tripled letter."""
    return _TRIPLE.search(w) is not None


def unique_word(
    rng: random.Random,
    inv: Inventory,
    syllables: int,
    taken: set[str],
    min_len: int = 2,
    forbidden: set[str] | frozenset[str] = frozenset(),
) -> str:
    """A pseudo-word not in ``taken`` nor ``forbidden``; adds it to ``taken``.

    After 50 collisions it tries one more syllable (small inventories run out of short words).
    """
    tries = 0
    while True:
        w = pseudo_word(rng, inv, syllables + tries // 50, min_len)
        if w not in taken and w not in forbidden:
            taken.add(w)
            return w
        tries += 1


# --- cognates -----------------------------------------------------------------------------------

COGNATE_RULES: tuple[tuple[str, str], ...] = (
    ("k(?=[aou])", "c"),
    ("v", "w"),
    ("f", "ph"),
    ("j", "y"),
    ("s(?=[aeiou])", "z"),
    ("ti", "ci"),
    ("p(?=[aeiou])", "b"),
    ("o$", "u"),
    ("a$", "e"),
    ("e$", "a"),
    ("([bdfgklmnprstv])$", r"\1e"),
    ("u", "ou"),
    ("i(?=[^aeiou]$)", "ie"),
    ("d$", "t"),
    ("g(?=[ei])", "gu"),
    ("h", ""),
    ("([aeiou])([lnr])(?=[aeiou])", r"\1\2\2"),
    ("e(?=[^aeiou][aeiou])", "ei"),
    ("o(?=[^aeiou])", "oa"),
)
"""Pool of systematic spelling changes ``(pattern, replacement)``; each language samples an ordered
subset of ``sound_changes`` of them."""


def sample_rules(rng: random.Random, n: int) -> tuple[tuple[str, str], ...]:
    """An ordered subset of :data:`COGNATE_RULES` of size ``n``."""
    pool = list(COGNATE_RULES)
    rng.shuffle(pool)
    return tuple(pool[:n])


def apply_rules(form: str, rules: tuple[tuple[str, str], ...]) -> str:
    """Apply the spelling changes in order to every match in ``form``.

    Example:
        >>> apply_rules("kavo", (("k(?=[aou])", "c"), ("o$", "u")))
        'cavu'
    """
    for pattern, repl in rules:
        form = re.sub(pattern, repl, form)
    return form


def force_change(form: str) -> str:
    """A minimal systematic change for a cognate that no rule touched (final vowel shift / added vowel)."""
    shift = {"a": "e", "e": "i", "i": "e", "o": "u", "u": "o", "y": "i"}
    if form[-1] in shift:
        return form[:-1] + shift[form[-1]]
    return form + "a"


# --- scripts ------------------------------------------------------------------------------------

_DIGRAPHS: dict[str, dict[str, str]] = {
    "cyrillic": {"sh": "ш", "kh": "х", "ch": "ч", "dh": "ђ", "ph": "ф"},
    "greek": {"sh": "ϸ", "kh": "χ", "th": "θ", "ph": "φ", "ps": "ψ", "dh": "δ"},
}
_LETTERS: dict[str, dict[str, str]] = {
    "cyrillic": dict(zip("abcdefghijklmnopqrstuvwxyz", "абцдефгһийклмнопќрстувўҳыз")),
    "greek": dict(zip("abcdefghijklmnopqrstuvwxyz", "αβϲδεϝγηιϳκλμνοπϙρστυϐωξϋζ")),
}


def transliterate(text: str, script: str) -> str:
    """Write a Latin-letter word in ``script`` (``latin`` returns it unchanged).

    Letters keep their case; digits, punctuation and anything else outside a–z pass through.

    Example:
        >>> transliterate("Qaxu", "greek")
        'Ϙαξυ'
    """
    if script == "latin":
        return text
    letters, digraphs = _LETTERS[script], _DIGRAPHS[script]
    out: list[str] = []
    i = 0
    while i < len(text):
        pair = text[i : i + 2]
        low = pair.lower()
        if len(pair) == 2 and low in digraphs:
            ch = digraphs[low]
            out.append(ch.upper() if pair[0].isupper() else ch)
            i += 2
            continue
        c = text[i]
        m = letters.get(c.lower())
        out.append(c if m is None else (m.upper() if c.isupper() else m))
        i += 1
    word = "".join(out)
    if script == "greek" and word.endswith("σ"):
        word = word[:-1] + "ς"
    return word
