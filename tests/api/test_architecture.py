"""The rooms and their arrows (``docs/ARCHITECTURE.md``), and the registration of every built-in.

The allowed import arrows are read from the ``arrows`` block of ``docs/ARCHITECTURE.md``, so the
document and this test cannot drift apart. Every import counts, also one inside a function.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

from harness import registry

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("harness", "methods", "tasks", "leaderboards")
PLUGIN_FILES = sorted([*ROOT.glob("docs/examples/*.py"), *ROOT.glob("tests/fixtures/plugins/*.py")])
REGISTER_KINDS = {"register_method": "method", "register_encoding": "encoding", "register_task": "task",
                  "register_stage": "stage"}


# ------------------------------------------------------------------------------------- parsing


def arrows() -> dict[str, tuple[str, ...]]:
    """``room -> allowed import prefixes`` from the ``arrows`` block of docs/ARCHITECTURE.md."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    block = re.search(r"```arrows\n(.*?)```", text, re.S)
    assert block, "docs/ARCHITECTURE.md has no ```arrows block"
    out = {}
    for line in block.group(1).splitlines():
        if line.strip():
            room, _, targets = line.partition("->")
            out[room.strip()] = tuple(t.strip() for t in targets.split(",") if t.strip())
    return out


def module_files() -> dict[str, Path]:
    """Dotted module name → file, for every module of the four packages."""
    out = {}
    for pkg in PACKAGES:
        for p in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(p.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = p
    return out


MODULES = module_files()


def _resolve(name: str) -> str | None:
    """The project module an imported name lives in (``None`` for third-party imports)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(path: Path, module: str | None) -> list[tuple[str, int]]:
    """``(imported project module, line)`` of every import in a file (nested ones included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                assert module, f"{path}: relative import outside a package"
                parts = module.split(".") if is_pkg else module.split(".")[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            # ``from harness import vocab`` imports the module harness.vocab
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            names = [str(node.args[0].value)]  # importing by name is importing
        for n in names:
            target = _resolve(n)
            if target and target != module:
                out.append((target, node.lineno))
    return out


def room_of(module: str, rooms: dict) -> str:
    matches = [r for r in rooms if module == r or module.startswith(r + ".")]
    assert matches, f"{module}: no room in docs/ARCHITECTURE.md"
    return max(matches, key=len)


def allowed(target: str, prefixes: tuple[str, ...]) -> bool:
    return any(target == p or target.startswith(p + ".") for p in prefixes)


# --------------------------------------------------------------------------------------- tests


def test_the_arrows_block_names_every_room():
    assert set(arrows()) >= {"harness", "harness.cli", "harness.run", "harness.model", "methods", "tasks", "plugins",
                             "leaderboards"}
    assert PLUGIN_FILES, "the plugin example and the test plugins are checked as plugins"


def test_no_import_points_against_the_arrows():
    rooms = arrows()
    bad = []
    for module, path in MODULES.items():
        room = room_of(module, rooms)
        for target, line in imports(path, module):
            if not allowed(target, rooms[room]):
                bad.append(f"{path.relative_to(ROOT)}:{line}: {module} → {target} (room {room!r} may import "
                           f"{', '.join(rooms[room])})")
    for path in PLUGIN_FILES:
        for target, line in imports(path, None):
            if not allowed(target, rooms["plugins"]):
                bad.append(f"{path.relative_to(ROOT)}:{line}: plugin → {target}")
    assert not bad, "imports against docs/ARCHITECTURE.md:\n" + "\n".join(bad)


def test_nothing_imports_the_command_line():
    users = [f"{m} (line {line})" for m, p in MODULES.items() if room_of(m, arrows()) != "harness.cli"
             for t, line in imports(p, m) if t == "harness.cli" or t.startswith("harness.cli.")]
    assert not users, f"harness.cli is the front door; imported by {users}"


def test_executors_are_given_the_trial_function():
    """The executors receive ``execute`` as a parameter; they import neither the runner nor the grid."""
    targets = {t for t, _ in imports(MODULES["harness.run.executors"], "harness.run.executors")}
    assert not targets & {"harness.run.runner", "harness.run.experiment"}, targets


def test_no_import_cycle_between_project_modules():
    """No circle anywhere in the four packages (a package's ``__init__`` importing its own modules to
    register them is not a circle: those modules never import the package ``__init__``)."""
    graph = {m: {t for t, _ in imports(p, m)} for m, p in MODULES.items()}
    cycles = _cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" → ".join(c + [c[0]]) for c in cycles)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph.get(v, ()):
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_arrow_check_sees_nested_and_by_name_imports(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from methods import focus\n    import importlib\n"
                 "    importlib.import_module('tasks')\n", encoding="utf-8")
    assert [t for t, _ in imports(f, None)] == ["methods.focus", "tasks"]


# ---------------------------------------------------------------------------- registration


def _registrations(path: Path) -> list[tuple[str, str]]:
    """``(kind, name)`` of every ``@register_<kind>("name", …)`` decorator in a file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef):
            for d in node.decorator_list:
                if isinstance(d, ast.Call):
                    fn = getattr(d.func, "id", getattr(d.func, "attr", None))
                    if fn in REGISTER_KINDS and d.args and isinstance(d.args[0], ast.Constant):
                        out.append((REGISTER_KINDS[fn], d.args[0].value))
    return out


BUILTIN_REGISTRATIONS = [(m, kind, name) for m, p in MODULES.items() if m.split(".")[0] in ("methods", "tasks")
                         for kind, name in _registrations(p)]


def test_built_ins_are_found():
    kinds = {k for _, k, _ in BUILTIN_REGISTRATIONS}
    assert kinds == {"method", "encoding", "task", "stage"}, kinds


@pytest.mark.parametrize("module, kind, name", BUILTIN_REGISTRATIONS, ids=lambda v: str(v))
def test_every_module_that_defines_a_component_is_registered(module, kind, name):
    entry = registry.get(kind, name)  # loads the entry points, as every command does
    assert entry.cls.__module__ == module, f"{kind} {name!r} is registered by {entry.origin}, not by {module}"


def test_built_ins_come_from_the_entry_points_pyproject_declares():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"]
    assert set(declared) == set(registry.ENTRY_POINT_GROUPS.values())
    for group, eps in declared.items():
        installed = {ep.name: ep.value for ep in importlib.metadata.entry_points(group=group)
                     if ep.dist is not None and ep.dist.metadata["Name"] == registry.DISTRIBUTION}
        assert installed == eps, (
            f"entry points of {group}: installed {installed}, pyproject.toml declares {eps}; "
            "reinstall (pip install -e .) after changing them"
        )
        for value in eps.values():
            assert value in MODULES and value.split(".")[0] in ("methods", "tasks"), value


def test_an_install_without_the_entry_points_is_one_clear_error(monkeypatch):
    registry.load_builtins()
    monkeypatch.setitem(registry._loaded, "entry_points", False)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [])
    with pytest.raises(registry.PluginError, match=r"declares none of the entry-point groups .*pip install -e \."):
        registry.load_builtins()
