"""``build_world``: generate a world into a content-hashed cache directory, atomically.

Layout of a world directory (every file is UTF-8; JSONL has one record per line)::

    world.json                          manifest: config, counts, sizes, statistics
    lexicon.tsv                         every lemma: id, pos, relations, form and origin per language
    <lang>/text/{train,dev,test}.txt    one sentence per line
    <lang>/ner/{train,dev,test}.jsonl   {"tokens", "ner_tags"}; labels in <lang>/ner/labels.json
    <lang>/xnli/{train,dev,test}.jsonl  {"premise", "hypothesis", "label"}
    <lang>/qa/{train,dev,test}.jsonl    SQuAD records
    <tgt>/translation/{split}.jsonl     {"translation": {"<tgt>": ..., "src": ...}}
    <tgt>/gold/dictionary.tsv           target lemma <TAB> source lemma (every lemma)
    <tgt>/gold/parallel.jsonl           {"source", "target"} for every target train sentence
    <tgt>/gold/word_map.tsv             target form <TAB> source form <TAB> count (over parallel.jsonl)

Nothing in the directory depends on time, host or hash seed, so the same config and seed give
byte-identical files.

Example:
    >>> import tempfile
    >>> path = build_world("tiny", seed=0, root=tempfile.mkdtemp())
    >>> (path / "world.json").is_file()
    True
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from harness.cache import cache_subdir

from .config import GENERATOR_VERSION, SPLITS, WorldConfig, world_config
from .grammar import SentenceSampler, build
from .languages import Language, build_languages
from .lexicon import Lexicon, build_lexicon
from .realize import capitalize_first, join_words, linearize, text_of, words
from .rng import stream
from .tasks_data import (
    NER_LABELS,
    XNLI_LABELS,
    NliGenerator,
    QaGenerator,
    ner_examples,
    ner_record,
    qa_record,
    translation_examples,
    translation_record,
    xnli_record,
)

MANIFEST = "world.json"
FORMAT = "tokxfer-world"


def default_root() -> Path:
    """``<cache root>/world`` (:func:`harness.cache.cache_root`; created, the root with its marker, if missing)."""
    return cache_subdir("world")


def world_dir_name(config: WorldConfig, seed: int) -> str:
    """``<name>-s<seed>-<fingerprint>``, the cache directory name of a world."""
    return f"{config.name}-s{seed}-{config.fingerprint()}"


def build_world(size: str | WorldConfig = "tiny", seed: int = 0, root: str | os.PathLike | None = None) -> Path:
    """Build (or find in the cache) the world of ``size`` and ``seed``; return its directory.

    The directory is ``<root>/<size>-s<seed>-<hash>`` where the hash covers the full config and the
    generator version; ``root`` defaults to :func:`default_root`. The world is generated into a
    temporary sibling directory and renamed into place, so a reader never sees a partial world and
    two concurrent builders both end up with the same complete directory. A second call returns
    the existing directory without generating anything.

    Args:
        size: ``"tiny"``, ``"small"`` or a custom :class:`WorldConfig`.
        seed: a non-negative integer; the only source of randomness.
        root: directory under which worlds are cached.

    Returns:
        The world directory (open it with :class:`harness.world.World`).

    Raises:
        ValueError: unknown size or invalid seed.
        RuntimeError: the target directory exists but has no manifest (an incomplete world).

    Example:
        >>> import tempfile
        >>> p = build_world("tiny", 1, root=tempfile.mkdtemp())
        >>> p.name.startswith("tiny-s1-")
        True
    """
    config = size if isinstance(size, WorldConfig) else world_config(size)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"build_world: seed must be a non-negative int; got {seed!r}")
    base = Path(root) if root is not None else default_root()
    final = base / world_dir_name(config, seed)
    if (final / MANIFEST).is_file():
        return final
    if final.exists():
        raise RuntimeError(
            f"{final} exists but has no {MANIFEST}: an incomplete or foreign directory; delete it to rebuild"
        )
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=base))
    try:
        os.chmod(tmp, 0o755)
        generate(config, seed, tmp)
        try:
            os.rename(tmp, final)
        except OSError:
            if not (final / MANIFEST).is_file():  # not a lost race with another builder
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _split_counts(n: int, fractions: tuple[float, float, float]) -> dict[str, int]:
    train, dev = round(n * fractions[0]), round(n * fractions[1])
    return {"train": train, "dev": dev, "test": n - train - dev}


def _jsonl(path: Path, records) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
            n += 1
    return n


def _write_text(out: Path, lex: Lexicon, L: Language, src: Language, n: dict[str, int], seed: int, stats: dict) -> dict:
    """Text splits of ``L``; for a target also the parallel corpus and word map of its train split."""
    rng = stream(seed, "text", L.name)
    sampler = SentenceSampler(lex, rng)
    is_target = L is not src
    pairs: Counter[tuple[str, str]] = Counter()
    types: set[str] = set()
    chars: Counter[str] = Counter()
    counts = {}
    (out / L.name / "text").mkdir(parents=True, exist_ok=True)
    par_fh = None
    if is_target:
        (out / L.name / "gold").mkdir(parents=True, exist_ok=True)
        par_fh = open(out / L.name / "gold" / "parallel.jsonl", "w", encoding="utf-8", newline="\n")
    try:
        for split in SPLITS:
            with open(out / L.name / "text" / f"{split}.txt", "w", encoding="utf-8", newline="\n") as fh:
                for _ in range(n[split]):
                    tree = build(sampler.sentence(), lex)
                    order = linearize(tree, L)
                    toks = words(order, L, capitalize=False)
                    text = join_words([capitalize_first(toks[0]), *toks[1:]])
                    fh.write(text + "\n")
                    if split != "train":
                        continue
                    chars.update(text)
                    for leaf, w in zip(order, toks):
                        if leaf.kind != "punct":
                            types.add(w)
                            if is_target:
                                pairs[(w, src.word(leaf))] += 1
                    if par_fh is not None:
                        source = text_of(linearize(tree, src), src)
                        par_fh.write(json.dumps({"source": source, "target": text}, ensure_ascii=False) + "\n")
            counts[split] = n[split]
    finally:
        if par_fh is not None:
            par_fh.close()
    stats["train_types"] = types
    stats["letters"] = Counter({c: n for c, n in chars.items() if c.isalpha()})
    if is_target:
        rows = sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        with open(out / L.name / "gold" / "word_map.tsv", "w", encoding="utf-8", newline="\n") as fh:
            for (t, s), c in rows:
                fh.write(f"{t}\t{s}\t{c}\n")
        stats["word_map"] = len(rows)
        stats["word_map_tokens"] = sum(pairs.values())
        stats["verbatim_tokens"] = sum(c for (t, s), c in pairs.items() if t == s)
    return counts


def _write_dictionary(out: Path, lex: Lexicon, L: Language, src: Language) -> int:
    path = out / L.name / "gold" / "dictionary.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for lem in lex.lemmas:
            fh.write(f"{L.citation(lem.id)}\t{src.citation(lem.id)}\n")
    return len(lex.lemmas)


def _write_lexicon(out: Path, lex: Lexicon, langs: dict[str, Language]) -> None:
    names = list(langs)
    header = ["id", "pos", "role", "rank", "category", "hypernym", "synonyms", "antonym"] + [
        c for n in names for c in (n, f"{n}_origin")
    ]
    with open(out / "lexicon.tsv", "w", encoding="utf-8", newline="\n") as fh:
        fh.write("\t".join(header) + "\n")
        for lem in lex.lemmas:
            hyper = lex.hypernym(lem.id)
            row = [
                str(lem.id),
                lem.pos,
                lem.role or "",
                str(lem.rank),
                str(lem.category),
                "" if hyper is None else str(hyper),
                ",".join(map(str, lex.synonyms(lem.id))),
                "" if lem.antonym is None else str(lem.antonym),
            ]
            for n in names:
                row += [langs[n].citation(lem.id), langs[n].origins[lem.id]]
            fh.write("\t".join(row) + "\n")


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in sorted(path.rglob("*")) if p.is_file())


def generate(config: WorldConfig, seed: int, out: Path) -> dict:
    """Write a whole world into the existing empty directory ``out``; return the manifest.

    This is the uncached core of :func:`build_world`.
    """
    # One sequence on purpose: the order of the RNG draws below defines the world (GENERATOR_VERSION); a split
    # would hide that order.
    lex = build_lexicon(config, seed)
    langs = build_languages(config, lex, seed)
    src = langs["src"]
    targets = [t.name for t in config.targets]
    counts: dict[str, dict] = {name: {} for name in langs}
    stats: dict[str, dict] = {name: {} for name in langs}

    # Text, parallel corpora, word maps, dictionaries.
    for name, L in langs.items():
        n = config.text_sentences_source if L is src else config.text_sentences_target
        counts[name]["text"] = _write_text(
            out, lex, L, src, _split_counts(n, config.split_fractions), seed, stats[name]
        )
        if L is not src:
            counts[name]["parallel"] = counts[name]["text"]["train"]
            counts[name]["dictionary"] = _write_dictionary(out, lex, L, src)
            counts[name]["word_map"] = stats[name]["word_map"]

    # Task data: the same abstract examples realized in every language.
    for name in langs:
        (out / name / "ner").mkdir(parents=True, exist_ok=True)
        (out / name / "ner" / "labels.json").write_text(json.dumps(list(NER_LABELS)) + "\n", encoding="utf-8")
        for task in ("ner", "xnli", "qa"):
            counts[name][task] = {}
        if name != "src":
            counts[name]["translation"] = {}
    for i, split in enumerate(SPLITS):
        k = {task: config.examples_of(task)[i] for task in ("ner", "xnli", "qa", "translation")}
        ner = ner_examples(lex, stream(seed, "task", "ner", split), k["ner"])
        nli = NliGenerator(lex, stream(seed, "task", "xnli", split)).examples(k["xnli"])
        qa_gen = QaGenerator(lex, stream(seed, "task", "qa", split))
        qa = [qa_gen.example() for _ in range(k["qa"])]
        mt = translation_examples(lex, stream(seed, "task", "translation", split), k["translation"])
        for name, L in langs.items():
            counts[name]["ner"][split] = _jsonl(out / name / "ner" / f"{split}.jsonl", (ner_record(t, L) for t in ner))
            counts[name]["xnli"][split] = _jsonl(
                out / name / "xnli" / f"{split}.jsonl", (xnli_record(e, lex, L) for e in nli)
            )
            counts[name]["qa"][split] = _jsonl(
                out / name / "qa" / f"{split}.jsonl",
                (qa_record(e, L, f"world-qa-{split}-{i:05d}") for i, e in enumerate(qa)),
            )
            if L is not src:
                counts[name]["translation"][split] = _jsonl(
                    out / name / "translation" / f"{split}.jsonl", (translation_record(t, L, src) for t in mt)
                )

    _write_lexicon(out, lex, langs)

    # Statistics that say how far each target is from the source (all over the train text):
    # type_overlap_with_src: share of the target's word types that are also source word types;
    # verbatim_token_rate: share of target word tokens spelled exactly like their aligned source word;
    # shared_letter_rate: share of letter occurrences (digits/punctuation excluded) drawn from the source's letters.
    src_types = stats["src"]["train_types"]
    src_letters = set(stats["src"]["letters"])
    lang_stats = {}
    for name, L in langs.items():
        entry: dict = {
            "script": L.spec.script,
            "train_types": len(stats[name]["train_types"]),
            "morphology": {"affixing": L.morphology.affixing, "affixes": dict(L.morphology.affixes)},
        }
        if L is not src:
            types = stats[name]["train_types"]
            letters = stats[name]["letters"]
            entry.update(
                lemma_origins=dict(sorted(Counter(L.origins).items())),
                cognate_rules=[list(r) for r in L.rules],
                type_overlap_with_src=round(len(types & src_types) / max(1, len(types)), 4),
                verbatim_token_rate=round(stats[name]["verbatim_tokens"] / max(1, stats[name]["word_map_tokens"]), 4),
                shared_letter_rate=round(
                    sum(n for c, n in letters.items() if c in src_letters) / max(1, sum(letters.values())), 4
                ),
            )
        lang_stats[name] = entry

    manifest = {
        "format": FORMAT,
        "generator_version": GENERATOR_VERSION,
        "name": config.name,
        "seed": seed,
        "fingerprint": config.fingerprint(),
        "languages": list(langs),
        "source_language": "src",
        "targets": targets,
        "tasks": {
            "ner": {"labels": list(NER_LABELS), "languages": list(langs)},
            "xnli": {"labels": list(XNLI_LABELS), "languages": list(langs)},
            "qa": {"languages": list(langs)},
            "translation": {"languages": targets},
        },
        "lexicon": {"lemmas": len(lex.lemmas), "categories": len(lex.categories), "entities": len(lex.entities)},
        "counts": counts,
        "bytes": {name: _dir_bytes(out / name) for name in langs},
        "stats": lang_stats,
        "config": config.to_dict(),
    }
    (out / MANIFEST).write_text(json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return manifest
