"""Languages: how each lemma and each inflected form is spelled, derived from the source.

For every target language and every source lemma, one draw decides whether the lemma is spelled
*verbatim*, as a *cognate* (the source form after the language's ordered spelling changes) or as
a *new* unrelated word in the language's own phonology. Morphology (affixes, prefixing vs
suffixing, case, agreement) is drawn per language too. Names keep their Latin spelling, except
that a non-Latin script transliterates all but ``latin_name_ratio`` of them.

Example:
    >>> from harness.world.config import world_config, NEAR
    >>> from harness.world.lexicon import build_lexicon
    >>> cfg = world_config("tiny")
    >>> lex = build_lexicon(cfg, 0)
    >>> langs = build_languages(cfg, lex, 0)
    >>> n = lex.by_pos["noun"][0]
    >>> langs["src"].inflect(n, ("pl", "nom")) != langs["src"].inflect(n, ("sg", "nom"))
    True
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .config import LanguageSpec, WorldConfig
from .lexicon import Lexicon
from .phonology import PHONOLOGY, VOWELS, apply_rules, force_change, sample_rules, transliterate, unique_word
from .rng import stable_fraction, stream

SLOTS = (
    "noun.pl",
    "noun.acc",
    "verb.pres.sg",
    "verb.pres.pl",
    "verb.past.sg",
    "verb.past.pl",
    "verb.fut.sg",
    "verb.fut.pl",
    "adj.pl",
)
"""Inflectional slots; an empty affix means the feature is not marked."""

VERBATIM, COGNATE, NEW, SOURCE = "verbatim", "cognate", "new", "source"


@dataclass(frozen=True)
class Morphology:
    """The affixes of a language and how they attach."""

    affixing: str
    affixes: dict[str, str]
    linker: str

    def attach(self, stem: str, affix: str) -> str:
        """Attach one affix, inserting the linker consonant between two vowels.

        Example:
            >>> Morphology("suffix", {}, "n").attach("kala", "en")
            'kalanen'
        """
        if not affix:
            return stem
        if self.affixing == "suffix":
            return stem + self.linker + affix if stem[-1] in VOWELS and affix[0] in VOWELS else stem + affix
        return affix + self.linker + stem if affix[-1] in VOWELS and stem[0] in VOWELS else affix + stem


class Language:
    """Spelling of every leaf of an abstract sentence in one language.

    Attributes:
        spec: the language's :class:`LanguageSpec`.
        forms: Latin-letter citation form per lemma id.
        origins: per lemma id, ``verbatim`` / ``cognate`` / ``new`` (``source`` for the source).
        irregular: suppletive forms ``{(lemma id, feats): Latin form}``.
        morphology: affixes.
        rules: the spelling changes that made the cognates.
    """

    def __init__(
        self,
        spec: LanguageSpec,
        lex: Lexicon,
        forms: list[str],
        origins: list[str],
        irregular: dict[tuple[int, tuple[str, ...]], str],
        morphology: Morphology,
        rules: tuple[tuple[str, str], ...],
        seed: int,
    ) -> None:
        self.spec = spec
        self.name = spec.name
        self.lex = lex
        self.forms = forms
        self.origins = origins
        self.irregular = irregular
        self.morphology = morphology
        self.rules = rules
        self.seed = seed
        self._cache: dict[tuple, str] = {}
        self._pos = [lem.pos for lem in lex.lemmas]

    # -- lemma forms ---------------------------------------------------------------------------

    def script(self, latin: str) -> str:
        """``latin`` written in this language's script."""
        return transliterate(latin, self.spec.script)

    def citation(self, lemma: int) -> str:
        """The dictionary form of a lemma, in this language's script."""
        return self.script(self.forms[lemma])

    def latin_inflect(self, lemma: int, feats: tuple[str, ...]) -> str:
        """The inflected form in Latin letters (before the script is applied)."""
        irr = self.irregular.get((lemma, feats))
        if irr is not None:
            return irr
        pos = self._pos[lemma]
        stem = self.forms[lemma]
        m = self.morphology
        a = m.affixes
        if pos in ("noun", "orgtype") and feats:
            number, case = feats
            if number == "pl":
                stem = m.attach(stem, a["noun.pl"])
            if case == "acc" and self.spec.case_marking:
                stem = m.attach(stem, a["noun.acc"])
            return stem
        if pos == "verb" and feats:
            tense, number = feats
            return m.attach(stem, a[f"verb.{tense}.{number}"])
        if pos == "adj" and feats and feats[0] == "pl" and self.spec.adjective_agreement:
            return m.attach(stem, a["adj.pl"])
        return stem

    def inflect(self, lemma: int, feats: tuple[str, ...]) -> str:
        """The inflected form of a lemma, in this language's script.

        ``feats`` are ``(number, case)`` for nouns, ``(tense, number)`` for verbs and the copula,
        ``(number,)`` for adjectives and ``()`` otherwise; features this language does not mark are
        ignored.
        """
        key = (lemma, feats)
        f = self._cache.get(key)
        if f is None:
            f = self._cache[key] = self.script(self.latin_inflect(lemma, feats))
        return f

    def name_part(self, part: str, key: str) -> str:
        """A name token; in a non-Latin script only some names (chosen by ``key``) stay Latin."""
        if self.spec.script == "latin":
            return part
        f = self._cache.get((part, key))
        if f is None:
            keep = stable_fraction(str(self.seed), self.name, key) < self.spec.latin_name_ratio
            f = self._cache[(part, key)] = part if keep else self.script(part)
        return f

    def word(self, leaf) -> str:
        """The spelling of one :class:`~harness.world.grammar.Leaf` (without sentence capitalization)."""
        kind = leaf.kind
        if kind == "lex":
            w = self.inflect(leaf.lemma, leaf.feats)
            return w[:1].upper() + w[1:] if leaf.cap else w
        if kind == "name":
            return self.name_part(leaf.text, leaf.key)
        return leaf.text


def _source_morphology(rng: random.Random) -> Morphology:
    """The source's suffixes: plural, present singular, past and future (no case, no agreement elsewhere)."""
    inv = PHONOLOGY["src"]
    taken: set[str] = set()

    def affix() -> str:
        while True:
            a = (
                inv.pick(rng, "vowels") + rng.choice("nrsltk")
                if rng.random() < 0.6
                else rng.choice("nrsltkm") + inv.pick(rng, "vowels")
            )
            if a not in taken:
                taken.add(a)
                return a

    pl, sg3, past, fut = affix(), affix(), affix(), affix()
    affixes = {s: "" for s in SLOTS}
    affixes.update(
        {
            "noun.pl": pl,
            "verb.pres.sg": sg3,
            "verb.past.sg": past,
            "verb.past.pl": past,
            "verb.fut.sg": fut,
            "verb.fut.pl": fut,
        }
    )
    return Morphology("suffix", affixes, inv.linker)


def _target_morphology(
    spec: LanguageSpec, src: Morphology, rules: tuple[tuple[str, str], ...], rng: random.Random
) -> Morphology:
    """Affixes of a target: cognates of the source's where both suffix, else new ones."""
    inv = PHONOLOGY[spec.phonology]
    affixes: dict[str, str] = {}
    taken: set[str] = set()
    related = spec.cognate_ratio + spec.shared_verbatim_ratio
    derived: dict[str, str] = {}  # the same source affix must map to the same target affix
    for slot in SLOTS:
        base = src.affixes[slot]
        marked = (
            bool(base)
            or (slot == "noun.acc" and spec.case_marking)
            or (slot == "adj.pl" and spec.adjective_agreement)
            or (slot.startswith("verb.") and spec.full_verb_agreement)
        )
        if not marked:
            affixes[slot] = ""
            continue
        if (
            slot.startswith("verb.")
            and not spec.full_verb_agreement
            and slot.endswith(".pl")
            and slot != "verb.pres.pl"
        ):
            affixes[slot] = affixes[slot[:-3] + ".sg"]
            continue
        same_side = bool(base) and spec.affixing == src.affixing
        if same_side and base in derived:
            affixes[slot] = derived[base]
            continue
        if same_side and rng.random() < related:
            a = apply_rules(base, rules) or base
        else:
            a = ""
            while not a or a in taken:
                syl = inv.pick(rng, "onsets") + inv.pick(rng, "vowels")
                a = syl if spec.affixing == "prefix" else inv.pick(rng, "vowels") + inv.pick(rng, "codas") or syl
        taken.add(a)
        affixes[slot] = a
        if base:
            derived[base] = a
    return Morphology(spec.affixing, affixes, inv.linker)


def _derive_lexicon(spec: LanguageSpec, lex: Lexicon, rng: random.Random) -> tuple[list[str], list[str], dict, tuple]:
    """Citation forms, origins and irregular forms of a target derived from the source lexicon."""
    inv = PHONOLOGY[spec.phonology]
    rules = sample_rules(rng, spec.sound_changes)
    src_forms = {lem.form for lem in lex.lemmas}
    src_forms.update(f for lem in lex.lemmas for f in lem.irregular.values())
    taken: set[str] = set()
    forms: list[str] = []
    origins: list[str] = []
    irregular: dict[tuple[int, tuple[str, ...]], str] = {}

    def render(form: str, origin: str) -> tuple[str, str]:
        if origin == VERBATIM and form not in taken:
            taken.add(form)
            return form, VERBATIM
        if origin in (VERBATIM, COGNATE):
            c = apply_rules(form, rules)
            if c == form:
                c = force_change(form)
            if c and c not in taken and c not in src_forms:
                taken.add(c)
                return c, COGNATE
        syllables = max(1, round(len(form) / 2.6))
        return unique_word(rng, inv, syllables, taken, min_len=2, forbidden=src_forms), NEW

    for lem in lex.lemmas:
        u = rng.random()
        origin = (
            VERBATIM
            if u < spec.shared_verbatim_ratio
            else COGNATE
            if u < spec.shared_verbatim_ratio + spec.cognate_ratio
            else NEW
        )
        form, got = render(lem.form, origin)
        forms.append(form)
        origins.append(got)
        for feats, f in sorted(lem.irregular.items()):
            if feats == ("fut", "pl") and ("fut", "sg") in lem.irregular and lem.irregular[("fut", "sg")] == f:
                continue
            irregular[(lem.id, feats)] = form if f == lem.form else render(f, got)[0]
        if ("fut", "sg") in lem.irregular and (lem.id, ("fut", "pl")) not in irregular:
            irregular[(lem.id, ("fut", "pl"))] = irregular[(lem.id, ("fut", "sg"))]
    return forms, origins, irregular, rules


def build_languages(config: WorldConfig, lex: Lexicon, seed: int) -> dict[str, Language]:
    """All languages of a world, source first, keyed by name.

    Each target draws from ``stream(seed, "language", name)``; a language with ``lexicon_from``
    shares the lexicon and morphology of that language object.
    """
    src_morph = _source_morphology(stream(seed, "morphology", "src"))
    src_irregular = {(lem.id, feats): f for lem in lex.lemmas for feats, f in lem.irregular.items()}
    langs: dict[str, Language] = {
        "src": Language(
            config.source,
            lex,
            [lem.form for lem in lex.lemmas],
            [SOURCE] * len(lex.lemmas),
            src_irregular,
            src_morph,
            (),
            seed,
        )
    }
    for spec in config.targets:
        if spec.lexicon_from is not None:
            base = langs[spec.lexicon_from]
            langs[spec.name] = Language(
                spec, lex, base.forms, base.origins, base.irregular, base.morphology, base.rules, seed
            )
            continue
        rng = stream(seed, "language", spec.name)
        forms, origins, irregular, rules = _derive_lexicon(spec, lex, rng)
        morph = _target_morphology(spec, src_morph, rules, rng)
        langs[spec.name] = Language(spec, lex, forms, origins, irregular, morph, rules, seed)
    return langs
