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
    "cli": 7,
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("jobctl."):
            out.add(node.module.split(".")[1])
    return out


def test_every_module_has_a_layer():
    modules = {p.stem for p in SRC.glob("*.py") if p.stem not in ("__init__", "__main__")}
    assert modules <= set(LAYERS), modules - set(LAYERS)


def test_modules_import_only_from_lower_layers():
    bad = []
    for path in SRC.glob("*.py"):
        if path.stem in ("__init__", "__main__"):
            continue
        mine = LAYERS[path.stem]
        for dep in _imports(path):
            if dep == "__init__" or dep not in LAYERS:
                continue
            if LAYERS[dep] >= mine:
                bad.append(f"{path.stem} imports {dep}")
    assert bad == []


def test_only_store_speaks_sql_and_only_cli_uses_click():
    for path in SRC.glob("*.py"):
        text = path.read_text()
        if path.stem != "store":
            assert "import sqlite3" not in text, path.stem
        if path.stem != "cli":
            assert "import click" not in text, path.stem
        if path.stem != "output":
            assert "from rich" not in text and "import rich" not in text, path.stem
