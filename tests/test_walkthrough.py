"""docs/WALKTHROUGH.md, run: every ``tokxfer`` command of the walkthrough, in order, on tiny stand-ins.

The stand-ins have the real use's shape: an XLM-R-family encoder *without* an MLM head (as
``multilingual-e5-small``) with a multilingual SentencePiece vocabulary, saved with
``save_pretrained``; the tiny world's ``near`` text as German, ``src`` as English, its gold
dictionary and sentence pairs (as TSV). fastText options are shrunk so that each command takes
seconds; nothing else is changed. A command preceded by ``# exits 2`` must fail with one line.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import torch

from harness.cli import main

DOC = Path(__file__).resolve().parent.parent / "docs" / "WALKTHROUGH.md"
FAST = {  # fastText small enough for tiny text (bucket >= methods._fasttext.min_bucket(dim))
    "focus": ["aux_dim=16", "aux_bucket=540672", "aux_epochs=2", "aux_min_count=3"],
    "wechsel": ["dim=16", "bucket=540672", "min_count=1", "epochs=2"],
}


def walkthrough_commands(text: str) -> list[tuple[list[str], int]]:
    """``(argv without 'tokxfer', expected exit code)`` for every command in the doc's bash blocks."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        expect = 0
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith("# exits 2"):
                expect = 2
            elif line.startswith("tokxfer "):
                out.append((shlex.split(line)[1:], expect))
                expect = 0
    return out


@pytest.fixture(scope="module")
def env(tiny_world, tmp_path_factory) -> dict:
    from transformers import XLMRobertaConfig, XLMRobertaModel

    from harness.tokenizers import train_tokenizer
    from harness.world import World

    w = World(tiny_world)
    d = tmp_path_factory.mktemp("walkthrough")
    tok = train_tokenizer([w.text("src", "train"), w.text("script", "train"), w.text("far", "train")], "unigram", 400)
    cfg = XLMRobertaConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=130, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    XLMRobertaModel(cfg).save_pretrained(d / "e5-standin")
    tok.save_pretrained(d / "e5-standin")
    rows = [ln.split("\t")[:2] for ln in w.dictionary("near").read_text().splitlines() if ln.strip()]
    (d / "en-de.tsv").write_text("".join(f"{s}\t{t}\n" for t, s in rows))
    pairs = [json.loads(ln) for ln in w.parallel("near").read_text().splitlines() if ln.strip()]
    (d / "pairs.tsv").write_text("".join(f"{p['target']}\t{p['source']}\n" for p in pairs))
    return {"SRC": str(d / "e5-standin"), "DE_TXT": str(w.text("near", "train")), "EN_TXT": str(w.text("src", "train")),
            "DICT": str(w.dictionary("near")), "DICT_EN_DE": str(d / "en-de.tsv"), "PAIRS": str(d / "pairs.tsv"),
            "VOCAB": "200", "WORK": str(d / "xfer")}


def _fill(argv: list[str], env: dict) -> list[str]:
    out = []
    for a in argv:
        for name in re.findall(r"\$(\w+)", a):
            assert name in env, f"the walkthrough uses ${name}, which its 'What you need' block does not define"
            a = a.replace(f"${name}", env[name])
        out.append(a)
    if out[:1] == ["init"] and "--explain" not in out:
        method = out[out.index("--method") + 1]
        if method in FAST and "--config" in out:
            i = out.index("--config")
            out[i + 1:i + 1] = FAST[method]
        elif method in FAST:
            out += ["--config", *FAST[method]]
    return out


def test_the_walkthrough_defines_what_it_uses():
    text = DOC.read_text()
    defined = set(re.findall(r"export (\w+)=", text))
    used = {v for argv, _ in walkthrough_commands(text) for a in argv for v in re.findall(r"\$(\w+)", a)}
    assert used <= defined and len(walkthrough_commands(text)) >= 10


def test_walkthrough_commands_run_on_tiny_standins(env, capfd):
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    commands = walkthrough_commands(DOC.read_text())
    for argv, expect in commands:
        filled = _fill(argv, env)
        try:
            code = main(filled)
        except SystemExit as e:
            code = e.code
        out, err = capfd.readouterr()
        assert code == expect, f"tokxfer {' '.join(filled)} exited {code}:\n{err[-3000:]}"
        if expect == 2:
            assert len([ln for ln in err.splitlines() if ln.startswith("tokxfer: error:")]) == 1
        if argv[:1] == ["init"] and "--explain" not in argv and expect == 0:
            assert "provenance" in out and "time per step" in out
    work = Path(env["WORK"])
    for name in ("de-focus", "de-wechsel", "de-wechsel-all", "de-wechsel-swapped", "de-tiktotok"):
        d = work / name
        tok = AutoTokenizer.from_pretrained(d)
        assert AutoModel.from_pretrained(d).get_input_embeddings().weight.shape[0] == len(tok)
        assert AutoModelForMaskedLM.from_pretrained(d).get_output_embeddings().weight.shape[0] == len(tok)
        info = json.loads((d / "init_info.json").read_text())
        assert info["new_head"]["missing"] and info["source"]["path"] == str(Path(env["SRC"]).resolve())
    warned = json.loads((work / "de-wechsel-all" / "init_info.json").read_text())["warnings"]
    assert any("--source-tokens english-only" in w for w in warned)
    assert not any("--source-tokens" in w for w in json.loads((work / "de-wechsel" / "init_info.json").read_text())["warnings"])
