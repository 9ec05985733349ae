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

DOC = Path(__file__).resolve().parents[2] / "docs" / "WALKTHROUGH.md"
FAST = {  # fastText small enough for tiny text (bucket >= methods._fasttext.min_bucket(dim))
    "focus": ["aux_dim=16", "aux_bucket=540672", "aux_epochs=2", "aux_min_count=3"],
    "wechsel": ["dim=16", "bucket=540672", "min_count=1", "epochs=2"],
}
STANDIN_LAYERS, STANDIN_VOCAB, FAST_DIM = 2, 400, 16  # what the walkthrough says about its stand-ins


def walkthrough_commands(text: str) -> list[tuple[list[str], int]]:
    """``(argv without 'tokxfer', expected exit code)`` for every command in the doc's bash blocks."""
    return [(argv, expect) for argv, expect, _ in walkthrough_steps(text)]


def walkthrough_steps(text: str) -> list[tuple[list[str], int, list[str]]]:
    """Every command of the doc's bash blocks with its expected exit code and the example output the doc
    shows for it: the lines of a ``text`` block that follows (before the next command), else ``[]``."""
    out: list[tuple[list[str], int, list[str]]] = []
    for kind, block in re.findall(r"```(bash|text)\n(.*?)```", text, flags=re.S):
        if kind == "text":
            assert out and not out[-1][2], "a text block must follow a command, one per command"
            out[-1] = (out[-1][0], out[-1][1], [ln for ln in block.splitlines() if ln.strip()])
            continue
        expect = 0
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith("# exits 2"):
                expect = 2
            elif line.startswith("tokxfer "):
                out.append((shlex.split(line)[1:], expect, []))
                expect = 0
    return out


@pytest.fixture(scope="module")
def env(tiny_world, tmp_path_factory) -> dict:
    from transformers import XLMRobertaConfig, XLMRobertaModel

    from harness.tokenizers import train_tokenizer
    from harness.world import World

    w = World(tiny_world)
    d = tmp_path_factory.mktemp("walkthrough")
    tok = train_tokenizer([w.text("src", "train"), w.text("script", "train"), w.text("far", "train")], "unigram",
                          STANDIN_VOCAB)
    cfg = XLMRobertaConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=STANDIN_LAYERS, num_attention_heads=2,
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


def _figures(text: str) -> list[str]:
    """The numbers of the doc's prose (outside code blocks, inline code, headings and "step N" references)."""
    prose = re.sub(r"```.*?```|`[^`]*`|^#+ \d+\.|step \d", " ", text, flags=re.S | re.M)
    return re.findall(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?!\w)", prose)


def test_every_figure_in_the_walkthrough_comes_from_the_code_or_its_checked_output():
    """No figure from an old run survives: each number of the prose is a default or constant of the code (or
    arithmetic on them), says what the test's stand-ins are, or is in an example output the run test checks."""
    from harness import progress
    from harness.model.provenance import MAX_RANDOM_ROWS
    from methods.focus import FocusConfig

    text = DOC.read_text()
    vocab = int(re.search(r"export VOCAB=(\d+)", text).group(1))
    f, fast_dim = FocusConfig(), int(FAST["focus"][0].split("=")[1])
    mb, gb = vocab * f.aux_dim * 4 / 1e6, f.aux_bucket * f.aux_dim * 4 / 1e9
    derived = {
        f"{STANDIN_LAYERS}", f"{STANDIN_VOCAB}", f"{fast_dim}",  # the stand-ins (tests/cli/test_walkthrough.py)
        f"{progress.HEARTBEAT_S:g}", f"{f.aux_min_count}", f"{MAX_RANDOM_ROWS:g}",  # defaults of the code
        f"{vocab:,}", f"{f.aux_dim}", "4", f"{mb:g}", f"{f.aux_bucket:,}", f"{gb:g}",  # float32 rows of FOCUS's fastText
    }
    assert fast_dim == FAST_DIM
    shown = {n for _, _, example in walkthrough_steps(text) for line in example for n in re.findall(r"\d[\d,.]*", line)}
    stray = [n for n in _figures(text) if n not in derived and n.rstrip(".") not in shown]
    assert not stray, f"figures in docs/WALKTHROUGH.md that neither the code nor a checked example output gives: {stray}"
    assert "prints its progress (percent" not in text  # fastText with one thread prints nothing until it is done


def test_walkthrough_commands_run_on_tiny_standins(env, capfd):
    from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

    shown = 0
    for argv, expect, example in walkthrough_steps(DOC.read_text()):
        filled = _fill(argv, env)
        try:
            code = main(filled)
        except SystemExit as e:
            code = e.code
        out, err = capfd.readouterr()
        assert code == expect, f"tokxfer {' '.join(filled)} exited {code}:\n{err[-3000:]}"
        # every line the doc shows as this command's output (numbers included) is what the code prints now
        printed = {ln.rstrip() for ln in (out + err).splitlines()}
        for line in example:
            assert _fill([line], env)[0].rstrip() in printed, f"the walkthrough shows {line!r}; tokxfer printed:\n{out}{err}"
        shown += len(example)
        if expect == 2:
            assert len([ln for ln in err.splitlines() if ln.startswith("tokxfer: error:")]) == 1
        if argv[:1] == ["init"] and "--explain" not in argv and expect == 0:
            assert "provenance" in out and "time per step" in out
    assert shown >= 10  # the example outputs are there (and were checked)
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
