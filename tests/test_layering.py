"""The layering rules written down and enforced (like dulwich's test_source.py).

- nothing outside gitmem/cli/ imports typer or rich (the library never renders);
- nothing but gitmem/config.py reads os.environ / os.getenv;
- the library never calls print() (process entry points excepted);
- modules stay under ~500 lines: reported as a warning, not a failure.
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import gitmem

PACKAGE = Path(gitmem.__file__).parent
MAX_LINES = 500
# Process entry points that talk to a terminal or to git directly.
ENTRY_POINTS = {"hook.py", "__main__.py"}


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
        if p.name not in ENTRY_POINTS
        for node in ast.walk(_parse(p))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
    ]
    assert offenders == []


def test_detectors_catch_violations() -> None:
    bad = ast.parse("import os\nfrom rich.console import Console\nx = os.environ['A']\ny = os.getenv('B')\n")
    assert _imports(bad) == {"os", "rich"}
    assert _environ_uses(bad) == [3, 4]
    assert _environ_uses(ast.parse("from os import environ\n")) == [1]


def test_module_sizes_are_reported() -> None:
    big = {
        _rel(p): n for p in _modules() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    if big:
        listing = ", ".join(f"{name} ({n} lines)" for name, n in sorted(big.items()))
        warnings.warn(f"modules over {MAX_LINES} lines: {listing}", stacklevel=1)
