"""The package's shape: the layers of DESIGN.md (import-linter) and no import circles.

The contracts live in ``pyproject.toml`` (``[tool.importlinter]``): a *layers* contract (every
import, function-level ones included, points down the layers) and an *acyclic siblings*
contract (no circle between the modules or sub-packages of any package). The guard tests
break a copy of the package on purpose and check that the contracts see it.

Module and function sizes are advice, not a test (STYLE.md: a long module is a question to
ask, never a number to split a concept at). ``python tests/test_layers.py`` prints the modules
over a few hundred lines and the functions over 80, largest first.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tsexplore"
ADVISED_MODULE_LINES = 500
ADVISED_FUNCTION_LINES = 80

LINT = (
    "import sys; from importlinter.cli import lint_imports; "
    "sys.exit(lint_imports(config_filename=sys.argv[1], no_cache=True))"
)


def lint(root: Path) -> subprocess.CompletedProcess[str]:
    """Run import-linter with ``root``'s pyproject.toml on the package under ``root``."""
    pytest.importorskip("importlinter")
    return subprocess.run(
        [sys.executable, "-c", LINT, str(root / "pyproject.toml")],
        cwd=root, capture_output=True, text=True, timeout=300,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )


def test_imports_point_down_the_layers_without_circles() -> None:
    out = lint(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 kept, 0 broken" in out.stdout


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    shutil.copytree(PACKAGE, tmp_path / "tsexplore", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _append(path: Path, code: str) -> None:
    path.write_text(path.read_text() + "\n\n" + code + "\n")


def test_the_contract_sees_an_upward_import_inside_a_function(package_copy: Path) -> None:
    _append(package_copy / "tsexplore" / "engine" / "cache.py",
            "def _sneaky():\n    from ..compute import reduce\n\n    return reduce")
    out = lint(package_copy)
    assert out.returncode != 0
    assert "tsexplore.engine.cache -> tsexplore.compute" in out.stdout


def test_the_contract_sees_a_circle_inside_a_layer(package_copy: Path) -> None:
    _append(package_copy / "tsexplore" / "engine" / "cache.py",
            "def _sneaky():\n    from .scheduler import Engine\n\n    return Engine")
    out = lint(package_copy)
    assert out.returncode != 0
    assert "no import circles inside tsexplore BROKEN" in out.stdout


def _module_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the package modules it imports (anywhere in it, functions included)."""
    mods = {}
    for f in package.rglob("*.py"):
        parts = list(f.relative_to(package.parent).with_suffix("").parts)
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        base = m.split(".") if f.name == "__init__.py" else m.split(".")[:-1]
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.ImportFrom):
                root = base[: len(base) - node.level + 1] if node.level else []
                mod = ".".join(root + ([node.module] if node.module else []))
                names = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            edges[m].update(n for n in names if n in mods and n != m)
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_back_through_others() -> None:
    """Parents and children included (import-linter's contracts see siblings only)."""
    assert _circles(_module_graph(PACKAGE)) == []


def test_the_circle_finder_sees_a_circle(package_copy: Path) -> None:
    _append(package_copy / "tsexplore" / "sources" / "memory.py",
            "def _sneaky():\n    from . import open_group\n\n    return open_group")
    (group,) = _circles(_module_graph(package_copy / "tsexplore"))
    assert {"tsexplore.sources", "tsexplore.sources.memory"} <= set(group)


def _sizes() -> list[tuple[int, str]]:
    """(lines, name) of every module and function past the advised sizes, largest first."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        name = path.relative_to(ROOT)
        if text.count("\n") > ADVISED_MODULE_LINES:
            out.append((text.count("\n"), f"{name}"))
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > ADVISED_FUNCTION_LINES:
                    out.append((n, f"{name}:{node.lineno} {node.name}"))
    return sorted(out, reverse=True)


if __name__ == "__main__":
    for lines, where in _sizes():
        print(f"{lines:6d}  {where}")
