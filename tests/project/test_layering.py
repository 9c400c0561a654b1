"""The layering rules written down and enforced (like dulwich's test_source.py).

- every module belongs to a layer (docs/architecture.md#layers), and imports only from its own layer or
  below: base < model < git < engine < audit < push < store (the facade) < faces; faces (cli, sessions,
  integrations, server) import each other only as ``FACE_IMPORTS`` lists; entry points
  (``gitmem/__init__.py``, ``__main__.py``, ``hook.py``) may import anything and nothing imports them;
- no import cycle among gitmem's modules, imports inside functions included, and no waiver for one
  (a ``# cycle-ok:`` comment is itself a failure). Imports under ``if TYPE_CHECKING:`` never run, so
  they take no part in cycles, but they still obey the layer order; and a cycle closed only by them
  fails too (it hides a real coupling);
- pygit2 is imported only in the library layers that work with git: ``gitmem/git``, ``engine``,
  ``audit``, ``push``; no face does;
- nothing outside gitmem/cli/ imports typer or rich (the library never renders);
- nothing but gitmem/config.py reads os.environ / os.getenv;
- the library never calls print() (process entry points excepted);
- modules stay under 500 lines, with no waiver.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import gitmem

PACKAGE = Path(gitmem.__file__).parent
MAX_LINES = 500
# Process entry points that may talk to a terminal directly (the print check spares only these).
ENTRY_POINTS = {"gitmem/hook.py", "gitmem/__main__.py"}

# Bottom to top. A module belongs to the first layer with a prefix naming it or a package above it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("gitmem.errors", "gitmem.config", "gitmem.ids", "gitmem.events")),
    ("model", ("gitmem.model",)),
    ("git", ("gitmem.git",)),
    ("engine", ("gitmem.engine",)),
    ("audit", ("gitmem.audit",)),
    ("push", ("gitmem.push",)),
    (
        "store",
        ("gitmem.facade", "gitmem.store", "gitmem.webhooks", "gitmem.webhook_local"),
    ),  # the public library API the faces use
    ("faces", ("gitmem.cli", "gitmem.sessions", "gitmem.integrations", "gitmem.server", "gitmem.cluster")),
]
# Which face may import which other face: the CLI fronts the others; the server serves the integrations
# (MCP over HTTP) and the sessions (the console's sessions page).
FACE_IMPORTS: dict[str, set[str]] = {
    "gitmem.cli": {"gitmem.sessions", "gitmem.integrations", "gitmem.server", "gitmem.cluster"},
    "gitmem.server": {"gitmem.integrations", "gitmem.sessions"},  # the console shows and reverts sessions
    "gitmem.sessions": set(),
    "gitmem.integrations": set(),
    "gitmem.cluster": {"gitmem.server"},  # the cluster keeps the server's tokens in PostgreSQL
}
ENTRY_MODULES = {"gitmem", "gitmem.__main__", "gitmem.hook"}

CYCLE_OK = re.compile(r"#\s*cycle-ok:(.*)$")
SIZE_OK = re.compile(r"#\s*size-ok:\s*\S")
# The only layers that import pygit2 (the hook reads the quarantine with it)
PYGIT2_LAYERS = ("gitmem/git/", "gitmem/engine/", "gitmem/audit/", "gitmem/push/")


# ------------------------------------------------------------------ the import graph
@dataclass(frozen=True)
class Import:
    source: str  # importing module, dotted
    target: str  # imported module of the package, dotted
    file: str
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``: never runs
    waiver: str | None  # the reason of a ``# cycle-ok:`` comment on the import's lines


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for the package at ``root`` (a directory with __init__.py)."""
    out: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _type_only_nodes(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:  # the else branch does run
                ids.update(id(n) for n in ast.walk(stmt))
    return ids


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The package module ``name`` loads: itself, or the nearest package above (``from pkg import obj``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, modules: Mapping[str, Path]) -> list[Import]:
    """Every import of a package module by ``module``, wherever it stands (functions included)."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    tree = ast.parse(text, str(path))
    type_only = _type_only_nodes(tree)
    package = module.split(".")[0]
    here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    shown = str(path.relative_to(path.parents[len(module.split(".")) - (path.name != "__init__.py")]))
    out: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*here[: len(here) - node.level + 1], *([base] if base else [])])
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        span = lines[node.lineno - 1 : node.end_lineno]
        waivers = [m.group(1).strip() for line in span if (m := CYCLE_OK.search(line))]
        for name in names:
            if name.split(".")[0] != package:
                continue
            target = _resolve(name, modules)
            if target is None or target == module:
                continue
            out.append(
                Import(
                    module, target, shown, node.lineno, id(node) in type_only, waivers[0] if waivers else None
                )
            )
    return out


def import_graph(root: Path) -> list[Import]:
    modules = module_files(root)
    return [imp for module, path in modules.items() for imp in imports_of(module, path, modules)]


def find_cycles(imports: Iterable[Import], *, type_only: bool = False) -> list[list[str]]:
    """Strongly connected components of more than one module among the run-time imports (with
    ``type_only``, the ``if TYPE_CHECKING:`` ones too). A ``# cycle-ok:`` waiver breaks nothing."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        if type_only or not imp.type_only:
            graph.setdefault(imp.source, set()).add(imp.target)
            graph.setdefault(imp.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan; the package graph is small, recursion is fine
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components)


def _layer_of(module: str, layers: Sequence[tuple[str, tuple[str, ...]]]) -> tuple[int, str] | None:
    for rank, (_name, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                return rank, prefix
    return None


def layer_violations(
    imports: Iterable[Import],
    modules: Iterable[str],
    *,
    layers: Sequence[tuple[str, tuple[str, ...]]] = LAYERS,
    face_imports: Mapping[str, set[str]] = FACE_IMPORTS,
    entry_modules: set[str] = ENTRY_MODULES,
) -> list[str]:
    """Modules in no layer, imports of an entry point, and imports from a higher layer or a foreign face."""
    top = len(layers) - 1
    problems = [
        f"{m} is in no layer: add it to LAYERS (docs/architecture.md#layers)"
        for m in sorted(modules)
        if m not in entry_modules and _layer_of(m, layers) is None
    ]
    for imp in imports:
        where = f"{imp.file}:{imp.line}: {imp.source} imports {imp.target}"
        if imp.target in entry_modules:
            problems.append(f"{where}, an entry point")
            continue
        if imp.source in entry_modules:
            continue
        src, dst = _layer_of(imp.source, layers), _layer_of(imp.target, layers)
        if src is None or dst is None:
            continue  # reported above
        if dst[0] > src[0]:
            problems.append(f"{where} of the higher layer {layers[dst[0]][0]!r}")
        elif src[0] == dst[0] == top and src[1] != dst[1] and dst[1] not in face_imports.get(src[1], set()):
            problems.append(f"{where}: the face {src[1]} may not import the face {dst[1]}")
    return problems


def describe_cycles(cycles: list[list[str]], imports: Iterable[Import]) -> list[str]:
    imports = list(imports)
    out = []
    for members in cycles:
        inside = set(members)
        edges = sorted(
            f"{imp.file}:{imp.line} {imp.source} -> {imp.target}"
            for imp in imports
            if imp.source in inside and imp.target in inside
        )
        out.append(f"cycle among {', '.join(members)}: " + "; ".join(edges))
    return out


# ------------------------------------------------------------------ the package's own checks
def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def _library_modules() -> list[Path]:
    return [p for p in _modules() if p.relative_to(PACKAGE).parts[0] != "cli"]


def _rel(path: Path) -> str:
    return str(path.relative_to(PACKAGE.parent))


def _imports(tree: ast.AST) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
    return out


_ENV_NAMES = ("environ", "environb", "getenv", "putenv", "unsetenv")


def _environ_uses(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in _ENV_NAMES
            or (
                isinstance(node, ast.ImportFrom)
                and node.module == "os"
                and any(a.name in _ENV_NAMES for a in node.names)
            )
        ):
            lines.append(node.lineno)
    return lines


def _parse(path: Path) -> ast.AST:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def test_the_checks_see_the_package() -> None:
    names = {_rel(p) for p in _modules()}
    assert {"gitmem/config.py", "gitmem/store.py", "gitmem/cli/app.py"} <= names
    graph = import_graph(PACKAGE)
    # Lazy imports inside functions and TYPE_CHECKING imports are both seen.
    assert any(i.source == "gitmem.engine.opening" and i.target == "gitmem.engine.index" for i in graph)
    assert any(i.source == "gitmem.engine.index_db" and i.type_only for i in graph)


def test_no_import_cycles() -> None:
    graph = import_graph(PACKAGE)
    assert describe_cycles(find_cycles(graph), graph) == []


def test_imports_follow_the_layers() -> None:
    graph = import_graph(PACKAGE)
    assert layer_violations(graph, module_files(PACKAGE)) == []


def test_no_cycle_waivers() -> None:
    waived = [f"{i.file}:{i.line}" for i in import_graph(PACKAGE) if i.waiver is not None]
    assert waived == [], "no cycle is deliberate: break it (a lower module, a callable passed down)"


def test_no_cycles_through_type_checking_imports() -> None:
    """A cycle closed by a ``TYPE_CHECKING`` import hides a real coupling (the module imported for
    its types calls back at run time): a lower module or a Protocol breaks it."""
    graph = import_graph(PACKAGE)
    assert describe_cycles(find_cycles(graph, type_only=True), graph) == []


def test_the_core_is_at_the_bottom_of_the_engine() -> None:
    """StoreCore imports nothing that reads through it: the index, the ledger and the deny-list take
    what they need (the index is handed to it by gitmem.engine.opening), in no form at all."""
    graph = import_graph(PACKAGE)
    takers = {i.source for i in graph if i.target == "gitmem.engine.core"}
    assert sorted(i.target for i in graph if i.source == "gitmem.engine.core" and i.target in takers) == []
    assert not any(
        i.source == "gitmem.engine.core" and i.target in {"gitmem.engine.index", "gitmem.engine.ledger"}
        for i in graph
    )


def _pygit2_importers() -> set[str]:
    return {_rel(p) for p in _modules() if "pygit2" in _imports(_parse(p))}


def test_pygit2_only_in_the_library_layers() -> None:
    outside = {m for m in _pygit2_importers() if not m.startswith(PYGIT2_LAYERS)}
    assert outside == set(), "pygit2 belongs in gitmem/git, engine, audit or push"


def test_library_never_imports_typer_or_rich() -> None:
    offenders = [
        f"{_rel(p)} imports {sorted(_imports(_parse(p)) & {'typer', 'rich'})}"
        for p in _library_modules()
        if _imports(_parse(p)) & {"typer", "rich"}
    ]
    assert offenders == []


def test_only_config_reads_the_environment() -> None:
    offenders = [
        f"{_rel(p)}:{line}"
        for p in _modules()
        if _rel(p) != "gitmem/config.py"
        for line in _environ_uses(_parse(p))
    ]
    assert offenders == []


def test_library_never_prints() -> None:
    offenders = [
        f"{_rel(p)}:{node.lineno}"
        for p in _library_modules()
        if _rel(p) not in ENTRY_POINTS
        for node in ast.walk(_parse(p))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
    ]
    assert offenders == []


def test_detectors_catch_violations() -> None:
    bad = ast.parse("import os\nfrom rich.console import Console\nx = os.environ['A']\ny = os.getenv('B')\n")
    assert _imports(bad) == {"os", "rich"}
    assert _environ_uses(bad) == [3, 4]
    assert _environ_uses(ast.parse("from os import environ\n")) == [1]


def oversized(paths: Iterable[Path]) -> list[Path]:
    """Files over MAX_LINES lines (a ``# size-ok:`` comment changes nothing)."""
    return [p for p in paths if len(p.read_text(encoding="utf-8").splitlines()) > MAX_LINES]


def test_modules_stay_small() -> None:
    big = {_rel(p) for p in oversized(_modules())}
    assert big == set(), "split these along their seams"


def test_no_size_waivers() -> None:
    waived = [
        _rel(p)
        for p in _modules()
        if any(SIZE_OK.search(line) for line in p.read_text(encoding="utf-8").splitlines())
    ]
    assert waived == []


# ------------------------------------------------------------------ the detector on a fake package
def _fake_package(root: Path, files: Mapping[str, str]) -> Path:
    pkg = root / "gitmem"
    for name, text in {"__init__.py": "", **files}.items():
        path = pkg / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return pkg


def test_the_detector_fails_on_a_cycle_through_a_lazy_import(tmp_path: Path) -> None:
    pkg = _fake_package(
        tmp_path,
        {
            "engine/__init__.py": "",
            "engine/a.py": "from gitmem.engine import b\n",
            "engine/b.py": "def f():\n    from gitmem.engine.a import x\n    return x\n",
            "engine/c.py": "from . import a\n",  # relative imports are resolved too
        },
    )
    graph = import_graph(pkg)
    assert find_cycles(graph) == [["gitmem.engine.a", "gitmem.engine.b"]]
    assert any(i.source == "gitmem.engine.c" and i.target == "gitmem.engine.a" for i in graph)
    (message,) = describe_cycles(find_cycles(graph), graph)
    assert "b.py:2 gitmem.engine.b -> gitmem.engine.a" in message


def test_a_cycle_ok_comment_breaks_no_cycle_and_type_checking_only_the_run_time_one(tmp_path: Path) -> None:
    lazy = "def f():\n    from gitmem.engine.a import x  # cycle-ok: a test of the waiver\n    return x\n"
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gitmem.engine.a import x\n"
    graphs = {}
    for b in (lazy, typed):
        pkg = _fake_package(
            tmp_path / str(len(b)),
            {"engine/__init__.py": "", "engine/a.py": "from gitmem.engine import b\n", "engine/b.py": b},
        )
        graphs[b] = import_graph(pkg)
    both = [["gitmem.engine.a", "gitmem.engine.b"]]
    assert find_cycles(graphs[lazy]) == both  # the waiver is seen, and waives nothing
    assert [i.waiver for i in graphs[lazy] if i.waiver] == ["a test of the waiver"]
    assert find_cycles(graphs[typed]) == [] and find_cycles(graphs[typed], type_only=True) == both


def test_the_detector_fails_on_imports_from_above(tmp_path: Path) -> None:
    pkg = _fake_package(
        tmp_path,
        {
            "errors.py": "",
            "model/__init__.py": "",
            "model/paths.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gitmem.store import Store\n",
            "store.py": "import gitmem.model.paths\n",
            "sessions/__init__.py": "from gitmem.cli import app\n",
            "cli/__init__.py": "",
            "cli/app.py": "from gitmem import sessions\nfrom gitmem.hook import main\n",
            "hook.py": "from gitmem.cli.app import x\n",
            "stray.py": "",
        },
    )
    problems = layer_violations(import_graph(pkg), module_files(pkg))
    assert sorted(p.split(": ", 1)[1] if ".py:" in p else p for p in problems) == [
        "gitmem.cli.app imports gitmem.hook, an entry point",
        "gitmem.model.paths imports gitmem.store of the higher layer 'store'",
        "gitmem.sessions imports gitmem.cli.app: the face gitmem.sessions may not import the face gitmem.cli",
        "gitmem.stray is in no layer: add it to LAYERS (docs/architecture.md#layers)",
    ]


def test_the_size_check_fails_with_or_without_a_reason(tmp_path: Path) -> None:
    body = "x = 1\n" * (MAX_LINES + 1)
    (tmp_path / "big.py").write_text(body, encoding="utf-8")
    (tmp_path / "whole.py").write_text("# size-ok: one table, one job\n" + body, encoding="utf-8")
    (tmp_path / "small.py").write_text("x = 1\n" * MAX_LINES, encoding="utf-8")
    assert oversized(sorted(tmp_path.glob("*.py"))) == [tmp_path / "big.py", tmp_path / "whole.py"]
