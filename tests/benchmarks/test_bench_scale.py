"""``benchmarks/bench_scale.py`` at a tiny size: the XLM-R-shaped inputs, the per-method command, the
silence measurement, and one method end to end through the command line (never its times)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import bench_scale as bs

ROOT = Path(__file__).resolve().parents[2]
TINY = bs.Sizes(source_vocab=2000, target_vocab=400, dim=16, lines=600, pairs=300, dictionary=200)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, dict]:
    work = tmp_path_factory.mktemp("bench-scale") / "inputs"
    files = bs.build_inputs_isolated(work, TINY)  # as the benchmarks build them: in a child process
    assert files == bs.build_inputs(work, TINY)  # and the same manifest as in-process (reused, not rebuilt)
    return work, files


def test_inputs_are_shaped_like_xlmr(built):
    from transformers import AutoConfig, AutoTokenizer

    from harness.vocab import tokenizer_family

    work, files = built
    src = AutoTokenizer.from_pretrained(files["paths"]["source_model"])
    tgt = AutoTokenizer.from_pretrained(files["paths"]["target_tokenizer"])
    assert len(src) == 2000 and files["sizes"]["n_source"] == 2000
    assert src.convert_ids_to_tokens([0, 1, 2, 3]) == ["<s>", "<pad>", "</s>", "<unk>"] and src.mask_token_id == 1999
    assert tokenizer_family(src) == tokenizer_family(tgt) == "sentencepiece"
    pieces = src.convert_ids_to_tokens(list(range(4, 1999)))
    assert sum(p.startswith("▁") for p in pieces) > len(pieces) / 2  # mostly word-start pieces, as in XLM-R
    assert any(ord(c) > 0x370 for p in pieces for c in p)  # other scripts fill the multilingual vocabulary
    shared = len(set(src.get_vocab()) & set(tgt.get_vocab()))
    assert 0.25 * len(tgt) < shared < 0.5 * len(tgt)  # about a third of the target's pieces, as XLM-R for German
    cfg = AutoConfig.from_pretrained(files["paths"]["source_model"])
    assert (cfg.vocab_size, cfg.hidden_size, cfg.model_type) == (2000, 16, "xlm-roberta")
    lines = Path(files["paths"]["parallel_corpus"]).read_text(encoding="utf-8").splitlines()
    assert len(lines) == 300 and set(json.loads(lines[0])) == {"source", "target"}
    dic = Path(files["paths"]["dictionary"]).read_text(encoding="utf-8").splitlines()
    assert len(dic) == 200 and all(len(x.split("\t")) == 2 for x in dic)
    assert bs.build_inputs(work, TINY) == files  # reused, not rebuilt


def test_each_method_gets_exactly_the_inputs_it_reads(built):
    _, files = built
    flags = {m: [a for a in bs.init_command(m, files["paths"], Path("out"), 1, []) if a.startswith("--")]
             for m in ("random", "tiktotok", "focus", "wechsel", "multivariate", "omp", "omp:donor=helper", "clp", "ofa")}  # fmt: skip
    base = ["--method", "--source", "--target-tokenizer", "--seed", "--out", "--overwrite"]
    assert flags["random"] == flags["multivariate"] == base
    assert flags["tiktotok"] == flags["ofa"] == base + ["--parallel-corpus"]  # ofa: vectors from the parallel corpus
    assert flags["focus"] == flags["omp"] == base + ["--target-corpus"]  # omp's default donor: FOCUS's fastText
    assert set(flags["wechsel"]) - set(base) == {"--source-corpus", "--target-corpus", "--dictionary"}
    assert flags["omp:donor=helper"] == base + ["--helper-model", "--config"]  # the helper donor, not the corpus
    assert flags["clp"] == base + ["--helper-model", "--config"]
    clp = bs.init_command("clp", files["paths"], Path("out"), 1, [])
    assert clp[clp.index("--config") + 1 :] == ["top_k=100"]  # SCALE_CONFIG: the dense default refuses at 250k x 50k
    omp = bs.init_command("omp:donor=helper:k=4", files["paths"], Path("out"), 1, [])
    assert omp[omp.index("--config") + 1 :] == ["donor=helper", "k=4"]


def test_method_specs_parse_and_bad_ones_are_named():
    assert bs.parse_method("clp") == ("clp", {})
    assert bs.parse_method("ofa:rank=100:vectors=given") == ("ofa", {"rank": 100, "vectors": "given"})
    assert bs.method_config("clp:top_k=5") == ("clp", {"top_k": 5})  # the spec's own value over SCALE_CONFIG
    with pytest.raises(ValueError, match="expected NAME:KEY=VALUE, got 'k'"):
        bs.parse_method("omp:k")


def test_helper_model_is_in_the_target_vocabulary_and_added_to_an_older_folder(built):
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    from methods._anchors import helper_vectors

    work, files = built
    path = Path(files["paths"]["helper_model"])
    cfg = AutoConfig.from_pretrained(path)
    tgt = AutoTokenizer.from_pretrained(files["paths"]["target_tokenizer"])
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_hidden_layers) == (len(tgt), 256, 2)
    assert AutoTokenizer.from_pretrained(path).get_vocab() == tgt.get_vocab()
    vecs, has, info = helper_vectors(path, tgt, len(tgt))  # what clp and omp read from it
    assert info["same_vocabulary"] and has.sum() == len(tgt) - 5 and vecs.shape == (len(tgt), 256)  # all but specials
    # a folder built before the helper existed (no extras in its manifest) gets it added, nothing else rebuilt
    manifest = json.loads((work / "manifest.json").read_text())
    manifest.pop("extras")
    manifest["paths"].pop("helper_model")
    (work / "manifest.json").write_text(json.dumps(manifest))
    weights = next(Path(files["paths"]["source_model"]).glob("*.safetensors"))
    stamp, old = weights.stat().st_mtime_ns, AutoModel.from_pretrained(path).embeddings.word_embeddings.weight
    again = bs.build_inputs(work, TINY)
    assert again["paths"]["helper_model"] == str(path) and weights.stat().st_mtime_ns == stamp
    assert (AutoModel.from_pretrained(path).embeddings.word_embeddings.weight == old).all()  # seeded: the same helper
    assert bs.build_inputs(work, TINY) == again


def test_output_joins_lines_written_in_pieces_and_tells_fasttext_training_apart():
    out = bs.Output()
    for t, chunk in ((1.0, "Number of labels: "), (1.1, "0\n"), (9.0, "\r"), (9.1, "Progress: 100.0%"), (9.5, "\n[ 9.5s] saving\n")):
        out.add(t, chunk)
    assert [x for _, x in out.lines] == ["Number of labels: 0", "Progress: 100.0%", "[ 9.5s] saving"]
    longest, other = out.silences(12.0, None)[:2]
    assert (longest["seconds"], longest["after"]) == (7.9, "Number of labels: 0")  # fastText writes "\r" alone first
    assert longest["fasttext_training"] and not other["fasttext_training"] and other["after"] == "[ 9.5s] saving"


def test_run_child_measures_the_longest_silence(tmp_path):
    script = "import sys, time; print('a', flush=True); time.sleep(0.8); sys.stderr.write('b\\rc\\n'); sys.stderr.flush()"
    res = bs.run_child([sys.executable, "-c", script], {}, tmp_path / "log", timeout=60)
    assert res["exit"] == 0 and not res["timed_out"] and res["output_lines"] == 3
    sil = res["longest_silence"]
    assert 0.7 < sil["seconds"] < 5 and sil["after"] == "a" and sil["before"] == "c"
    assert res["peak_rss_gb"] > 0 and (tmp_path / "log").read_bytes() == b"a\nb\rc\n"
    slow = bs.run_child([sys.executable, "-c", "import time; time.sleep(30)"], {}, tmp_path / "log2", timeout=0.5)
    assert slow["timed_out"] and slow["exit"] != 0 and slow["wall_s"] < 20


def test_a_child_reports_at_least_its_parents_peak_rss_and_the_floor_says_so(tmp_path):
    """Linux carries a parent's peak RSS into the children it starts (fork + exec): a child measured from a parent
    that once held more than the child needs reports the parent's peak — ``run_child`` records that floor and marks
    the figure floor-bound. Why the benchmarks build their inputs in a child. (A process started from this test
    inherits the test process's own peak, ``f0``; the sizes are relative to it.)"""
    script = f"""
import json, sys
from pathlib import Path
sys.path.insert(0, {str(ROOT)!r})
from benchmarks import bench_scale as bs
f0 = bs.rss_floor_gb()
child = [sys.executable, "-c", f"x = bytearray(int(({{f0}} + 0.2) * 2**30))"]
own = bs.run_child(child, {{}}, Path({str(tmp_path / "a")!r}), timeout=60)
held = bytearray(int((f0 + 0.5) * 2**30))
del held
floored = bs.run_child(child, {{}}, Path({str(tmp_path / "b")!r}), timeout=60)
print(json.dumps([f0, own, floored]))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120)
    f0, own, floored = json.loads(out.stdout.strip().splitlines()[-1])
    assert own["exit"] == floored["exit"] == 0
    # the child's own peak (its f0 + 0.2 GiB buffer), above the floor
    assert own["rss_floor_gb"] == f0 and f0 + 0.2 <= own["peak_rss_gb"] < f0 + 0.35 and not own["peak_rss_floor_bound"]
    # the same child after the parent held f0 + 0.5 GiB: the parent's peak, marked as such
    assert floored["rss_floor_gb"] >= f0 + 0.5 and floored["peak_rss_gb"] >= f0 + 0.5 and floored["peak_rss_floor_bound"]


def _tiny_argv(work: Path, methods: str, out: Path) -> list[str]:
    """``bench_scale.main``'s arguments for :data:`TINY` in ``work``."""
    return ["--source-vocab", "2000", "--target-vocab", "400", "--dim", "16", "--lines", "600", "--pairs", "300",
            "--dictionary", "200", "--methods", methods, "--work-dir", str(work), "--json", str(out)]  # fmt: skip


def test_smoke_one_method_end_to_end(built, tmp_path):
    work, _ = built
    out = tmp_path / "scale.json"
    assert bs.main(_tiny_argv(work, "random", out)) == 0
    rec = json.loads(out.read_text())
    assert rec["bench"] == "scale" and rec["sizes"]["n_source"] == 2000 and list(rec["methods"]) == ["random"]
    r = rec["methods"]["random"]
    assert r["exit"] == 0 and r["command"][:3] == ["tokxfer", "init", "--method"]
    assert r["wall_s"] >= r["longest_silence"]["seconds"] > 0 and r["peak_rss_gb"] > 0.05
    assert len(r["load_avg_before"]) == 3 and r["timings"]["init"]["total_s"] > 0
    assert "| random |" in rec["table"] and len(rec["load_avg_start"]) == 3


def test_clp_end_to_end_reads_the_helper_model(built, tmp_path):
    work, _ = built
    out = tmp_path / "scale.json"
    assert bs.main(_tiny_argv(work, "clp", out)) == 0
    r = json.loads(out.read_text())["methods"]["clp"]
    assert r["exit"] == 0 and r["config"] == {"top_k": 100} and "--helper-model" in r["command"]
    assert r["timings"]["method"]["weights_s"] >= 0  # the method ran its CLP weights, not a fallback


def test_bad_sizes_are_refused(capsys):
    with pytest.raises(SystemExit) as e:
        bs.main(["--source-vocab", "500", "--target-vocab", "400"])
    assert e.value.code == 2 and "--source-vocab >= 2 x --target-vocab" in capsys.readouterr().err
