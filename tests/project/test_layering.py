"""The shape of the code, kept by a test instead of by memory (docs/architecture.md, "Checks that keep the shape").

Every rule reads the source with ``ast`` (nothing is imported), so the whole test takes well under
a second. Imports are counted wherever they stand (inside functions too), relative imports are
resolved, and imports under ``if TYPE_CHECKING:`` are left out: they never run.
"""

from __future__ import annotations

import ast
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"

# Package folder -> the other packages of ours it may import. `cli` (the root package
# `ctxscope`, the composition root) may import anything; `bench` anything but the tests.
ALLOWED: dict[str, set[str]] = {
    "vocab": set(),
    "proxy": {"vocab"},
    "simulator": {"vocab"},
    "agent": {"vocab"},
    "inspector": {"proxy", "vocab"},
    "web": {"inspector", "proxy", "vocab"},
}
UNRESTRICTED = "cli"
SOURCE_FOLDERS = [*ALLOWED, UNRESTRICTED, "bench"]
# Inside agent/: the core imports no other part of the agent; `host` may import everything;
# every other subpackage is a feature, which imports only the core and itself.
AGENT_CORE, AGENT_HOST = "core", "host"
# Inside inspector/writer/: the daemon's side and the child's side meet only through the wire
# (and the neutral room: the modules at writer/'s root). The daemon's side does not load the
# storing thread either: what it stores with runs in the child (docs/architecture.md, "The writer's
# rooms"). Room -> the other rooms of the writer it may import.
WRITER = "ctxscope.inspector.writer"
WRITER_ROOMS: dict[str, set[str]] = {
    "": set(),  # the neutral room: protocol, status, priority
    "wire": {""},
    "storing": {"", "wire"},
    "daemon_side": {"", "wire"},
    "child": {"", "wire", "storing"},
}
# The rooms inside the other packages (docs/architecture.md, "Rooms inside the packages"): package ->
# room -> the other rooms of that package it may import. A room is a subfolder, or a module at the
# package's root (named as it is). ROOT_COMPOSES: root modules that wire the rooms together and may
# import any room of their package (and no room imports them).
INSPECTOR = "ctxscope.inspector"
ROOMS: dict[str, dict[str, set[str]]] = {
    INSPECTOR: {
        "base": set(),  # the ground floor: owner-only files, clock, JSON text, body reuse
        "analyses": {"base"},  # pure analyses of prompts and usage
        "store": {"base"},  # the SQLite store: the only SQL
        "advisor": {"base", "analyses", "store"},  # findings' facts and the advisor's replay
        "pipeline": {"base", "analyses", "store", "advisor"},  # the analysis of each call as it is stored
        "writer": {"base", "analyses", "store", "pipeline"},
        "share": {"base", "analyses", "store", "pipeline"},
        "otlp": {"base", "analyses", "store"},
        "reading": {"base", "analyses", "store", "advisor", "pipeline", "writer"},
    },
    "ctxscope.proxy": {
        "exchange": set(),  # the contract: what a call is
        "ids": set(),
        "redaction": {"exchange", "ids"},
        "defence": {"exchange", "ids"},
        "wire": {"exchange", "ids"},
        "forward": {"exchange", "ids", "defence", "redaction", "wire"},
        "sockets": {"exchange", "ids", "defence", "redaction", "wire", "forward"},
    },
    "ctxscope.simulator": {
        "model": set(),  # script, prompt and cache: pure
        "control": set(),
        "wire": {"model"},
    },
}
ROOT_COMPOSES: dict[str, set[str]] = {
    INSPECTOR: set(),
    "ctxscope.proxy": {"server"},
    "ctxscope.simulator": {"__main__", "app", "background", "body", "child", "exchange", "process", "sockets", "state"},
}
ENTRY_POINT = re.compile(r"^ctxscope(\.\w+)*:\w+(\.\w+)*$")
SQL = re.compile(
    # SELECT ... FROM within one string (f-string fields included), or across implicitly
    # concatenated ones ("SELECT a " "FROM t")
    r"\bSELECT\b(?:\{[^{}]*\}|[^;\"'{}]|[\"']\s*f?[\"']){0,400}?\bFROM\b"
    r"|\bINSERT\s+(?:OR\s+\w+\s+)?INTO\b|\bUPDATE\s+\w+\s+SET\b|\bDELETE\s+FROM\b"
    r"|\bCREATE\s+(?:TEMP\s+|TEMPORARY\s+)?TABLE\b|\bPRAGMA\s+\w+"
)


@dataclass(frozen=True)
class Module:
    name: str  # dotted, as installed: "ctxscope.agent.core.loop"; bench scripts: "bench.abuse"
    path: Path
    unit: str  # the source folder it lives in: "agent", "cli", "bench", ...

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"

    @property
    def where(self) -> str:
        return str(self.path.relative_to(ROOT))


@dataclass
class Edge:
    source: Module
    target: str  # dotted name of what is imported (a module of ours when it resolves to one)
    line: int
    how: str = "import"  # or "importlib string", "entry point string"
    loader: str | None = None  # for an entry point string handed to another package: that package


@dataclass
class Tree:
    modules: dict[str, Module] = field(default_factory=dict)
    edges: list[Edge] = field(default_factory=list)


def _package_dirs() -> dict[str, Path]:
    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {package: ROOT / folder for package, folder in table.items()}


def _modules_of(folder: Path, dotted: str, unit: str) -> Iterator[Module]:
    for path in sorted(folder.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(folder).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        yield Module(".".join([dotted, *parts]), path, unit)


def unit_of(name: str) -> str | None:
    """The source folder a dotted ctxscope name belongs to (None: not ours)."""
    parts = name.split(".")
    if parts[0] != "ctxscope":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else UNRESTRICTED


class _Imports(ast.NodeVisitor):
    """Every import of one module, inside functions too, except under ``if TYPE_CHECKING:``."""

    def __init__(self, module: Module, known: dict[str, Module]):
        self.module, self.known = module, known
        self.found: list[tuple[str, int]] = []
        self.strings: list[tuple[str, int, str]] = []  # (text, line, "importlib string" | "entry point string")
        self.constants: dict[str, str] = {}  # module-level NAME = "ctxscope...:attr"
        self.handed: list[tuple[str, int, str]] = []  # (entry string, line, callee's dotted origin)
        self.origins: dict[str, str] = {}  # local name -> dotted name it was imported as

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append((alias.name, node.lineno))
            top = alias.name.split(".")[0]
            self.origins[alias.asname or top] = alias.name if alias.asname else top

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._absolute(node.module, node.level)
        if base is None:
            return
        for alias in node.names:
            full = f"{base}.{alias.name}"
            self.found.append((full if full in self.known else base, node.lineno))
            self.origins[alias.asname or alias.name] = full

    def _absolute(self, module: str | None, level: int) -> str | None:
        if level == 0:
            return module
        package = self.module.name.split(".")
        if not self.module.is_package:
            package.pop()
        if level > 1:
            package = package[: len(package) - (level - 1)]
        return ".".join([*package, *([module] if module else [])]) or None

    def visit_Assign(self, node: ast.Assign) -> None:
        value = node.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and ENTRY_POINT.match(value.value):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.constants[target.id] = value.value
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and ENTRY_POINT.match(node.value):
            self.strings.append((node.value, node.lineno, "entry point string"))

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        callee = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        first = node.args[0] if node.args else None
        literal = isinstance(first, ast.Constant) and isinstance(first.value, str)
        if callee in ("import_module", "__import__") and literal:
            self.strings.append((first.value, node.lineno, "importlib string"))
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            text = None
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and ENTRY_POINT.match(arg.value):
                text = arg.value
            elif isinstance(arg, ast.Name):
                text = self.constants.get(arg.id)
            if text is not None:
                self.handed.append((text, node.lineno, self._origin(func)))
        self.generic_visit(node)

    def _origin(self, func: ast.expr) -> str:
        parts: list[str] = []
        while isinstance(func, ast.Attribute):
            parts.insert(0, func.attr)
            func = func.value
        if isinstance(func, ast.Name):
            return ".".join([self.origins.get(func.id, func.id), *parts])
        return ""


@cache
def tree() -> Tree:
    """Our modules (every package folder, recursively, plus bench/) and every import between them."""
    t = Tree()
    for package, folder in _package_dirs().items():
        unit = UNRESTRICTED if package == "ctxscope" else package.split(".", 1)[1]
        for module in _modules_of(folder, package, unit):
            t.modules[module.name] = module
    for module in _modules_of(ROOT / "bench", "bench", "bench"):
        t.modules[module.name] = module
    for module in list(t.modules.values()):
        visitor = _Imports(module, t.modules)
        visitor.visit(ast.parse(module.path.read_text(), str(module.path)))
        t.edges += [Edge(module, _resolve(name, t.modules), line) for name, line in visitor.found]
        for text, line, how in visitor.strings:
            t.edges.append(Edge(module, _resolve(text.split(":")[0], t.modules), line, how))
        for text, line, origin in visitor.handed:
            loader = unit_of(origin)
            if loader is not None and loader != module.unit:
                t.edges.append(
                    Edge(module, _resolve(text.split(":")[0], t.modules), line, "entry point string", loader)
                )
    return t


def _resolve(name: str, known: dict[str, Module]) -> str:
    """The longest prefix of a dotted name that is a module of ours (or the name itself)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in known:
            return ".".join(parts[:end])
    return name


def _ours(edges: list[Edge]) -> Iterator[Edge]:
    return (e for e in edges if unit_of(e.target) is not None)


def _say(e: Edge) -> str:
    via = "" if e.how == "import" else f" ({e.how}{f', loaded by {e.loader}' if e.loader else ''})"
    return f"{e.source.where}:{e.line} imports {e.target}{via}"


def layering_violations(t: Tree) -> list[str]:
    bad = []
    test_modules = {p.stem for p in TESTS.rglob("*.py")} | {"tests", "support"}
    for e in t.edges:
        unit = e.source.unit
        if unit == "bench":
            if e.target.split(".")[0] in test_modules:
                bad.append(f"{_say(e)}: bench may not import the tests")
            continue
        target = unit_of(e.target)
        if target is None:
            continue
        for who in [unit] if e.loader is None else [e.loader]:  # the holder: its own edge
            if who != UNRESTRICTED and target != who and target not in ALLOWED[who]:
                bad.append(f"{_say(e)}: {who} may import only {sorted(ALLOWED[who]) or 'nothing of ours'}")
    return bad


def agent_violations(t: Tree) -> list[str]:
    """The core imports no other part of the agent; a feature imports only the core and itself."""
    bad = []
    for m in t.modules.values():
        parts = m.name.split(".")
        if m.unit == "agent" and len(parts) == 3 and not m.is_package:
            bad.append(f"{m.where}: a top-level module of agent/ (it belongs in core, a feature or host)")
    for e in _ours(t.edges):
        source, target = e.source.name.split("."), e.target.split(".")
        if e.source.unit != "agent" or target[:2] != ["ctxscope", "agent"] or len(source) < 3:
            continue
        if len(source) == 3 and not e.source.is_package:
            continue  # a top-level module: reported above
        mine, theirs = source[2], (target[2] if len(target) > 2 else None)
        if mine in (AGENT_HOST, theirs):
            continue
        if mine == AGENT_CORE:
            bad.append(f"{_say(e)}: the agent's core imports nothing outside agent.core")
        elif theirs != AGENT_CORE:
            bad.append(f"{_say(e)}: the feature agent.{mine} imports only agent.core and itself")
    return bad


def _writer_room(name: str) -> str | None:
    """The room of inspector/writer/ a dotted name is in ("" for its root modules); None: outside it."""
    if name != WRITER and not name.startswith(WRITER + "."):
        return None
    rest = name[len(WRITER) + 1 :].split(".") if name != WRITER else []
    return rest[0] if len(rest) > 1 else ""


def writer_violations(t: Tree) -> list[str]:
    """The daemon's side and the child's side of the writer import the wire, never each other."""
    bad = []
    for m in t.modules.values():
        room = _writer_room(m.name)
        if room is not None and room not in WRITER_ROOMS and not m.is_package:
            bad.append(f"{m.where}: in no room of the writer ({sorted(WRITER_ROOMS)})")
    for e in _ours(t.edges):
        mine, theirs = _writer_room(e.source.name), _writer_room(e.target)
        if mine is None or theirs is None or mine == theirs or mine not in WRITER_ROOMS:
            continue
        if theirs not in WRITER_ROOMS[mine]:
            allowed = sorted(r or "writer's root" for r in WRITER_ROOMS[mine])
            bad.append(f"{_say(e)}: writer/{mine or '(root)'} may import only {allowed}")
    return bad


def _room(package: str, name: str) -> str | None:
    """The room of ``package`` a dotted name is in; None: outside the package, or the package itself."""
    if not name.startswith(package + "."):
        return None
    return name[len(package) + 1 :].split(".")[0]


def room_violations(t: Tree) -> list[str]:
    """Inside the inspector, the proxy and the simulator, a room imports only the rooms below it."""
    bad = []
    for package, rooms in ROOMS.items():
        known = set(rooms) | ROOT_COMPOSES[package]
        for m in t.modules.values():
            room = _room(package, m.name)
            if (
                room is not None
                and room not in known
                and not (m.is_package and m.name == f"{package}.{room}" and room in known)
            ):
                bad.append(f"{m.where}: in no room of {package} ({sorted(known)})")
        for e in _ours(t.edges):
            mine, theirs = _room(package, e.source.name), _room(package, e.target)
            if mine is None or theirs is None or mine == theirs or mine in ROOT_COMPOSES[package]:
                continue
            if mine in rooms and theirs not in rooms[mine]:
                bad.append(f"{_say(e)}: {package}.{mine} may import only {sorted(rooms[mine]) or 'no other room'}")
    return sorted(set(bad))


def _cycles(t: Tree) -> list[list[str]]:
    """Strongly connected groups of ctxscope modules (Tarjan), each as one readable cycle through them."""
    graph: dict[str, set[str]] = {n: set() for n in t.modules if n.startswith("ctxscope")}
    for e in _ours(t.edges):
        if e.target in graph and e.target != e.source.name and e.source.name in graph:
            graph[e.source.name].add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def connect(v: str) -> None:  # iterative enough for our depth: modules import a few dozen at most
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [_one_cycle(graph, group) for group in groups]


def _one_cycle(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    """The shortest cycle through the group's first module (breadth first), plus the group's size."""
    start = min(group)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & group):
            if w == start:
                return [*paths[v], start, f"({len(group)} modules in this knot: {', '.join(sorted(group))})"]
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    raise AssertionError("a strongly connected group without a cycle")


@pytest.mark.slow
def test_packages_import_only_the_packages_below_them():
    bad = layering_violations(tree())
    assert not bad, f"{len(bad)} layering violations:\n" + "\n".join(bad)


def test_inside_the_agent_the_core_imports_no_feature_and_features_only_the_core():
    bad = agent_violations(tree())
    assert not bad, f"{len(bad)} agent core/feature violations:\n" + "\n".join(bad)


def test_the_writers_daemon_side_and_child_side_meet_only_through_the_wire():
    bad = writer_violations(tree())
    assert not bad, f"{len(bad)} writer room violations:\n" + "\n".join(bad)


def test_the_writer_room_rule_catches_a_crossing():
    """The rule itself: a child module importing the daemon's side, and the daemon's side importing
    the storing thread, are both reported."""
    t = tree()
    child = t.modules[f"{WRITER}.child.life"]
    daemon = t.modules[f"{WRITER}.daemon_side.supervisor"]
    planted = Tree(
        t.modules,
        [
            Edge(child, f"{WRITER}.daemon_side.launch", 1),
            Edge(daemon, f"{WRITER}.storing.thread", 2),
            Edge(daemon, f"{WRITER}.wire.messages", 3),
        ],
    )
    bad = writer_violations(planted)
    assert len(bad) == 2 and "child may import only" in bad[0] and "daemon_side may import only" in bad[1], bad


def test_inside_the_inspector_proxy_and_simulator_rooms_import_only_the_rooms_below():
    bad = room_violations(tree())
    assert not bad, f"{len(bad)} room violations:\n" + "\n".join(bad)


def test_the_room_rule_catches_a_crossing_and_a_module_in_no_room():
    """The rule itself: the store importing the pipeline, and a stray module at the inspector's root."""
    t = tree()
    store = t.modules[f"{INSPECTOR}.store.db"]
    stray = Module(f"{INSPECTOR}.stray", ROOT / "inspector" / "stray.py", "inspector")
    planted = Tree({**t.modules, stray.name: stray}, [Edge(store, f"{INSPECTOR}.pipeline.analyze", 1)])
    bad = room_violations(planted)
    assert len(bad) == 2, bad
    assert any("inspector.store may import only" in b for b in bad) and any("stray.py: in no room" in b for b in bad)


def test_every_source_folder_is_described_in_the_architecture():
    """Folder size is a smell to read, not a number to meet: what keeps rooms meaningful is that
    docs/architecture.md says what each one holds, so every package folder is named there."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    missing = []
    for unit in SOURCE_FOLDERS:
        for folder in (p for p in (ROOT / unit).rglob("*") if p.is_dir() and (p / "__init__.py").exists()):
            rel = folder.relative_to(ROOT / unit).as_posix()
            if f"{rel}/" not in doc:
                missing.append(f"{unit}/{rel}/")
    assert not missing, "folders docs/architecture.md does not describe: " + ", ".join(missing)


def test_no_import_cycle_among_our_modules():
    cycles = _cycles(tree())
    assert not cycles, f"{len(cycles)} import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.slow
def test_importlib_and_entry_point_strings_name_modules_that_exist():
    """A string an import machinery will load must survive moves: its module and attribute exist."""
    t = tree()
    bad = []
    for e in t.edges:
        if e.how != "import" and unit_of(e.target) is not None and e.target not in t.modules:
            bad.append(f"{_say(e)}: no such module")
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    texts = [(text, "pyproject.toml [project.scripts]") for text in scripts.values()]
    for m in t.modules.values():
        for node in ast.walk(ast.parse(m.path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and ENTRY_POINT.match(node.value):
                texts.append((node.value, f"{m.where}:{node.lineno}"))
    for text, where in texts:
        module, attr = text.split(":")
        if module not in t.modules:
            bad.append(f"{where}: {text!r} names no module of ours")
        elif attr.split(".")[0] not in _top_level_names(t.modules[module].path):
            bad.append(f"{where}: {text!r}: {module} defines no {attr.split('.')[0]}")
    assert not bad, "\n".join(bad)


def _top_level_names(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def test_no_sql_text_in_web():
    """The store is the only code that reads or writes SQL; the web calls its query functions."""
    bad = []
    for path in sorted((ROOT / "web").rglob("*")):
        if path.suffix in (".py", ".js", ".html") and "__pycache__" not in path.parts:
            text = path.read_text()
            for match in SQL.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                bad.append(f"{path.relative_to(ROOT)}:{line}: {' '.join(match.group().split())[:60]}")
    assert not bad, f"{len(bad)} SQL statements in web/:\n" + "\n".join(bad)


@pytest.mark.slow
def test_the_agent_and_the_simulator_do_not_import_the_inspector():
    bad = [
        _say(e)
        for e in _ours(tree().edges)
        if e.source.unit in ("agent", "simulator") and unit_of(e.target) == "inspector"
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.slow
def test_no_test_module_imports_another():
    """Shared test data lives in tests/support/ (factories and fixtures modules), never in a test module."""
    test_modules = {p.stem for p in TESTS.rglob("test_*.py")}
    spelled = re.compile(r"^\s*(?:from|import)\s+(?:tests\.)?(test_\w+)", re.MULTILINE)
    bad = []
    for path in sorted(TESTS.rglob("test_*.py")):
        source = path.read_text()
        names: list[tuple[str, int]] = []
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, ast.Import):
                names += [(a.name, node.lineno) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names.append((node.module, node.lineno))
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):  # scripts run in a subprocess
                names += [(m.group(1), node.lineno) for m in spelled.finditer(node.value)]
        for name, line in names:
            stem = name.removeprefix("tests.").split(".")[0]
            if stem in test_modules and stem != path.stem:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {stem}")
    assert not bad, "\n".join(bad)


def test_every_package_folder_is_installed_and_listed():
    """Each folder with an __init__.py is a package pyproject names, so a non-editable install has it."""
    import importlib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {m.name for m in tree().modules.values() if m.is_package and m.unit != "bench"}
    assert found - listed == set(), "packages missing from [tool.setuptools] packages"
    for package, folder in _package_dirs().items():
        assert Path(importlib.import_module(package).__file__).parent == folder
