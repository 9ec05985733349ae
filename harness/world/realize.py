"""Realization: order the leaves of an abstract sentence for one language and spell them.

Word order comes from the language spec (clause order, adjective/determiner/modifier position,
pre- or postpositions, negation side, question-word movement); every constituent is realized
contiguously, so an answer phrase is a single character span in every language.

Example:
    >>> from harness.world.config import world_config
    >>> from harness.world.lexicon import build_lexicon
    >>> from harness.world.languages import build_languages
    >>> from harness.world.grammar import SentenceSampler, build
    >>> from harness.world.rng import stream
    >>> cfg = world_config("tiny"); lex = build_lexicon(cfg, 0); langs = build_languages(cfg, lex, 0)
    >>> tree = build(SentenceSampler(lex, stream(0, "doc")).sentence(), lex)
    >>> text, spans = render(linearize(tree, langs["far"]), langs["far"])
    >>> text[-1] in ".!?"
    True
"""

from __future__ import annotations

from .grammar import NP, PP, Clause, Leaf, Sentence
from .languages import Language

NO_SPACE_BEFORE = frozenset(".,!?;:")


def _np(np: NP, L: Language, out: list[Leaf]) -> None:
    s = L.spec
    if s.modifier_position == "before":
        if np.rel is not None:
            _clause(np.rel, L, out)
        if np.of is not None:
            _pp(np.of, L, out)
    if np.det is not None and s.determiner_position == "before":
        out.append(np.det)
    if s.adjective_position == "before":
        out.extend(np.adjs)
        out.extend(np.head)
    else:
        out.extend(np.head)
        out.extend(np.adjs)
    if np.det is not None and s.determiner_position == "after":
        out.append(np.det)
    if s.modifier_position == "after":
        if np.of is not None:
            _pp(np.of, L, out)
        if np.rel is not None:
            _clause(np.rel, L, out)


def _pp(pp: PP, L: Language, out: list[Leaf]) -> None:
    if pp.prep is None:
        _np(pp.np, L, out)
    elif L.spec.adposition == "before":
        out.append(pp.prep)
        _np(pp.np, L, out)
    else:
        _np(pp.np, L, out)
        out.append(pp.prep)


def _verb(c: Clause, L: Language, out: list[Leaf]) -> None:
    if c.neg is not None and L.spec.negation == "before":
        out.append(c.neg)
    out.append(c.verb)
    if c.neg is not None and L.spec.negation == "after":
        out.append(c.neg)


def _clause(c: Clause, L: Language, out: list[Leaf]) -> None:
    s = L.spec
    skip = c.wh if (c.wh is not None and s.wh_movement) else None
    if c.rel is not None and s.modifier_position == "after":
        out.append(c.rel)
    if skip is not None:
        if isinstance(skip, NP):
            _np(skip, L, out)
        else:
            _pp(skip, L, out)

    def subj() -> None:
        if c.subj is not None and c.subj is not skip:
            _np(c.subj, L, out)

    def obj() -> None:
        if c.obj is not None and c.obj is not skip:
            _np(c.obj, L, out)
        if c.pred is not None:
            out.append(c.pred)

    def pps() -> None:
        for pp in c.pps:
            if pp is not skip:
                _pp(pp, L, out)

    def adv() -> None:
        if c.adv is not None:
            out.append(c.adv)

    order = s.word_order
    if order == "SVO":
        subj(), _verb(c, L, out), obj(), adv(), pps()
    elif order == "SOV":
        subj(), pps(), obj(), adv(), _verb(c, L, out)
    else:  # VSO
        _verb(c, L, out), subj(), obj(), adv(), pps()
    if c.rel is not None and s.modifier_position == "before":
        out.append(c.rel)


def linearize(sent: Sentence, L: Language) -> list[Leaf]:
    """The leaves of ``sent`` in the order language ``L`` says them."""
    out: list[Leaf] = []
    for part in sent.front:
        if isinstance(part, PP):
            _pp(part, L, out)
        else:
            out.append(part)
    for i, c in enumerate(sent.clauses):
        if i:
            out.extend(sent.joiners[i - 1])
        _clause(c, L, out)
    if sent.end is not None:
        out.append(sent.end)
    return out


def capitalize_first(text: str) -> str:
    """Upper-case the first character (only where that keeps the length, so offsets stay valid)."""
    if not text:
        return text
    up = text[0].upper()
    return (up + text[1:]) if len(up) == 1 else text


def words(order: list[Leaf], L: Language, capitalize: bool = True) -> list[str]:
    """The spelled tokens of ordered leaves (punctuation separate), first one capitalized."""
    toks = [L.word(leaf) for leaf in order]
    if capitalize and toks:
        toks[0] = capitalize_first(toks[0])
    return toks


def join_words(toks: list[str]) -> str:
    """Detokenize spelled tokens: single spaces, none before ``. , ! ? ; :`` (punctuation leaves
    are the only tokens made of these characters, and no word contains a space)."""
    text = " ".join(toks)
    for p in NO_SPACE_BEFORE:
        text = text.replace(" " + p, p)
    return text


def text_of(order: list[Leaf], L: Language) -> str:
    """The sentence text of ordered leaves (what :func:`render` returns, without the spans)."""
    return join_words(words(order, L))


def render(order: list[Leaf], L: Language, capitalize: bool = True) -> tuple[str, list[tuple[int, int]]]:
    """Detokenized text of ordered leaves and each leaf's ``(start, end)`` character span.

    Tokens are joined by single spaces except before ``. , ! ? ; :``.
    """
    toks = words(order, L, capitalize)
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    pos = 0
    for i, tok in enumerate(toks):
        if i and not (order[i].kind == "punct" and tok in NO_SPACE_BEFORE):
            parts.append(" ")
            pos += 1
        parts.append(tok)
        spans.append((pos, pos + len(tok)))
        pos += len(tok)
    return "".join(parts), spans
