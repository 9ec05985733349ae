"""Configuration of the built-in world: one frozen dataclass per language and one per world.

The language table (:data:`SOURCE`, :data:`NEAR`, :data:`FAR`, :data:`SCRIPT`) and the size table
(:data:`SIZES`) are the only places where the built-in world is described; a researcher who wants
another target language builds a :class:`WorldConfig` with one more :class:`LanguageSpec`.

Example:
    >>> cfg = world_config("tiny")
    >>> [t.name for t in cfg.targets]
    ['near', 'far', 'script', 'agglu']
    >>> cfg.language("far").word_order
    'SOV'
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import re
from dataclasses import dataclass

GENERATOR_VERSION = "2.1"
"""Version of the generator's output. Bump it whenever the same config and seed would produce
different files, so cached worlds built by an older generator are never reused."""

SCRIPTS = ("latin", "cyrillic", "greek")
SCRIPT_CODES = {"latin": "Latn", "cyrillic": "Cyrl", "greek": "Grek"}
"""ISO 15924 code of each world script (the codes of the language table, ``tasks.languages``)."""
WORD_ORDERS = ("SVO", "SOV", "VSO")
AFFIXING = ("suffix", "prefix")
PHONOLOGIES = ("src", "near", "far")
_BEFORE_AFTER = ("before", "after")
SPLITS = ("train", "dev", "test")
TASKS = ("ner", "xnli", "qa", "translation")


def _check_choice(owner: str, field: str, value: object, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"{owner}.{field} must be one of {', '.join(map(repr, allowed))}; got {value!r}")


def _check_ratio(owner: str, field: str, value: float) -> None:
    if not isinstance(value, (int, float)) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{owner}.{field} must be a number in [0, 1]; got {value!r}")


@dataclass(frozen=True)
class LanguageSpec:
    """How one language of the world looks, relative to the source language.

    Lexical fields (``cognate_ratio`` … ``sound_changes``) say how each source lemma is rendered:
    verbatim, as a cognate (the source form after the language's systematic spelling changes) or
    as an unrelated new word. Structural fields say how the same abstract sentence is linearized.
    """

    name: str
    """Language code used in paths, manifests and records (``[a-z][a-z0-9_]*``)."""
    cognate_ratio: float = 0.0
    """Fraction of lemmas rendered as cognates (source form + systematic spelling changes)."""
    shared_verbatim_ratio: float = 0.0
    """Fraction of lemmas spelled exactly as in the source; the rest are unrelated new words."""
    script: str = "latin"
    """Writing system of every word except numbers, punctuation and kept names."""
    word_order: str = "SVO"
    """Order of subject, verb and object in a clause."""
    affixing: str = "suffix"
    """Whether inflection uses suffixes or prefixes."""
    case_marking: bool = False
    """Whether objects carry an accusative affix."""
    adjective_agreement: bool = False
    """Whether adjectives agree with their noun in number."""
    full_verb_agreement: bool = False
    """Whether verbs agree with the subject in every tense (the source only in the present)."""
    adjective_position: str = "before"
    """Adjectives before or after their noun."""
    determiner_position: str = "before"
    """Determiners and numerals before or after the noun phrase."""
    modifier_position: str = "after"
    """Relative clauses and genitive phrases after or before their noun."""
    adposition: str = "before"
    """Prepositions (``before``) or postpositions (``after``)."""
    negation: str = "before"
    """Negation particle before or after the verb."""
    wh_movement: bool = True
    """Question words move to the front (``True``) or stay in place (``False``)."""
    phonology: str = "src"
    """Sound inventory of this language's new (non-cognate) words and affixes."""
    sound_changes: int = 4
    """Number of systematic spelling-change rules that turn source forms into cognates."""
    latin_name_ratio: float = 0.2
    """For a non-Latin script: fraction of named entities left in Latin letters (the
    "some names overlap" of the symbolic-overlap setting)."""
    lexicon_from: str | None = None
    """Reuse the lexicon and morphology of this earlier language (e.g. ``script`` is ``far`` in
    another script). Its lexical fields must then equal that language's."""

    def __post_init__(self) -> None:
        owner = f"LanguageSpec({self.name!r})"
        if not isinstance(self.name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", self.name):
            raise ValueError(f"LanguageSpec.name must match [a-z][a-z0-9_]*; got {self.name!r}")
        _check_ratio(owner, "cognate_ratio", self.cognate_ratio)
        _check_ratio(owner, "shared_verbatim_ratio", self.shared_verbatim_ratio)
        _check_ratio(owner, "latin_name_ratio", self.latin_name_ratio)
        if self.cognate_ratio + self.shared_verbatim_ratio > 1.0 + 1e-9:
            raise ValueError(
                f"{owner}: cognate_ratio + shared_verbatim_ratio must be <= 1; got {self.cognate_ratio} + {self.shared_verbatim_ratio}"
            )
        _check_choice(owner, "script", self.script, SCRIPTS)
        _check_choice(owner, "word_order", self.word_order, WORD_ORDERS)
        _check_choice(owner, "affixing", self.affixing, AFFIXING)
        _check_choice(owner, "phonology", self.phonology, PHONOLOGIES)
        for f in ("adjective_position", "determiner_position", "modifier_position", "adposition", "negation"):
            _check_choice(owner, f, getattr(self, f), _BEFORE_AFTER)
        if not isinstance(self.sound_changes, int) or not 0 <= self.sound_changes <= 12:
            raise ValueError(f"{owner}.sound_changes must be an int in [0, 12]; got {self.sound_changes!r}")


LEXICAL_FIELDS = (
    "cognate_ratio",
    "shared_verbatim_ratio",
    "affixing",
    "case_marking",
    "adjective_agreement",
    "full_verb_agreement",
    "phonology",
    "sound_changes",
)
"""Fields that a language with ``lexicon_from`` inherits and must therefore repeat unchanged."""

SOURCE = LanguageSpec("src")
"""The source language L0: SVO, suffixing, prepositions, fronted question words."""

NEAR = LanguageSpec("near", cognate_ratio=0.7, shared_verbatim_ratio=0.2, phonology="near", sound_changes=4)
"""A close relative of the source: mostly cognates, some words shared verbatim, same grammar."""

FAR = LanguageSpec(
    "far",
    cognate_ratio=0.1,
    shared_verbatim_ratio=0.02,
    word_order="SOV",
    affixing="prefix",
    case_marking=True,
    adjective_agreement=True,
    full_verb_agreement=True,
    adjective_position="after",
    determiner_position="after",
    modifier_position="before",
    adposition="after",
    negation="after",
    wh_movement=False,
    phonology="far",
    sound_changes=7,
)
"""A distant language: few cognates, prefixing morphology with case and agreement, head-final
(SOV, postpositions, prenominal relative clauses), question words in situ."""

SCRIPT = dataclasses.replace(FAR, name="script", script="cyrillic", lexicon_from="far")
"""``far`` written in Cyrillic: only digits, punctuation and some names overlap with the source."""

AGGLU = LanguageSpec(
    "agglu",
    cognate_ratio=0.35,
    shared_verbatim_ratio=0.05,
    word_order="VSO",
    affixing="suffix",
    case_marking=True,
    adjective_agreement=True,
    full_verb_agreement=True,
    adjective_position="after",
    negation="after",
    phonology="near",
    sound_changes=6,
)
"""An agglutinative, verb-initial language: a third of the lemmas are cognates, suffixes stack
(plural + accusative on nouns, plural on adjectives, person agreement in every tense), VSO order
with postposed adjectives and negation after the verb, prepositions and fronted question words."""


@dataclass(frozen=True)
class WorldConfig:
    """Everything that determines a world besides the seed.

    The cache directory of a world is named by ``name``, the seed and a hash of this config plus
    :data:`GENERATOR_VERSION` (see :meth:`fingerprint`).
    """

    name: str
    """Size name (``tiny``, ``small``) or any label; first part of the cache directory name."""
    n_lemmas: int
    """Lemmas of the source lexicon, function words included."""
    n_categories: int
    """Semantic noun categories; each has a head noun (the hypernym of its members)."""
    n_first_names: int
    """Person first names."""
    n_surnames: int
    """Person surnames."""
    n_locations: int
    """Location names."""
    n_organizations: int
    """Organization names."""
    text_sentences_source: int
    """Sentences of plain text for the source language (all splits)."""
    text_sentences_target: int
    """Sentences of plain text for each target language (all splits)."""
    task_examples: tuple[int, int, int]
    """Examples per task for train, dev and test."""
    split_fractions: tuple[float, float, float] = (0.9, 0.05, 0.05)
    """Fractions of the text sentences in train, dev and test."""
    zipf_exponent: float = 1.0
    """Exponent ``s`` of the Zipf-Mandelbrot lemma weights ``1 / (rank + 2.7) ** s``."""
    source: LanguageSpec = SOURCE
    """The source language (its lexical ratio fields are unused)."""
    targets: tuple[LanguageSpec, ...] = (NEAR, FAR, SCRIPT, AGGLU)
    """Target languages, in the order they appear in ``World.languages``."""
    task_sizes: tuple[tuple[str, tuple[int, int, int]], ...] = ()
    """Per-task overrides of ``task_examples`` as ``((task, (train, dev, test)), ...)``; a task
    such as NLI or translation needs more examples than NER to be learnable by a small model."""

    def examples_of(self, task: str) -> tuple[int, int, int]:
        """Train, dev and test sizes of ``task`` (``task_sizes`` entry, else ``task_examples``)."""
        return dict(self.task_sizes).get(task, self.task_examples)

    def __post_init__(self) -> None:
        owner = f"WorldConfig({self.name!r})"
        if not isinstance(self.name, str) or not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", self.name):
            raise ValueError(
                f"WorldConfig.name must match [A-Za-z0-9_][A-Za-z0-9_.-]* (a directory name); got {self.name!r}"
            )
        minimum = {
            "n_lemmas": 150,
            "n_categories": 3,
            "n_first_names": 5,
            "n_surnames": 5,
            "n_locations": 5,
            "n_organizations": 3,
            "text_sentences_source": 20,
            "text_sentences_target": 20,
        }
        for f, lo in minimum.items():
            v = getattr(self, f)
            if not isinstance(v, int) or v < lo:
                raise ValueError(f"{owner}.{f} must be an int >= {lo}; got {v!r}")
        if len(self.task_examples) != 3 or any(not isinstance(n, int) or n < 3 for n in self.task_examples):
            raise ValueError(
                f"{owner}.task_examples must be three ints >= 3 (train, dev, test); got {self.task_examples!r}"
            )
        if (
            len(self.split_fractions) != 3
            or any(f <= 0 for f in self.split_fractions)
            or abs(sum(self.split_fractions) - 1.0) > 1e-6
        ):
            raise ValueError(
                f"{owner}.split_fractions must be three positive numbers summing to 1; got {self.split_fractions!r}"
            )
        for entry in self.task_sizes:
            if (
                not isinstance(entry, tuple)
                or len(entry) != 2
                or entry[0] not in TASKS
                or len(entry[1]) != 3
                or any(not isinstance(n, int) or n < 3 for n in entry[1])
            ):
                raise ValueError(
                    f"{owner}.task_sizes entries must be (task, (train, dev, test)) with task in {TASKS} and ints >= 3; got {entry!r}"
                )
        if not 0.5 <= self.zipf_exponent <= 2.0:
            raise ValueError(f"{owner}.zipf_exponent must be in [0.5, 2]; got {self.zipf_exponent!r}")
        if self.source.name != "src":
            raise ValueError(
                f"{owner}.source.name must be 'src' (the contract's source language); got {self.source.name!r}"
            )
        if self.source.lexicon_from is not None or self.source.script != "latin":
            raise ValueError(f"{owner}.source must be written in Latin script and have no lexicon_from")
        names = [self.source.name]
        for t in self.targets:
            if t.name in names:
                raise ValueError(f"{owner}.targets: duplicate language name {t.name!r}")
            if t.lexicon_from is not None:
                base = next((b for b in self.targets if b.name == t.lexicon_from), None)
                if base is None or t.lexicon_from not in names:
                    raise ValueError(
                        f"{owner}.targets[{t.name!r}].lexicon_from must name an earlier target; got {t.lexicon_from!r} (earlier: {names[1:]})"
                    )
                if base.lexicon_from is not None:
                    raise ValueError(
                        f"{owner}.targets[{t.name!r}].lexicon_from={t.lexicon_from!r} itself has lexicon_from; chains are not supported"
                    )
                for f in LEXICAL_FIELDS:
                    if getattr(t, f) != getattr(base, f):
                        raise ValueError(
                            f"{owner}.targets[{t.name!r}].{f}={getattr(t, f)!r} differs from {base.name!r}'s {getattr(base, f)!r}; a language with lexicon_from inherits it"
                        )
            names.append(t.name)
        if not self.targets:
            raise ValueError(f"{owner}.targets must name at least one target language")

    @property
    def languages(self) -> list[str]:
        """Source first, then the targets in order."""
        return [self.source.name] + [t.name for t in self.targets]

    def language(self, name: str) -> LanguageSpec:
        """The spec of language ``name`` (source or target); ValueError naming the allowed ones."""
        for spec in (self.source, *self.targets):
            if spec.name == name:
                return spec
        raise ValueError(f"unknown language {name!r}; this world has {', '.join(self.languages)}")

    def to_dict(self) -> dict:
        """A JSON-serializable dict of every field (tuples become lists)."""
        return json.loads(json.dumps(dataclasses.asdict(self)))

    def fingerprint(self) -> str:
        """Hash of this config and the generator version (12 hex digits), for cache directories."""
        blob = json.dumps(
            {"generator_version": GENERATOR_VERSION, "config": self.to_dict()}, sort_keys=True, separators=(",", ":")
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


SIZES: dict[str, WorldConfig] = {
    # tiny: for unit tests; tens of KB per language, builds in well under a second.
    "tiny": WorldConfig(
        name="tiny",
        n_lemmas=300,
        n_categories=6,
        n_first_names=30,
        n_surnames=30,
        n_locations=25,
        n_organizations=15,
        text_sentences_source=400,
        text_sentences_target=400,
        task_examples=(40, 16, 16),
    ),
    # small: for the quickstart and pretraining the built-in source models; a few MB per language.
    "small": WorldConfig(
        name="small",
        n_lemmas=3000,
        n_categories=24,
        n_first_names=300,
        n_surnames=400,
        n_locations=300,
        n_organizations=150,
        text_sentences_source=40_000,
        text_sentences_target=20_000,
        task_examples=(2000, 300, 300),
        # QA: 8000 training questions (4000 until the QA budget of tasks-encoder.yaml outgrew them; the QA
        # splits draw from their own streams, so the first 4000 and the dev/test questions are unchanged)
        task_sizes=(("xnli", (12000, 600, 600)), ("qa", (8000, 400, 400)), ("translation", (20000, 500, 500))),
    ),
}
"""The built-in sizes, by name."""


def world_config(size: str) -> WorldConfig:
    """The built-in :class:`WorldConfig` called ``size``.

    Raises:
        ValueError: for an unknown size, naming the known ones (and a close match if any).

    Example:
        >>> world_config("small").n_lemmas
        3000
    """
    if size not in SIZES:
        close = difflib.get_close_matches(str(size), list(SIZES), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"unknown world size {size!r}; known sizes: {', '.join(SIZES)}{hint}")
    return SIZES[size]


def language_scripts() -> dict[str, str]:
    """ISO 15924 script of every language of the built-in worlds (:data:`SIZES`), by language name.

    Raises:
        ValueError: two built-in worlds write one language name in different scripts.

    Example:
        >>> language_scripts()["script"], language_scripts()["src"]
        ('Cyrl', 'Latn')
    """
    out: dict[str, str] = {}
    for size, cfg in SIZES.items():
        for spec in (cfg.source, *cfg.targets):
            code = SCRIPT_CODES[spec.script]
            if out.setdefault(spec.name, code) != code:
                raise ValueError(f"world {size!r}: language {spec.name!r} is written in {code}, another world in {out[spec.name]}")
    return out
