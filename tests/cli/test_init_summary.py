"""``tokxfer init`` says what it did, once (issue 32): one provenance summary counted from the mapping,
random rows with their reasons and one warning above ``--max-random-rows``, messages in the user's
flags, progress while fastText and tokenizers train; and issue 25's two ``init`` checks (a tokenizer
file that cannot be read is named, ``--seed`` is checked before any model is loaded).

The fixture has many unmappable tokens: the source (a tiny XLM-R) knows only the ``src`` language
of the tiny world, the target tokenizer is trained on its ``script`` language (another alphabet),
so most target tokens have characters the source vocabulary lacks.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from harness import progress
from tests.cli.test_init_cli import FAST_FOCUS, _xlmr, cli, error_line, no_model_loading  # noqa: F401 - a fixture


@pytest.fixture(scope="module")
def unmappable(tiny_world, tmp_path_factory) -> dict:
    from harness.tokenizers import train_tokenizer
    from harness.world import World

    w = World(tiny_world)
    d = tmp_path_factory.mktemp("unmappable")
    src_tok = train_tokenizer([w.text("src", "train")], "unigram", 200)
    tgt_tok = train_tokenizer([w.text("script", "train")], "unigram", 300)
    tgt_tok.save_pretrained(d / "script-tokenizer")
    return {"xlmr": _xlmr(src_tok, d / "xlmr"), "tok": d / "script-tokenizer", "text": w.text("script", "train"),
            "pairs": w.parallel("script"), "n_target": len(tgt_tok), "dir": d,
            "de_tok": d / "script-tokenizer", "en_txt": w.text("src", "train"), "dict": w.dictionary("script")}


# the inputs that leave many rows random, per method (fastText shrunk to seconds)
CASES = {
    "tiktotok": ["--parallel-corpus", "pairs", "--config", "fallback=random", "min_count=20"],
    "mean-of-pieces": [],
    "vipi": [],
    "focus": ["--target-corpus", "text", "--config", *FAST_FOCUS[:-1], "aux_min_count=20"],
}


def _argv(s: dict, method: str, out: Path, *extra) -> list:
    args = [s[a] if a in ("pairs", "text") else a for a in CASES[method]]
    return ["init", "--method", method, "--source", s["xlmr"], "--target-tokenizer", s["tok"], "--out", out, *args, *extra]


@pytest.mark.parametrize("method", list(CASES))
def test_one_summary_counts_every_row_once_and_warns_once_above_the_threshold(method, unmappable, tmp_path, capfd):
    s = unmappable
    code, out, err = cli(capfd, *_argv(s, method, tmp_path / "o"))
    assert code == 0, err
    info = json.loads((tmp_path / "o" / "init_info.json").read_text(encoding="utf-8"))
    cats, rr = info["categories"], info["random_rows"]
    # counted from the mapping: every row once, the random rows split by reason, every reason given by the method
    assert sum(cats.values()) == info["n_target"] == s["n_target"] == len(info["provenance"])
    assert rr["count"] == cats["fallback"] == info["provenance"].count("3") == sum(r["count"] for r in rr["reasons"])
    ids = sorted(i for r in rr["reasons"] for i in r["ids"])
    assert ids == [i for i, c in enumerate(info["provenance"]) if c == "3"]
    assert rr["share"] > 0.1 and rr["above_threshold"] and rr["max_random_rows"] == 0.1
    assert not any(r["reason"] == "no reason given by the method" for r in rr["reasons"]), rr["reasons"]
    # one summary, one warning, no second report of the same rows (method loggers, a method-specific line)
    assert out.count("target tokens") == 1 and out.count("random rows by reason") == 1
    for r in rr["reasons"]:
        assert " ".join(out.split()).count(r["reason"]) == 1
    warnings = [ln for ln in err.splitlines() if ln.startswith("tokxfer: warning:")]
    assert len(warnings) == 1 and "--max-random-rows 0.1" in warnings[0] and f"{rr['count']:,} of the" in warnings[0]
    assert info["warnings"] == [warnings[0].removeprefix("tokxfer: warning: ")]
    assert not [ln for ln in err.splitlines() if ln.startswith("WARNING ")], err
    # tokens read as text: no Python byte-string reprs anywhere
    text = (tmp_path / "o" / "init_info.json").read_text(encoding="utf-8")
    assert not re.search(r"""b['"]\\\\x|b'\\x""", text) and "b'" not in out
    assert all(isinstance(e, str) and not e.startswith("b'") for r in rr["reasons"] for e in r["examples"])
    # the threshold is the user's: no warning when it allows the share, and it is recorded
    code, _, err = cli(capfd, *_argv(s, method, tmp_path / "p", "--max-random-rows", "1"))
    assert code == 0 and "tokxfer: warning:" not in err
    assert json.loads((tmp_path / "p" / "init_info.json").read_text())["random_rows"]["max_random_rows"] == 1.0


@pytest.mark.usefixtures("no_model_loading")
def test_max_random_rows_is_checked(unmappable, tmp_path, capfd):
    code, _, err = cli(capfd, *_argv(unmappable, "vipi", tmp_path / "o", "--max-random-rows", "1.5"))
    assert code == 2 and "--max-random-rows 1.5" in error_line(err)


def test_readable_tokens():
    from harness.vocab import Canon, show_canon

    assert show_canon(Canon("Ŋ".encode(), True)) == "▁Ŋ"  # the b'\xc5\x8a'
    assert show_canon(Canon(b"\xc5", False)) == "<0xC5>" and show_canon(Canon(b"a\tb", False)) == "a<0x09>b"


def test_a_plugin_without_reasons_is_counted_all_the_same(unmappable):
    from harness.model.provenance import NO_REASON, SPECIAL_WITHOUT_ROLE, provenance_summary
    from harness.protocols import COPIED, FALLBACK, SPECIAL, InitResult, TokenMapping
    from harness.tokenizers import load_tokenizer
    from harness.vocab import special_ids

    tok = load_tokenizer(unmappable["tok"])
    n = len(tok)
    special = sorted(special_ids(tok))
    prov = [FALLBACK] * n
    prov[special[0]], prov[10] = SPECIAL, COPIED
    m = TokenMapping.from_coo(n, n, [special[0], 10], [special[0], 10], [1, 1], prov)
    reasons = {"rare": [11, 12, 10]}  # 10 is not a random row: ignored
    s = provenance_summary(InitResult(m, tok, random_reasons=reasons), tok, tok)
    by = {r["reason"]: r["count"] for r in s["random_rows"]["reasons"]}
    assert by == {NO_REASON: n - 2 - 2 - (len(special) - 1), "rare": 2, SPECIAL_WITHOUT_ROLE: len(special) - 1}
    assert sum(by.values()) == s["categories"]["fallback"] == n - 2


# ---------------------------------------------------------------------------------------------
# messages in the user's flags


def _english_only(s: dict, out: Path, *how) -> list:
    return ["init", "--method", "wechsel", "--source", s["xlmr"], "--target-tokenizer", s["tok"], "--out", out,
            "--target-corpus", s["text"], "--source-corpus", s["en_txt"], "--dictionary", s["dict"], *how]


@pytest.mark.usefixtures("no_model_loading")
def test_english_only_without_english_tokenizer_names_the_flags(unmappable, tmp_path, capfd):
    code, _, err = cli(capfd, *_english_only(unmappable, tmp_path / "o", "--source-tokens", "english-only"))
    line = error_line(err)
    assert code == 2
    assert "--source-tokens english-only" in line and "--english-tokenizer" in line and "--source-corpus" in line
    assert "inputs." not in line and "english_tokenizer:" not in line and "of method" not in line
    assert "--config source_tokens" not in line  # the user did not use --config for it
    # set with --config, it is named as typed
    code, _, err = cli(capfd, *_english_only(unmappable, tmp_path / "o", "--config", "source_tokens=english-only"))
    line = error_line(err)
    assert code == 2 and "--config source_tokens=english-only" in line and "--english-tokenizer" in line


@pytest.mark.usefixtures("no_model_loading")
def test_config_errors_name_config_only_when_it_was_used(unmappable, tmp_path, capfd):
    code, _, err = cli(capfd, *_english_only(unmappable, tmp_path / "o", "--config", "k=0"))
    line = error_line(err)
    assert code == 2 and line.startswith("tokxfer: error: --config: k must be >= 1")


def test_explain_wechsel_english_only_says_what_the_default_uses(capfd):
    from harness.cli.init_flags import explain

    text = " ".join(explain("wechsel").split())
    doc = text[text.index("source_tokens = "):text.index("alignment = ")]
    assert "english_tokenizer`` (--english-tokenizer)" in doc and "by default" in doc
    assert "--english-tokenizer: an English tokenizer" in text
    assert "[when --source-tokens english-only and english_tokens=tokenizer-overlap (the default)]" in text


# ---------------------------------------------------------------------------------------------
# issue 25: the tokenizer file that cannot be read; --seed before any model


@pytest.mark.usefixtures("no_model_loading")
def test_unreadable_tokenizer_file_is_named(unmappable, tmp_path, capfd):
    bad = tmp_path / "tok"
    shutil.copytree(unmappable["tok"], bad)
    (bad / "tokenizer.json").write_text('{"version": "1.0", "model": ')
    code, _, err = cli(capfd, "init", "--method", "vipi", "--source", unmappable["xlmr"], "--target-tokenizer", bad,
                       "--out", tmp_path / "o")
    line = error_line(err)
    assert code == 2 and "--target-tokenizer" in line and str(bad / "tokenizer.json") in line and "not valid JSON" in line
    (bad / "tokenizer.json").write_text('{"not": "a tokenizer"}')
    code, _, err = cli(capfd, "init", "--method", "vipi", "--source", unmappable["xlmr"], "--target-tokenizer", bad,
                       "--out", tmp_path / "o")
    line = error_line(err)
    assert code == 2 and str(bad / "tokenizer.json") in line and "not a tokenizers file" in line
    src = tmp_path / "src"
    shutil.copytree(unmappable["xlmr"], src)
    (src / "tokenizer_config.json").write_text("{oops")
    code, _, err = cli(capfd, "init", "--method", "vipi", "--source", src, "--target-tokenizer", unmappable["tok"],
                       "--out", tmp_path / "o")
    line = error_line(err)
    assert code == 2 and "--source" in line and str(src / "tokenizer_config.json") in line


@pytest.mark.parametrize("seed", ["-1", "-7"])
@pytest.mark.usefixtures("no_model_loading")
def test_negative_seed_is_refused_before_loading(seed, unmappable, tmp_path, capfd, monkeypatch):
    from harness.run import resources

    monkeypatch.setattr(resources, "load_tokenizer", lambda *a, **k: pytest.fail("a tokenizer was loaded"))
    code, _, err = cli(capfd, *_argv(unmappable, "vipi", tmp_path / "o", "--seed", seed))
    line = error_line(err)
    assert code == 2 and f"--seed {seed}" in line and ">= 0" in line and not (tmp_path / "o").exists()


# ---------------------------------------------------------------------------------------------
# progress: fastText with one thread, tokenizer training in a log


def test_fasttext_one_thread_prints_a_heartbeat(tmp_path):
    from methods._fasttext import train_fasttext

    rng = __import__("random").Random(0)
    words = [f"w{i}" for i in range(500)]
    text = tmp_path / "c.txt"
    text.write_text("".join(" ".join(rng.choice(words) for _ in range(20)) + "\n" for _ in range(6000)))
    lines: list[str] = []
    with progress.reporting(None, lines=lines.append, every=0.05):
        t0 = time.perf_counter()
        train_fasttext(text, dim=16, epoch=5, min_count=1, bucket=540672, threads=1)
        took = time.perf_counter() - t0
    beats = [ln for ln in lines if ln.startswith("fastText skipgram training on c.txt (1 thread(s)): ")]
    assert took > 0.2 and beats, (took, lines)
    assert all("elapsed" in b for b in beats)
    assert any(re.search(r"epoch [1-5] of 5|reading the text", b) for b in beats), beats
    with progress.reporting(None):  # nobody listens: no thread, no line
        train_fasttext(text, dim=16, epoch=1, min_count=1, bucket=540672, threads=1, seed=3)


def test_init_in_a_log_shows_fasttext_heartbeats(unmappable, tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.02)
    text = tmp_path / "script.txt"  # a text of its own: nothing cached
    text.write_text(Path(unmappable["text"]).read_text() + "Ўаҳум ыанќам.\n")
    code, _, err = cli(capfd, *_argv({**unmappable, "text": text}, "focus", tmp_path / "o", "aux_seed=5"))
    assert code == 0, err
    assert re.search(r"^\[ *[\d.]+s\] fastText skipgram training on \S+ \(1 thread\(s\)\): \d+s elapsed", err, re.M), err
    assert "pre-tokenizing" in err  # the forecast's long step, as a plain line (stderr is not a terminal here)


def test_tokenizer_train_in_a_log_prints_plain_progress_lines(unmappable, tmp_path, capfd, monkeypatch):
    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.01)
    big = tmp_path / "big.txt"
    big.write_text(Path(unmappable["text"]).read_text() * 20)
    code, out, err = cli(capfd, "tokenizer", "train", big, "--algorithm", "bpe", "--vocab-size", "600", "--out", tmp_path / "t")
    assert code == 0, err
    assert re.search(r"^\[ *[\d.]+s\] training a bpe tokenizer \(600 tokens\) on [\d.]+ MB$", err, re.M), err
    assert "\r" not in err and "wrote" in out
