"""The source lexicon: lemmas with parts of speech, Zipfian weights and lexical relations, and names.

Every lemma has an integer id that is the same in every language of the world; a target language
only gives the lemma another spelling. Ids are in order of role: function words first, then
content lemmas by decreasing frequency, so the gold dictionary reads most frequent first.

Semantics are deliberately simple but real, so that the NLI labels can be inferred and word
vectors learn something:

* nouns belong to one of ``n_categories`` categories whose *head* noun is their hypernym;
  categories are animate (can be subjects), places (objects of location prepositions) or things;
* verbs are transitive or not, and transitive verbs prefer objects from two categories;
* adjectives apply to a few categories and often come in antonym pairs;
* a few lemmas form synonym pairs (same concept id, same selectional behaviour).

Example:
    >>> from harness.world.config import world_config
    >>> lex = build_lexicon(world_config("tiny"), seed=0)
    >>> lex.lemmas[lex.role("neg")].pos
    'neg'
    >>> all(lex.lemmas[lex.hypernym(n)].pos == "noun" for n in lex.by_pos["noun"] if lex.hypernym(n) is not None)
    True
"""

from __future__ import annotations

import math
import random
from bisect import bisect
from dataclasses import dataclass, field
from itertools import accumulate

from .config import WorldConfig
from .phonology import PHONOLOGY, pseudo_word, unique_word
from .rng import stream

FUNCTION_WORDS: tuple[tuple[str, str], ...] = (
    ("det_def", "det"),
    ("det_indef", "det"),
    ("det_dem", "det"),
    ("det_some", "det"),
    ("pron_he", "pron"),
    ("pron_she", "pron"),
    ("pron_it", "pron"),
    ("pron_they", "pron"),
    ("prep_in", "prep"),
    ("prep_on", "prep"),
    ("prep_near", "prep"),
    ("prep_from", "prep"),
    ("prep_to", "prep"),
    ("prep_with", "prep"),
    ("prep_for", "prep"),
    ("prep_of", "prep"),
    ("prep_time", "prep"),
    ("conj_and", "conj"),
    ("conj_but", "conj"),
    ("conj_because", "conj"),
    ("conj_or", "conj"),
    ("neg", "neg"),
    ("rel", "rel"),
    ("wh_who", "wh"),
    ("wh_what", "wh"),
    ("wh_where", "wh"),
    ("wh_when", "wh"),
    ("wh_howmany", "wh"),
    ("cop", "cop"),
)
"""Closed-class words as ``(role, part of speech)``; ``cop`` is the copula, with suppletive forms."""

LOCATION_PREPS = ("prep_in", "prep_on", "prep_near", "prep_from", "prep_to")
COPULA_FEATS: tuple[tuple[str, str], ...] = tuple((t, n) for t in ("pres", "past", "fut") for n in ("sg", "pl"))
ORGTYPE_COUNT = 6
"""Organization-type nouns (the "Bank", "Union" of "Kelto Bank"), capitalized inside names."""

_CONTENT_SHARES = (("noun", 0.50), ("verb", 0.22), ("adj", 0.18), ("adv", 0.10))


@dataclass
class Lemma:
    """One lemma of the lexicon (its spelling here is the source language's)."""

    id: int
    form: str
    pos: str
    """``noun verb adj adv orgtype`` or a closed class ``det pron prep conj neg rel wh cop``."""
    role: str | None = None
    """Function-word role (``det_def`` …), ``None`` for content words."""
    rank: int = -1
    """Frequency rank among content lemmas (0 = most frequent); -1 for function words."""
    weight: float = 0.0
    """Zipf-Mandelbrot sampling weight (content words)."""
    concept: int = -1
    """Meaning id; synonyms share it."""
    category: int = -1
    """Noun category (nouns), else -1."""
    transitive: bool = False
    """Verbs: takes an object."""
    categories: tuple[int, ...] = ()
    """Verbs: preferred object categories; adjectives: categories they describe."""
    antonym: int | None = None
    """Adjectives: the lemma id of the antonym."""
    irregular: dict[tuple[str, ...], str] = field(default_factory=dict)
    """Suppletive forms by features (the copula)."""
    fav_adjs: tuple[int, ...] = ()
    """Nouns: adjectives this noun collocates with (drawn more often than its category's others)."""
    fav_objs: tuple[int, ...] = ()
    """Transitive verbs: nouns this verb collocates with as object."""
    fav_subjs: tuple[int, ...] = ()
    """Verbs: animate nouns this verb collocates with as subject."""
    fav_advs: tuple[int, ...] = ()
    """Verbs: adverbs this verb collocates with."""


@dataclass
class Category:
    """A noun category: its head noun (the hypernym), kind and member nouns."""

    id: int
    head: int
    kind: str
    """``animate``, ``place`` or ``thing``."""
    members: list[int] = field(default_factory=list)


@dataclass
class Entity:
    """A named entity (language-independent Latin spelling)."""

    id: int
    kind: str
    """``PER``, ``LOC`` or ``ORG``."""
    parts: tuple[str, ...]
    """Name tokens (for ORG: the name words; the org-type noun is ``orgtype``)."""
    orgtype: int | None = None
    """ORG: lemma id of the trailing organization-type noun."""

    @property
    def key(self) -> str:
        """The full name (with the org type as ``#<lemma id>``), unique per entity."""
        return " ".join(self.parts) + (f" #{self.orgtype}" if self.orgtype is not None else "")


class _Sampler:
    """Weighted sampling from a fixed list of ids (bisect over cumulative weights)."""

    __slots__ = ("ids", "cum")

    def __init__(self, ids: list[int], weights: list[float]) -> None:
        self.ids = ids
        self.cum = list(accumulate(weights))

    def __call__(self, rng: random.Random) -> int:
        return self.ids[bisect(self.cum, rng.random() * self.cum[-1])]

    def __bool__(self) -> bool:
        return bool(self.ids)

    def weights(self) -> list[float]:
        """The weight of each id, in ``ids`` order."""
        return [b - a for a, b in zip([0.0, *self.cum[:-1]], self.cum)]

    def top(self, k: int) -> _Sampler:
        """This sampler restricted to its ``k`` heaviest ids (ties to the earlier id), weights and order kept."""
        w = self.weights()
        keep = sorted(sorted(range(len(w)), key=lambda i: (-w[i], i))[:k])
        return _Sampler([self.ids[i] for i in keep], [w[i] for i in keep])


class Lexicon:
    """The source lexicon plus names, with samplers used by the grammar.

    Attributes:
        lemmas: all lemmas, index = id.
        by_pos: lemma ids per part of speech.
        categories: the noun categories.
        entities: named entities; ``persons``/``locations``/``organizations`` index into it.
        first_names / surnames: name parts used to make person entities.
    """

    def __init__(
        self,
        lemmas: list[Lemma],
        categories: list[Category],
        entities: list[Entity],
        first_names: list[str],
        surnames: list[str],
        zipf: float,
    ) -> None:
        self.lemmas = lemmas
        self.categories = categories
        self.entities = entities
        self.first_names = first_names
        self.surnames = surnames
        self.by_pos: dict[str, list[int]] = {}
        for lem in lemmas:
            self.by_pos.setdefault(lem.pos, []).append(lem.id)
        self._roles = {lem.role: lem.id for lem in lemmas if lem.role}
        self._by_concept: dict[int, list[int]] = {}
        for lem in lemmas:
            if lem.concept >= 0:
                self._by_concept.setdefault(lem.concept, []).append(lem.id)
        self._heads = {c.head: c.id for c in categories}
        w = {lem.id: lem.weight for lem in lemmas}

        def sampler(ids: list[int]) -> _Sampler:
            return _Sampler(ids, [w[i] for i in ids])

        self.kinds = {kind: [c.id for c in categories if c.kind == kind] for kind in ("animate", "place", "thing")}
        self.noun_in = {c.id: sampler(c.members + [c.head]) for c in categories}
        self.noun_of_kind = {
            kind: sampler([n for c in ids for n in self.categories[c].members + [self.categories[c].head]])
            for kind, ids in self.kinds.items()
        }
        self.any_noun = sampler([n for n in self.by_pos["noun"]])
        self.transitive_verb = sampler([v for v in self.by_pos["verb"] if lemmas[v].transitive])
        self.intransitive_verb = sampler([v for v in self.by_pos["verb"] if not lemmas[v].transitive])
        self.any_verb = sampler(self.by_pos["verb"])
        self.adverb = sampler(self.by_pos["adv"])
        self.any_adj = sampler(self.by_pos["adj"])
        self.adj_for = {
            c.id: sampler([a for a in self.by_pos["adj"] if c.id in lemmas[a].categories]) for c in categories
        }
        self.antonym_adjs = [a for a in self.by_pos["adj"] if lemmas[a].antonym is not None]
        """Adjectives that have an antonym."""
        self.nouns_for_adj = {
            a: sorted(n for c in lemmas[a].categories for n in categories[c].members + [categories[c].head])
            for a in self.by_pos["adj"]
        }
        """Per adjective, the nouns of the categories it describes."""
        self.synonym_lemmas = {
            pos: [i for i in self.by_pos.get(pos, []) if len(self._by_concept[lemmas[i].concept]) > 1]
            for pos in ("noun", "verb", "adj", "adv")
        }
        """Per part of speech, the lemmas that have a synonym."""
        self.person_first = _Sampler(list(range(len(first_names))), [1.0 / (r + 2.7) for r in range(len(first_names))])
        self.person_last = _Sampler(list(range(len(surnames))), [1.0 / (r + 2.7) for r in range(len(surnames))])
        kinds = {"LOC": [], "ORG": []}
        for e in entities:
            kinds[e.kind].append(e.id)
        self.location = _Sampler(kinds["LOC"], [1.0 / (r + 2.7) ** 0.8 for r in range(len(kinds["LOC"]))])
        self.organization = _Sampler(kinds["ORG"], [1.0 / (r + 2.7) ** 0.8 for r in range(len(kinds["ORG"]))])

    def role(self, role: str) -> int:
        """The lemma id of a function word by role (``det_def``, ``neg``, ``cop`` …)."""
        return self._roles[role]

    def synonyms(self, lemma: int) -> list[int]:
        """Other lemmas with the same concept."""
        return [i for i in self._by_concept.get(self.lemmas[lemma].concept, []) if i != lemma]

    def hypernym(self, noun: int) -> int | None:
        """The head noun of the noun's category (``None`` for a head itself)."""
        lem = self.lemmas[noun]
        if lem.pos != "noun" or noun in self._heads:
            return None
        return self.categories[lem.category].head

    def hyponyms(self, noun: int) -> list[int]:
        """Members of the category headed by ``noun`` (empty unless ``noun`` is a head)."""
        c = self._heads.get(noun)
        return [] if c is None else list(self.categories[c].members)

    def is_head(self, noun: int) -> bool:
        """Whether ``noun`` heads a category."""
        return noun in self._heads

    def category_kind(self, noun: int) -> str:
        """``animate``, ``place`` or ``thing`` for a noun."""
        return self.categories[self.lemmas[noun].category].kind

    def person(self, rng: random.Random) -> tuple[str, ...]:
        """A person name: first + surname (60 %), first name only (30 %) or surname only (10 %)."""
        u = rng.random()
        if u < 0.6:
            return (self.first_names[self.person_first(rng)], self.surnames[self.person_last(rng)])
        if u < 0.9:
            return (self.first_names[self.person_first(rng)],)
        return (self.surnames[self.person_last(rng)],)

    def full_person(self, rng: random.Random) -> tuple[str, str]:
        """A first + surname person name."""
        return (self.first_names[self.person_first(rng)], self.surnames[self.person_last(rng)])


def _syllables_for(rank: int, n: int, rng: random.Random) -> int:
    """Frequent words are short (Zipf's law of abbreviation)."""
    return 1 + (rank >= 40) + (rng.random() < 0.15 + 0.5 * rank / n)


def build_lexicon(config: WorldConfig, seed: int) -> Lexicon:
    """Generate the source lexicon and names of a world.

    Args:
        config: the world config (sizes, Zipf exponent).
        seed: the world seed; draws come from ``stream(seed, "lexicon")`` and ``stream(seed, "names")``.

    Returns:
        The :class:`Lexicon`.
    """
    # One sequence on purpose: the order of the RNG draws below defines the world (GENERATOR_VERSION); a split
    # would hide that order.
    rng = stream(seed, "lexicon")
    inv = PHONOLOGY["src"]
    taken: set[str] = set()
    lemmas: list[Lemma] = []

    # Function words: short, one syllable.
    for role, pos in FUNCTION_WORDS:
        form = unique_word(rng, inv, 1, taken)
        lemmas.append(Lemma(len(lemmas), form, pos, role=role, concept=len(lemmas)))
    cop = lemmas[-1]  # its citation form is the present singular
    for feats in COPULA_FEATS:
        cop.irregular[feats] = cop.form if feats == ("pres", "sg") else unique_word(rng, inv, 1, taken)
    # the future is regular-looking but still suppletive: no agreement
    cop.irregular[("fut", "pl")] = cop.irregular[("fut", "sg")]

    n_content = config.n_lemmas - len(lemmas) - ORGTYPE_COUNT
    counts = {pos: int(round(share * n_content)) for pos, share in _CONTENT_SHARES}
    counts["noun"] += n_content - sum(counts.values())
    pos_list = [pos for pos, _ in _CONTENT_SHARES for _ in range(counts[pos])]
    rng.shuffle(pos_list)  # rank order: which part of speech the r-th most frequent lemma has
    for rank, pos in enumerate(pos_list):
        form = unique_word(rng, inv, _syllables_for(rank, n_content, rng), taken, min_len=3 if rank > 20 else 2)
        weight = 1.0 / (rank + 2.7) ** config.zipf_exponent
        lemmas.append(Lemma(len(lemmas), form, pos, rank=rank, weight=weight, concept=len(lemmas)))
    for _ in range(ORGTYPE_COUNT):
        lemmas.append(Lemma(len(lemmas), unique_word(rng, inv, 2, taken, min_len=4), "orgtype", concept=len(lemmas)))

    nouns = [lem.id for lem in lemmas if lem.pos == "noun"]
    verbs = [lem.id for lem in lemmas if lem.pos == "verb"]
    adjs = [lem.id for lem in lemmas if lem.pos == "adj"]

    # Categories: heads are frequent nouns; kinds fixed by position.
    k = config.n_categories
    n_animate, n_place = max(2, k // 4), max(1, k // 6)
    head_pool = nouns[: max(k * 2, len(nouns) // 5)]
    heads = rng.sample(head_pool, k)
    categories = [
        Category(i, h, "animate" if i < n_animate else "place" if i < n_animate + n_place else "thing")
        for i, h in enumerate(heads)
    ]
    for c in categories:
        lemmas[c.head].category = c.id
    head_set = set(heads)
    for n in nouns:
        if n not in head_set:
            c = rng.randrange(k)
            lemmas[n].category = c
            categories[c].members.append(n)
    for c in categories:  # every category needs members for hyponym/sibling operations
        if len(c.members) < 2:
            donors = [m for d in categories if len(d.members) > 3 for m in d.members]
            for m in rng.sample(donors, 2 - len(c.members)):
                categories[lemmas[m].category].members.remove(m)
                lemmas[m].category = c.id
                c.members.append(m)

    objectish = [c.id for c in categories if c.kind != "place"]
    for v in verbs:
        lem = lemmas[v]
        lem.transitive = rng.random() < 0.65
        lem.categories = tuple(sorted(rng.sample(objectish, 2))) if lem.transitive else ()
    for a in adjs:
        lemmas[a].categories = tuple(sorted(rng.sample(range(k), min(3, k))))

    # Synonym pairs (about 8 % of content lemmas): same concept, same selectional behaviour.
    for pool in (nouns, verbs, adjs, [lem.id for lem in lemmas if lem.pos == "adv"]):
        cands = [i for i in pool if i not in head_set]
        rng.shuffle(cands)
        used: set[int] = set()
        for a in cands[: max(2, len(cands) // 12)]:
            if a in used:
                continue
            la = lemmas[a]
            partners = [
                b for b in cands if b != a and b not in used and (la.pos != "noun" or lemmas[b].category == la.category)
            ]
            if not partners:
                continue
            b = partners[0]
            lb = lemmas[b]
            used.update((a, b))
            lb.concept = la.concept
            lb.transitive, lb.categories = la.transitive, la.categories

    # Antonym pairs among adjectives (60 % of them are in a pair), never between synonyms.
    free = list(adjs)
    rng.shuffle(free)
    for _ in range(math.ceil(0.3 * len(adjs))):
        if len(free) < 2:
            break
        a = free.pop()
        b = next((x for x in free if lemmas[x].concept != lemmas[a].concept), None)
        if b is None:
            break
        free.remove(b)
        lemmas[a].antonym, lemmas[b].antonym = b, a
        lemmas[b].categories = lemmas[a].categories  # big/small describe the same things

    _add_collocations(lemmas, categories, seed)
    first, last, entities = _build_names(config, seed, taken, [lem.id for lem in lemmas if lem.pos == "orgtype"])
    return Lexicon(lemmas, categories, entities, first, last, config.zipf_exponent)


COLLOCATES = 3
"""How many favourite adjectives/objects/subjects a noun or verb gets (one favourite adverb)."""


def _add_collocations(lemmas: list[Lemma], categories: list[Category], seed: int) -> None:
    """Give every noun and verb a few idiosyncratic collocates (from their own random stream).

    Categories alone make every noun of a category distributionally interchangeable, so no
    distributional method (fastText neighbours, WECHSEL, FOCUS) could tell *which* member a word
    translates to. Real words have idiosyncratic company (*strong tea*, *powerful engine*): here
    each noun favours a few of the adjectives that describe its category, each verb a few object
    nouns of its preferred categories, a few animate subjects and one adverb. The choice is
    uniform over the eligible lemmas (not Zipf-weighted), so rare words get distinctive contexts
    too. Synonyms share their collocates, as they share selectional behaviour.
    """
    rng = stream(seed, "collocations")
    by_cat_adjs: dict[int, list[int]] = {c.id: [] for c in categories}
    for lem in lemmas:
        if lem.pos == "adj":
            for c in lem.categories:
                by_cat_adjs[c].append(lem.id)
    members = {c.id: c.members + [c.head] for c in categories}
    animate = [n for c in categories if c.kind == "animate" for n in members[c.id]]
    advs = [lem.id for lem in lemmas if lem.pos == "adv"]

    def pick(pool: list[int], k: int) -> tuple[int, ...]:
        return tuple(rng.sample(pool, min(k, len(pool)))) if pool else ()

    first_of_concept: dict[int, Lemma] = {}
    for lem in lemmas:
        if lem.pos not in ("noun", "verb"):
            continue
        twin = first_of_concept.setdefault(lem.concept, lem)
        if twin is not lem:  # a synonym: same company
            lem.fav_adjs, lem.fav_objs, lem.fav_subjs, lem.fav_advs = (
                twin.fav_adjs, twin.fav_objs, twin.fav_subjs, twin.fav_advs)
            continue
        if lem.pos == "noun":
            lem.fav_adjs = pick(by_cat_adjs.get(lem.category, []), COLLOCATES)
        else:
            objs = [n for c in lem.categories for n in members[c]] if lem.transitive else []
            lem.fav_objs = pick(objs, COLLOCATES)
            lem.fav_subjs = pick(animate, COLLOCATES)
            lem.fav_advs = pick(advs, 1)


_FIRST_ENDINGS = ("a", "o", "ia", "en", "el", "is", "ar", "ina", "")
_SURNAME_ENDINGS = ("sen", "ova", "ez", "ani", "berg", "ton", "ic", "ari", "")
_PLACE_ENDINGS = ("ora", "heim", "ville", "grad", "ia", "ano", "mar", "polis", "")


def _build_names(
    config: WorldConfig, seed: int, taken: set[str], orgtypes: list[int]
) -> tuple[list[str], list[str], list[Entity]]:
    """First names, surnames, and LOC/ORG entities, all capitalized pseudo-words."""
    rng = stream(seed, "names")
    inv = PHONOLOGY["names"]

    def name(syllables: int, endings: tuple[str, ...]) -> str:
        tries = 0
        while True:
            w = pseudo_word(rng, inv, syllables + tries // 50, min_len=3)
            tries += 1
            end = rng.choice(endings)
            cand = (w + end if not (end and w[-1] in "aeiou" and end[0] in "aeiou") else w[:-1] + end).capitalize()
            if cand.lower() not in taken:
                taken.add(cand.lower())
                return cand

    first = [name(rng.choice((1, 2, 2)), _FIRST_ENDINGS) for _ in range(config.n_first_names)]
    last = [name(rng.choice((1, 2, 2, 3)), _SURNAME_ENDINGS) for _ in range(config.n_surnames)]
    loc_prefixes = [name(1, ("",)) for _ in range(3)]  # like "Port", "San", "Nova"
    entities: list[Entity] = []
    for _ in range(config.n_locations):
        base = name(rng.choice((2, 2, 3)), _PLACE_ENDINGS)
        parts = (rng.choice(loc_prefixes), base) if rng.random() < 0.15 else (base,)
        entities.append(Entity(len(entities), "LOC", parts))
    for _ in range(config.n_organizations):
        words = (name(2, ("", "o", "ex", "an")),)
        if rng.random() < 0.2:
            words = words + (name(2, ("", "a", "is")),)
        entities.append(Entity(len(entities), "ORG", words, orgtype=rng.choice(orgtypes)))
    return first, last, entities
