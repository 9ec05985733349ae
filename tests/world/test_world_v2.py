"""World v2: five languages, task files read by the real adapters, NLI labels that follow from the
lexical relations, exact label balance, and no bag-of-words label leak (tiny world)."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from harness.world import World, build_world, world_config
from harness.world.baselines import bow_baselines
from harness.world.grammar import SentenceSampler
from harness.world.languages import build_languages
from harness.world.lexicon import build_lexicon
from harness.world.rng import stream
from harness.world.tasks_data import NLI_EDITS, NLI_POOL_SIZE, QA_FACTS, NliGenerator, QaGenerator, xnli_record
from tests.world.test_world import _files

E, N, C = 0, 1, 2


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    return World(build_world("tiny", seed=0, root=tmp_path_factory.mktemp("worlds")))


@pytest.fixture(scope="module")
def lex():
    return build_lexicon(world_config("tiny"), 0)


def test_five_languages_spanning_the_knobs(world):
    assert world.languages == ["src", "near", "far", "script", "agglu"]
    stats = world.manifest["stats"]
    assert stats["script"]["script"] == "cyrillic"
    assert stats["agglu"]["morphology"]["affixing"] == "suffix" and stats["far"]["morphology"]["affixing"] == "prefix"
    # agglu stacks suffixes (case + number on nouns) and is verb-initial
    cfg = world_config("tiny").language("agglu")
    assert cfg.word_order == "VSO" and cfg.case_marking and cfg.full_verb_agreement
    overlap = {t: stats[t]["type_overlap_with_src"] for t in world.targets}
    assert overlap["near"] > overlap["agglu"] > overlap["far"] > overlap["script"]
    for t in world.targets:
        for f in ("dictionary", "parallel", "word_map"):
            assert getattr(world, f)(t).stat().st_size > 0
        assert world.text(t, "train").stat().st_size > 0


@pytest.mark.parametrize("task", ["xnli", "qa", "ner", "translation"])
def test_every_task_file_loads_with_the_real_adapters(world, task):
    from tasks.data import TASK_COLUMNS, load_task_splits, ner_label_names

    langs = world.targets if task == "translation" else world.languages
    for lang in langs:
        splits, info = load_task_splits(task, lang, data_root=world.path)
        assert info["source"] == "world" and not info["dev_from_train"]
        for split, ds in splits.items():
            assert len(ds) == world.manifest["counts"][lang][task][split] > 0
            assert set(TASK_COLUMNS[task]) <= set(ds.column_names), (task, lang, split, ds.column_names)
        if task == "ner":
            names = ner_label_names(splits["train"], template_file=world.task_file(lang, "ner", "train"))
            assert names == world.labels("ner")


def test_per_task_sizes_of_the_small_world():
    cfg = world_config("small")
    assert cfg.examples_of("xnli")[0] >= 10_000 and cfg.examples_of("translation")[0] >= 10_000
    assert cfg.examples_of("ner") == cfg.task_examples
    with pytest.raises(ValueError, match="task_sizes"):
        type(cfg)(**{**cfg.__dict__, "task_sizes": (("nli", (1, 2, 3)),)})


def test_text_shows_the_relations_nli_needs(lex):
    """Antonyms contrasted (X is A but it is not B) and synonyms restated appear in the text grammar."""
    s = SentenceSampler(lex, stream(0, "test-relations"))
    cop, but = lex.role("cop"), lex.role("conj_but")
    contrasts = synonyms = 0
    for _ in range(200):
        spec = s.relation()
        if len(spec.facts) == 1:  # a noun synonym: "a hound is a dog"
            f = spec.facts[0]
            assert f.verb == cop and f.obj.lemma in lex.synonyms(f.subj.lemma)
            synonyms += 1
            continue
        a, b = spec.facts
        if spec.conjs == ("conj_but",):
            assert a.verb == b.verb == cop and lex.lemmas[a.pred_adj].antonym == b.pred_adj and a.neg != b.neg
            contrasts += 1
        else:
            pair = (a.pred_adj, b.pred_adj) if a.verb == cop else (a.verb, b.verb) if a.adv is None else (a.adv, b.adv)
            assert pair[1] in lex.synonyms(pair[0]), spec
            synonyms += 1
    assert contrasts > 40 and synonyms > 40
    assert but == lex.role("conj_but")


def _relation(lex, a: int, b: int) -> str:
    if a == b:
        return "same"
    if b in lex.synonyms(a):
        return "syn"
    if lex.lemmas[a].antonym == b:
        return "ant"
    if lex.hypernym(a) == b:
        return "up"
    if lex.hypernym(b) == a:
        return "down"
    return "other"


def _oracle(lex, p, h) -> int:
    """The label, from the two facts and the lexicon alone (independent of NLI_EDITS)."""
    diffs = [k for k in ("subj", "verb", "obj", "pred_adj", "pps", "adv") if getattr(p, k) != getattr(h, k)]
    assert len(diffs) <= 1, (p, h)
    base = E
    if diffs:
        k = diffs[0]
        if k == "subj":
            ps, hs = p.subj, h.subj
            rel = "other" if ps.kind == "person" else _relation(lex, ps.lemma, hs.lemma)
            base = {"syn": E, "up": E, "down": N, "other": N}[rel]
        elif k in ("verb", "pred_adj"):
            rel = _relation(lex, getattr(p, k), getattr(h, k))
            base = {"syn": E, "ant": C, "other": N}[rel]
        else:  # the indefinite object and the modifiers: downward monotone under negation
            if k == "obj" and p.obj.lemma != h.obj.lemma:
                rel = _relation(lex, p.obj.lemma, h.obj.lemma)
                direction = {"syn": "eq", "up": "up", "down": "down", "other": "other"}[rel]
            elif k == "obj" and p.obj.count != h.obj.count:
                direction = "count"
            else:  # a modifier dropped (more general) or added (more specific)
                n_p = len(p.obj.adjs) + len(p.pps) + (p.adv is not None)
                n_h = len(h.obj.adjs) + len(h.pps) + (h.adv is not None)
                direction = "up" if n_h < n_p else "down"
            aff = not p.neg
            base = {
                "eq": E,
                "other": N,
                "up": E if aff else N,
                "down": N if aff else E,
                "count": C if aff else N,
            }[direction]
    if p.neg != h.neg:
        return {E: C, C: E, N: N}[base]
    return base


def test_nli_labels_follow_from_relations_and_polarity(lex):
    g = NliGenerator(lex, stream(0, "test-oracle"))
    seen = Counter()
    for i in range(900):
        p, h, label = g.example(i % 3)
        (pf,), (hf,) = p.facts, h.facts
        assert label == NLI_EDITS[g.last_edit][pf.neg]
        assert _oracle(lex, pf, hf) == label, (g.last_edit, pf, hf)
        seen[g.last_edit] += 1
    assert len(seen) >= 18  # nearly every edit kind occurs


def test_nli_is_balanced_and_premise_negation_is_label_independent(lex):
    g = NliGenerator(lex, stream(0, "test-balance"))
    ex = g.examples(600)
    assert Counter(label for *_, label in ex) == {0: 200, 1: 200, 2: 200}
    neg = Counter((label, p.facts[0].neg) for p, _, label in ex)
    for label in (0, 1, 2):
        assert 0.35 < neg[label, True] / 200 < 0.65


def test_bag_of_words_baselines_stay_far_below_the_learnable_level(lex):
    """Hypothesis-minus-premise and hypothesis-only bags of words must not predict the label well.

    Chance is 1/3; on the small world 2.1 (12k train) they reach 0.52 and 0.52 (world 2.0, whose NLI
    drew from the whole lexicon: 0.48 and 0.43; ``benchmarks/probe_world.py``);
    the bound here (tiny world, 900 examples) leaves room for sampling noise only."""
    L = build_languages(world_config("tiny"), lex, 0)["src"]
    recs = {}
    for split, n in (("train", 900), ("dev", 150), ("test", 300)):
        recs[split] = [xnli_record(e, lex, L) for e in NliGenerator(lex, stream(0, "bow", split)).examples(n)]
    res = bow_baselines(recs["train"], recs["dev"], recs["test"], l2_grid=(1.0,))
    assert res["hypothesis-minus-premise"]["test"] < 0.55, res
    assert res["hypothesis-only"]["test"] < 0.52, res
    assert res["hypothesis-minus-premise"]["train"] > 0.5  # the model can fit: the bound is not vacuous


def test_nli_content_words_come_from_the_bounded_inventory(lex):
    """World 2.1: premise verbs and objects are among the NLI_POOL_SIZE-bounded pools (the most
    frequent lemmas); ``pool_size=None`` is world 2.0's whole lexicon."""
    g = NliGenerator(lex, stream(0, "pool"))
    assert len(g.verbs.ids) == min(4 * NLI_POOL_SIZE, len(lex.transitive_verb.ids))
    weight = dict(zip(lex.transitive_verb.ids, lex.transitive_verb.weights()))
    assert min(weight[i] for i in g.verbs.ids) >= max(weight[i] for i in set(weight) - set(g.verbs.ids))
    verbs, objects = set(), set()
    for p, _, _ in g.examples(600):
        f = p.facts[0]
        if f.verb != g.cop:
            verbs.add(f.verb)
            objects.add(f.obj.lemma)
            assert f.obj.lemma in g.noun_in[lex.lemmas[f.obj.lemma].category].ids
    assert verbs <= set(g.verbs.ids) and len(verbs) > NLI_POOL_SIZE
    whole = NliGenerator(lex, stream(0, "pool"), pool_size=None)
    assert whole.verbs is lex.transitive_verb and whole.noun_in is lex.noun_in


def test_top_keeps_the_heaviest_ids_with_their_weights(lex):
    s = lex.any_noun
    t = s.top(5)
    w = dict(zip(s.ids, s.weights()))
    assert len(t.ids) == 5 and sorted(w, key=lambda i: -w[i])[:5] == sorted(t.ids, key=lambda i: -w[i])
    assert t.cum[-1] == pytest.approx(sum(w[i] for i in t.ids))
    assert s.top(10**6).ids == s.ids


def test_qa_contexts_hold_two_or_three_facts(lex):
    g = QaGenerator(lex, stream(0, "qa-facts"))
    counts = Counter(len(g.example().context) for _ in range(200))
    assert set(counts) == set(range(QA_FACTS[0], QA_FACTS[1] + 1)) == {2, 3}, counts


def test_edit_lookup_is_the_memorization_reference(lex):
    """The label is a function of the edit (few ambiguous edits), and a lookup of seen edits is
    right almost always: what a model cannot memorize from the task data is the unseen edits."""
    from harness.world.baselines import edit_lookup

    L = build_languages(world_config("tiny"), lex, 0)["src"]
    train = [xnli_record(e, lex, L) for e in NliGenerator(lex, stream(0, "lookup", "train")).examples(900)]
    test = [xnli_record(e, lex, L) for e in NliGenerator(lex, stream(0, "lookup", "test")).examples(300)]
    r = edit_lookup(train, test)
    assert r["ambiguous_train_edits"] < 0.05 * r["distinct_train_edits"], r
    assert 0.0 < r["coverage"] < 1.0 and r["seen_accuracy"] > 0.85, r
    assert r["accuracy"] == pytest.approx(r["coverage"] * r["seen_accuracy"] + (1 - r["coverage"]) / 3, abs=1e-3)
    assert edit_lookup(train, train)["coverage"] == 1.0


def test_world_v2_files_are_byte_identical_for_the_same_seed(world, tmp_path):
    other = build_world("tiny", seed=0, root=tmp_path)

    a, b = _files(world.path), _files(other)
    assert a == b and any(k.startswith("agglu/xnli/") for k in a)
    assert world.manifest["generator_version"].startswith("2.")


def test_growing_a_task_split_keeps_every_other_file(world, tmp_path):
    """A task's splits draw from their own streams: more QA training questions append to the old ones and
    leave the dev/test questions and every other file of the world as they were (so records made on the
    smaller split stay valid for ``max_train_examples`` up to its size)."""
    cfg = world_config("tiny")
    n_train, n_dev, n_test = cfg.examples_of("qa")
    bigger = dataclasses.replace(cfg, task_sizes=(("qa", (2 * n_train, n_dev, n_test)),))
    other = World(build_world(bigger, seed=0, root=tmp_path))
    assert other.manifest["fingerprint"] != world.manifest["fingerprint"]

    a, b = _files(world.path), _files(other.path)
    changed = {k for k in a if a[k] != b[k]}
    assert a.keys() == b.keys()
    assert changed == {"world.json"} | {f"{lang}/qa/train.jsonl" for lang in world.languages}, sorted(changed)
    for lang in world.languages:
        old, new = a[f"{lang}/qa/train.jsonl"].splitlines(), b[f"{lang}/qa/train.jsonl"].splitlines()
        assert len(old) == n_train and len(new) == 2 * n_train and new[:n_train] == old
