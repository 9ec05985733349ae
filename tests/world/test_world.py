"""Tests of the built-in world generator (harness/world) on the ``tiny`` size, in temporary dirs."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from harness.world import FAR, SIZES, LanguageSpec, World, WorldConfig, build_world, world_config
from harness.world.rng import derive

LANGS = ["src", "near", "far", "script", "agglu"]
SPLITS = ["train", "dev", "test"]
WIKIANN = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]
WORD = re.compile(r"[^\s.,!?;:]+")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("worlds")


@pytest.fixture(scope="module")
def world(root) -> World:
    return World(build_world("tiny", seed=0, root=root))


def _files(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _tokens(line: str) -> list[str]:
    return WORD.findall(line)


def _lexicon(world: World) -> list[dict]:
    lines = world.lexicon().read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    return [dict(zip(header, line.split("\t"))) for line in lines[1:]]


# --- determinism and caching -------------------------------------------------------------------


def test_same_seed_gives_byte_identical_worlds_regardless_of_global_rng(world, tmp_path):
    random.seed(12345)
    np.random.seed(777)
    state = (random.getstate(), np.random.get_state()[1].copy())
    other = build_world("tiny", seed=0, root=tmp_path)
    assert random.getstate() == state[0] and np.array_equal(np.random.get_state()[1], state[1]), (
        "build touched the global RNGs"
    )
    assert other.name == world.path.name
    a, b = _files(world.path), _files(other)
    assert len(a) > 40 and a == b


def test_same_seed_is_identical_across_processes_and_hash_seeds(world, tmp_path):
    """Set iteration order depends on PYTHONHASHSEED; output must not."""
    code = "import sys; from harness.world import build_world; print(build_world('tiny', 0, root=sys.argv[1]))"
    env = dict(os.environ, PYTHONHASHSEED="4242")
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[2],
    )
    assert _files(Path(out.stdout.strip())) == _files(world.path)


def test_different_seed_gives_a_different_world(world, root):
    other = World(build_world("tiny", seed=1, root=root))
    assert other.path != world.path and other.path.name.startswith("tiny-s1-")
    for lang in LANGS:
        assert other.text(lang, "train").read_bytes() != world.text(lang, "train").read_bytes()
    assert other.dictionary("near").read_bytes() != world.dictionary("near").read_bytes()


def test_cache_returns_the_same_path_fast_and_leaves_no_temp_dirs(world, root):
    t = time.perf_counter()
    again = build_world("tiny", seed=0, root=root)
    assert again == world.path
    assert time.perf_counter() - t < 0.05
    assert not [p for p in root.iterdir() if ".tmp-" in p.name]


def test_concurrent_builds_agree(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        paths = list(pool.map(lambda _: build_world("tiny", seed=2, root=tmp_path), range(2)))
    assert paths[0] == paths[1] and (paths[0] / "world.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == [paths[0].name]


def test_default_root_is_the_tokxfer_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKXFER_CACHE", str(tmp_path))
    path = build_world("tiny", seed=3)
    assert path.parent == tmp_path / "world"
    assert re.fullmatch(r"tiny-s3-[0-9a-f]{12}", path.name)


def test_incomplete_directory_is_not_silently_reused(tmp_path):
    path = build_world("tiny", seed=0, root=tmp_path)
    (path / "world.json").unlink()
    with pytest.raises(RuntimeError, match="world.json"):
        build_world("tiny", seed=0, root=tmp_path)


def test_config_change_changes_the_cache_directory():
    tiny = world_config("tiny")
    assert dataclasses.replace(tiny, n_lemmas=301).fingerprint() != tiny.fingerprint()
    assert world_config("small").fingerprint() != tiny.fingerprint()


def test_local_seed_derivation_matches_harness_seeding():
    from harness.seeding import derive as harness_derive

    for args in [(0, "lexicon"), (7, "task", "qa", "dev"), (2**40, "text", "near")]:
        assert derive(*args) == harness_derive(*args)


# --- manifest, API and errors ------------------------------------------------------------------


def test_world_api_and_manifest_counts_match_files(world):
    assert world.languages == LANGS
    assert world.source_language == "src"
    assert world.targets == ["near", "far", "script", "agglu"]
    assert world.labels("ner") == WIKIANN
    assert world.labels("xnli") == ["entailment", "neutral", "contradiction"]
    for lang in LANGS:
        counts = world.counts(lang)
        for split in SPLITS:
            assert len(world.text(lang, split).read_text(encoding="utf-8").splitlines()) == counts["text"][split]
            tasks = ["ner", "xnli", "qa"] + (["translation"] if lang != "src" else [])
            for task in tasks:
                assert (
                    len(_jsonl(world.task_file(lang, task, split)))
                    == counts[task][split]
                    == SIZES["tiny"].task_examples[SPLITS.index(split)]
                )
    for lang in world.targets:
        assert len(_jsonl(world.parallel(lang))) == world.counts(lang)["text"]["train"]
        assert (
            len(world.dictionary(lang).read_text(encoding="utf-8").splitlines()) == world.manifest["lexicon"]["lemmas"]
        )


def test_unknown_names_raise_value_errors_naming_the_allowed_values(world):
    with pytest.raises(ValueError, match="src, near, far, script"):
        world.text("klingon", "train")
    with pytest.raises(ValueError, match="train, dev, test"):
        world.text("src", "validation")
    with pytest.raises(ValueError, match="ner, xnli, qa, translation"):
        world.task_file("src", "pos", "train")
    with pytest.raises(ValueError, match="near, far, script"):
        world.task_file("src", "translation", "train")
    with pytest.raises(ValueError, match="near, far, script"):
        world.dictionary("src")
    with pytest.raises(ValueError, match="ner, xnli"):
        world.labels("qa")
    with pytest.raises(ValueError, match="tiny, small"):
        build_world("huge")
    with pytest.raises(ValueError, match="did you mean 'tiny'"):
        build_world("tiyn")
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="seed"):
            build_world("tiny", seed=bad)


def test_missing_or_corrupt_manifest_names_the_file(tmp_path, world):
    with pytest.raises(FileNotFoundError, match=r"world\.json"):
        World(tmp_path)
    (tmp_path / "world.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "world.json"))):
        World(tmp_path)
    (tmp_path / "world.json").write_text(json.dumps({"format": "tokxfer-world"}), encoding="utf-8")
    with pytest.raises(ValueError, match="generator_version|languages"):
        World(tmp_path)


def test_config_validation_names_the_field():
    with pytest.raises(ValueError, match="cognate_ratio"):
        LanguageSpec("x", cognate_ratio=1.5)
    with pytest.raises(ValueError, match="word_order"):
        LanguageSpec("x", word_order="OSV")
    with pytest.raises(ValueError, match="affixing"):
        WorldConfig(
            **{
                **dataclasses.asdict(SIZES["tiny"]),
                "source": SIZES["tiny"].source,
                "targets": (FAR, dataclasses.replace(FAR, name="y", affixing="suffix", lexicon_from="far")),
            }
        )
    with pytest.raises(ValueError, match="lexicon_from"):
        WorldConfig(
            **{
                **dataclasses.asdict(SIZES["tiny"]),
                "source": SIZES["tiny"].source,
                "targets": (dataclasses.replace(FAR, name="y", lexicon_from="far"),),
            }
        )


# --- formats -----------------------------------------------------------------------------------


def test_ner_files_are_wikiann_with_valid_iob_and_entities(world):
    for lang in LANGS:
        assert json.loads((world.path / lang / "ner" / "labels.json").read_text()) == WIKIANN
        for split in SPLITS:
            for rec in _jsonl(world.task_file(lang, "ner", split)):
                assert set(rec) == {"tokens", "ner_tags"}
                toks, tags = rec["tokens"], rec["ner_tags"]
                assert len(toks) == len(tags) > 1 and all(isinstance(t, str) and t and " " not in t for t in toks)
                names = [WIKIANN[t] for t in tags]
                assert any(n != "O" for n in names), "every NER sentence has an entity"
                for prev, cur in zip(["O"] + names, names):
                    if cur.startswith("I-"):
                        assert prev[2:] == cur[2:], f"invalid IOB {prev}->{cur} in {rec}"


def test_ner_entities_are_parallel_and_names_verbatim_in_latin_targets(world):
    def spans(rec):
        out, cur = [], None
        for tok, tag in zip(rec["tokens"], rec["ner_tags"]):
            name = WIKIANN[tag]
            if name.startswith("B-"):
                cur = [name[2:], [tok]]
                out.append(cur)
            elif name.startswith("I-"):
                cur[1].append(tok)
        return out

    src = [spans(r) for r in _jsonl(world.task_file("src", "ner", "train"))]
    for lang in world.targets:
        tgt = [spans(r) for r in _jsonl(world.task_file(lang, "ner", "train"))]
        assert [sorted(k for k, _ in s) for s in src] == [sorted(k for k, _ in s) for s in tgt]
    near = [spans(r) for r in _jsonl(world.task_file("near", "ner", "train"))]
    persons = lambda ss: sorted(" ".join(t) for s in ss for k, t in s if k == "PER")  # noqa: E731
    assert persons(src) == persons(near)


def test_xnli_labels_are_balanced_and_parallel(world):
    labels = {}
    for lang in LANGS:
        for split in SPLITS:
            recs = _jsonl(world.task_file(lang, "xnli", split))
            assert all(set(r) == {"premise", "hypothesis", "label"} and r["label"] in (0, 1, 2) for r in recs)
            assert all(r["premise"] != r["hypothesis"] for r in recs)
            c = Counter(r["label"] for r in recs)
            assert max(c.values()) - min(c.values()) <= 1 and len(c) == 3
            labels[lang, split] = [r["label"] for r in recs]
    for split in SPLITS:
        assert len({tuple(labels[lang, split]) for lang in LANGS}) == 1


def test_xnli_negation_is_no_label_cue(world):
    """Premises are negated at the same rate under every label (the label is the relation, not the word)."""
    neg = next(r["src"] for r in _lexicon(world) if r["role"] == "neg")
    recs = [r for split in SPLITS for r in _jsonl(world.task_file("src", "xnli", split))]
    for label in (0, 1, 2):
        sub = [r for r in recs if r["label"] == label]
        assert any(neg in _tokens(r["premise"].lower()) for r in sub)
        assert any(neg in _tokens(r["hypothesis"].lower()) for r in sub)
        assert any(neg not in _tokens(r["hypothesis"].lower()) for r in sub)


def test_qa_is_squad_with_exact_offsets(world):
    for lang in LANGS:
        for split in SPLITS:
            for rec in _jsonl(world.task_file(lang, "qa", split)):
                assert set(rec) == {"id", "title", "context", "question", "answers"}
                assert rec["question"].endswith("?") and rec["title"]
                (text,), (start,) = rec["answers"]["text"], rec["answers"]["answer_start"]
                assert text.strip() == text and text
                assert rec["context"][start : start + len(text)] == text


def test_qa_is_parallel_across_languages(world):
    ids = {lang: [r["id"] for r in _jsonl(world.task_file(lang, "qa", "dev"))] for lang in LANGS}
    assert len({tuple(v) for v in ids.values()}) == 1 and len(set(ids["src"])) == len(ids["src"])


def test_translation_pairs_are_target_to_src(world):
    src_lines = set(world.text("src", "train").read_text(encoding="utf-8").splitlines())
    assert src_lines
    for lang in world.targets:
        for split in SPLITS:
            for rec in _jsonl(world.task_file(lang, "translation", split)):
                assert set(rec) == {"translation"} and set(rec["translation"]) == {lang, "src"}
                assert all(isinstance(v, str) and v for v in rec["translation"].values())
    mt = [r["translation"] for r in _jsonl(world.task_file("far", "translation", "dev"))]
    assert sum(r["far"] != r["src"] for r in mt) == len(mt)


# --- gold resources ----------------------------------------------------------------------------


def _word_map(world: World, lang: str) -> list[tuple[str, str, int]]:
    rows = [line.split("\t") for line in world.word_map(lang).read_text(encoding="utf-8").splitlines()]
    assert all(len(r) == 3 and r[0] and r[1] and int(r[2]) > 0 for r in rows)
    return [(t, s, int(c)) for t, s, c in rows]


def test_word_map_counts_equal_parallel_corpus_token_counts(world):
    for lang in world.targets:
        rows = _word_map(world, lang)
        pairs = _jsonl(world.parallel(lang))
        tgt = Counter(t.lower() for p in pairs for t in _tokens(p["target"]))
        src = Counter(t.lower() for p in pairs for t in _tokens(p["source"]))
        wm_t, wm_s = Counter(), Counter()
        for t, s, c in rows:
            wm_t[t.lower()] += c
            wm_s[s.lower()] += c
        assert wm_t == tgt and wm_s == src


def test_word_map_translates_near_word_by_word_but_not_far(world):
    """near keeps the source word order; far reorders (SOV, postpositions) but is still 1:1."""

    def translate(lang):
        best: dict[str, tuple[int, str]] = {}
        for t, s, c in _word_map(world, lang):
            if c > best.get(t.lower(), (0, ""))[0]:
                best[t.lower()] = (c, s.lower())
        same_order = same_bag = 0
        pairs = _jsonl(world.parallel(lang))
        for p in pairs:
            mapped = [best[t.lower()][1] for t in _tokens(p["target"])]
            src = [t.lower() for t in _tokens(p["source"])]
            same_order += mapped == src
            same_bag += sorted(mapped) == sorted(src)
        return same_order / len(pairs), same_bag / len(pairs)

    near_order, near_bag = translate("near")
    far_order, far_bag = translate("far")
    assert near_order > 0.9 and near_bag > 0.9
    assert far_bag > 0.9 and far_order < 0.5


def test_dictionary_covers_every_lemma_and_agrees_with_the_lexicon(world):
    lex = _lexicon(world)
    for lang in world.targets:
        rows = [line.split("\t") for line in world.dictionary(lang).read_text(encoding="utf-8").splitlines()]
        assert [(r[lang], r["src"]) for r in lex] == [tuple(r) for r in rows]
        assert len({t for t, _ in rows}) == len(rows), f"{lang}: target lemmas must be distinct"


def test_near_shares_most_lemmas_far_few_script_none(world):
    lex = _lexicon(world)
    n = len(lex)
    same = {lang: sum(r[lang] == r["src"] for r in lex) / n for lang in world.targets}
    related = {lang: sum(r[f"{lang}_origin"] in ("verbatim", "cognate") for r in lex) / n for lang in world.targets}
    assert related["near"] > 0.8 and 0.1 < same["near"] < 0.4
    assert related["far"] < 0.25 and same["far"] < 0.06
    assert same["script"] == 0.0

    def types(lang):
        return {
            t.lower()
            for line in world.text(lang, "train").read_text(encoding="utf-8").splitlines()
            for t in _tokens(line)
        }

    src = types("src")
    overlap = {lang: len(types(lang) & src) / len(types(lang)) for lang in world.targets}
    assert overlap["near"] > overlap["far"] > overlap["script"]


def test_script_shares_almost_no_letters_with_src(world):
    src_letters = {c for c in world.text("src", "train").read_text(encoding="utf-8") if c.isalpha()}
    text = world.text("script", "train").read_text(encoding="utf-8")
    letters = [c for c in text if c.isalpha()]
    shared = sum(c in src_letters for c in letters) / len(letters)
    assert shared < 0.08, shared
    # what is shared: digits, punctuation and a few names (capitalized tokens), never common words
    for tok in _tokens(text):
        if any(c in src_letters for c in tok):
            assert tok[0].isupper() and all(c.isascii() for c in tok), tok
    assert any(c.isdigit() for c in text)
    dictionary = world.dictionary("script").read_text(encoding="utf-8")
    assert not any(c.isascii() and c.isalpha() for line in dictionary.splitlines() for c in line.split("\t")[0])


def test_far_morphology_and_order_differ_from_src(world):
    cfg = world.config
    far = next(t for t in cfg["targets"] if t["name"] == "far")
    assert far["word_order"] == "SOV" and far["affixing"] == "prefix"
    stats = world.manifest["stats"]
    assert stats["far"]["morphology"]["affixing"] == "prefix"
    src_affixes = {a for a in stats["src"]["morphology"]["affixes"].values() if a}
    far_affixes = [a for a in stats["far"]["morphology"]["affixes"].values() if a]
    assert len(far_affixes) > len(src_affixes), "far marks more (case, agreement)"


def test_custom_language_by_config(tmp_path):
    greek = LanguageSpec(
        "greekish", cognate_ratio=0.5, shared_verbatim_ratio=0.1, script="greek", word_order="VSO", latin_name_ratio=0.0
    )
    cfg = dataclasses.replace(
        world_config("tiny"),
        name="custom",
        targets=(greek,),
        text_sentences_source=60,
        text_sentences_target=60,
        task_examples=(6, 3, 3),
    )
    w = World(build_world(cfg, seed=0, root=tmp_path))
    assert w.languages == ["src", "greekish"]
    text = w.text("greekish", "train").read_text(encoding="utf-8")
    assert any("\u0370" <= c <= "\u03ff" for c in text)
    assert not any(c.isascii() and c.isalpha() for c in text)
    assert w.task_file("greekish", "translation", "dev").is_file()


# --- the source language -----------------------------------------------------------------------


def test_tiny_builds_fast_and_small(tmp_path):
    t = time.perf_counter()
    w = World(build_world("tiny", seed=5, root=tmp_path))
    assert time.perf_counter() - t < 4.0  # five languages; a loaded 2-core machine
    for lang in LANGS:
        assert 10_000 < w.manifest["bytes"][lang] < 400_000


def test_source_text_is_zipfian_and_inflected(world):
    lex = _lexicon(world)
    tokens = [
        t.lower() for line in world.text("src", "train").read_text(encoding="utf-8").splitlines() for t in _tokens(line)
    ]
    freq = np.array(sorted(Counter(tokens).values(), reverse=True), dtype=float)
    ranks = np.arange(1, len(freq) + 1)
    sel = (ranks >= 5) & (ranks <= 200)
    slope = np.polyfit(np.log(ranks[sel]), np.log(freq[sel]), 1)[0]
    assert -1.3 < slope < -0.6, slope
    affixes = world.manifest["stats"]["src"]["morphology"]["affixes"]
    types = set(tokens)
    for pos, slot in [("noun", "noun.pl"), ("verb", "verb.past.sg"), ("verb", "verb.pres.sg")]:
        stems = [r["src"] for r in lex if r["pos"] == pos]
        inflected = sum(
            any(t.startswith(s) and t.endswith(affixes[slot]) and len(t) > len(s) for t in types) for s in stems
        )
        assert inflected >= 10, (pos, slot, inflected)
    # sentences are varied: questions, negation, numbers, commas all occur; few exact duplicates
    text = world.text("src", "train").read_text(encoding="utf-8")
    neg = next(r["src"] for r in lex if r["role"] == "neg")
    assert "?" in text and "," in text and any(c.isdigit() for c in text) and neg in tokens
    lines = text.splitlines()
    assert len(set(lines)) > 0.9 * len(lines)


def test_lexicon_defines_relations_used_by_nli(world):
    lex = _lexicon(world)
    pos = Counter(r["pos"] for r in lex)
    assert {"noun", "verb", "adj", "adv", "det", "prep", "pron", "conj", "neg", "wh", "cop"} <= set(pos)
    assert pos["noun"] > pos["verb"] > pos["adv"]
    by_id = {r["id"]: r for r in lex}
    assert sum(bool(r["synonyms"]) for r in lex) >= 6
    antonyms = [r for r in lex if r["antonym"]]
    assert antonyms and all(by_id[r["antonym"]]["antonym"] == r["id"] and r["pos"] == "adj" for r in antonyms)
    hyper = [r for r in lex if r["hypernym"]]
    assert len(hyper) > 0.8 * pos["noun"] and all(by_id[r["hypernym"]]["pos"] == "noun" for r in hyper)
    forms = [r["src"] for r in lex]
    assert len(set(forms)) == len(forms) and all(f.isalpha() and f.islower() for f in forms)
