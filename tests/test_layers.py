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
    # value types apart from models, each imported only by what uses it
    "waits": 1.5,
    "outcomes": 1.5,
    "fleet": 1.5,
    "access": 1.5,
    "clock": 1,
    "paths": 1,
    "zones": 2,
    "cronexpr": 2,
    "durations": 3,
    "triggers": 4,
    "crontab": 4,
    "checks": 2,
    "envfile": 2,
    "specs": 5,
    "jobfile": 5.5,
    # the rules of watched jobs: below the job file, which reads and writes such jobs
    "watching": 5.2,
    "reaper": 5,
    "notifications": 4,
    "notifier": 7,
    "delivery": 6,
    "store": 6,
    "planner": 5.9,
    "loadplan": 5,
    "worker": 6,
    "pinger": 6,
    "keeper": 5,
    "spawner": 5,
    "logs": 1,
    "service": 6,
    "scheduler": 7,
    "retention": 7,
    "executor": 7,
    "output": 7,
    "importer": 7,
    "applier": 7,
    "daemon": 8,
    "web": 8,
    "cli": 9,
}
#: the daemon's roles: driven by the loop, never importing each other
ROLES = {"scheduler", "executor", "retention", "notifier"}

# inside the store: values and named statements first, then the shared logic over a
# dialect, then the protocols; each backend's modules, one idea each
STORE_LAYERS = {
    "values": 0,
    "outbox": 1.5,
    "queries": 0,
    "sqlfiles": 0,
    "rows": 1.7,
    "calendars": 1.6,
    "dialect": 1,
    "secrets": 1.6,
    "daemon_sql": 1,
    "driver": 2,
    "writes": 2,
    "transfer": 2,
    "retention": 2,
    "watch": 2,
    "commands": 3,
    "dashboard": 3,
    "daemon": 3,
    "protocol": 4,
}
SQLITE_LAYERS = {"sql": 0, "schema": 0, "wake": 0, "db": 1, "driver": 2}
POSTGRESQL_LAYERS = {"url": 0, "schema": 0, "sql": 0, "db": 1, "waker": 2, "driver": 3}
#: the faces of the store, written once above the backends
FACES = ("jobctl.store.commands", "jobctl.store.daemon", "jobctl.store.dashboard")
#: the backends' packages: each a driver, its connection handling and its schema
BACKENDS = ("jobctl.store.sqlite", "jobctl.store.postgresql")


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


def _dotted(path: Path) -> str:
    """A file's module name: ``jobctl.store.sqlite.commands``; a package is its folder."""
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


#: every module of the package, by dotted name
MODULES = {_dotted(p): p for p in SRC.rglob("*.py")}


def _resolved_imports(name: str) -> list[str]:
    """Every jobctl module that module ``name`` imports, resolved to its dotted name: at any
    depth (module level, inside a function, under ``if TYPE_CHECKING``), absolute or
    relative at any level. ``from P import x`` names the module ``P.x`` when there is one,
    else ``P``."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.split(".")[0] == "jobctl"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] != "jobctl":
                continue
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.append(sub if sub in MODULES else mod)
    return out


def _imports(path: Path) -> set[str]:
    """The jobctl top-level modules a file imports, at any depth."""
    return {dep.split(".")[1] for dep in _resolved_imports(_dotted(path)) if dep.count(".") >= 1}


def _graph() -> dict[str, set[str]]:
    return {m: {d for d in _resolved_imports(m) if d != m} for m in MODULES}


def _import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): each is a set of
    modules that import one another round a circle, directly or not."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(circles)


def _in_store(module: str) -> bool:
    return module.startswith("jobctl.store.") or module == "jobctl.store"


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
    """Every import counts, at any depth; a package's files may import one another (inside
    the store, by the store's own layers below)."""
    bad = []
    for path in _files():
        mine = LAYERS[_module(path)]
        for dep in _imports(path) - {_module(path)}:
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


def test_store_modules_import_only_from_lower_store_modules():
    """Inside each store folder, by the layers above; every import counts, at any depth."""
    bad = []
    for folder, layers in (
        (SRC / "store", STORE_LAYERS),
        (SRC / "store" / "sqlite", SQLITE_LAYERS),
        (SRC / "store" / "postgresql", POSTGRESQL_LAYERS),
    ):
        package = _dotted(folder / "__init__.py")
        for path in folder.glob("*.py"):
            if path.stem == "__init__":
                continue
            for dep in _resolved_imports(_dotted(path)):
                parent, _, stem = dep.rpartition(".")
                if parent == package and stem in layers and layers[stem] >= layers[path.stem]:
                    bad.append(f"{path.relative_to(SRC)} imports {dep}")
    assert bad == []


def test_every_jobctl_import_names_a_module_that_exists():
    bad = [f"{m} imports {d}" for m in MODULES for d in _resolved_imports(m) if d not in MODULES]
    assert bad == []


def test_the_import_graph_is_read_at_every_depth():
    # the web application imports its handlers at module level, the store package its
    # backends only inside open_store, the PostgreSQL backend its driver lazily: all seen
    graph = _graph()
    assert {"jobctl.web.api", "jobctl.web.pages"} <= graph["jobctl.web.app"]
    assert {"jobctl.store.sqlite", "jobctl.store.postgresql"} <= graph["jobctl.store"]
    assert "jobctl.store.commands" in graph["jobctl.store.sqlite"]
    circle = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _import_circles(circle) == [["a", "b", "c"]]
    assert _import_circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_outside_the_store():
    """No module imports, directly or through others, a module that imports it back: every
    import counts, inside functions and under ``if TYPE_CHECKING`` too."""
    circles = [c for c in _import_circles(_graph()) if not all(_in_store(m) for m in c)]
    assert circles == []


def test_no_import_circle_inside_the_store():
    circles = [c for c in _import_circles(_graph()) if all(_in_store(m) for m in c)]
    assert circles == []


def test_the_postgresql_backend_imports_nothing_from_sqlite():
    bad = [
        f"{m} imports {d}"
        for m in MODULES
        if m.startswith("jobctl.store.postgresql")
        for d in _resolved_imports(m)
        if d == "jobctl.store.sqlite" or d.startswith("jobctl.store.sqlite.")
    ]
    assert bad == []


def _under(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_drivers_import_no_face_and_faces_import_no_driver():
    """A backend's modules (its driver, connection and schema) never reach a face; a face
    never reaches a backend: it is handed its dialect or driver. Only a backend package's
    ``__init__`` puts the two together (it opens the connection and gives each face it)."""
    bad = []
    for m in MODULES:
        deps = _resolved_imports(m)
        if _under(m, BACKENDS) and m not in BACKENDS:
            bad += [f"{m} imports {d}" for d in deps if _under(d, FACES)]
        if _under(m, FACES):
            bad += [f"{m} imports {d}" for d in deps if _under(d, BACKENDS) or _under(d, FACES)]
    assert bad == []
    # the daemons' face is one module over the drivers' protocol, not a class a backend
    graph = _graph()
    assert "jobctl.store.driver" in graph["jobctl.store.daemon"]
    for backend in BACKENDS:
        assert "jobctl.store.daemon" not in graph[backend + ".driver"]


def test_outside_the_store_only_its_protocols_are_imported():
    """The CLI, the daemon and its roles reach a backend only through ``open_store``, the
    protocols and their values: never a backend module."""
    bad = []
    for path in _files():
        if _module(path) == "store":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                mod = node.module if node.level == 0 else "jobctl." + node.module
                parts = mod.split(".")
                if parts[:2] == ["jobctl", "store"] and parts[2:] not in (
                    [],
                    ["protocol"],
                    ["values"],
                ):
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
