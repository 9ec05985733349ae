"""Abstract sentences: a probabilistic grammar over lexicon ids, and the trees it builds.

A sentence is generated once, language-independently, in two steps:

1. :class:`SentenceSampler` draws a *spec* (:class:`SentenceSpec` of :class:`Fact` s and
   :class:`NounSpec` s): which lemmas, numbers, tenses, names, modifiers. Specs are small frozen
   values, so the NLI and QA generators can edit them (negate a fact, swap a word for its
   hypernym, turn a constituent into a question word) with :func:`dataclasses.replace`.
2. :func:`build` turns a spec into a tree of :class:`Leaf` objects (one leaf = one word in every
   language), grouped into :class:`NP`, :class:`PP` and :class:`Clause` nodes.

:mod:`harness.world.realize` then orders the leaves of a tree for a given language and spells
them; because every language realizes the *same* leaves, parallel text and word maps are exact.

Example:
    >>> from harness.world.config import world_config
    >>> from harness.world.lexicon import build_lexicon
    >>> from harness.world.rng import stream
    >>> lex = build_lexicon(world_config("tiny"), 0)
    >>> s = SentenceSampler(lex, stream(0, "doc"))
    >>> tree = build(s.sentence(), lex)
    >>> len(leaves(tree)) > 2
    True
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from .lexicon import LOCATION_PREPS, Lexicon

# ---------------------------------------------------------------------------------------------
# Specs
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NounSpec:
    """A noun phrase, language-independently.

    ``kind`` is ``common`` (a noun lemma), ``person`` (``name`` parts), ``loc``/``org`` (entity id
    in ``lemma``), ``pron`` (pronoun lemma), ``year`` (the year in ``count``) or ``wh`` (a question
    word lemma standing for the whole phrase).
    """

    kind: str
    lemma: int = -1
    number: str = "sg"
    det: str | None = None
    """Determiner role (``det_def`` …) or ``None``."""
    count: int | None = None
    """A numeral before the noun (common nouns, plural) or the year (``kind == "year"``)."""
    adjs: tuple[int, ...] = ()
    name: tuple[str, ...] = ()
    of: NounSpec | None = None
    """Genitive modifier (``the dog of the farmer``)."""
    rel: Fact | None = None
    """Subject-gap relative clause (``the dog that sees a cat``); its ``subj`` is ignored."""
    howmany: bool = False
    """The numeral is the question word *how many* (QA questions)."""


@dataclass(frozen=True)
class Fact:
    """A clause: subject, verb (or copula), object or predicate, modifiers, polarity, tense."""

    subj: NounSpec | None
    verb: int
    tense: str = "pres"
    neg: bool = False
    obj: NounSpec | None = None
    """Object of a transitive verb, or predicate noun of the copula."""
    pred_adj: int | None = None
    """Predicate adjective of the copula (``the dog is big``)."""
    pps: tuple[tuple[str, NounSpec], ...] = ()
    """Adverbial prepositional phrases as ``(preposition role, noun phrase)``; a ``wh`` noun
    phrase with role ``""`` is a bare question adverb (*where*, *when*)."""
    adv: int | None = None
    wh: str | None = None
    """In a question: which constituent is the question word (``subj``, ``obj``, ``pp``)."""


@dataclass(frozen=True)
class SentenceSpec:
    """One sentence: facts joined by conjunctions, an optional fronted phrase, final punctuation."""

    facts: tuple[Fact, ...]
    conjs: tuple[str, ...] = ()
    front: tuple[str, NounSpec] | None = None
    end: str = "."


# ---------------------------------------------------------------------------------------------
# Trees
# ---------------------------------------------------------------------------------------------


@dataclass(eq=False)
class Leaf:
    """One word (or punctuation mark) of an abstract sentence.

    ``kind`` is ``lex`` (lemma + features), ``name`` (a name part, ``key`` = the whole name),
    ``num`` (digits) or ``punct``. ``tag`` is the IOB entity tag. ``cap`` capitalizes a common
    word inside a name (organization types). Leaves compare by identity.
    """

    kind: str
    lemma: int = -1
    feats: tuple[str, ...] = ()
    text: str = ""
    key: str = ""
    tag: str = "O"
    cap: bool = False


@dataclass(eq=False)
class NP:
    """A noun phrase: head leaves, determiner-or-numeral slot, adjectives, modifiers."""

    head: list[Leaf]
    det: Leaf | None = None
    adjs: list[Leaf] = field(default_factory=list)
    of: PP | None = None
    rel: Clause | None = None


@dataclass(eq=False)
class PP:
    """An adposition (``None`` for a bare question adverb) and its noun phrase."""

    prep: Leaf | None
    np: NP


@dataclass(eq=False)
class Clause:
    """A clause. ``rel`` is set for a relative clause (then ``subj`` is ``None``); ``wh`` is the
    question constituent (an :class:`NP` or :class:`PP` of this clause) in a question."""

    subj: NP | None
    verb: Leaf
    obj: NP | None = None
    pred: Leaf | None = None
    neg: Leaf | None = None
    adv: Leaf | None = None
    pps: list[PP] = field(default_factory=list)
    rel: Leaf | None = None
    wh: NP | PP | None = None


@dataclass(eq=False)
class Sentence:
    """A sentence tree: clauses, the leaves joining them, an optional fronted phrase, the end mark."""

    clauses: list[Clause]
    joiners: list[list[Leaf]]
    front: list[PP | Leaf] = field(default_factory=list)
    end: Leaf | None = None


Node = Sentence | Clause | NP | PP | Leaf


def leaves(node: Node | None) -> list[Leaf]:
    """All leaves under ``node`` in a fixed, language-independent order."""
    out: list[Leaf] = []
    _collect(node, out)
    return out


def _collect(node: Node | None, out: list[Leaf]) -> None:
    if node is None:
        return
    if isinstance(node, Leaf):
        out.append(node)
    elif isinstance(node, NP):
        _collect(node.det, out)
        for leaf in node.adjs:
            out.append(leaf)
        out.extend(node.head)
        _collect(node.of, out)
        _collect(node.rel, out)
    elif isinstance(node, PP):
        _collect(node.prep, out)
        _collect(node.np, out)
    elif isinstance(node, Clause):
        for part in (node.rel, node.subj, node.neg, node.verb, node.obj, node.pred, node.adv):
            _collect(part, out)
        for pp in node.pps:
            _collect(pp, out)
    elif isinstance(node, Sentence):
        for part in node.front:
            _collect(part, out)
        for i, c in enumerate(node.clauses):
            if i:
                out.extend(node.joiners[i - 1])
            _collect(c, out)
        _collect(node.end, out)
    else:  # pragma: no cover - programming error
        raise TypeError(f"not a tree node: {type(node).__name__}")


# ---------------------------------------------------------------------------------------------
# Building trees from specs
# ---------------------------------------------------------------------------------------------


def _number_of(np: NounSpec | None) -> str:
    return "sg" if np is None else np.number


def build_np(spec: NounSpec, lex: Lexicon, case: str = "nom") -> NP:
    """The tree of a noun phrase; ``case`` is ``nom`` or ``acc`` (object of a transitive verb)."""
    if spec.kind == "common":
        head = [Leaf("lex", spec.lemma, (spec.number, case))]
        if spec.howmany:
            det: Leaf | None = Leaf("lex", lex.role("wh_howmany"))
        elif spec.count is not None:
            det = Leaf("num", text=str(spec.count))
        elif spec.det is not None:
            det = Leaf("lex", lex.role(spec.det))
        else:
            det = None
        adjs = [Leaf("lex", a, (spec.number,)) for a in spec.adjs]
        of = PP(Leaf("lex", lex.role("prep_of")), build_np(spec.of, lex)) if spec.of is not None else None
        rel = build_clause(spec.rel, lex, relative=True, subj_number=spec.number) if spec.rel is not None else None
        return NP(head, det, adjs, of, rel)
    if spec.kind == "person":
        key = " ".join(spec.name)
        return NP(
            [Leaf("name", text=p, key=key, tag=("B-PER" if i == 0 else "I-PER")) for i, p in enumerate(spec.name)]
        )
    if spec.kind in ("loc", "org"):
        ent = lex.entities[spec.lemma]
        t = ent.kind
        parts = [
            Leaf("name", text=p, key=ent.key, tag=(f"B-{t}" if i == 0 else f"I-{t}")) for i, p in enumerate(ent.parts)
        ]
        if ent.orgtype is not None:
            parts.append(Leaf("lex", ent.orgtype, ("sg", "nom"), tag=f"I-{t}", cap=True))
        return NP(parts)
    if spec.kind == "pron" or spec.kind == "wh":
        return NP([Leaf("lex", spec.lemma)])
    if spec.kind == "year":
        return NP([Leaf("num", text=str(spec.count))])
    raise ValueError(f"unknown NounSpec.kind {spec.kind!r}")


def build_clause(fact: Fact, lex: Lexicon, relative: bool = False, subj_number: str | None = None) -> Clause:
    """The tree of a clause (a relative clause when ``relative``; its verb agrees with ``subj_number``)."""
    number = subj_number if relative else _number_of(fact.subj)
    verb_lem = lex.lemmas[fact.verb]
    verb = Leaf("lex", fact.verb, (fact.tense, number or "sg"))
    subj = None if relative or fact.subj is None else build_np(fact.subj, lex)
    obj = None
    if fact.obj is not None:
        obj = build_np(fact.obj, lex, case="nom" if verb_lem.pos == "cop" else "acc")
    pred = Leaf("lex", fact.pred_adj, (number or "sg",)) if fact.pred_adj is not None else None
    neg = Leaf("lex", lex.role("neg")) if fact.neg else None
    adv = Leaf("lex", fact.adv) if fact.adv is not None else None
    pps = [PP(Leaf("lex", lex.role(p)) if p else None, build_np(np, lex)) for p, np in fact.pps]
    c = Clause(subj, verb, obj, pred, neg, adv, pps, Leaf("lex", lex.role("rel")) if relative else None)
    if fact.wh == "subj":
        c.wh = c.subj
    elif fact.wh == "obj":
        c.wh = c.obj
    elif fact.wh == "pp":
        c.wh = next(pp for pp, (_, np) in zip(c.pps, fact.pps) if np.kind == "wh")
    elif fact.wh is not None:
        raise ValueError(f"unknown Fact.wh {fact.wh!r}")
    return c


def build(spec: SentenceSpec, lex: Lexicon) -> Sentence:
    """The tree of a sentence."""
    clauses = [build_clause(f, lex) for f in spec.facts]
    joiners = []
    for role in spec.conjs:
        conj = Leaf("lex", lex.role(role))
        joiners.append([conj] if role in ("conj_and", "conj_or") else [Leaf("punct", text=","), conj])
    front: list[PP | Leaf] = []
    if spec.front is not None:
        prep, np = spec.front
        front = [PP(Leaf("lex", lex.role(prep)), build_np(np, lex)), Leaf("punct", text=",")]
    return Sentence(clauses, joiners, front, Leaf("punct", text=spec.end))


# ---------------------------------------------------------------------------------------------
# The probabilistic grammar
# ---------------------------------------------------------------------------------------------

TENSES = ("pres", "past", "fut")
COLLOCATION = 0.8
"""Probability that a noun's adjective, a verb's subject/object or adverb is one of its collocates
(:func:`harness.world.lexicon._add_collocations`): what makes words distributionally distinct."""
_TENSE_CUM = (0.5, 0.85, 1.0)
RELATION_RATE = 0.08
"""Share of text sentences that show a synonym or antonym pair in a defining or contrasting
context (:meth:`SentenceSampler.relation`), beside the copular taxonomy statements."""


class SentenceSampler:
    """Draws sentence specs from the lexicon with one explicit :class:`random.Random`.

    Args:
        lex: the lexicon.
        rng: the generator every draw comes from.
        entity_rate: multiplier on the probability of named entities (NER data uses ~2.5).
    """

    def __init__(self, lex: Lexicon, rng: random.Random, entity_rate: float = 1.0) -> None:
        self.lex = lex
        self.rng = rng
        self.entity_rate = entity_rate
        self._cop = lex.role("cop")

    # -- noun phrases --------------------------------------------------------------------------

    def tense(self) -> str:
        """Present, past or future (50/35/15 %)."""
        u = self.rng.random()
        return "pres" if u < _TENSE_CUM[0] else "past" if u < _TENSE_CUM[1] else "fut"

    def adjectives(self, category: int, n: int, noun: int | None = None) -> tuple[int, ...]:
        """``n`` distinct adjectives: the noun's collocates (``COLLOCATION`` of the draws), else
        mostly ones that apply to ``category`` (85 %)."""
        out: list[int] = []
        favs = self.lex.lemmas[noun].fav_adjs if noun is not None else ()
        for _ in range(n * 3):
            if len(out) == n:
                break
            s = self.lex.adj_for[category]
            if favs and self.rng.random() < COLLOCATION:
                a = self.rng.choice(favs)
            else:
                a = s(self.rng) if s and self.rng.random() < 0.85 else self.lex.any_adj(self.rng)
            if a not in out and all(
                self.lex.lemmas[a].concept != self.lex.lemmas[b].concept and self.lex.lemmas[a].antonym != b
                for b in out
            ):
                out.append(a)
        return tuple(out)

    def n_adjectives(self) -> int:
        """0 (60 %), 1 (30 %) or 2 (10 %) adjectives."""
        u = self.rng.random()
        return 0 if u < 0.6 else 1 if u < 0.9 else 2

    def common(self, noun: int, depth: int = 0) -> NounSpec:
        """A common-noun phrase headed by ``noun`` with random determiner, number and modifiers."""
        r = self.rng
        lem = self.lex.lemmas[noun]
        number = "pl" if r.random() < 0.3 else "sg"
        count = None
        det: str | None
        if number == "pl" and r.random() < 0.25:
            count = r.randint(2, 12) if r.random() < 0.8 else r.randint(13, 999)
            det = None
        elif number == "sg":
            u = r.random()
            det = "det_def" if u < 0.6 else "det_indef" if u < 0.9 else "det_dem"
        else:
            u = r.random()
            det = "det_def" if u < 0.5 else "det_some" if u < 0.75 else "det_dem" if u < 0.85 else None
        adjs = self.adjectives(lem.category, self.n_adjectives(), noun)
        of = rel = None
        if depth == 0 and r.random() < 0.06:
            of = self.subject(depth=1)
        elif depth == 0 and r.random() < 0.06:
            rel = self.fact(depth=1)
        return NounSpec("common", noun, number, det, count, adjs, of=of, rel=rel)

    def person(self) -> NounSpec:
        """A person name."""
        return NounSpec("person", name=self.lex.person(self.rng))

    def location(self) -> NounSpec:
        """A location name."""
        return NounSpec("loc", self.lex.location(self.rng))

    def organization(self) -> NounSpec:
        """An organization name."""
        return NounSpec("org", self.lex.organization(self.rng))

    def pronoun(self) -> NounSpec:
        """A subject pronoun (``they`` is plural)."""
        role = self.rng.choice(("pron_he", "pron_she", "pron_it", "pron_they"))
        return NounSpec("pron", self.lex.role(role), "pl" if role == "pron_they" else "sg")

    def subject(self, depth: int = 0, verb: int | None = None) -> NounSpec:
        """An animate subject: person, pronoun, organization or animate common noun (for a
        ``verb``, one of its collocates with probability ``COLLOCATION``)."""
        u = self.rng.random()
        e = self.entity_rate
        if u < 0.22 * e:
            return self.person()
        if u < 0.27 * e:
            return self.organization()
        if depth == 0 and u < 0.27 * e + 0.1:
            return self.pronoun()
        favs = self.lex.lemmas[verb].fav_subjs if verb is not None else ()
        if favs and self.rng.random() < COLLOCATION:
            return self.common(self.rng.choice(favs), depth)
        return self.common(self.lex.noun_of_kind["animate"](self.rng), depth)

    def object(self, verb: int, depth: int = 0) -> NounSpec:
        """An object for ``verb``: one of its collocates (``COLLOCATION``), else mostly from its
        preferred categories (80 %)."""
        r = self.rng
        favs = self.lex.lemmas[verb].fav_objs
        if favs and r.random() < COLLOCATION:
            return self.common(r.choice(favs), depth)
        cats = self.lex.lemmas[verb].categories
        cat = r.choice(cats) if cats and r.random() < 0.8 else r.randrange(len(self.lex.categories))
        if self.lex.categories[cat].kind == "animate" and r.random() < 0.25 * self.entity_rate:
            return self.person() if r.random() < 0.7 else self.organization()
        return self.common(self.lex.noun_in[cat](r), depth)

    def place(self) -> NounSpec:
        """A location: a named location (45 %) or a place noun."""
        r = self.rng
        if r.random() < 0.45 * min(self.entity_rate, 2.0):
            return self.location()
        noun = self.lex.noun_of_kind["place"](r)
        return NounSpec(
            "common",
            noun,
            "sg",
            "det_def" if r.random() < 0.7 else "det_indef",
            adjs=self.adjectives(self.lex.lemmas[noun].category, 1 if r.random() < 0.2 else 0),
        )

    def year(self) -> NounSpec:
        """A year between 1700 and 2030."""
        return NounSpec("year", count=self.rng.randint(1700, 2030))

    # -- clauses -------------------------------------------------------------------------------

    def adverbials(self) -> tuple[tuple[str, NounSpec], ...]:
        """Up to four adverbial phrases: location, company (*with*), beneficiary (*for*), time."""
        r = self.rng
        pps: list[tuple[str, NounSpec]] = []
        if r.random() < 0.3:
            pps.append((r.choice(LOCATION_PREPS), self.place()))
        if r.random() < 0.08:
            pps.append(("prep_with", self.common(self.lex.any_noun(r), depth=1)))
        if r.random() < 0.05:
            pps.append(("prep_for", self.person() if r.random() < 0.6 else self.organization()))
        if r.random() < 0.07:
            pps.append(("prep_time", self.year()))
        return tuple(pps)

    def fact(self, depth: int = 0) -> Fact:
        """An event clause: subject, verb, object if transitive, negation, adverb, adverbials."""
        r = self.rng
        lex = self.lex
        verb = lex.transitive_verb(r) if r.random() < 0.7 else lex.intransitive_verb(r)
        subj = self.subject(depth, verb)
        obj = self.object(verb, depth) if lex.lemmas[verb].transitive else None
        adv = None
        if r.random() < 0.15:
            favs = lex.lemmas[verb].fav_advs
            adv = r.choice(favs) if favs and r.random() < COLLOCATION else lex.adverb(r)
        pps = self.adverbials() if depth == 0 else ()
        return Fact(subj, verb, self.tense(), r.random() < 0.12, obj, None, pps, adv)

    def copular(self) -> Fact:
        """``NP is (not) ADJ`` or a taxonomy statement ``a dog is an animal`` / ``dogs are animals``."""
        r = self.rng
        lex = self.lex
        tense = "pres" if r.random() < 0.7 else "past"
        if r.random() < 0.35:
            cat = lex.categories[r.randrange(len(lex.categories))]
            noun = lex.noun_in[cat.id](r)
            if noun != cat.head:
                if r.random() < 0.5:
                    return Fact(
                        NounSpec("common", noun, "sg", "det_indef"),
                        self._cop,
                        "pres",
                        False,
                        NounSpec("common", cat.head, "sg", "det_indef"),
                    )
                return Fact(
                    NounSpec("common", noun, "pl"), self._cop, "pres", False, NounSpec("common", cat.head, "pl")
                )
        noun = lex.any_noun(r)
        subj = self.common(noun, depth=1) if r.random() < 0.8 else self.person()
        cat = lex.lemmas[noun].category if subj.kind == "common" else 0
        adj = self.adjectives(cat, 1)
        return Fact(subj, self._cop, tense, r.random() < 0.15, pred_adj=adj[0] if adj else lex.any_adj(r))

    def question(self) -> SentenceSpec:
        """A question about the subject, object, place or time of an event."""
        f = self.fact()
        lex = self.lex
        options = ["subj"]
        if f.obj is not None:
            options.append("obj")
        pp_roles = [i for i, (p, _) in enumerate(f.pps) if p in LOCATION_PREPS or p == "prep_time"]
        if pp_roles:
            options.append("pp")
        what = self.rng.choice(options)
        if what == "subj":
            f = Fact(NounSpec("wh", lex.role("wh_who")), f.verb, f.tense, f.neg, f.obj, None, f.pps, f.adv, wh="subj")
        elif what == "obj":
            f = Fact(f.subj, f.verb, f.tense, f.neg, NounSpec("wh", lex.role("wh_what")), None, f.pps, f.adv, wh="obj")
        else:
            i = pp_roles[0]
            wh = "wh_when" if f.pps[i][0] == "prep_time" else "wh_where"
            pps = tuple(("", NounSpec("wh", lex.role(wh))) if j == i else pp for j, pp in enumerate(f.pps))
            f = Fact(f.subj, f.verb, f.tense, f.neg, f.obj, None, pps, f.adv, wh="pp")
        return SentenceSpec((f,), end="?")

    def _it(self, number: str) -> NounSpec:
        """The pronoun that refers back to a common noun phrase of ``number``."""
        role = "pron_they" if number == "pl" else "pron_it"
        return NounSpec("pron", self.lex.role(role), number)

    def relation(self) -> SentenceSpec:
        """A sentence that shows one lexical relation in context, the way text defines and contrasts words.

        * antonyms, contrasted: ``the dog is big but it is not small`` / ``… is not big but it is small``
          (antonyms are complementary in this world: *not big* means *small*);
        * adjective synonyms, restated: ``the dog is big and it is large``;
        * noun synonyms, both ways round: ``a hound is a dog`` (a hypernym only one way: ``a dog is an animal``);
        * verb synonyms, restated: ``the man buys a dog and he purchases it``.

        These are what a pretrained source model can learn the NLI relations from; the NLI data
        itself never needs them.
        """
        r, lex = self.rng, self.lex
        tense = "pres" if r.random() < 0.7 else "past"
        u = r.random()
        if u < 0.45:  # antonym contrast
            a = r.choice(lex.antonym_adjs)
            b = lex.lemmas[a].antonym
            noun = r.choice(lex.nouns_for_adj[a]) if lex.nouns_for_adj[a] else lex.any_noun(r)
            subj = NounSpec("common", noun, "pl" if r.random() < 0.3 else "sg", "det_def")
            first_neg = r.random() < 0.5
            f1 = Fact(subj, self._cop, tense, first_neg, pred_adj=a)
            f2 = Fact(self._it(subj.number), self._cop, tense, not first_neg, pred_adj=b)
            return SentenceSpec((f1, f2), ("conj_but",))
        pools = [(pos, ids) for pos, ids in lex.synonym_lemmas.items() if ids]
        pos, ids = r.choice(pools)
        a = r.choice(ids)
        b = r.choice(lex.synonyms(a))
        if pos == "adj":
            noun = r.choice(lex.nouns_for_adj[a]) if lex.nouns_for_adj[a] else lex.any_noun(r)
            subj = NounSpec("common", noun, "pl" if r.random() < 0.3 else "sg", "det_def")
            neg = r.random() < 0.2
            f1 = Fact(subj, self._cop, tense, neg, pred_adj=a)
            f2 = Fact(self._it(subj.number), self._cop, tense, neg, pred_adj=b)
            return SentenceSpec((f1, f2), ("conj_and",))
        if pos == "noun":
            if r.random() < 0.5:
                return SentenceSpec(
                    (Fact(NounSpec("common", a, "sg", "det_indef"), self._cop, "pres", False,
                          NounSpec("common", b, "sg", "det_indef")),)
                )
            return SentenceSpec(
                (Fact(NounSpec("common", a, "pl"), self._cop, "pres", False, NounSpec("common", b, "pl")),)
            )
        if pos == "verb":
            subj = self.subject(depth=1, verb=a)
            if lex.lemmas[a].transitive:
                obj = self.object(a, depth=1)
                it = self._it(obj.number) if obj.kind == "common" else None
                f1 = Fact(subj, a, tense, False, obj)
                f2 = Fact(self._it(_number_of(subj)) if subj.kind == "common" else subj, b, tense, False, it or obj)
            else:
                f1 = Fact(subj, a, tense, False)
                f2 = Fact(self._it(_number_of(subj)) if subj.kind == "common" else subj, b, tense, False)
            return SentenceSpec((f1, f2), ("conj_and",))
        # adverbs: the same event, restated with the synonym
        f = self.fact(depth=1)
        return SentenceSpec((replace(f, adv=a), replace(f, adv=b, subj=self._it(_number_of(f.subj))
                                                          if f.subj is not None and f.subj.kind == "common"
                                                          else f.subj)), ("conj_and",))

    def sentence(self) -> SentenceSpec:
        """A random sentence: statements (mostly), copular sentences, questions, coordinations, and
        (``RELATION_RATE``) sentences that show a lexical relation (:meth:`relation`)."""
        r = self.rng
        u = r.random()
        if u < 0.05:
            return self.question()
        if u < 0.2:
            return SentenceSpec((self.copular(),), end="!" if r.random() < 0.03 else ".")
        if u < 0.2 + RELATION_RATE:
            return self.relation()
        facts = [self.fact()]
        conjs: list[str] = []
        if r.random() < 0.15:
            facts.append(self.fact())
            conjs.append(r.choice(("conj_and", "conj_and", "conj_but", "conj_because", "conj_or")))
        front = None
        if r.random() < 0.08:
            front = ("prep_time", self.year()) if r.random() < 0.5 else (r.choice(LOCATION_PREPS), self.place())
        return SentenceSpec(tuple(facts), tuple(conjs), front, "!" if r.random() < 0.03 else ".")
