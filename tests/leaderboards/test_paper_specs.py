"""The papers' tables as leaderboard specs: world flavour (``leaderboards/specs/*.yaml``), real flavour
(``leaderboards/specs/real/*.yaml``), the papers' numbers (``leaderboards/paper_numbers/*.yaml``) and
the experiments behind them (``harness/configs/real/*.yaml``, ``harness/configs/wechsel-grid.yaml``).

Nothing here runs an experiment: specs are parsed, paper numbers loaded, configs validated the way
``tokxfer validate`` does (offline: a network connection attempt fails the test), and every spec is
aggregated over no records to check that its paper rows render.
"""

from __future__ import annotations

import functools
import socket
from pathlib import Path

import pytest
import yaml

from harness.cli import CONFIG_DIR, main
from harness.run.config import load_experiment
from leaderboards.aggregate import aggregate
from leaderboards.render import render_markdown
from leaderboards.spec import PACKAGED_SPECS, load_paper_numbers, load_spec

REAL_SPECS = sorted((PACKAGED_SPECS / "real").glob("*.yaml"))
WORLD_SPECS = sorted(PACKAGED_SPECS.glob("*.yaml"))
ALL_SPECS = WORLD_SPECS + REAL_SPECS
PAPER_DIR = PACKAGED_SPECS.parent / "paper_numbers"
PAPER_FILES = sorted(PAPER_DIR.glob("*.yaml"))
REAL_CONFIGS = sorted((CONFIG_DIR / "real").glob("*.yaml"))
NEW_CONFIGS = REAL_CONFIGS + [CONFIG_DIR / "wechsel-grid.yaml"]

# Paper numbers that no spec shows, and why.
UNREFERENCED = {
    "wechsel-table7-probes.yaml": "linear-probe NLI/POS scores: tokxfer has no probe or POS task",
}
# The paper tables each flavour must cover (spec file stems).
TABLES = [
    "focus-table2",
    "focus-table3",
    "focus-table3-germeval-masakhaner",
    "focus-table4",
    "wechsel-table1",
    "wechsel-table2",
    "wechsel-table7",
    "xlp-table1",
    "xlp-table1-translate-train",
    "xlp-table2",
]
# Measured rows of real specs that the paper has no number for, and why.
ROWS_WITHOUT_PAPER_NUMBERS = {
    ("xlp-table1", "none"): "the XLP paper's XNLI models all carry a language encoding",
    ("xlp-table1", "attached"): "the XLP paper runs the attached encoding on translation only",
    ("xlp-table1-translate-train", "none"): "the XLP paper's XNLI models all carry a language encoding",
    ("xlp-table1-translate-train", "additive"): "the XLP paper prints no translate-train number for XLM15",
    ("xlp-table1-translate-train", "attached"): "the XLP paper runs the attached encoding on translation only",
    ("xlp-table2", "none"): "the XLP paper compares the three encodings only",
}
WORLD_ONLY = ["vipi-table3", "vipi-table4"]  # the VIPI tasks (English text classification) are not in tokxfer


def _ids(paths: list[Path]) -> list[str]:
    return [f"{p.parent.name}/{p.stem}" for p in paths]


@pytest.fixture()
def network_attempts(monkeypatch) -> list:
    """Refuse every network connection (OSError, as offline) and record the attempts for the test to check."""
    attempts: list = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError(f"network access refused in this test: {args!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    return attempts


def test_every_paper_table_has_both_flavours():
    world = {p.stem for p in WORLD_SPECS}
    real = {p.stem for p in REAL_SPECS}
    for stem in TABLES:
        assert stem in world, f"no world spec leaderboards/specs/{stem}.yaml"
        assert stem in real, f"no real spec leaderboards/specs/real/{stem}.yaml"
    for stem in WORLD_ONLY:
        assert stem in world
    assert set(REAL_SPECS) and not (real - set(TABLES)), f"real specs outside the list: {sorted(real - set(TABLES))}"


@pytest.mark.parametrize("path", ALL_SPECS, ids=_ids(ALL_SPECS))
def test_spec_parses_and_its_paper_numbers_name_its_columns(path):
    spec = load_spec(path)
    columns = {c.key for c in spec.columns}
    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert len(spec.paper) == len(raw.get("paper_numbers") or [])
    for ref in raw.get("paper_numbers") or []:
        pn = load_paper_numbers(path.parent / ref)
        assert pn.path.resolve().parent == PAPER_DIR.resolve(), f"{path.name}: {ref} is outside {PAPER_DIR}"
        for method, _, values in pn.rows:
            assert values, f"{pn.path.name}: row {method!r} has no values"
            for key, _ in values:
                assert key in columns, f"{pn.path.name}: {key!r} is not a column of {path.name}"
    # names are output file stems: world and real flavours must not overwrite each other
    if path in REAL_SPECS:
        assert spec.name == f"{path.stem}-real"
    elif path.stem in TABLES + WORLD_ONLY:
        assert spec.name == path.stem


def test_spec_names_are_unique():
    names = [load_spec(p).name for p in ALL_SPECS]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("path", PAPER_FILES, ids=[p.stem for p in PAPER_FILES])
def test_paper_numbers_load_and_are_referenced(path):
    pn = load_paper_numbers(path)
    assert pn.paper and pn.table and pn.url.startswith("https://") and pn.note
    methods = [m for m, _, _ in pn.rows]
    assert len(methods) == len(set(methods)), f"{path.name}: a method key twice"
    for _, _, values in pn.rows:
        for key, value in values:
            task, lang, metric = key.split("/")
            assert task and lang and metric
            assert value == value and value >= 0  # finite, non-negative in record units
    referenced = {
        (spec_path.parent / ref).resolve()
        for spec_path in ALL_SPECS
        for ref in yaml.safe_load(spec_path.read_text(encoding="utf-8")).get("paper_numbers") or []
    }
    if path.name in UNREFERENCED:
        assert path.resolve() not in referenced
    else:
        assert path.resolve() in referenced, f"{path.name} is referenced by no spec"


@pytest.mark.parametrize("path", NEW_CONFIGS, ids=_ids(NEW_CONFIGS))
def test_config_validates_offline(path, network_attempts, capsys):
    first = path.read_text(encoding="utf-8").splitlines()[0]
    rel = path.relative_to(CONFIG_DIR.parent.parent).as_posix()
    command = f"# tokxfer run {rel}"
    assert first == command or first.startswith(command + " --plugin "), f"{path.name} must start with the command that runs it"
    plugin = first.split(" --plugin ")[1:]  # the "my method vs baselines" preset names the README's plugin
    extra = ["--plugin", str(Path(__file__).resolve().parents[2] / plugin[0])] if plugin else []
    assert main(["validate", str(path), *extra]) == 0
    assert network_attempts == [], f"tokxfer validate {path.name} tried the network"
    assert ": ok — experiment" in capsys.readouterr().out
    cfg = load_experiment(path)
    assert cfg.name == path.stem
    if path.parent.name == "real":
        assert cfg.world is None and cfg.seeds == (1, 2, 3, 4, 5)


@functools.cache
def _experiment_methods(path: Path, row_by: str = "method") -> frozenset[str]:
    """Row keys the experiment in ``path`` (whose ``name`` must be the file's stem) can fill:
    method ids, encoding ids (``row_by: encoding``) or ``method + encoding`` pairs."""
    cfg = load_experiment(path)
    assert cfg.name == path.stem, f"{path}: experiment name {cfg.name!r} differs from the file name"
    methods = [m.id for m in cfg.methods]
    encodings = [e.id for e in cfg.encodings] or ["none"]
    if row_by == "encoding":
        return frozenset(encodings)
    if row_by == "method+encoding":
        return frozenset(f"{m} + {e}" for m in methods for e in encodings)
    return frozenset(methods)


@pytest.mark.parametrize("path", ALL_SPECS, ids=_ids(ALL_SPECS))
def test_spec_experiments_and_rows_exist(path):
    spec = load_spec(path)
    directory = CONFIG_DIR / "real" if path in REAL_SPECS else CONFIG_DIR
    methods = set()
    for exp in spec.experiments:
        config = directory / f"{exp}.yaml"
        assert config.is_file(), f"{path.name}: experiment {exp!r} has no config {config}"
        methods |= _experiment_methods(config, spec.row_by)
    for row in spec.rows or ():
        assert row.method in methods, f"{path.name}: row {row.method!r} is in none of {spec.experiments}"


@pytest.mark.parametrize("path", REAL_SPECS, ids=_ids(REAL_SPECS))
def test_real_paper_rows_match_measured_rows(path):
    """A paper row keyed like a harness row is the same method id as the measured one."""
    spec = load_spec(path)
    measured = {r.method for r in spec.rows or ()}
    paper = {m for pn in spec.paper for m, _, _ in pn.rows}
    # every measured row has the paper's numbers beside it, unless the paper has none (listed with the reason)
    excused = {row for (stem, row) in ROWS_WITHOUT_PAPER_NUMBERS if stem == path.stem}
    assert measured - excused <= paper, f"{path.name}: rows without paper numbers: {sorted(measured - excused - paper)}"
    assert not excused & paper, f"{path.name}: {sorted(excused & paper)} have paper numbers; drop them from the list"


@pytest.mark.parametrize("path", ALL_SPECS, ids=_ids(ALL_SPECS))
def test_spec_renders_paper_rows_without_records(path):
    spec = load_spec(path)
    table = aggregate([], spec)
    assert all(cell.empty for row in table.rows for cell in row.cells.values())
    md = render_markdown(table)
    for pn in spec.paper:
        assert pn.citation in md
        for _, display, _ in pn.rows:
            assert f"{display} (paper)" in md
