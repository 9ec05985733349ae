"""``World``: read-only access to a built world directory, with validated names.

Example:
    >>> import tempfile
    >>> from harness.world import build_world
    >>> w = World(build_world("tiny", seed=0, root=tempfile.mkdtemp()))
    >>> w.languages
    ['src', 'near', 'far', 'script', 'agglu']
    >>> w.task_file("near", "qa", "dev").name
    'dev.jsonl'
    >>> w.labels("xnli")
    ['entailment', 'neutral', 'contradiction']
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .build import FORMAT, MANIFEST
from .config import GENERATOR_VERSION, SPLITS, TASKS

_REQUIRED = {
    "format": str,
    "generator_version": str,
    "languages": list,
    "source_language": str,
    "targets": list,
    "tasks": dict,
    "counts": dict,
    "config": dict,
}


class World:
    """A built world (see :func:`harness.world.build_world` for the layout).

    Args:
        path: the world directory (the one that holds ``world.json``).

    Raises:
        FileNotFoundError: no ``world.json`` in ``path`` (the message names the file).
        ValueError: ``world.json`` is not valid JSON, lacks a field, or was written by another
            generator version (the message names the file and the problem).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        manifest_path = self.path / MANIFEST
        if not manifest_path.is_file():
            raise FileNotFoundError(
                f"{manifest_path}: no world manifest here; build a world with `tokxfer world build` or harness.world.build_world()"
            )
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(
                f"{manifest_path}: corrupt world manifest ({e}); delete the directory and rebuild"
            ) from None
        if not isinstance(manifest, dict):
            raise ValueError(f"{manifest_path}: corrupt world manifest (not a JSON object)")
        for key, typ in _REQUIRED.items():
            if not isinstance(manifest.get(key), typ):
                raise ValueError(
                    f"{manifest_path}: corrupt world manifest (field {key!r} missing or not a {typ.__name__})"
                )
        if manifest["format"] != FORMAT:
            raise ValueError(f"{manifest_path}: not a tokxfer world (format {manifest['format']!r})")
        if manifest["generator_version"] != GENERATOR_VERSION:
            raise ValueError(
                f"{manifest_path}: built by world generator {manifest['generator_version']}, this is {GENERATOR_VERSION}; rebuild it"
            )
        if manifest["source_language"] not in manifest["languages"] or not set(manifest["targets"]) <= set(
            manifest["languages"]
        ):
            raise ValueError(f"{manifest_path}: corrupt world manifest (languages/targets/source_language disagree)")
        self.manifest: dict = manifest

    def __repr__(self) -> str:
        return f"World({str(self.path)!r})"

    # -- names ---------------------------------------------------------------------------------

    @property
    def languages(self) -> list[str]:
        """All languages, source first (e.g. ``["src", "near", "far", "script", "agglu"]``)."""
        return list(self.manifest["languages"])

    @property
    def source_language(self) -> str:
        """The source language (``"src"``)."""
        return self.manifest["source_language"]

    @property
    def targets(self) -> list[str]:
        """The target languages."""
        return list(self.manifest["targets"])

    @property
    def config(self) -> dict:
        """The resolved :class:`~harness.world.config.WorldConfig` as a dict."""
        return self.manifest["config"]

    @property
    def seed(self) -> int:
        """The seed the world was built with."""
        return int(self.manifest["seed"])

    def _lang(self, lang: str, allowed: list[str] | None = None, what: str = "language") -> str:
        allowed = self.languages if allowed is None else allowed
        if lang not in allowed:
            raise ValueError(f"unknown {what} {lang!r}; allowed: {', '.join(allowed)}")
        return lang

    @staticmethod
    def _split(split: str) -> str:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; allowed: {', '.join(SPLITS)}")
        return split

    def _file(self, *parts: str) -> Path:
        p = self.path.joinpath(*parts)
        if not p.is_file():
            raise FileNotFoundError(
                f"{p}: missing from world {self.path.name}; the directory is incomplete, delete it and rebuild"
            )
        return p

    # -- files ---------------------------------------------------------------------------------

    def text(self, lang: str, split: str) -> Path:
        """Plain text, one sentence per line."""
        return self._file(self._lang(lang), "text", f"{self._split(split)}.txt")

    def task_file(self, lang: str, task: str, split: str) -> Path:
        """JSONL examples of ``task`` (``ner | xnli | qa | translation``) in ``lang``.

        ``translation`` exists for the targets only (pairs target → ``src``).
        """
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; allowed: {', '.join(TASKS)}")
        allowed = list(self.manifest["tasks"].get(task, {}).get("languages", self.languages))
        return self._file(self._lang(lang, allowed, f"language for task {task!r}"), task, f"{self._split(split)}.jsonl")

    def dictionary(self, lang: str) -> Path:
        """Gold bilingual dictionary, TSV ``target_word<TAB>source_word`` (every lemma)."""
        return self._file(self._lang(lang, self.targets, "target language"), "gold", "dictionary.tsv")

    def parallel(self, lang: str) -> Path:
        """Sentence-aligned JSONL ``{"source", "target"}`` (the target's text train split)."""
        return self._file(self._lang(lang, self.targets, "target language"), "gold", "parallel.jsonl")

    def word_map(self, lang: str) -> Path:
        """Gold form map, TSV ``target_form<TAB>source_form<TAB>count`` over :meth:`parallel`."""
        return self._file(self._lang(lang, self.targets, "target language"), "gold", "word_map.tsv")

    def lexicon(self) -> Path:
        """The full lexicon table (TSV with a header): relations, forms and origins per language."""
        return self._file("lexicon.tsv")

    def labels(self, task: str) -> list[str]:
        """Label names of a classification task (``ner`` in WikiANN order, ``xnli``)."""
        labelled = [t for t, info in self.manifest["tasks"].items() if "labels" in info]
        if task not in labelled:
            raise ValueError(f"task {task!r} has no labels; labelled tasks: {', '.join(labelled)}")
        return list(self.manifest["tasks"][task]["labels"])

    def counts(self, lang: str) -> dict:
        """Example counts per file kind and split for ``lang``."""
        return self.manifest["counts"][self._lang(lang)]
