"""Whether a source checkpoint holds the head a task or ``tokxfer init --kind`` needs, read without loading it.

A checkpoint saved as a bare encoder (``XLMRobertaModel``, an embedding model) has no masked-LM head;
loading it as ``AutoModelForMaskedLM`` would add a random head silently, and every number read
through it would be meaningless. :func:`missing_head` names the head parameters a checkpoint lacks.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from harness.errors import TokxferError

__all__ = ["HeadError", "missing_head"]


class HeadError(TokxferError, ValueError):
    """A checkpoint's architecture has no model class with the asked-for head."""


def _checkpoint_keys(d: Path) -> set[str] | None:
    """Tensor names in a model directory's weights, read without loading them (``None``: unknown format)."""
    idx = next((p for p in (d / "model.safetensors.index.json", d / "pytorch_model.bin.index.json") if p.is_file()), None)
    if idx is not None:
        return set(json.loads(idx.read_text()).get("weight_map", {}))
    st = sorted(d.glob("*.safetensors"))
    if st:
        from safetensors import safe_open

        keys: set[str] = set()
        for p in st:
            with safe_open(str(p), "pt") as f:
                keys.update(f.keys())
        return keys
    bins = sorted(d.glob("*.bin"))
    if bins:
        import torch

        keys = set()
        for p in bins:
            keys.update(torch.load(p, map_location="cpu", mmap=True, weights_only=True).keys())
        return keys
    return None


def missing_head(source: str, kind: str) -> tuple[list[str], list[str]] | None:
    """Parameters of the ``kind`` head that the source checkpoint lacks, and its ``architectures``.

    Builds the model on the meta device (no memory) and compares its head parameters (those
    outside the base model) with the tensor names in the checkpoint; a head parameter tied to a
    present one (the decoder weight to the input embeddings when the config ties them, the decoder
    bias to the head bias) counts as present. ``None`` when the source is not a local directory.
    """
    import torch
    import transformers

    d = Path(source).expanduser()
    if not d.is_dir():
        return None
    keys = _checkpoint_keys(d)
    if keys is None:
        return None
    keys = {re.sub(r"\.gamma$", ".weight", re.sub(r"\.beta$", ".bias", k)) for k in keys}
    config = transformers.AutoConfig.from_pretrained(d)
    cls = {"mlm": transformers.AutoModelForMaskedLM, "clm": transformers.AutoModelForCausalLM}[kind]
    try:
        with torch.device("meta"):
            model = cls.from_config(config)
    except ValueError as e:  # no such head class for this architecture
        raise HeadError(f"{source}: a {type(config).__name__} has no {kind} model class ({' '.join(str(e).split())[:200]})") from None
    prefix = model.base_model_prefix
    expected = list(model.state_dict().keys())
    present = keys | {f"{prefix}.{k}" for k in keys}
    tied = getattr(model, "_tied_weights_keys", None) or {}
    text_cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    ties_embeddings = bool(getattr(text_cfg, "tie_word_embeddings", True))
    head = [k for k in expected if not k.startswith(prefix + ".")]
    missing = []
    for k in head:
        if k in present:
            continue
        if isinstance(tied, dict):
            partners = {v for kk, v in tied.items() if kk == k} | {kk for kk, v in tied.items() if v == k}
            ok = any(p in present and (not p.startswith(prefix + ".") or ties_embeddings) for p in partners)
        else:  # older transformers: a list of tied names, partners unknown
            ok = any(re.fullmatch(t, k) or t == k for t in tied)
        if not ok:
            missing.append(k)
    return missing, list(getattr(config, "architectures", None) or [])
