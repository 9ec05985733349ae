"""Hostile-but-realistic inputs that used to pass ``validate`` and fail later (or never): each is now
refused by ``tokxfer validate`` (or by the command itself) with exit 2, one line naming the field or
file and what is expected, and nothing created or changed.

Table-driven like ``tests/cli/test_bad_inputs.py``: every case is ``(id, setup, argv, needles)``;
``argv`` and needles may use ``{exp}`` (a valid tiny experiment file), ``{tmp}`` (the test's
folder) and ``{runs}`` (a runs dir that must not appear). Every needle must be in the single stderr
line. The test folder is snapshotted (names, sizes, modification times) after the setup and must
be the same after the command. Everything runs in-process and stops before any trial runs.
"""

from __future__ import annotations

import os
import time

import pytest
import yaml

from harness.inputs import MAX_YAML_DEPTH, MAX_YAML_NODES, YAMLInputError, load_yaml
from tests.cli.test_bad_inputs import BASE, NOOP, _fill, _main, _records

BOMB_LEVELS = "abcdefghi"


def _bomb() -> str:
    """The classic "billion laughs" (9 levels of 9 aliases: 9^9 values), in about 350 bytes of YAML."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for prev, cur in zip(BOMB_LEVELS, BOMB_LEVELS[1:]):
        lines.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def _flow_bomb() -> str:
    """The same bomb as one flow mapping, for a ``key=value`` override."""
    items = ['a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]']
    items += [f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]" for prev, cur in zip(BOMB_LEVELS, BOMB_LEVELS[1:])]
    return "{" + ", ".join(items) + "}"


def _write(path, text):
    path.write_text(text)
    return path


def _exp_text(**extra) -> str:
    return yaml.safe_dump({**BASE, **extra}, sort_keys=False)


def _spec(tmp, *, columns=None, rows="all", text=None, **top):
    """A spec over the ``bad`` experiment's records (``text``: the spec file's exact text instead)."""
    spec = {"name": "t", "version": 1, "experiments": ["bad"], "required_seeds": [1, 2],
            "metrics": {"loss": {"direction": "lower"}},
            "columns": columns or [{"task": "mlm-at-init", "languages": ["near"], "metrics": ["loss"]}],
            "rows": rows, **top}
    (tmp / "spec.yaml").write_text(text if text is not None else yaml.safe_dump(spec, sort_keys=False))


def _records_and_spec(**kw):
    return lambda t, e: (_records(t / "runs"), _spec(t, **kw))


def _model_dir(tmp, weights=False):
    d = tmp / "model"
    d.mkdir()
    (d / "config.json").write_text("{}")
    if weights:
        (d / "model.safetensors").write_bytes(b"x")


LB = ["leaderboard", "{tmp}/spec.yaml", "--runs-dir", "{runs}", "--out", "{tmp}/out"]
DUP_EXP = "name: bad\nworld: {size: tiny}\ntargets: [near]\nmethods: [random]\ntasks: [mlm-at-init]\nseeds: [1]\nseeds: [2]\n"
DEEP = "x: " + "[" * (MAX_YAML_DEPTH + 10) + "]" * (MAX_YAML_DEPTH + 10) + "\n"

# (id, setup(tmp, exp) or None, argv, needles in the one stderr line)
CASES = [
    # --- YAML: one loader everywhere -----------------------------------------------------------
    ("yaml-duplicate-key", lambda t, e: _write(e, DUP_EXP), ["validate", "{exp}"],
     ["bad.yaml", "duplicate key 'seeds'", "line 7", "first at line 6"]),
    ("yaml-duplicate-nested-key", lambda t, e: _write(e, _exp_text().replace("vocab_size: 300", "vocab_size: 300\n    vocab_size: 400")),
     ["validate", "{exp}"], ["bad.yaml", "duplicate key 'vocab_size'"]),
    ("yaml-duplicate-key-in-override", NOOP, ["validate", "{exp}", "world={{size: tiny, size: small}}"],
     ["override", "duplicate key 'size'"]),
    ("yaml-alias-bomb", lambda t, e: _write(e, _bomb() + _exp_text()), ["validate", "{exp}"],
     ["bad.yaml", f"more than {MAX_YAML_NODES}", "alias"]),
    ("yaml-alias-bomb-in-override", NOOP,
     ["validate", "{exp}", "description=" + _flow_bomb().replace("{", "{{").replace("}", "}}")],
     ["override", f"more than {MAX_YAML_NODES}"]),
    ("yaml-too-deep", lambda t, e: _write(e, _exp_text() + DEEP), ["validate", "{exp}"],
     ["bad.yaml", f"nested deeper than {MAX_YAML_DEPTH}"]),
    ("yaml-recursive-alias", lambda t, e: _write(e, _exp_text() + "description: &d [*d]\n"), ["validate", "{exp}"],
     ["bad.yaml", "alias refers to a node that contains it"]),
    ("experiment-is-a-directory", lambda t, e: (t / "adir").mkdir(), ["validate", "{tmp}/adir"],
     ["adir", "is a directory"]),
    ("experiment-is-dev-zero", NOOP, ["validate", "/dev/zero"], ["/dev/zero", "a character device"]),
    ("spec-duplicate-key", lambda t, e: (_records(t / "runs"), _spec(t, text="name: t\nname: u\nversion: 1\n")),
     LB, ["spec.yaml", "duplicate key 'name'"]),
    ("spec-alias-bomb", lambda t, e: (_records(t / "runs"), _spec(t, text=_bomb())), LB,
     ["spec.yaml", f"more than {MAX_YAML_NODES}"]),
    ("spec-is-dev-zero", NOOP, ["leaderboard", "/dev/zero", "--out", "{tmp}/out"], ["/dev/zero", "character device"]),
    ("paper-numbers-duplicate-key",
     lambda t, e: (_records(t / "runs"), _write(t / "paper.yaml", "paper: p\ntable: t\ntable: u\nrows: []\n"),
                   _spec(t, paper_numbers=["paper.yaml"])),
     LB, ["paper.yaml", "duplicate key 'table'"]),
    ("slurm-param-duplicate-key", NOOP,
     ["run", "{exp}", "--runs-dir", "{runs}", "--executor", "slurm", "--slurm-param", "x={{a: 1, a: 2}}"],
     ["--slurm-param", "duplicate key 'a'"]),
    # --- keys, types and ranges at every depth ---------------------------------------------------
    ("pretrain-typo", NOOP, ["validate", "{exp}", "source.pretrain.hiden_size=16"],
     ["bad.yaml", "source", "pretrain", "'hiden_size'", "did you mean 'hidden_size'"]),
    ("pretrain-type", NOOP, ["validate", "{exp}", "source.pretrain.hidden_size=abc"],
     ["pretrain.hidden_size", "integer", "'abc'"]),
    ("pretrain-nan", NOOP, ["validate", "{exp}", "source.pretrain.lr=.nan"], ["pretrain.lr", "finite"]),
    ("pretrain-inf", NOOP, ["validate", "{exp}", "source.pretrain.lr=.inf"], ["pretrain.lr", "finite"]),
    ("pretrain-too-wide", NOOP, ["validate", "{exp}", "source.pretrain.hidden_size=1000000"],
     ["pretrain.hidden_size", "at most 65536"]),
    ("pretrain-vocab-huge", NOOP, ["validate", "{exp}", "source.pretrain.vocab_size=1000000000"],
     ["pretrain.vocab_size", "at most 2000000"]),
    ("pretrain-seed-negative", NOOP, ["validate", "{exp}", "source.pretrain.seed=-1"], ["pretrain.seed", "seed", "-1"]),
    ("pretrain-kind-contradicts", NOOP, ["validate", "{exp}", "source.pretrain.kind=clm"],
     ["pretrain.kind", "'clm'", "world:mlm"]),
    ("pretrain-for-hub-model", NOOP, ["validate", "{exp}", "source.model=xlm-roberta-base", "source.pretrain.steps=5"],
     ["pretrain", "world:mlm / world:clm", "xlm-roberta-base"]),
    ("world-model-unknown", NOOP, ["validate", "{exp}", "source.model=world:xlm"], ["source", "world:xlm", "world:mlm"]),
    ("world-model-without-world", NOOP, ["validate", "{exp}", "world=null"], ["source.model", "needs a 'world:' section"]),
    ("seed-negative", NOOP, ["validate", "{exp}", "seeds=[1, -1]"], ["seeds.1", "[0, 4294967295]", "-1"]),
    ("seed-too-large", NOOP, ["validate", "{exp}", "seeds=[4294967296]"], ["seeds.0", "4294967295"]),
    ("seed-nan", NOOP, ["validate", "{exp}", "seeds=[.nan]"], ["seeds", "integers", "nan"]),
    ("world-seed-negative", NOOP, ["validate", "{exp}", "world.seed=-5"], ["world.seed", "seed", "-5"]),
    ("task-seed-negative", NOOP, ["validate", "{exp}", "tasks=[{{name: mlm-at-init, config: {{mask_seed: -3}}}}]"],
     ["tasks.0.config.mask_seed", "seed", "-3"]),
    ("task-setting-nan", NOOP, ["validate", "{exp}", "tasks=[{{name: mlm-at-init, config: {{mlm_probability: .nan}}}}]"],
     ["tasks.0.config.mlm_probability", "finite"]),
    ("task-setting-overflow-text", NOOP,
     ["validate", "{exp}", "tasks=[{{name: mlm-at-init, config: {{mlm_probability: '1e400'}}}}]"],
     ["mlm_probability", "finite", "got '1e400'"]),
    ("task-setting-beyond-64-bits", NOOP,
     ["validate", "{exp}", "tasks=[{{name: mlm-at-init, config: {{max_eval_examples: 100000000000000000000}}}}]"],
     ["tasks.0.config.max_eval_examples", "64-bit"]),
    ("vocab-size-billion", NOOP, ["validate", "{exp}", "targets.0.tokenizer.vocab_size=1000000000"],
     ["targets.0.tokenizer", "vocab_size", "1000000000", "at most 2000000", "MAX_VOCAB_SIZE"]),
    ("extend-top-n-billion", NOOP, ["validate", "{exp}", "mode=extend", "extend_top_n=1000000000"],
     ["extend_top_n", "2000000"]),
    ("languages-key", lambda t, e: _write(e, _exp_text(languages=["near", "far"])), ["validate", "{exp}"],
     ["bad.yaml", "'languages' is not a setting", "targets"]),
    ("languages-override", NOOP, ["validate", "{exp}", "languages=[near]"], ["languages=[near]", "targets"]),
    # --- resources that exist and are wrong ----------------------------------------------------
    ("corpus-empty", lambda t, e: _write(t / "c.txt", ""), ["validate", "{exp}", "targets.0.corpus={tmp}/c.txt"],
     ["targets.0", "corpus", "c.txt", "is empty"]),
    ("corpus-binary", lambda t, e: (t / "c.txt").write_bytes(b"some text\n\x00\x01\x02"),
     ["validate", "{exp}", "targets.0.corpus={tmp}/c.txt"], ["corpus", "c.txt", "binary", "NUL byte at offset 10"]),
    ("corpus-not-utf8", lambda t, e: (t / "c.txt").write_bytes("caf\xe9 cr\xe8me\n".encode("latin-1")),
     ["validate", "{exp}", "targets.0.corpus={tmp}/c.txt"], ["corpus", "c.txt", "not UTF-8", "offset 3"]),
    ("corpus-directory", lambda t, e: (t / "cdir").mkdir(), ["validate", "{exp}", "targets.0.corpus={tmp}/cdir"],
     ["targets.0", "corpus", "cdir", "is a directory"]),
    ("corpus-dev-zero", NOOP, ["validate", "{exp}", "targets.0.corpus=/dev/zero"],
     ["corpus", "/dev/zero", "a character device"]),
    ("source-corpus-binary", lambda t, e: (t / "s.txt").write_bytes(b"\x00" * 10),
     ["validate", "{exp}", "targets.0.source_corpus={tmp}/s.txt"], ["source_corpus", "binary"]),
    ("dictionary-directory", lambda t, e: (t / "ddir").mkdir(),
     ["validate", "{exp}", "targets.0.dictionary={tmp}/ddir"], ["dictionary", "ddir", "is a directory"]),
    ("model-etc", NOOP, ["validate", "{exp}", "source.model=/etc"], ["source", "/etc", "no config.json"]),
    ("model-is-a-file", lambda t, e: _write(t / "afile", "x"), ["validate", "{exp}", "source.model={tmp}/afile"],
     ["source", "afile", "is a file", "model directory"]),
    ("model-without-weights", lambda t, e: _model_dir(t), ["validate", "{exp}", "source.model={tmp}/model"],
     ["source", "model", "no weights"]),
    ("tokenizer-path-is-a-file", lambda t, e: _write(t / "tok.json", "{}"),
     ["validate", "{exp}", "targets.0.tokenizer.path={tmp}/tok.json"], ["tokenizer.path", "tok.json", "tokenizer directory"]),
    ("target-language-not-in-world", NOOP, ["validate", "{exp}", "targets=[klingon]"],
     ["targets.0.language", "'klingon'", "src, near, far, script, agglu"]),
    ("target-language-typo", NOOP, ["validate", "{exp}", "targets=[neer]"], ["'neer'", "did you mean 'near'"]),
    # --- tracking ------------------------------------------------------------------------------
    ("tracking-memory", NOOP, ["run", "{exp}", "--runs-dir", "{runs}", "--tracking-uri", "sqlite:///:memory:"],
     ["sqlite:///:memory:", "in-memory", "--no-tracking"]),
    ("tracking-memory-bare", NOOP, ["run", "{exp}", "--runs-dir", "{runs}", "--tracking-uri", "sqlite://"],
     ["sqlite://", "in-memory"]),
    ("sync-memory", lambda t, e: _records(t / "runs"), ["sync", "{runs}/bad", "--tracking-uri", "sqlite:///:memory:"],
     ["in-memory"]),
    # --- leaderboard specs naming nothing ------------------------------------------------------
    ("spec-task-typo", _records_and_spec(columns=[{"task": "mlm-at-int", "languages": ["near"], "metrics": ["loss"]}]),
     LB, ["spec.yaml", "task 'mlm-at-int'", "did you mean 'mlm-at-init'"]),
    ("spec-language-typo", _records_and_spec(columns=[{"task": "mlm-at-init", "languages": ["neer"], "metrics": ["loss"]}]),
     LB, ["spec.yaml", "language 'neer'", "did you mean 'near'"]),
    ("spec-average-language-typo",
     _records_and_spec(columns=[{"task": "mlm-at-init", "languages": ["near", "scirpt"], "metrics": ["loss"], "average": True}]),
     LB, ["language 'scirpt'", "did you mean 'script'"]),
    ("spec-row-typo", _records_and_spec(rows=[{"method": "random"}, {"method": "focsu"}]),
     LB, ["spec.yaml", "rows[1]", "method 'focsu'", "did you mean 'focus'", "overlap, random"]),
    ("spec-row-encoding-typo", _records_and_spec(rows=["random + nonee"], row_by="method+encoding"),
     LB, ["rows[0]", "encoding 'nonee'", "did you mean 'none'"]),
    ("spec-scale-nan", _records_and_spec(format={"scale": float("nan")}), LB, ["spec.yaml", "scale", "finite"]),
    ("spec-alpha-inf", _records_and_spec(alpha=float("inf")), LB, ["alpha", "(0, 0.5)"]),
    ("paper-number-inf",
     lambda t, e: (_records(t / "runs"), _write(t / "paper.yaml", yaml.safe_dump(
         {"paper": "p", "table": "t", "rows": [{"method": "random", "values": {"mlm-at-init/near/loss": float("inf")}}]})),
                   _spec(t, paper_numbers=["paper.yaml"])),
     LB, ["paper.yaml", "finite"]),
    ("golden-update-spec-typo",
     _records_and_spec(columns=[{"task": "mlm-at-int", "languages": ["near"], "metrics": ["loss"]}]),
     ["golden", "update", "--records", "{runs}/bad", "--spec", "{tmp}/spec.yaml", "--golden", "{tmp}/g.json"],
     ["task 'mlm-at-int'", "did you mean 'mlm-at-init'"]),
    # --- compare -------------------------------------------------------------------------------
    ("compare-alpha-7", lambda t, e: _records(t / "runs"),
     ["compare", "{runs}/bad", "--method", "overlap", "--against", "random", "--alpha", "7"], ["--alpha", "(0, 0.5)", "'7'"]),
    ("compare-alpha-zero", lambda t, e: _records(t / "runs"),
     ["compare", "{runs}/bad", "--method", "overlap", "--against", "random", "--alpha", "0"], ["--alpha", "(0, 0.5)"]),
    ("compare-alpha-nan", lambda t, e: _records(t / "runs"),
     ["compare", "{runs}/bad", "--method", "overlap", "--against", "random", "--alpha", "nan"], ["--alpha", "'nan'"]),
    ("compare-against-itself", lambda t, e: _records(t / "runs"),
     ["compare", "{runs}/bad", "--method", "random", "--against", "random"], ["--against 'random'", "--method itself"]),
    ("compare-against-twice", lambda t, e: _records(t / "runs"),
     ["compare", "{runs}/bad", "--method", "overlap", "--against", "random", "random"], ["--against", "'random' twice"]),
    ("compare-method-typo", lambda t, e: _records(t / "runs"),
     ["compare", "{runs}/bad", "--method", "overlp", "--against", "random"], ["--method", "'overlp'", "did you mean 'overlap'"]),
    # --- GPUs ----------------------------------------------------------------------------------
    ("gpus-env-semicolons", lambda t, e: {"TOKXFER_GPUS": "a;b"},
     ["run", "{exp}", "--runs-dir", "{runs}", "--no-tracking", "--executor", "gpus"], ["TOKXFER_GPUS='a;b'", "0,1"]),
    ("gpus-env-negative", lambda t, e: {"TOKXFER_GPUS": "0,-1"},
     ["run", "{exp}", "--runs-dir", "{runs}", "--no-tracking", "--executor", "gpus"], ["TOKXFER_GPUS", "'-1'"]),
    ("gpus-flag-semicolons", NOOP,
     ["run", "{exp}", "--runs-dir", "{runs}", "--no-tracking", "--executor", "gpus", "--gpus", "0;1"], ["--gpus", "'0;1'"]),
]


@pytest.fixture()
def exp(tmp_path):
    return _write(tmp_path / "bad.yaml", yaml.safe_dump(BASE))


def _snapshot(root) -> dict[str, tuple]:
    """Every path under ``root`` with its type, size and modification time."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def test_cases_are_distinct():
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case_id, setup, argv, needles", CASES, ids=[c[0] for c in CASES])
def test_hostile_input_is_refused_with_one_line_and_changes_nothing(case_id, setup, argv, needles, exp, tmp_path,
                                                                     capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TOKXFER_GPUS", raising=False)
    monkeypatch.setenv("TOKXFER_CACHE", str(tmp_path / "cache"))
    runs = tmp_path / "runs"
    env = setup(tmp_path, exp) if setup is not None else None
    for k, v in (env if isinstance(env, dict) else {}).items():  # a setup may name environment variables
        monkeypatch.setenv(k, v)
    before = _snapshot(tmp_path)
    t0 = time.perf_counter()
    code = _main(_fill(argv, exp=exp, tmp=tmp_path, runs=runs))
    seconds = time.perf_counter() - t0
    needles = _fill(needles, exp=exp, tmp=tmp_path, runs=runs)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, f"{case_id}: exit {code}, stderr: {err}"
    assert "Traceback" not in err and "internal error" not in err, err
    assert len(lines) == 1, f"{case_id}: expected one line, got:\n{err}"
    for needle in needles:
        assert needle in lines[0], f"{case_id}: {needle!r} not in {lines[0]!r}"
    assert _snapshot(tmp_path) == before, f"{case_id}: the command created or changed files"
    # the bombs and device files are refused at once (generous for a loaded 2-core machine)
    assert seconds < 30, f"{case_id}: took {seconds:.0f}s"


def test_alias_bomb_is_refused_fast_and_small():
    import resource

    text = _bomb()
    assert len(text) < 2048
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    with pytest.raises(YAMLInputError, match=f"more than {MAX_YAML_NODES}"):
        load_yaml(text)
    assert time.perf_counter() - t0 < 2
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 50_000  # KB: no expansion happened


def test_loader_keeps_what_yaml_allows():
    # anchors, aliases and merge keys whose explicit keys override merged ones are fine
    text = "base: &b {lr: 1, epochs: 2}\ntask: {<<: *b, lr: 3}\nseeds: &s [1, 2]\nagain: *s\n"
    assert load_yaml(text) == {"base": {"lr": 1, "epochs": 2}, "task": {"lr": 3, "epochs": 2},
                               "seeds": [1, 2], "again": [1, 2]}
    # the top-level mapping and 63 lists inside it: exactly the bound, accepted
    assert load_yaml("x: " + "[" * (MAX_YAML_DEPTH - 1) + "]" * (MAX_YAML_DEPTH - 1))
    # the same key in two different mappings is not a duplicate
    assert load_yaml("a: {k: 1}\nb: {k: 2}\n") == {"a": {"k": 1}, "b": {"k": 2}}


def test_loader_refuses_keys_equal_after_resolution():
    # YAML 1.1 reads both as True: the second would silently replace the first
    with pytest.raises(YAMLInputError, match="duplicate key True"):
        load_yaml("yes: 1\ntrue: 2\n")


def test_missing_data_files_still_validate(exp, tmp_path, capsys):
    """Data a download provides later (the real presets' data/… corpora) may be missing at validate;
    only what is there and wrong is refused."""
    code = _main(["validate", str(exp), f"targets.0.corpus={tmp_path}/later.txt"])
    assert code == 0, capsys.readouterr().err
    code = _main(["validate", str(exp), "world=null", f"source.model={tmp_path}/later-model",
                  "targets=[{language: de, corpus: data/cc100/de.txt, dictionary: data/dict.tsv}]"])
    assert code == 0, capsys.readouterr().err
    assert not (tmp_path / "later.txt").exists()


def test_valid_corpus_and_model_dir_pass(exp, tmp_path, capsys):
    (tmp_path / "c.txt").write_text("ein Satz\n" * 10_000 + "é")  # longer than the checked head
    _model_dir(tmp_path, weights=True)
    code = _main(["validate", str(exp), f"targets.0.corpus={tmp_path}/c.txt"])
    assert code == 0, capsys.readouterr().err
    code = _main(["validate", str(exp), "world=null", f"source.model={tmp_path}/model", "targets=[de]"])
    assert code == 0, capsys.readouterr().err


def test_corpus_head_accepts_a_character_cut_by_the_block_end(tmp_path):
    from harness.inputs import CORPUS_HEAD_BYTES, check_corpus_head

    p = tmp_path / "c.txt"
    p.write_bytes(b"a" * (CORPUS_HEAD_BYTES - 1) + "é".encode() + b"\n")  # é spans bytes head-1 and head
    assert check_corpus_head(p, "corpus") == p


def test_world_languages_come_from_the_world_table():
    from harness.run.config import WorldSpec
    from harness.world.config import world_config

    assert WorldSpec(size="tiny").languages == world_config("tiny").languages
    assert WorldSpec(size="small").languages == world_config("small").languages


def test_gpu_ids_accept_indices_and_uuids(monkeypatch):
    from harness.run.executors import GpuPoolExecutor, parse_gpu_ids

    assert parse_gpu_ids("0, 1,7", "--gpus") == ["0", "1", "7"]
    assert parse_gpu_ids("GPU-8a5c1f2e-0000-1111-2222-333344445555", "--gpus") == ["GPU-8a5c1f2e-0000-1111-2222-333344445555"]
    monkeypatch.setenv("TOKXFER_GPUS", "2,3")
    assert GpuPoolExecutor(progress=False).gpus == ["2", "3"]  # parsed without looking for CUDA


def test_spec_names_known_to_tokxfer_but_not_yet_run_render_as_missing(tmp_path, capsys):
    """A registered method or a world language without records is an experiment still running: its
    row or column renders (empty), as before; only names nothing knows are refused."""
    _records(tmp_path / "runs")
    _spec(tmp_path, columns=[{"task": "mlm-at-init", "languages": ["near", "far"], "metrics": ["loss"]}],
          rows=["random", "focus"])
    code = _main(["leaderboard", str(tmp_path / "spec.yaml"), "--runs-dir", str(tmp_path / "runs"),
                  "--out", str(tmp_path / "out")])
    assert code == 0, capsys.readouterr().err
    md = (tmp_path / "out" / "t.md").read_text()
    assert "focus" in md and "far" in md
