"""Task examples (NER, NLI, QA, translation) as abstract trees, and their per-language records.

Each generator draws language-independent examples once; :func:`ner_record`, :func:`xnli_record`,
:func:`qa_record` and :func:`translation_record` realize one example in one language, in the
file formats of the real data sets (WikiANN, XNLI, SQuAD, IWSLT-style ``translation`` dicts).
As in XNLI and XQuAD, every language gets the *same* examples, translated.

NLI labels follow from the lexicon and simple monotonicity, so they are inferable from the text
(the full table is :data:`NLI_EDITS`; antonyms are complementary, so *not big* means *small*):

=======================================  ======================  ======================
hypothesis edit                          affirmative premise     negated premise
=======================================  ======================  ======================
synonym of subject/verb/object/adj       entailment              entailment
the same, negation toggled               contradiction           contradiction
toggle negation only                     contradiction           contradiction
predicate adj → antonym                  contradiction           contradiction
predicate adj → antonym, toggled         entailment              entailment
unrelated subject/verb/adj (± toggle)    neutral                 neutral
subject → hypernym (definite subject)    entailment              entailment
the same, negation toggled               contradiction           contradiction
subject → hyponym (definite subject)     neutral                 neutral
object → hypernym / drop a modifier      entailment              neutral
object → hyponym / add a modifier        neutral                 entailment
object → hypernym, toggled               contradiction           neutral
object → hyponym, toggled                neutral                 contradiction
other numeral on the object              contradiction           neutral
=======================================  ======================  ======================

Example:
    >>> from harness.world.config import world_config
    >>> from harness.world.lexicon import build_lexicon
    >>> from harness.world.rng import stream
    >>> lex = build_lexicon(world_config("tiny"), 0)
    >>> ex = NliGenerator(lex, stream(0, "doc")).examples(6)
    >>> sorted(label for _, _, label in ex)
    [0, 0, 1, 1, 2, 2]
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from .grammar import NP, Fact, Leaf, NounSpec, Sentence, SentenceSampler, SentenceSpec, build, build_np, leaves
from .languages import Language
from .lexicon import LOCATION_PREPS, Lexicon
from .realize import linearize, render, text_of, words

NER_LABELS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC")
"""WikiANN label order; ``ner_tags`` are indices into it."""
NER_INDEX = {t: i for i, t in enumerate(NER_LABELS)}
XNLI_LABELS = ("entailment", "neutral", "contradiction")
"""XNLI label order: 0 entailment, 1 neutral, 2 contradiction."""
ENTAILMENT, NEUTRAL, CONTRADICTION = 0, 1, 2


# ---------------------------------------------------------------------------------------------
# NER
# ---------------------------------------------------------------------------------------------


def ner_examples(lex: Lexicon, rng: random.Random, n: int) -> list[Sentence]:
    """``n`` sentences with at least one named entity each (entities ~2.5x as frequent as in text)."""
    s = SentenceSampler(lex, rng, entity_rate=2.5)
    out: list[Sentence] = []
    while len(out) < n:
        tree = build(s.sentence(), lex)
        if any(leaf.tag != "O" for leaf in leaves(tree)):
            out.append(tree)
    return out


def ner_record(tree: Sentence, L: Language) -> dict:
    """WikiANN-style record ``{"tokens", "ner_tags"}`` of one sentence in language ``L``."""
    order = linearize(tree, L)
    return {"tokens": words(order, L), "ner_tags": [NER_INDEX[leaf.tag] for leaf in order]}


# ---------------------------------------------------------------------------------------------
# NLI
# ---------------------------------------------------------------------------------------------


NLI_EDITS: dict[str, tuple[int, int]] = {
    # copular premises: "S is (not) ADJ"; antonyms are complementary (not big = small)
    "adj_synonym": (ENTAILMENT, ENTAILMENT),
    "adj_synonym_toggle": (CONTRADICTION, CONTRADICTION),
    "adj_antonym": (CONTRADICTION, CONTRADICTION),
    "adj_antonym_toggle": (ENTAILMENT, ENTAILMENT),
    "adj_other": (NEUTRAL, NEUTRAL),
    "adj_other_toggle": (NEUTRAL, NEUTRAL),
    # both kinds of premise (the subject is a person or a definite, hence referential, noun phrase)
    "toggle": (CONTRADICTION, CONTRADICTION),
    "subj_synonym": (ENTAILMENT, ENTAILMENT),
    "subj_hypernym": (ENTAILMENT, ENTAILMENT),
    "subj_hypernym_toggle": (CONTRADICTION, CONTRADICTION),
    "subj_hyponym": (NEUTRAL, NEUTRAL),
    "subj_other": (NEUTRAL, NEUTRAL),
    # event premises: "S (not) V [a/some/N] [ADJ] O [PP] [ADV]"; the object is indefinite, so
    # negation reverses the direction of hypernym/hyponym and modifier edits (monotonicity)
    "verb_synonym": (ENTAILMENT, ENTAILMENT),
    "verb_synonym_toggle": (CONTRADICTION, CONTRADICTION),
    "verb_other": (NEUTRAL, NEUTRAL),
    "verb_other_toggle": (NEUTRAL, NEUTRAL),
    "obj_synonym": (ENTAILMENT, ENTAILMENT),
    "obj_hypernym": (ENTAILMENT, NEUTRAL),
    "obj_hyponym": (NEUTRAL, ENTAILMENT),
    "obj_other": (NEUTRAL, NEUTRAL),
    "obj_hypernym_toggle": (CONTRADICTION, NEUTRAL),
    "obj_hyponym_toggle": (NEUTRAL, CONTRADICTION),
    "drop_modifier": (ENTAILMENT, NEUTRAL),
    "add_modifier": (NEUTRAL, ENTAILMENT),
    "other_count": (CONTRADICTION, NEUTRAL),
}
"""Every hypothesis edit with its label after an affirmative and after a negated premise.

Each surface shape of an edit occurs under at least two labels, so no single token or length
change gives the label away: a toggled negation is a contradiction alone but an entailment with an
antonym (*is big* → *is not small*) and neutral with an unrelated adjective; a substituted word is
entailed, contradicting or neutral according to its relation to the premise's word (synonym,
hypernym, antonym, unrelated); added and dropped modifiers swap labels under negation. What
decides the label is the lexical relation of the substituted pair together with the premise's
polarity, which the pretraining text shows (:meth:`~harness.world.grammar.SentenceSampler.relation`
and the taxonomy statements)."""

PREMISE_EVENT_RATE = 0.65
"""Share of event premises (the rest are copular); drawn independently of the label."""
PREMISE_NEGATION_RATE = 0.5
"""Share of negated premises; drawn independently of the label, so the negation word is not a cue."""
RELATED_WORD_RATE = 0.35
"""Share of premise subjects, verbs, objects and adjectives drawn from the lemmas that have a synonym
(or head a category), whatever the label, so that relation edits are frequent enough to learn."""
HEAD_SUBJECT_RATE = 0.15
"""Share of common-noun premise subjects that head a category (*the animal*), whatever the label,
so that a category head in a hypothesis does not point to the hypernym edit."""
TOGGLE_WEIGHT = 0.2
"""Weight of the bare negation toggle among the applicable edits (the others weigh 1)."""
NLI_POOL_SIZE = 6
"""Content words of NLI premises (subjects, verbs, objects, predicate adjectives) and the unrelated
substitutes come from the ``NLI_POOL_SIZE`` most frequent lemmas of each pool (animate nouns and
transitive verbs: ``4 * NLI_POOL_SIZE``; nouns and adjectives of one category: ``NLI_POOL_SIZE``).
World 2.0 drew them from the whole lexicon: 12k training pairs then covered about half of the test
edits and every fine-tuned model stayed near the memorization reference (54 %); a bounded inventory
lets a small model learn the relations from the task data (world 2.1). Relation substitutes
(synonym, hypernym, hyponym, antonym) are whatever the lexicon relates to those words."""


class NliGenerator:
    """Premise/hypothesis pairs with exactly balanced labels, built by one controlled edit each.

    The label is drawn first (exact thirds, shuffled), then the premise kind and polarity
    independently of it, then a premise, then one edit of :data:`NLI_EDITS` that gives the label
    (uniformly among the applicable ones; a premise without one is redrawn with the same kind and
    polarity). The premise distribution is therefore the same under every label.

    Args:
        lex: the lexicon.
        rng: the generator every draw comes from.
        pool_size: see :data:`NLI_POOL_SIZE`; None draws from the whole lexicon (world 2.0).
    """

    def __init__(self, lex: Lexicon, rng: random.Random, pool_size: int | None = NLI_POOL_SIZE) -> None:
        self.lex = lex
        self.rng = rng
        self.s = SentenceSampler(lex, rng)
        self.cop = lex.role("cop")
        k = pool_size
        self.animate = lex.noun_of_kind["animate"] if k is None else lex.noun_of_kind["animate"].top(4 * k)
        self.verbs = lex.transitive_verb if k is None else lex.transitive_verb.top(4 * k)
        self.noun_in = lex.noun_in if k is None else {c: x.top(k) for c, x in lex.noun_in.items()}
        self.adj_for = lex.adj_for if k is None else {c: x.top(k) for c, x in lex.adj_for.items()}
        self._related_cache: dict[tuple, list[int]] = {}
        self.last_edit: str | None = None
        """Name of the edit that made the last hypothesis (for diagnostics)."""

    # -- premises -----------------------------------------------------------------------------

    def _subject(self) -> NounSpec:
        r, lex = self.rng, self.lex
        if r.random() < 0.35:
            return self.s.person()
        u = r.random()
        if u < HEAD_SUBJECT_RATE:
            noun = lex.categories[r.choice(lex.kinds["animate"])].head
        else:
            noun = self.animate(r)
            if u < HEAD_SUBJECT_RATE + RELATED_WORD_RATE:
                noun = self._related(self.animate.ids, noun)
        return NounSpec("common", noun, "pl" if r.random() < 0.25 else "sg", "det_def")

    def _related(self, pool: list[int], default: int) -> int:
        """A lemma of ``pool`` that has a synonym (or is a category head), else ``default``."""
        lex = self.lex
        key = tuple(pool[:3]) + (len(pool),)
        cands = self._related_cache.get(key)
        if cands is None:
            cands = self._related_cache[key] = [x for x in pool if lex.synonyms(x) or lex.is_head(x)]
        return self.rng.choice(cands) if cands else default

    def _object(self, verb: int) -> NounSpec:
        r, lex = self.rng, self.lex
        cat = r.choice(lex.lemmas[verb].categories)
        noun = self.noun_in[cat](r)
        if r.random() < RELATED_WORD_RATE:
            noun = self._related(self.noun_in[cat].ids, noun)
        adjs = self.s.adjectives(lex.lemmas[noun].category, 1, noun) if r.random() < 0.3 else ()
        u = r.random()
        if u < 0.15:
            return NounSpec("common", noun, "pl", None, r.randint(2, 12), adjs)
        if u < 0.75:
            return NounSpec("common", noun, "sg", "det_indef", adjs=adjs)
        return NounSpec("common", noun, "pl", "det_some", adjs=adjs)

    def premise(self, event: bool, neg: bool) -> Fact:
        """An event or copular premise with the given polarity."""
        r, lex = self.rng, self.lex
        tense = self.s.tense()
        subj = self._subject()
        if event:
            verb = self.verbs(r)
            if r.random() < RELATED_WORD_RATE:
                verb = self._related(self.verbs.ids, verb)
            pps = ((r.choice(LOCATION_PREPS), self.s.place()),) if r.random() < 0.25 else ()
            adv = lex.adverb(r) if r.random() < 0.15 else None
            return Fact(subj, verb, tense, neg, self._object(verb), None, pps, adv)
        pool = self._adj_pool(subj)
        adj = r.choice(pool)
        if r.random() < RELATED_WORD_RATE:
            adj = self._related(pool, adj)
        return Fact(subj, self.cop, tense, neg, pred_adj=adj)

    # -- edits --------------------------------------------------------------------------------

    def _other(self, draw, avoid: int) -> int | None:
        """A lemma from ``draw`` (a sampler, the one premises use, so an unrelated substitute is
        as frequent as a premise word) unrelated to ``avoid``: other concept, not its
        hypernym/hyponym/antonym."""
        lex = self.lex
        la = lex.lemmas[avoid]
        for _ in range(20):
            x = draw(self.rng)
            if (
                lex.lemmas[x].concept != la.concept
                and x != la.antonym
                and lex.hypernym(x) != avoid
                and lex.hypernym(avoid) != x
            ):
                return x
        return None

    def _adj_pool(self, subj: NounSpec) -> list[int]:
        """The adjectives with an antonym that describe the subject's category (copular premises)."""
        lex = self.lex
        cat = lex.lemmas[subj.lemma].category if subj.kind == "common" else None
        pool = [a for a in self.adj_for[cat].ids if lex.lemmas[a].antonym is not None] if cat is not None else []
        return pool or lex.antonym_adjs

    def _syn(self, lemma: int) -> int | None:
        syn = self.lex.synonyms(lemma)
        return self.rng.choice(syn) if syn else None

    def _modifiers(self, f: Fact) -> tuple[list[Fact], list[Fact]]:
        """Hypotheses with one modifier (object adjective, adverbial, adverb) fewer, and one more."""
        lex, r = self.lex, self.rng
        drop, add = [], []
        if f.obj.adjs:
            drop.append(replace(f, obj=replace(f.obj, adjs=())))
        else:
            extra = self.s.adjectives(lex.lemmas[f.obj.lemma].category, 1, f.obj.lemma)
            if extra:
                add.append(replace(f, obj=replace(f.obj, adjs=extra)))
        if f.pps:
            drop.append(replace(f, pps=()))
        else:
            add.append(replace(f, pps=((r.choice(LOCATION_PREPS), self.s.place()),)))
        if f.adv is not None:
            drop.append(replace(f, adv=None))
        else:
            add.append(replace(f, adv=lex.adverb(r)))
        return drop, add

    def _edits(self, f: Fact) -> dict[str, Fact]:
        """Every edit of :data:`NLI_EDITS` that applies to premise ``f``, with its hypothesis."""
        lex, r = self.lex, self.rng
        out: dict[str, Fact] = {"toggle": replace(f, neg=not f.neg)}
        subj = f.subj
        if subj.kind == "person":
            other = self.s.person()
            if not set(other.name) & set(subj.name):
                out["subj_other"] = replace(f, subj=other)
        else:
            y = self._syn(subj.lemma)
            if y is not None:
                out["subj_synonym"] = replace(f, subj=replace(subj, lemma=y))
            h = lex.hypernym(subj.lemma)
            if h is not None:
                out["subj_hypernym"] = replace(f, subj=replace(subj, lemma=h))
                out["subj_hypernym_toggle"] = replace(f, subj=replace(subj, lemma=h), neg=not f.neg)
            hypo = lex.hyponyms(subj.lemma)
            if hypo:
                out["subj_hyponym"] = replace(f, subj=replace(subj, lemma=r.choice(hypo)))
            y = self._other(self.animate, subj.lemma)
            if y is not None:
                out["subj_other"] = replace(f, subj=replace(subj, lemma=y))
        if f.verb == self.cop:
            a = f.pred_adj
            y = self._syn(a)
            if y is not None:
                out["adj_synonym"] = replace(f, pred_adj=y)
                out["adj_synonym_toggle"] = replace(f, pred_adj=y, neg=not f.neg)
            out["adj_antonym"] = replace(f, pred_adj=lex.lemmas[a].antonym)
            out["adj_antonym_toggle"] = replace(f, pred_adj=lex.lemmas[a].antonym, neg=not f.neg)
            pool = self._adj_pool(subj)
            y = self._other(lambda r: r.choice(pool), a)
            if y is not None:
                out["adj_other"] = replace(f, pred_adj=y)
                out["adj_other_toggle"] = replace(f, pred_adj=y, neg=not f.neg)
            return out
        y = self._syn(f.verb)
        if y is not None:
            out["verb_synonym"] = replace(f, verb=y)
            out["verb_synonym_toggle"] = replace(f, verb=y, neg=not f.neg)
        y = self._other(self.verbs, f.verb)
        if y is not None:
            out["verb_other"] = replace(f, verb=y)
            out["verb_other_toggle"] = replace(f, verb=y, neg=not f.neg)
        obj = f.obj
        y = self._syn(obj.lemma)
        if y is not None:
            out["obj_synonym"] = replace(f, obj=replace(obj, lemma=y))
        h = lex.hypernym(obj.lemma)
        if h is not None:
            out["obj_hypernym"] = replace(f, obj=replace(obj, lemma=h))
            out["obj_hypernym_toggle"] = replace(f, obj=replace(obj, lemma=h), neg=not f.neg)
        hypo = lex.hyponyms(obj.lemma)
        if hypo:
            y = r.choice(hypo)
            out["obj_hyponym"] = replace(f, obj=replace(obj, lemma=y))
            out["obj_hyponym_toggle"] = replace(f, obj=replace(obj, lemma=y), neg=not f.neg)
        y = self._other(self.noun_in[lex.lemmas[obj.lemma].category], obj.lemma)
        if y is not None:
            out["obj_other"] = replace(f, obj=replace(obj, lemma=y))
        drop, add = self._modifiers(f)
        if drop:
            out["drop_modifier"] = r.choice(drop)
        if add:
            out["add_modifier"] = r.choice(add)
        if obj.count is not None:
            out["other_count"] = replace(f, obj=replace(obj, count=r.choice([c for c in range(2, 13) if c != obj.count])))
        return out

    def example(self, label: int) -> tuple[SentenceSpec, SentenceSpec, int]:
        """One ``(premise, hypothesis, label)`` with the given label; sets :attr:`last_edit`."""
        r = self.rng
        event = r.random() < PREMISE_EVENT_RATE
        neg = r.random() < PREMISE_NEGATION_RATE
        while True:
            p = self.premise(event, neg)
            edits = {k: h for k, h in self._edits(p).items() if NLI_EDITS[k][neg] == label and h != p}
            if edits:
                names = sorted(edits)
                weights = [TOGGLE_WEIGHT if k == "toggle" else 1.0 for k in names]
                name = r.choices(names, weights)[0]
                self.last_edit = name
                return SentenceSpec((p,)), SentenceSpec((edits[name],)), label

    def examples(self, n: int) -> list[tuple[SentenceSpec, SentenceSpec, int]]:
        """``n`` examples ``(premise, hypothesis, label)``; labels as balanced as ``n`` allows, shuffled."""
        labels = [i % 3 for i in range(n)]
        self.rng.shuffle(labels)
        return [self.example(label) for label in labels]


def xnli_record(example: tuple[SentenceSpec, SentenceSpec, int], lex: Lexicon, L: Language) -> dict:
    """XNLI record ``{"premise", "hypothesis", "label"}`` in language ``L``."""
    p, h, label = example
    return {
        "premise": text_of(linearize(build(p, lex), L), L),
        "hypothesis": text_of(linearize(build(h, lex), L), L),
        "label": label,
    }


# ---------------------------------------------------------------------------------------------
# QA
# ---------------------------------------------------------------------------------------------


@dataclass
class QaExample:
    """A context of fact sentences, one question about one of them, and the answer's leaves."""

    title: NP
    context: list[Sentence]
    question: Sentence
    answer_sentence: int
    answer: list[Leaf]


QA_FACTS = (2, 3)
"""Fewest and most fact sentences of a QA context (world 2.0: 3 to 5, where 4,000 questions and four
epochs left the small world's model at F1 36; world 2.1 halves the distractors)."""


class QaGenerator:
    """Short biographies of two or three people and questions answered by a span.

    Each fact in a context has a different verb (and verb concept), so *who/what/where/when/how
    many* + the verb identifies exactly one fact and the answer is unique.
    """

    def __init__(self, lex: Lexicon, rng: random.Random) -> None:
        self.lex = lex
        self.rng = rng
        self.s = SentenceSampler(lex, rng)

    def example(self) -> QaExample:
        """One context with one question."""
        r, lex, s = self.rng, self.lex, self.s
        people: list[tuple[str, ...]] = []
        n_people = r.choice((2, 2, 3))
        while len(people) < n_people:
            p = lex.full_person(r)
            if all(not set(p) & set(q) for q in people):
                people.append(p)
        facts: list[Fact] = []
        concepts: set[int] = set()
        for i in range(r.randint(*QA_FACTS)):
            while True:
                verb = lex.transitive_verb(r)
                if lex.lemmas[verb].concept not in concepts:
                    concepts.add(lex.lemmas[verb].concept)
                    break
            subj = NounSpec("person", name=people[0] if i == 0 or r.random() < 0.5 else r.choice(people[1:]))
            if r.random() < 0.15:
                obj = s.organization()
            else:
                noun = lex.noun_in[r.choice(lex.lemmas[verb].categories)](r)
                adjs = s.adjectives(lex.lemmas[noun].category, 1) if r.random() < 0.4 else ()
                u = r.random()
                obj = (
                    NounSpec("common", noun, "pl", None, r.randint(2, 40), adjs)
                    if u < 0.3
                    else NounSpec("common", noun, "sg", "det_indef" if u < 0.7 else "det_def", adjs=adjs)
                )
            pps: list[tuple[str, NounSpec]] = []
            if r.random() < 0.45:
                pps.append((r.choice(("prep_in", "prep_near", "prep_from", "prep_to")), s.location()))
            if r.random() < 0.35:
                pps.append(("prep_time", s.year()))
            facts.append(Fact(subj, verb, "past" if r.random() < 0.7 else "pres", False, obj, None, tuple(pps)))
        trees = [build(SentenceSpec((f,)), lex) for f in facts]

        k = r.randrange(len(facts))
        f, tree = facts[k], trees[k]
        clause = tree.clauses[0]
        kinds = ["who", "what"]
        if f.obj.count is not None:
            kinds.append("howmany")
        for i, (prep, _) in enumerate(f.pps):
            kinds.append(("when", i) if prep == "prep_time" else ("where", i))
        kind = r.choice(kinds)
        wh = lex.role
        if kind == "who":
            q = Fact(NounSpec("wh", wh("wh_who")), f.verb, f.tense, False, f.obj, wh="subj")
            answer = leaves(clause.subj)
        elif kind == "what":
            q = Fact(f.subj, f.verb, f.tense, False, NounSpec("wh", wh("wh_what")), wh="obj")
            answer = [leaf for leaf in leaves(clause.obj) if not (leaf is clause.obj.det and leaf.kind == "lex")]
        elif kind == "howmany":
            q = Fact(f.subj, f.verb, f.tense, False, replace(f.obj, count=None, howmany=True), wh="obj")
            answer = [clause.obj.det]
        else:
            role, i = kind
            q = Fact(
                f.subj,
                f.verb,
                f.tense,
                False,
                f.obj,
                None,
                (("", NounSpec("wh", wh("wh_when" if role == "when" else "wh_where"))),),
                wh="pp",
            )
            answer = leaves(clause.pps[i].np)
        question = build(SentenceSpec((q,), end="?"), lex)
        return QaExample(build_np(NounSpec("person", name=people[0]), lex), trees, question, k, answer)


def qa_record(ex: QaExample, L: Language, qid: str) -> dict:
    """SQuAD record in language ``L``; raises AssertionError if the answer span were not exact."""
    parts: list[str] = []
    start = end = -1
    pos = 0
    for i, tree in enumerate(ex.context):
        order = linearize(tree, L)
        text, spans = render(order, L)
        if i:
            pos += 1
        if i == ex.answer_sentence:
            wanted = {id(a) for a in ex.answer}
            idx = [j for j, leaf in enumerate(order) if id(leaf) in wanted]
            if len(idx) != len(ex.answer) or idx != list(range(idx[0], idx[-1] + 1)):
                raise AssertionError(f"answer of {qid} is not contiguous in {L.name}")
            start, end = pos + spans[idx[0]][0], pos + spans[idx[-1]][1]
        parts.append(text)
        pos += len(text)
    context = " ".join(parts)
    answer = context[start:end]
    assert answer and context[start : start + len(answer)] == answer
    title = " ".join(L.word(leaf) for leaf in ex.title.head)
    question = text_of(linearize(ex.question, L), L)
    return {
        "id": qid,
        "title": title,
        "context": context,
        "question": question,
        "answers": {"text": [answer], "answer_start": [start]},
    }


# ---------------------------------------------------------------------------------------------
# Translation
# ---------------------------------------------------------------------------------------------


def translation_examples(lex: Lexicon, rng: random.Random, n: int) -> list[Sentence]:
    """``n`` sentences from the text grammar."""
    s = SentenceSampler(lex, rng)
    return [build(s.sentence(), lex) for _ in range(n)]


def translation_record(tree: Sentence, L: Language, src: Language) -> dict:
    """``{"translation": {L.name: ..., "src": ...}}``."""
    return {"translation": {L.name: text_of(linearize(tree, L), L), src.name: text_of(linearize(tree, src), src)}}


__all__ = [
    "NER_LABELS",
    "NLI_EDITS",
    "XNLI_LABELS",
    "NliGenerator",
    "QaExample",
    "QaGenerator",
    "ner_examples",
    "ner_record",
    "qa_record",
    "translation_examples",
    "translation_record",
    "xnli_record",
]
