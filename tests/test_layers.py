"""The layering of STYLE.md: a module imports only from layers below it."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "jobctl"

# lower number = lower layer; a module may import only from strictly lower layers
LAYERS = {
    "errors": 0,
    "models": 1,
    "clock": 1,
    "paths": 1,
    "durations": 2,
    "triggers": 3,
    "crontab": 3,
    "specs": 4,
    "store": 5,
    "planner": 5,
    "worker": 5,
    "wake": 5,
    "service": 5,
    "daemon": 6,
    "output": 6,
    "web": 7,
    "cli": 8,
}


# inside the store package: one idea a module, each on top of the one before
STORE_LAYERS = {"schema": 0, "rows": 1, "connection": 2, "jobs": 3, "runs": 4, "scheduling": 5}


def _module(path: Path) -> str:
    """The top-level jobctl module a file belongs to (``store`` for the package)."""
    return path.parent.name if path.parent != SRC else path.stem


def _files() -> list[Path]:
    return [
        p for p in SRC.rglob("*.py") if p.name not in ("__main__.py",) and p != SRC / "__init__.py"
    ]


def _imports(path: Path) -> set[str]:
    """The jobctl top-level modules a file imports (relative or absolute)."""
    tree = ast.parse(path.read_text())
    depth = 1 if path.parent == SRC else 2  # relative level that reaches jobctl
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == depth:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("jobctl."):
            out.add(node.module.split(".")[1])
    return out


def test_every_module_has_a_layer():
    modules = {_module(p) for p in _files()}
    assert modules <= set(LAYERS), modules - set(LAYERS)
    store = {p.stem for p in (SRC / "store").glob("*.py") if p.stem != "__init__"}
    assert store == set(STORE_LAYERS)


def test_modules_import_only_from_lower_layers():
    bad = []
    for path in _files():
        mine = LAYERS[_module(path)]
        for dep in _imports(path):
            if dep in LAYERS and LAYERS[dep] >= mine:
                bad.append(f"{path.relative_to(SRC)} imports {dep}")
    assert bad == []


def test_store_modules_import_only_from_lower_store_modules():
    bad = []
    for path in (SRC / "store").glob("*.py"):
        if path.stem == "__init__":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                dep = node.module.split(".")[0]
                if STORE_LAYERS[dep] >= STORE_LAYERS[path.stem]:
                    bad.append(f"store/{path.stem} imports {dep}")
    assert bad == []


def test_only_store_speaks_sql_and_only_cli_uses_click():
    for path in _files():
        text = path.read_text()
        name = _module(path)
        if name != "store":
            assert "import sqlite3" not in text, name
        if name != "cli":
            assert "import click" not in text, name
        if name != "output":
            assert "from rich" not in text and "import rich" not in text, name
        if name != "web":
            for framework in ("starlette", "uvicorn", "jinja2"):
                assert f"import {framework}" not in text, name
                assert f"from {framework}" not in text, name
