"""The layering of STYLE.md: a module imports only from layers below it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "jobctl"

# lower number = lower layer; a module may import only from strictly lower layers
LAYERS = {
    "errors": 0,
    "models": 1,
    "clock": 1,
    "paths": 1,
    "zones": 2,
    "cronexpr": 2,
    "durations": 3,
    "triggers": 4,
    "crontab": 4,
    "checks": 2,
    "specs": 5,
    "reaper": 5,
    "notifications": 5,
    "delivery": 6,
    "store": 6,
    "planner": 6,
    "worker": 6,
    "service": 6,
    "scheduler": 7,
    "executor": 7,
    "output": 7,
    "importer": 7,
    "daemon": 8,
    "web": 8,
    "cli": 9,
}
#: the daemon's roles: driven by the loop, never importing each other
ROLES = {"scheduler", "executor"}

# inside the store: the protocols first, then each backend's modules, one idea each
STORE_LAYERS = {"protocol": 0, "transfer": 1}
SQLITE_LAYERS = {
    "sql": 0,
    "schema": 0,
    "wake": 0,
    "rows": 1,
    "db": 1,
    "transfer": 2,
    "commands": 3,
    "daemon": 4,
}
POSTGRESQL_LAYERS = {"url": 0, "schema": 0, "db": 1, "waker": 2, "commands": 2, "daemon": 3}


SQL_TEXT = re.compile(
    r"\b(SELECT\s+[\w*,. ()]+\s+FROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM"
    r"|CREATE\s+(TABLE|INDEX)|PRAGMA\s+\w+)\b"
)


def _module(path: Path) -> str:
    """The top-level jobctl module a file belongs to (``store`` for the package)."""
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else path.stem


def _files() -> list[Path]:
    return [
        p for p in SRC.rglob("*.py") if p.name not in ("__main__.py",) and p != SRC / "__init__.py"
    ]


def _imports(path: Path) -> set[str]:
    """The jobctl top-level modules a file imports (relative or absolute)."""
    tree = ast.parse(path.read_text())
    depth = len(path.relative_to(SRC).parts)  # relative level that reaches jobctl
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
    sqlite = {p.stem for p in (SRC / "store" / "sqlite").glob("*.py") if p.stem != "__init__"}
    assert sqlite == set(SQLITE_LAYERS)
    pg = {p.stem for p in (SRC / "store" / "postgresql").glob("*.py") if p.stem != "__init__"}
    assert pg == set(POSTGRESQL_LAYERS)


def test_modules_import_only_from_lower_layers():
    bad = []
    for path in _files():
        mine = LAYERS[_module(path)]
        for dep in _imports(path):
            if dep in LAYERS and LAYERS[dep] >= mine:
                bad.append(f"{path.relative_to(SRC)} imports {dep}")
    assert bad == []


def test_no_role_imports_another_role():
    bad = []
    for role in ROLES:
        for dep in _imports(SRC / f"{role}.py"):
            if dep in ROLES and dep != role:
                bad.append(f"{role} imports {dep}")
    assert bad == []


def _relative_deps(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_store_modules_import_only_from_lower_store_modules():
    bad = []
    for folder, layers in (
        (SRC / "store", STORE_LAYERS),
        (SRC / "store" / "sqlite", SQLITE_LAYERS),
        (SRC / "store" / "postgresql", POSTGRESQL_LAYERS),
    ):
        for path in folder.glob("*.py"):
            if path.stem == "__init__":
                continue
            for dep in _relative_deps(path):
                if dep in layers and layers[dep] >= layers[path.stem]:
                    bad.append(f"{path.relative_to(SRC)} imports {dep}")
    assert bad == []


def test_outside_the_store_only_its_protocols_are_imported():
    """The CLI, the daemon and its roles reach a backend only through ``open_store`` and the
    protocols: never a backend module."""
    bad = []
    for path in _files():
        if _module(path) == "store":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                mod = node.module if node.level == 0 else "jobctl." + node.module
                parts = mod.split(".")
                if parts[:2] == ["jobctl", "store"] and parts[2:] not in ([], ["protocol"]):
                    bad.append(f"{path.relative_to(SRC)} imports {mod}")
    assert bad == []


def test_only_store_speaks_sql_and_only_cli_uses_click():
    for path in _files():
        text = path.read_text()
        name = _module(path)
        if name != "store":
            assert "import sqlite3" not in text, name
            assert not SQL_TEXT.search(text), (path, SQL_TEXT.search(text))
        if name != "cli":
            assert "import click" not in text, name
        if name != "output":
            assert "from rich" not in text and "import rich" not in text, name
        if name != "web":
            for framework in ("starlette", "uvicorn", "jinja2"):
                assert f"import {framework}" not in text, name
                assert f"from {framework}" not in text, name
