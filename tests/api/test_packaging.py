"""What a ``pip install`` carries: every data file the code reads at run time is package data.

Configs, leaderboard specs, golden values, the papers' numbers, the committed records with their
per-example results and the rendered tables are read through the installed packages
(``harness.cli.CONFIG_DIR``, ``tokxfer leaderboard --all``); a data folder added without a
``[tool.setuptools.package-data]`` entry works from a checkout and breaks for every user who
installs the wheel. The globs are checked against the checkout always, and against the installed
distribution's file list when it is a real (not editable) install, as under tox in CI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
DATA_SUFFIXES = {".yaml", ".yml", ".json", ".npz", ".md", ".csv", ".tex", ".html", ".png", ".txt"}


def _package_data() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]


def _visible(path: Path, base: Path) -> bool:
    """setuptools globs like :func:`glob.glob`: hidden files (the plot writer's ``.tokxfer-plots.json``
    manifests of what it wrote) are not package data, and nothing reads them from an install."""
    return not any(part.startswith(".") for part in path.relative_to(base).parts)


def _data_files(package: str) -> set[str]:
    """Every non-code, non-hidden file of a package in the checkout (relative to the repository)."""
    base = ROOT / package
    return {p.relative_to(ROOT).as_posix() for p in base.rglob("*")
            if p.is_file() and p.suffix in DATA_SUFFIXES and "__pycache__" not in p.parts and _visible(p, base)}


def _covered(package: str) -> set[str]:
    base = ROOT / package
    return {p.relative_to(ROOT).as_posix() for pattern in _package_data()[package] for p in base.glob(pattern)
            if p.is_file() and _visible(p, base)}


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


def test_the_installed_packages_carry_the_data_files(tmp_path):
    """What ``import harness`` finds outside the checkout (the wheel under tox, the checkout itself
    in an editable install) has each data file the globs cover."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", "import harness, leaderboards; print(harness.__file__); "
                          "print(leaderboards.__file__)"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for package, init in zip(("harness", "leaderboards"), out.stdout.split()):
        installed = Path(init).resolve().parent
        expected = sorted(_covered(package))
        assert expected
        missing = [f for f in expected if not (installed / Path(f).relative_to(package)).is_file()]
        assert not missing, f"{package} installed at {installed} lacks {missing[:10]}"
