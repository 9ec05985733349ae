"""Task examples (NER, NLI, QA, translation) as abstract trees, and their per-language records.

Each generator draws language-independent examples once; :func:`ner_record`, :func:`xnli_record`,
:func:`qa_record` and :func:`translation_record` realize one example in one language, in the
file formats of the real data sets (WikiANN, XNLI, SQuAD, IWSLT-style ``translation`` dicts).
As in XNLI and XQuAD, every language gets the *same* examples, translated.

NLI labels follow from the lexicon and simple monotonicity, so they are inferable from the text:

=================================  ======================  ======================
hypothesis edit                    affirmative premise     negated premise
=================================  ======================  ======================
synonym of any content word        entailment              entailment
object → hypernym / drop its adj   entailment              neutral
object → hyponym / add an adj      neutral                 entailment
drop adverbial / adverb            entailment              neutral
add adverbial / adverb             neutral                 entailment
subject → hypernym / drop its adj  entailment              entailment
other object/verb/subject          neutral                 neutral
toggle negation                    contradiction           contradiction
other numeral on the object        contradiction           (not used)
predicate adj → antonym            contradiction           neutral
predicate adj → unrelated adj      neutral                 neutral
=================================  ======================  ======================

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


class NliGenerator:
    """Premise/hypothesis pairs with balanced labels from lexical relations and negation.

    Args:
        lex: the lexicon.
        rng: the generator every draw comes from.
    """

    def __init__(self, lex: Lexicon, rng: random.Random) -> None:
        self.lex = lex
        self.rng = rng
        self.s = SentenceSampler(lex, rng)
        self.cop = lex.role("cop")

    # -- premises -----------------------------------------------------------------------------

    def _subject(self) -> NounSpec:
        r, lex = self.rng, self.lex
        if r.random() < 0.4:
            return self.s.person()
        noun = lex.noun_of_kind["animate"](r)
        adjs = self.s.adjectives(lex.lemmas[noun].category, 1) if r.random() < 0.35 else ()
        return NounSpec("common", noun, "pl" if r.random() < 0.25 else "sg", "det_def", adjs=adjs)

    def _object(self, verb: int, numeral: bool) -> NounSpec:
        r, lex = self.rng, self.lex
        cats = lex.lemmas[verb].categories
        noun = lex.noun_in[r.choice(cats)](r)
        adjs = self.s.adjectives(lex.lemmas[noun].category, 1) if r.random() < 0.4 else ()
        if numeral and r.random() < 0.2:
            return NounSpec("common", noun, "pl", None, r.randint(2, 12), adjs)
        if r.random() < 0.7:
            return NounSpec("common", noun, "sg", "det_indef", adjs=adjs)
        return NounSpec("common", noun, "pl", "det_some", adjs=adjs)

    def premise(self) -> Fact:
        """An event (70 %) or a copular statement, negated 35 % of the time."""
        r, lex = self.rng, self.lex
        neg = r.random() < 0.35
        tense = self.s.tense()
        if r.random() < 0.7:
            verb = lex.transitive_verb(r)
            pps = ((r.choice(LOCATION_PREPS), self.s.place()),) if r.random() < 0.3 else ()
            adv = lex.adverb(r) if r.random() < 0.2 else None
            return Fact(self._subject(), verb, tense, neg, self._object(verb, numeral=not neg), None, pps, adv)
        subj = self._subject()
        cat = lex.lemmas[subj.lemma].category if subj.kind == "common" else lex.kinds["animate"][0]
        with_ant = [a for a in lex.adj_for[cat].ids if lex.lemmas[a].antonym is not None] if lex.adj_for[cat] else []
        adj = (
            r.choice(with_ant) if with_ant and r.random() < 0.7 else (self.s.adjectives(cat, 1) or (lex.any_adj(r),))[0]
        )
        return Fact(subj, self.cop, tense, neg, pred_adj=adj)

    # -- edits (each returns a new fact or None when it does not apply) ------------------------

    def _other(self, pool: list[int], avoid: int) -> int | None:
        """A lemma of ``pool`` unrelated to ``avoid`` (other concept, not its hypernym/hyponym/antonym)."""
        lex = self.lex
        la = lex.lemmas[avoid]
        cands = [
            x
            for x in pool
            if lex.lemmas[x].concept != la.concept
            and x != la.antonym
            and lex.hypernym(x) != avoid
            and lex.hypernym(avoid) != x
        ]
        return self.rng.choice(cands) if cands else None

    def _synonym(self, f: Fact) -> Fact | None:
        lex, r = self.lex, self.rng
        slots: list[tuple[str, int]] = [("verb", f.verb)] if f.verb != self.cop else []
        if f.pred_adj is not None:
            slots.append(("pred", f.pred_adj))
        if f.adv is not None:
            slots.append(("adv", f.adv))
        for who, np in (("subj", f.subj), ("obj", f.obj)):
            if np is not None and np.kind == "common":
                slots.append((who, np.lemma))
                slots.extend((f"{who}_adj{i}", a) for i, a in enumerate(np.adjs))
        slots = [(k, x) for k, x in slots if lex.synonyms(x)]
        if not slots:
            return None
        k, x = r.choice(slots)
        y = r.choice(lex.synonyms(x))
        if k == "verb":
            return replace(f, verb=y)
        if k == "pred":
            return replace(f, pred_adj=y)
        if k == "adv":
            return replace(f, adv=y)
        who, _, idx = k.partition("_adj")
        np = getattr(f, who)
        np = (
            replace(np, lemma=y)
            if not idx
            else replace(np, adjs=tuple(y if i == int(idx) else a for i, a in enumerate(np.adjs)))
        )
        return replace(f, **{who: np})

    def _up(self, np: NounSpec | None) -> NounSpec | None:
        """A more general noun phrase: the hypernym, or one adjective fewer."""
        if np is None or np.kind != "common":
            return None
        options = []
        if np.adjs:
            options.append(replace(np, adjs=np.adjs[:-1]))
        h = self.lex.hypernym(np.lemma)
        if h is not None:
            options.append(replace(np, lemma=h))
        return self.rng.choice(options) if options else None

    def _down(self, np: NounSpec | None) -> NounSpec | None:
        """A more specific noun phrase: a hyponym, or one adjective more."""
        if np is None or np.kind != "common":
            return None
        lex = self.lex
        options = []
        hypo = lex.hyponyms(np.lemma)
        if hypo:
            options.append(replace(np, lemma=self.rng.choice(hypo)))
        if not np.adjs:
            extra = self.s.adjectives(lex.lemmas[np.lemma].category, 1)
            if extra:
                options.append(replace(np, adjs=extra))
        return self.rng.choice(options) if options else None

    def _drop_modifier(self, f: Fact) -> Fact | None:
        options = []
        if f.pps:
            options.append(replace(f, pps=()))
        if f.adv is not None:
            options.append(replace(f, adv=None))
        return self.rng.choice(options) if options and f.verb != self.cop else None

    def _add_modifier(self, f: Fact) -> Fact | None:
        if f.verb == self.cop:
            return None
        options = []
        if not f.pps:
            options.append(replace(f, pps=((self.rng.choice(LOCATION_PREPS), self.s.place()),)))
        if f.adv is None:
            options.append(replace(f, adv=self.lex.adverb(self.rng)))
        return self.rng.choice(options) if options else None

    def _swap(self, f: Fact) -> Fact | None:
        """Replace the subject, verb or object by an unrelated one (neutral)."""
        lex, r = self.lex, self.rng
        options = []
        if f.subj is not None:
            if f.subj.kind == "person":
                other = self.s.person()
                if other.name != f.subj.name and not set(other.name) & set(f.subj.name):
                    options.append(replace(f, subj=other))
            elif f.subj.kind == "common":
                y = self._other(lex.noun_of_kind["animate"].ids, f.subj.lemma)
                if y is not None:
                    options.append(replace(f, subj=replace(f.subj, lemma=y, adjs=())))
        if f.verb != self.cop:
            y = self._other(lex.transitive_verb.ids, f.verb)
            if y is not None:
                options.append(replace(f, verb=y))
        else:
            y = self._other(lex.by_pos["adj"], f.pred_adj)
            if y is not None:
                options.append(replace(f, pred_adj=y))
        if f.obj is not None and f.obj.kind == "common":
            cat = lex.categories[lex.lemmas[f.obj.lemma].category]
            y = self._other(cat.members, f.obj.lemma)
            if y is not None:
                options.append(replace(f, obj=replace(f.obj, lemma=y, adjs=())))
        return r.choice(options) if options else None

    def _contradict(self, f: Fact) -> Fact | None:
        r = self.rng
        options = [replace(f, neg=not f.neg)]
        if not f.neg and f.obj is not None and f.obj.count is not None:
            other = r.choice([c for c in range(2, 13) if c != f.obj.count])
            options.append(replace(f, obj=replace(f.obj, count=other)))
        if not f.neg and f.pred_adj is not None and self.lex.lemmas[f.pred_adj].antonym is not None:
            options.append(replace(f, pred_adj=self.lex.lemmas[f.pred_adj].antonym))
        return r.choice(options)

    def _hypothesis(self, f: Fact, label: int) -> Fact | None:
        """A hypothesis with the wanted label, or ``None`` if no edit of this premise gives it."""
        r = self.rng
        if label == CONTRADICTION:
            return self._contradict(f)
        up = lambda: (lambda np: replace(f, obj=np) if np else None)(self._up(f.obj))  # noqa: E731
        down = lambda: (lambda np: replace(f, obj=np) if np else None)(self._down(f.obj))  # noqa: E731
        subj_up = lambda: (lambda np: replace(f, subj=np) if np else None)(self._up(f.subj))  # noqa: E731
        if label == ENTAILMENT:
            edits = [lambda: self._synonym(f), subj_up] + (
                [down, lambda: self._add_modifier(f)] if f.neg else [up, lambda: self._drop_modifier(f)]
            )
        else:
            edits = [lambda: self._swap(f)] + (
                [up, lambda: self._drop_modifier(f)] if f.neg else [down, lambda: self._add_modifier(f)]
            )
            if f.neg and f.pred_adj is not None and self.lex.lemmas[f.pred_adj].antonym is not None:
                edits.append(lambda: replace(f, pred_adj=self.lex.lemmas[f.pred_adj].antonym, neg=False))
        r.shuffle(edits)
        for edit in edits:
            h = edit()
            if h is not None and h != f:
                return h
        return None

    def examples(self, n: int) -> list[tuple[SentenceSpec, SentenceSpec, int]]:
        """``n`` examples ``(premise, hypothesis, label)``; labels as balanced as ``n`` allows, shuffled."""
        labels = [i % 3 for i in range(n)]
        self.rng.shuffle(labels)
        out = []
        for label in labels:
            while True:
                p = self.premise()
                h = self._hypothesis(p, label)
                if h is not None:
                    break
            out.append((SentenceSpec((p,)), SentenceSpec((h,)), label))
        return out


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
        for i in range(r.randint(3, 5)):
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
