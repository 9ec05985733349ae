"""``tokxfer init`` on real-model-shaped inputs: one test per stumble of issue 12, shown fixed.

The stand-ins have the shape of the real use (an XLM-R-family checkpoint with a SentencePiece
vocabulary, a target-language tokenizer trained here, corpora, a dictionary and sentence pairs),
built in seconds from the tiny world: ``src`` plays the source language (English), ``near`` the
target (German). Test names start with ``test_sNN_`` for stumble NN of the issue.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
import torch

from harness.cli import main
from harness.cli.init_checks import orientation
from harness.cli.init_flags import CONFIG_FLAGS, INPUT_FLAGS, flag_wording, method_needs, method_reads
from harness.model.provenance import PROVENANCE_CATEGORIES, categorize
from methods._wechsel_checks import fasttext_bin_words, ngram_coverage

# fastText small enough for seconds on tiny text (fastText needs bucket >= min_bucket(dim))
FAST_WECHSEL = ["dim=16", "bucket=540672", "min_count=1", "epochs=2"]
FAST_FOCUS = ["aux_dim=16", "aux_bucket=540672", "aux_epochs=2", "aux_min_count=3"]


def _xlmr(tok, out: Path, *, head: bool = True, seed: int = 0) -> Path:
    """A tiny random XLM-R (hidden size 16, 2 layers) with ``tok``'s vocabulary, saved with it."""
    from transformers import XLMRobertaConfig, XLMRobertaForMaskedLM, XLMRobertaModel

    cfg = XLMRobertaConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=130, pad_token_id=tok.pad_token_id,
                           bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    torch.manual_seed(seed)
    (XLMRobertaForMaskedLM if head else XLMRobertaModel)(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def standin(tiny_world, tmp_path_factory) -> dict:
    """Local files shaped like the real use; the keys name what each stands for."""
    from harness.tokenizers import train_tokenizer
    from harness.world import World

    w = World(tiny_world)
    d = tmp_path_factory.mktemp("standin")
    src_tok = train_tokenizer([w.text("src", "train")], "unigram", 200)
    multi_tok = train_tokenizer([w.text("src", "train"), w.text("script", "train"), w.text("far", "train")], "unigram", 400)
    tgt_tok = train_tokenizer([w.text("near", "train")], "unigram", 300)
    tgt_tok.save_pretrained(d / "de-tokenizer")
    swapped = d / "dict-en-de.tsv"  # WECHSEL-reference order: source word first
    swapped.write_text("".join(f"{s}\t{t}\n" for t, s in (ln.split("\t")[:2] for ln in
                                                          w.dictionary("near").read_text().splitlines() if ln.strip())))
    tsv = d / "pairs.tsv"
    tsv.write_text("".join(f"{json.loads(ln)['target']}\t{json.loads(ln)['source']}\n"
                           for ln in w.parallel("near").read_text().splitlines() if ln.strip()))
    return {
        "xlmr": _xlmr(src_tok, d / "xlmr"),
        "xlmr_no_head": _xlmr(src_tok, d / "xlmr-encoder", head=False),
        "xlmr_multilingual": _xlmr(multi_tok, d / "xlmr-multi"),
        "de_tok": d / "de-tokenizer",
        "de_txt": w.text("near", "train"),
        "en_txt": w.text("src", "train"),
        "dict": w.dictionary("near"),
        "dict_swapped": swapped,
        "pairs_jsonl": w.parallel("near"),
        "pairs_tsv": tsv,
        "dir": d,
    }


def cli(capfd, *argv) -> tuple[int, str, str]:
    """Run ``tokxfer`` in-process; returns (exit code, stdout, stderr) with fd-level capture (fastText's C++ output too)."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out, err = capfd.readouterr()
    return code, out, err


def init_argv(s: dict, method: str, out: Path, *extra, source: str = "xlmr") -> list:
    return ["init", "--method", method, "--source", s[source], "--target-tokenizer", s["de_tok"], "--out", out, *extra]


def error_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("tokxfer: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture()
def no_model_loading(monkeypatch):
    """Fail the test if the source model's weights are loaded (checks must come first)."""
    from harness.run import resources

    def boom(*a, **k):
        raise AssertionError("the source model was loaded before the input checks failed")

    monkeypatch.setattr(resources, "load_source_model", boom)


# ---------------------------------------------------------------------------------------------
# 1. a reversed dictionary


def test_s01_reversed_dictionary_is_an_error_naming_the_flag_and_fix(standin, tmp_path, capfd, no_model_loading):
    s = standin
    code, _, err = cli(capfd, *init_argv(s, "wechsel", tmp_path / "o", "--target-corpus", s["de_txt"], "--source-corpus",
                                         s["en_txt"], "--dictionary", s["dict_swapped"], "--config", *FAST_WECHSEL))
    line = error_line(err)
    assert code == 2 and "--dictionary" in line and "swapped" in line and "--swap-dictionary" in line
    assert "TARGET_WORD<TAB>SOURCE_WORD" in line and "--target-corpus" in line  # the evidence, in flag words
    assert not (tmp_path / "o").exists()


def test_s01_swap_dictionary_gives_the_same_alignment_as_the_right_order(standin, tmp_path, capfd):
    s = standin
    base = ["--target-corpus", s["de_txt"], "--source-corpus", s["en_txt"], "--config", *FAST_WECHSEL, "fasttext_seed=3"]
    assert cli(capfd, *init_argv(s, "wechsel", tmp_path / "a", "--dictionary", s["dict"], *base))[0] == 0
    assert cli(capfd, *init_argv(s, "wechsel", tmp_path / "b", "--dictionary", s["dict_swapped"], "--swap-dictionary", *base))[0] == 0
    a, b = (json.loads((tmp_path / x / "init_info.json").read_text()) for x in "ab")
    assert b["inputs"]["dictionary"]["swapped_by_flag"] is True and b["inputs"]["dictionary"]["orientation"] == "ok"
    assert a["info"]["alignment"]["pairs_used"] == b["info"]["alignment"]["pairs_used"] > 0
    assert a["provenance"] == b["provenance"]


def test_s01_orientation_without_corpora_uses_the_tokenizers(standin):
    from harness.tokenizers import load_tokenizer
    from methods._wordvectors import read_dictionary

    pairs, _ = read_dictionary(standin["dict"])
    tgt, src = load_tokenizer(standin["de_tok"]), load_tokenizer(standin["xlmr"])
    first, second = [p[0] for p in pairs], [p[1] for p in pairs]
    kw = {"target_vocab": None, "source_vocab": None, "target_tok": tgt, "source_tok": src}
    assert orientation(first, second, **kw).verdict == "ok"
    assert orientation(second, first, **kw).verdict == "swapped"


# ---------------------------------------------------------------------------------------------
# 2. word vectors on the command line; errors in flag words


@pytest.fixture(scope="module")
def vectors(standin) -> dict:
    """fastText .bin word vectors of both languages (as cc.en.300.bin / cc.de.300.bin would be)."""
    from methods._fasttext import train_fasttext

    out = {}
    for side, txt in (("source", standin["en_txt"]), ("target", standin["de_txt"])):
        model = train_fasttext(txt, dim=16, epoch=2, min_count=1, bucket=540672, seed=1, model="cbow")
        out[side] = standin["dir"] / f"{side}.bin"
        model.save_model(str(out[side]))
    return out


def test_s02_word_vectors_have_flags(standin, vectors, tmp_path, capfd):
    s = standin
    code, _, err = cli(capfd, *init_argv(s, "wechsel", tmp_path / "o", "--source-word-vectors", vectors["source"],
                                         "--target-word-vectors", vectors["target"], "--dictionary", s["dict"]))
    assert code == 0, err
    info = json.loads((tmp_path / "o" / "init_info.json").read_text())
    assert info["info"]["word_vectors"]["source"]["path"] == str(vectors["source"].resolve())
    assert info["inputs"]["target_word_vectors"]["sha256"] == hashlib.sha256(vectors["target"].read_bytes()).hexdigest()


def test_s02_missing_input_error_names_flags_not_internal_fields(standin, tmp_path, capfd, no_model_loading):
    code, _, err = cli(capfd, *init_argv(standin, "wechsel", tmp_path / "o", "--target-corpus", standin["de_txt"],
                                         "--dictionary", standin["dict"]))
    line = error_line(err)
    assert code == 2 and "--source-word-vectors or --source-corpus" in line and "inputs." not in line
    assert "--explain" in line
    assert flag_wording("FOCUS needs inputs.target_corpus") == "FOCUS needs --target-corpus"


def test_s02_fasttext_bin_header_reader_matches_fasttext(vectors):
    import fasttext

    m = fasttext.load_model(str(vectors["source"]))
    words, minn, maxn = fasttext_bin_words(vectors["source"], 10**9)
    assert words == m.get_words() and (minn, maxn) == (m.f.getArgs().minn, m.f.getArgs().maxn)


# ---------------------------------------------------------------------------------------------
# 3. a source without an MLM head


def test_s03_source_without_mlm_head_is_refused(standin, tmp_path, capfd, no_model_loading):
    code, _, err = cli(capfd, *init_argv(standin, "overlap", tmp_path / "o", source="xlmr_no_head"))
    line = error_line(err)
    assert code == 2 and "--new-head" in line and "XLMRobertaModel" in line and "lm_head" in line


def test_s03_new_head_is_seeded_and_recorded(standin, tmp_path, capfd):
    from safetensors.torch import load_file

    heads = []
    for run in ("a", "b"):
        code, _, err = cli(capfd, *init_argv(standin, "overlap", tmp_path / run, "--new-head", "--seed", "4",
                                             source="xlmr_no_head"))
        assert code == 0 and "--new-head" in err
        info = json.loads((tmp_path / run / "init_info.json").read_text())
        assert "lm_head.dense.weight" in info["new_head"]["missing"] and info["new_head"]["seed"] == 4
        assert any("head" in w for w in info["warnings"])
        heads.append(load_file(tmp_path / run / "model.safetensors")["lm_head.dense.weight"])
    assert torch.equal(heads[0], heads[1])  # the random head comes from --seed, not the global RNG


def test_s03_checkpoint_with_head_needs_no_flag(standin, tmp_path, capfd):
    code, _, err = cli(capfd, *init_argv(standin, "overlap", tmp_path / "o"))
    assert code == 0, err
    assert json.loads((tmp_path / "o" / "init_info.json").read_text())["new_head"] is None


# ---------------------------------------------------------------------------------------------
# 4. WECHSEL with a multilingual source


def test_s04_wechsel_multilingual_source_warns_with_share_and_source_tokens(standin, tmp_path, capfd):
    s = standin
    common = ["--target-corpus", s["de_txt"], "--source-corpus", s["en_txt"], "--dictionary", s["dict"]]
    code, _, err = cli(capfd, *init_argv(s, "wechsel", tmp_path / "o", *common, "--config", *FAST_WECHSEL,
                                         source="xlmr_multilingual"))
    assert code == 0, err
    warning = next(ln for ln in err.splitlines() if ln.startswith("tokxfer: warning: WECHSEL"))
    assert "--source-tokens english-only" in warning and "source_tokens" in warning and "%" in warning
    cov = json.loads((tmp_path / "o" / "init_info.json").read_text())["checks"]["wechsel_source_ngrams"]
    assert cov["share_mostly_unseen"] >= 0.2 and f"{cov['mostly_unseen']:,}" in warning
    # a monolingual source gets no warning; nor does english-only on the multilingual one
    code, _, err = cli(capfd, *init_argv(s, "wechsel", tmp_path / "m", *common, "--config", *FAST_WECHSEL))
    assert code == 0 and "tokxfer: warning: WECHSEL" not in err
    code, _, err = cli(capfd, *init_argv(s, "wechsel", tmp_path / "e", *common, "--source-tokens", "english-only",
                                         "--config", *FAST_WECHSEL, "english_tokens=source-corpus", source="xlmr_multilingual"))
    assert code == 0 and "tokxfer: warning: WECHSEL" not in err
    info = json.loads((tmp_path / "e" / "init_info.json").read_text())
    assert info["config"]["source_tokens"] == "english-only" and info["info"]["source_candidates"]["not_english"] > 0


def test_s04_ngram_coverage_counts_other_script_tokens(standin):
    from harness.tokenizers import load_tokenizer
    from methods._wordvectors import word_counts

    words = list(word_counts(standin["en_txt"]))
    mono = ngram_coverage(load_tokenizer(standin["xlmr"]), words, 3, 6)
    multi = ngram_coverage(load_tokenizer(standin["xlmr_multilingual"]), words, 3, 6)
    assert mono["none_seen"] == 0 and multi["none_seen"] > 0.2 * multi["tokens"]


def test_s04_source_tokens_is_in_help(capfd):
    _, out, _ = cli(capfd, "init", "--help")
    assert "--source-tokens {all,english-only}" in out and "--english-tokenizer" in out


# ---------------------------------------------------------------------------------------------
# 5. FOCUS's fallback share, announced before training


def test_s05_focus_fallback_forecast_is_announced_first_and_exact(standin, tmp_path, capfd):
    code, _, err = cli(capfd, *init_argv(standin, "focus", tmp_path / "o", "--target-corpus", standin["de_txt"],
                                         "--config", *FAST_FOCUS))
    assert code == 0, err
    forecast = next(i for i, ln in enumerate(err.splitlines()) if "FOCUS forecast:" in ln and "aux_min_count=3" in ln)
    loading = next(i for i, ln in enumerate(err.splitlines()) if "loading" in ln)
    assert forecast < loading
    line = err.splitlines()[forecast]
    assert "aux_min_count=1:" in line and "aux_min_count=2:" in line  # what a lower threshold would leave
    info = json.loads((tmp_path / "o" / "init_info.json").read_text())
    fc = info["checks"]["focus_forecast"]
    assert fc["fallback_forecast"] == info["info"]["focus"]["fallback_no_aux"]
    assert fc["additional"] == info["info"]["focus"]["additional"]


# ---------------------------------------------------------------------------------------------
# 6. progress


def test_s06_fasttext_training_shows_progress_unless_quiet(standin, tmp_path, capfd):
    args = init_argv(standin, "focus", tmp_path / "o", "--target-corpus", standin["de_txt"], "--config", *FAST_FOCUS,
                     "aux_seed=11")
    code, _, err = cli(capfd, *args)
    assert code == 0 and "Progress:" in err and "ETA" in err
    args[args.index("--out") + 1] = tmp_path / "quiet"
    code, _, err = cli(capfd, *args[:-1], "aux_seed=12", "--quiet")
    assert code == 0 and "Progress:" not in err


def test_s06_similarity_search_and_alignment_show_progress(standin, tmp_path, capfd):
    s = standin
    code, _, err = cli(capfd, *init_argv(s, "wechsel", tmp_path / "w", "--target-corpus", s["de_txt"], "--source-corpus",
                                         s["en_txt"], "--dictionary", s["dict"], "--config", *FAST_WECHSEL))
    assert code == 0 and "similarity search (query rows)" in err
    pairs = tmp_path / "pairs.tsv"  # a corpus of its own, so the alignment is not a cache hit
    pairs.write_text(s["pairs_tsv"].read_text() + "Kre.\tKra.\n")
    code, _, err = cli(capfd, *init_argv(s, "tiktotok", tmp_path / "t", "--parallel-corpus", pairs))
    assert code == 0 and "fast_align (EM iterations" in err
    pairs.write_text(s["pairs_tsv"].read_text() + "Kre trenas.\tKra trenas.\n")  # again not cached
    code, _, err = cli(capfd, *init_argv(s, "tiktotok", tmp_path / "q", "--parallel-corpus", pairs, "--quiet"))
    assert code == 0 and "fast_align" not in err


# ---------------------------------------------------------------------------------------------
# 7. errors: one line, flag names, before model loading; TSV parallel corpora


def test_s07_tsv_parallel_corpus_is_sniffed_not_json_error(standin, tmp_path, capfd):
    code, _, err = cli(capfd, *init_argv(standin, "tiktotok", tmp_path / "tsv", "--parallel-corpus", standin["pairs_tsv"]))
    assert code == 0, err
    assert "not valid JSON" not in err
    code, _, err = cli(capfd, *init_argv(standin, "tiktotok", tmp_path / "jsonl", "--parallel-corpus", standin["pairs_jsonl"]))
    assert code == 0, err
    a, b = (json.loads((tmp_path / x / "init_info.json").read_text()) for x in ("tsv", "jsonl"))
    assert a["inputs"]["parallel_corpus"]["format"] == "tsv" and b["inputs"]["parallel_corpus"]["format"] == "jsonl"
    assert a["provenance"] == b["provenance"]


def test_s07_bad_parallel_line_and_swapped_sides(standin, tmp_path, capfd, no_model_loading):
    bad = tmp_path / "bad.tsv"
    bad.write_text("eins\tone\nkaputt\n")
    code, _, err = cli(capfd, *init_argv(standin, "tiktotok", tmp_path / "o", "--parallel-corpus", bad))
    line = error_line(err)
    assert code == 2 and f"{bad}:2" in line and "TARGET<TAB>SOURCE" in line
    rev = tmp_path / "rev.tsv"
    rev.write_text("".join("\t".join(reversed(ln.split("\t"))) + "\n" for ln in standin["pairs_tsv"].read_text().splitlines()))
    code, _, err = cli(capfd, *init_argv(standin, "tiktotok", tmp_path / "o", "--parallel-corpus", rev,
                                         "--target-corpus", standin["de_txt"]))
    line = error_line(err)
    assert code == 2 and "swapped" in line and "--swap-parallel" in line


def test_s07_missing_corpus_error_before_loading(standin, tmp_path, capfd, no_model_loading):
    code, _, err = cli(capfd, *init_argv(standin, "focus", tmp_path / "o"))
    line = error_line(err)
    assert code == 2 and "--target-corpus" in line and "--aux-model" in line and "inputs." not in line


def test_s07_flag_for_another_method_is_an_error(standin, tmp_path, capfd, no_model_loading):
    code, _, err = cli(capfd, *init_argv(standin, "focus", tmp_path / "o", "--target-corpus", standin["de_txt"],
                                         "--source-tokens", "english-only"))
    line = error_line(err)
    assert code == 2 and "--source-tokens" in line and "wechsel" in line


# ---------------------------------------------------------------------------------------------
# 8. --help and --explain


def test_s08_help_documents_every_input_with_its_format(capfd):
    _, out, _ = cli(capfd, "init", "--help")
    for f in INPUT_FLAGS:
        assert f.flag in out
    for c in CONFIG_FLAGS:
        assert c.flag in out
    flat = " ".join(out.split())
    assert "TARGET_WORD<TAB>SOURCE_WORD" in flat and "JSON lines" in flat and "--swap-dictionary" in flat


@pytest.mark.parametrize("name", ["focus", "wechsel", "tiktotok", "vipi", "overlap", "original"])
def test_s08_explain_is_generated_from_the_config_docstrings(name, capfd):
    import dataclasses

    from harness import registry
    from harness.cli.init_flags import config_field_docs

    code, out, _ = cli(capfd, "init", "--method", name, "--explain")
    assert code == 0
    entry = registry.get("method", name)
    flat = " ".join(out.split())
    docs = config_field_docs(entry.config_cls)
    for f in dataclasses.fields(entry.config_cls):
        assert f"{f.name} = " in out
        if f.name in docs:
            assert " ".join(flag_wording(docs[f.name]).split())[:40] in flat
    for need in method_needs(name) or ():
        assert need.why in flat


def test_s08_method_needs_match_what_the_methods_read():
    """The needs each built-in method class declares list exactly the inputs its module reads."""
    from harness import registry

    for e in registry.entries("method"):
        if not e.cls.__module__.startswith("methods."):
            continue
        import inspect
        import re
        import sys

        src = inspect.getsource(sys.modules[e.cls.__module__])
        read = {f.field for f in INPUT_FLAGS if re.search(rf"\binputs\.{f.field}\b", src)}
        assert set(method_reads(e.cls)) == read, e.name


def test_s08_the_method_class_is_the_one_place_its_needs_are_written(tmp_path, capfd):
    """A method's ``needs`` drive both what ``tokxfer init`` asks for and whether the runner pretrains a
    trial's helper model: a plugin declaring a conditional helper gets both from the one declaration."""
    import dataclasses

    from harness import registry
    from harness.cli.init_cmd import missing_inputs
    from harness.protocols import Need

    @dataclasses.dataclass(frozen=True)
    class Cfg:
        donor: str = "none"

    @registry.register_method("test-needs-one-truth", config=Cfg, description="x")
    class M:
        needs = (Need(("helper_model",), "its embeddings, when asked", (("donor", "helper"),)),)

        def __init__(self, config):
            self.config = config

    assert method_needs("test-needs-one-truth") == M.needs and method_reads(M) == ["helper_model"]
    assert missing_inputs("test-needs-one-truth", Cfg("helper"), set()) == [
        "--method test-needs-one-truth with donor=helper needs --helper-model: its embeddings, when asked"]
    assert missing_inputs("test-needs-one-truth", Cfg(), set()) == []
    assert registry.reads_input(M, Cfg("helper"), "helper_model") and not registry.reads_input(M, Cfg(), "helper_model")
    code, out, _ = cli(capfd, "init", "--method", "test-needs-one-truth", "--explain")
    assert code == 0 and "--helper-model: its embeddings, when asked [when donor=helper]" in out
    for e in registry.entries("method"):  # no second list beside the declaration
        assert not hasattr(e.cls, "reads_helper_model"), e.name


# ---------------------------------------------------------------------------------------------
# 9. a command that trains the target tokenizer


def test_s09_tokenizer_train_like_source(standin, tmp_path, capfd):
    from harness import vocab as _canon
    from harness.tokenizers import load_tokenizer

    code, out, err = cli(capfd, "tokenizer", "train", standin["de_txt"], "--vocab-size", "250", "--like", standin["xlmr"],
                         "--out", tmp_path / "tok")
    assert code == 0, err
    tok, src = load_tokenizer(tmp_path / "tok"), load_tokenizer(standin["xlmr"])
    assert len(tok) == 250 and type(tok.backend_tokenizer.model).__name__ == "Unigram"
    assert _canon.special_roles(tok) == _canon.special_roles(src)  # same specials, same ids, as the source family
    assert "every special role matched" in out and "pieces per word" in out
    code, _, err = cli(capfd, "tokenizer", "train", standin["de_txt"], "--vocab-size", "250", "--out", tmp_path / "t2")
    assert code == 2 and "--algorithm" in error_line(err)


# ---------------------------------------------------------------------------------------------
# 10. the cache


def test_s10_cache_respects_xdg_and_tokxfer_cache_wins(monkeypatch, tmp_path):
    from harness.cache import cache_root

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TOKXFER_CACHE", str(tmp_path / "mine"))
    assert cache_root() == tmp_path / "mine"
    monkeypatch.delenv("TOKXFER_CACHE")
    assert cache_root() == tmp_path / "xdg" / "tokxfer"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # refused, like a relative TOKXFER_CACHE (never ignored)
    with pytest.raises(ValueError, match=r"XDG_CACHE_HOME='relative/path': .*absolute path"):
        cache_root()


def test_s10_cache_ls_and_prune(monkeypatch, tmp_path, capfd):
    from harness.cache import cached_dir, list_entries

    root = tmp_path / "cache"
    monkeypatch.setenv("TOKXFER_CACHE", str(root))
    old = cached_dir("tokenizers", {"k": 1}, lambda d: (d / "t.json").write_bytes(b"x" * 5000))
    new = cached_dir("inits", {"k": 2}, lambda d: (d / "m.npz").write_bytes(b"y" * 100))
    ft = root / "fasttext" / f"{'ab' * 32}.bin"  # a whole fastText model, named by its key
    ft.parent.mkdir()
    ft.write_bytes(b"z" * 20000)
    os.utime(old, (time.time() - 40 * 86400,) * 2)
    code, out, _ = cli(capfd, "cache", "ls")
    assert code == 0 and str(root) in out and "fastText model" in out and "tokenizers" in out and "40d" in out
    assert "3 entries" in out
    assert cli(capfd, "cache", "prune", "--all", "--dry-run")[0] == 0 and len(list_entries(root)) == 3
    code, out, _ = cli(capfd, "cache", "prune", "--older-than", "30d")
    assert code == 0 and not old.exists() and new.exists() and ft.exists()
    code, out, _ = cli(capfd, "cache", "prune", "--kind", "fasttext")
    assert code == 0 and not ft.exists() and new.exists()
    code, _, err = cli(capfd, "cache", "prune")
    assert code == 2 and "--all" in error_line(err)
    code, _, err = cli(capfd, "cache", "prune", "--kind", "nope")
    assert code == 2 and "'nope'" in error_line(err)


def test_s10_readme_tells_where_the_cache_is_and_how_big():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for needle in ("XDG_CACHE_HOME", "TOKXFER_CACHE", "tokxfer cache ls", "tokxfer cache prune", "GB"):
        assert needle in readme


# ---------------------------------------------------------------------------------------------
# 11. init_info.json: a trial record's provenance; categories named the same across methods


def test_s11_init_info_has_trial_record_provenance(standin, tmp_path, capfd):
    code, out, err = cli(capfd, *init_argv(standin, "mean-of-pieces", tmp_path / "o", "--seed", "3"))
    assert code == 0, err
    info = json.loads((tmp_path / "o" / "init_info.json").read_text())
    assert info["tokxfer_version"] and "sha" in info["git"] and info["environment"]["torch"] == torch.__version__
    assert Path(info["source"]["path"]).is_absolute() and len(info["source"]["sha256"]) == 64
    assert set(info["timings"]) >= {"checks_s", "load_s", "method_s", "install_s", "save_s", "total_s"}
    assert sum(info["categories"].values()) == info["n_target"] and set(info["categories"]) == set(PROVENANCE_CATEGORIES)
    assert info["seed"] == 3 and info["new_head"] is None and isinstance(info["warnings"], list)
    for name in PROVENANCE_CATEGORIES:  # the summary table
        assert name in out
    assert str((tmp_path / "o").resolve()) in out and "time per step" in out


def test_s11_one_row_alignments_are_single_source_not_copied(standin, tmp_path, capfd):
    """Tik-to-Tok labels a one-word alignment COPIED; the summary counts it apart from true copies."""
    import numpy as np

    from harness import registry, seeding
    from harness.protocols import COPIED, TransferInputs
    from harness.tokenizers import load_tokenizer

    code, out, err = cli(capfd, *init_argv(standin, "tiktotok", tmp_path / "o", "--parallel-corpus", standin["pairs_jsonl"]))
    assert code == 0, err
    info = json.loads((tmp_path / "o" / "init_info.json").read_text())
    # the same mapping, from the method itself, classified by hand: a COPIED row whose source token's text differs
    tgt, src = load_tokenizer(standin["de_tok"]), load_tokenizer(standin["xlmr"])
    emb = torch.zeros(len(src), 16)
    res = registry.get("method", "tiktotok").make().initialize(
        TransferInputs(src, tgt, emb, parallel_corpus=standin["pairs_jsonl"], cache_dir=tmp_path / "c"),
        seeding.numpy_rng(1, "init", "tiktotok"))
    m = res.mapping

    def text(tok, i):
        return tok.convert_ids_to_tokens(int(i)).lstrip("▁").lower()

    copied_rows = np.flatnonzero(m.provenance == COPIED)
    other = sum(1 for t in copied_rows if text(tgt, t) != text(src, m.indices[m.indptr[t]]))
    assert "".join(map(str, m.provenance.tolist())) == info["provenance"]
    assert other > 0 and info["categories"]["single-source"] >= other
    assert info["categories"]["copied"] == len(copied_rows) - other
    assert info["counts"]["copied"] == len(copied_rows)  # the method's own label is kept, under counts
    assert "single-source" in out


def test_s11_wechsel_random_rows_get_their_true_reasons(standin, tmp_path, capfd):
    s = standin
    code, out, err = cli(capfd, *init_argv(s, "wechsel", tmp_path / "o", "--target-corpus", s["de_txt"], "--source-corpus",
                                           s["en_txt"], "--dictionary", s["dict"], "--config", *FAST_WECHSEL, "minn=5", "maxn=6"))
    assert code == 0, err
    info = json.loads((tmp_path / "o" / "init_info.json").read_text())
    # the method itself splits its random rows by cause; the summary prints its reason once
    (zero,) = [f for f in info["info"]["fallbacks"] if "causes" in f]
    causes = {k: v for k, v in zero["causes"].items() if k != "minn"}
    assert sum(causes.values()) == zero["count"] == info["categories"]["fallback"] - sum(
        f["count"] for f in info["info"]["fallbacks"] if "special" in f["reason"])
    assert zero["causes"]["minn"] == 5
    assert any(v > 0 for k, v in causes.items() if "short" in k), causes
    flat = " ".join(out.split())
    assert flat.count(zero["reason"]) == 1, flat


def test_s11_categories_are_structural_whatever_the_method_label(standin):
    from harness.protocols import COMBINED, COPIED, FALLBACK, SPECIAL, TokenMapping
    from harness.tokenizers import load_tokenizer

    tok = load_tokenizer(standin["xlmr"])
    n = len(tok)
    special = tok.pad_token_id
    a, b = 10, 11  # two different ordinary tokens
    rows, cols, w = [special, a, b, 12, 13, 13], [special, a, a, a, a, b], [1, 1, 1, 1, .5, .5]
    prov = [FALLBACK] * n
    prov[special], prov[a], prov[b], prov[12], prov[13] = SPECIAL, COPIED, COPIED, COMBINED, COMBINED
    m = TokenMapping.from_coo(n, n, rows, cols, w, prov)
    c = categorize(m, tok, tok)
    # a->a is a copy; b->a (labelled COPIED) and 12->a (labelled COMBINED, one member) are single-source
    assert c == {"special": 1, "copied": 1, "single-source": 2, "combined": 1, "fallback": n - 5}


BROKEN_PLUGIN = '''
from dataclasses import dataclass

from harness.registry import register_method


@dataclass(frozen=True)
class BrokenConfig:
    pass


@register_method("broken-{kind}", config=BrokenConfig, description="raises inside initialize")
class Broken:
    def __init__(self, config):
        self.config = config

    def initialize(self, inputs, rng):
        raise {error}
'''


@pytest.mark.parametrize("kind, error, code, line", [
    # a bug in a method (or the harness) is not the user's fault: "internal error", exit 1, the hint
    ("keyerror", "KeyError('row')", 1, "tokxfer: internal error: KeyError: missing key 'row' (run with --debug"),
    ("valueerror", "ValueError('oops')", 1, "tokxfer: internal error: ValueError: oops"),
    # a method that refuses what the user gave says so with the project's error type: one line, exit 2
    ("userinput", "__import__('harness.errors').errors.UserInputError('--target-corpus: too short')", 2,
     "tokxfer: error: --target-corpus: too short"),
])
def test_a_bug_inside_a_method_is_an_internal_error_not_the_users(standin, tmp_path, capfd, kind, error, code, line):
    plugin = tmp_path / f"broken_{kind}.py"
    plugin.write_text(BROKEN_PLUGIN.replace("{kind}", kind).replace("{error}", error))
    got, _, err = cli(capfd, *init_argv(standin, f"broken-{kind}", tmp_path / "out"), "--plugin", plugin)
    assert got == code, err
    assert any(ln.startswith(line) for ln in err.splitlines()), err
    assert "Traceback" not in err


def test_s08_a_log_of_init_is_never_silent(standin, tmp_path, capfd, monkeypatch):
    """In a log (stderr not a terminal) a step that writes nothing for HEARTBEAT_S gets a watchdog line naming
    what init last said it was doing (the watchdog runs from before the libraries load)."""
    import time as _time

    from harness import progress
    from harness.cli import init_cmd

    monkeypatch.setattr(progress, "HEARTBEAT_S", 0.05)
    real = init_cmd._check_files

    def slow_checks(*a, **k):
        _time.sleep(0.4)  # a silent check (a large corpus being read)
        return real(*a, **k)

    monkeypatch.setattr(init_cmd, "_check_files", slow_checks)
    code, _, err = cli(capfd, *init_argv(standin, "overlap", tmp_path / "o"))
    lines = err.splitlines()
    assert code == 0, err
    assert any(ln.split("] ", 1)[-1].startswith("still ") and "since the last line" in ln for ln in lines), err
    code, _, err = cli(capfd, *init_argv(standin, "overlap", tmp_path / "q", "--quiet"))
    assert code == 0 and "still " not in err
