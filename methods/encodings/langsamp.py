"""``langsamp``: language and script embeddings added to the transformer's output, before the LM head.

LangSAMP (Liu et al., ACL 2025, "LangSAMP: Language-Script Aware Multilingual Pretraining";
METHODS.md, "langsamp"): ``logits = head(h + L[l] + S[s])`` where ``h`` is the last hidden state
of the transformer body, ``L[l]`` a learned vector of the sequence's language and ``S[s]`` a learned
vector of its script, shared by every language written in that script. The body itself never sees
a language id, so its representations stay language-neutral; task fine-tuning (classification,
NER, QA heads on the last hidden state) does not use ``L`` or ``S`` at all, and needs no language
ids: the task model's outputs do not depend on them.

Where the vectors act (see :mod:`harness.language_encoding`): a forward hook on the model's body
(``base_model``: ``roberta``, ``transformer`` …) adds them to its first output, the one the LM head
reads — in world pretraining, LAPT, MLM at init and perplexity. A model without an LM head (a task
model built by ``tasks.loop.build_task_model``) keeps the tables (frozen, recorded) but no hook.
Per-token language ids (TLM) add each token's own language and script. The other outputs of the
body (``hidden_states``, what ``sentence-embeddings`` pools) stay language-neutral.

Scripts (ISO 15924 codes) come, per language, from: the source model's saved encoding; the
``scripts`` option; the built-in world's languages (``harness.world.config.language_scripts``:
``script`` is Cyrillic, the others Latin). A language found in none of them is an error naming it.

Choices the paper leaves to the implementation (named options here):

- ``init``: the reference code (``cisnlp/LangSAMP``, ``modeling_xlmr_decoupled.py``) makes both tables
  ``nn.Embedding`` modules of the model, so continued pretraining starts them from transformers'
  ``_init_weights`` (N(0, ``initializer_range``), 0.02 for XLM-R): ``init: random`` with
  ``random_std: 0.02``. The default here is ``zero``: until trained, the encoded model computes
  exactly what the plain model computes (as ``additive``'s default), so MLM at init compares methods,
  not noise; the gradient of the loss with respect to an added vector is not zero, so they train.
- one script vector per script, shared by the languages written in it (the paper's script embedding,
  indexed by script code); adds ``(n_languages + n_scripts) x d`` parameters.
- the vectors are added before the LM head's own transform (RoBERTa's ``dense``/``layer_norm``), as in
  the reference's LM head; for GPT-2/Llama after the body's final norm (the body's output).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from harness import language_encoding as _wrapper
from harness.registry import register_encoding
from harness.seeding import torch_generator

_ISO15924 = re.compile(r"[A-Z][a-z]{3}")


@dataclass(frozen=True)
class LangsampConfig:
    """Configuration of :class:`Langsamp`."""

    init: str = "zero"
    """How a language (and a script) the source has no vector for starts: ``zero``/``identity`` (outputs
    equal the plain model's), ``random`` (N(0, std); the reference code's start with ``random_std: 0.02``),
    ``mean`` of the source's vectors, or ``copy:<lang>`` (that language's vector, and its script's)."""
    random_std: float | None = None
    """Std of ``random`` vectors; None: the std of the model's word-embedding matrix."""
    scripts: dict[str, str] | None = None
    """ISO 15924 script of languages the world does not know (real languages), e.g. ``{de: Latn, ar: Arab}``."""

    def __post_init__(self) -> None:
        _wrapper.check_init_options("langsamp", self.init, self.random_std)
        if self.scripts is None:
            return
        if not isinstance(self.scripts, dict):
            raise ValueError(f"langsamp.scripts must be a mapping language -> ISO 15924 code, got {self.scripts!r}")
        for lang, script in self.scripts.items():
            if not isinstance(script, str) or not _ISO15924.fullmatch(script):
                raise ValueError(f"langsamp.scripts[{lang!r}] must be an ISO 15924 code such as 'Latn' or 'Cyrl', got {script!r}")


def resolve_scripts(languages: list[str], given: dict[str, str], saved: dict[str, str]) -> dict[str, str]:
    """The script of every language: the source's saved one, else ``given`` (the config), else the world's.

    Raises:
        ValueError: a language of no known script, or ``given`` contradicting the source's encoding.

    Example:
        >>> resolve_scripts(["src", "script", "de"], {"de": "Latn"}, {})
        {'src': 'Latn', 'script': 'Cyrl', 'de': 'Latn'}
    """
    world: dict[str, str] | None = None
    out = {}
    for lang in languages:
        if lang in saved:
            if lang in given and given[lang] != saved[lang]:
                raise ValueError(f"langsamp.scripts[{lang!r}] = {given[lang]!r}, but the source model was "
                                 f"pretrained with {lang!r} as {saved[lang]!r}")  # fmt: skip
            out[lang] = saved[lang]
        elif lang in given:
            out[lang] = given[lang]
        else:
            world = _wrapper.world_scripts() if world is None else world
            if lang not in world:
                raise ValueError(f"langsamp: no script known for language {lang!r}; give it in the encoding's "
                                 f"config, e.g. scripts: {{{lang}: Latn}} (ISO 15924)")  # fmt: skip
            out[lang] = world[lang]
    return out


@register_encoding("langsamp", config=LangsampConfig,
                   description="language + script embeddings added to the last hidden state before the LM head; "
                               "unused in fine-tuning (LangSAMP)")  # fmt: skip
class Langsamp:
    """Language and script vectors on the transformer's output, for the LM head only."""

    def __init__(self, config: LangsampConfig) -> None:
        self.config = config
        self.wrapped: Any = None

    def wrap(self, model: Any, languages: list[str], *, seed: int | None = None, pretrained: dict | None = None) -> Any:
        """Wrap ``model`` (see :func:`harness.language_encoding.wrap_model`).

        Raises:
            ValueError: a language of unknown script (see :func:`resolve_scripts`).
        """
        encoded = getattr(model, "is_language_encoded", False) and model.encoding == "langsamp"
        saved = (model.script_state() if encoded else (pretrained or {}).get("scripts", {})).get("input", {})
        saved_langs, saved_rows = saved.get("languages", {}), saved.get("rows", {})
        known = list(model.languages) if encoded else list((pretrained or {}).get("state", {}).get("input", {}))
        scripts = resolve_scripts(known + [x for x in languages if x not in known], dict(self.config.scripts or {}),
                                  saved_langs)  # fmt: skip
        emb = _wrapper.side_modules(model.model if encoded else model)["input"]
        how, ref = _wrapper.parse_init(self.config.init, where="langsamp.init")
        init = f"copy:{saved_langs.get(ref, ref)}" if how == "copy" else self.config.init  # a language's script
        names = list(dict.fromkeys(scripts.values()))
        gen = torch_generator(seed, "encoding", "langsamp", "scripts") if seed is not None else None
        table, info = _wrapper.init_table(
            "langsamp", names, int(emb.weight.shape[1]), init, existing=saved_rows, generator=gen,
            random_std=self.config.random_std, embedding_std=float(emb.weight.detach().float().std()),
            where="langsamp scripts",
        )
        self.wrapped = _wrapper.wrap_model(model, languages, encoding="langsamp", config=self.config, seed=seed,
                                           pretrained=pretrained, train_in_finetuning=False, scripts=scripts,
                                           script_rows=dict(zip(names, table)))  # fmt: skip
        self.wrapped.init_info["scripts"] = info
        return self.wrapped

    def prepare(self, batch: dict, languages: list[str]) -> dict:
        """Add ``language_ids`` to the batch (a task model accepts and ignores them)."""
        return _wrapper.prepare_for(self, batch, languages)

