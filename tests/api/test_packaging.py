"""What a ``pip install`` carries: every data file the code reads at run time is package data.

Configs, leaderboard specs, golden values, the papers' numbers, the committed records with their
per-example results and the rendered tables are read through the installed packages
(``harness.cli.CONFIG_DIR``, ``tokxfer leaderboard --all``); a data folder added without a
``[tool.setuptools.package-data]`` entry works from a checkout and breaks for every user who
installs the wheel. The globs are checked against the checkout always, and against the installed
distribution's file list when it is a real (not editable) install, as under tox in CI.
"""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
DATA_SUFFIXES = {".yaml", ".yml", ".json", ".npz", ".md", ".csv", ".tex", ".html", ".png", ".txt"}


def _package_data() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]


def _data_files(package: str) -> set[str]:
    """Every non-code file of a package in the checkout (relative to the repository)."""
    base = ROOT / package
    return {p.relative_to(ROOT).as_posix() for p in base.rglob("*")
            if p.is_file() and p.suffix in DATA_SUFFIXES and "__pycache__" not in p.parts}


def _covered(package: str) -> set[str]:
    base = ROOT / package
    return {p.relative_to(ROOT).as_posix() for pattern in _package_data()[package] for p in base.glob(pattern)
            if p.is_file()}


def test_every_data_file_is_package_data():
    data = _package_data()
    assert set(data) == {"harness", "leaderboards"}
    for package in ("harness", "methods", "tasks", "leaderboards"):
        files = _data_files(package)
        missing = sorted(files - (_covered(package) if package in data else set()))
        assert not missing, f"{package}: data files no [tool.setuptools.package-data] glob carries: {missing[:10]}"
    # the folders the code reads are non-empty, so the globs above were checked against something
    assert any(f.startswith("harness/configs/real/") for f in _covered("harness"))
    assert any(f.endswith(".examples.npz") for f in _covered("leaderboards"))


def test_the_imported_packages_carry_the_data_files():
    """Under tox the packages are imported from the installed wheel, not the checkout: each data file
    the globs cover is there. (Imported from the checkout, as in an editable install, they are the
    same files, and the first test is the check.)"""
    import harness
    import leaderboards

    for package, module in (("harness", harness), ("leaderboards", leaderboards)):
        installed = Path(module.__file__).resolve().parent
        expected = sorted(_covered(package))
        assert expected
        missing = [f for f in expected if not (installed / Path(f).relative_to(package)).is_file()]
        assert not missing, f"{package} installed at {installed} lacks {missing[:10]}"
