"""Faces live on the public API (docs/access.md, docs/architecture.md): a module of ``gitmem/cli``,
``server``, ``sessions`` or ``integrations`` imports no ``gitmem.engine``, ``gitmem.audit``,
``gitmem.git`` or ``gitmem.push`` module and touches no ``.core``; and none imports pygit2 (only
the library layers ``git``, ``engine``, ``audit`` and ``push`` do: the facade hands out ids and
bytes, never pygit2 objects).

Every face module does (the allow-lists that counted the modules still on their way are gone):
one reach or one pygit2 import anywhere in a face fails the test, with the module and the count.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import gitmem

PACKAGE = Path(gitmem.__file__).parent
FACES = ("cli", "server", "sessions", "integrations", "cluster")
INTERNAL = ("gitmem.engine", "gitmem.audit", "gitmem.git", "gitmem.push")

PYGIT2_FACES = ("cli", "server", "sessions", "integrations")


def uses(path: Path) -> int:
    """Internal imports (anywhere, type-only ones too) plus ``.core`` attribute uses."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    n = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            n += node.module.startswith(INTERNAL) or (
                node.module == "gitmem"
                and any(a.name in ("engine", "audit", "git", "push") for a in node.names)
            )
        elif isinstance(node, ast.Import):
            n += sum(a.name.startswith(INTERNAL) for a in node.names)
        elif isinstance(node, ast.Attribute) and node.attr == "core":
            n += 1
    return n


def counts() -> Counter[str]:
    out: Counter[str] = Counter()
    for face in FACES:
        for path in sorted((PACKAGE / face).rglob("*.py")):
            out[str(path.relative_to(PACKAGE))] = uses(path)
    return out


def test_faces_reach_nothing_below_the_public_api() -> None:
    found = {m: n for m, n in counts().items() if n}
    assert not found, (
        f"faces reaching below the public API (module: imports of internals plus .core uses): {found}"
    )


def test_the_counter_sees_what_it_must() -> None:
    """The counter itself: an engine import, an audit import inside a function and a ``.core``."""
    sample = PACKAGE.parent / "build" / "faces-sample.py"
    sample.parent.mkdir(exist_ok=True)
    sample.write_text(
        "from gitmem.engine import proposals\n"
        "def f(store):\n    import gitmem.audit.review\n    return store.core\n"
        "from gitmem.store import Store\n",
        encoding="utf-8",
    )
    try:
        assert uses(sample) == 3
    finally:
        sample.unlink()


def imports_pygit2(path: Path) -> bool:
    """Whether the module imports pygit2 anywhere (functions and ``TYPE_CHECKING`` blocks too)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "pygit2" for a in node.names):
            return True
        if (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module or "").split(".")[0] == "pygit2"
        ):
            return True
    return False


def pygit2_importers() -> set[str]:
    return {
        str(path.relative_to(PACKAGE))
        for face in PYGIT2_FACES
        for path in sorted((PACKAGE / face).rglob("*.py"))
        if imports_pygit2(path)
    }


def test_faces_do_not_import_pygit2() -> None:
    found = pygit2_importers()
    assert not found, f"faces importing pygit2 (the facade gives ids and bytes instead): {sorted(found)}"


def test_the_pygit2_check_sees_what_it_must() -> None:
    sample = PACKAGE.parent / "build" / "faces-pygit2-sample.py"
    sample.parent.mkdir(exist_ok=True)
    for text, expected in (
        ("def f():\n    import pygit2.enums\n", True),
        ("from pygit2 import Oid\n", True),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pygit2\n", True),
        ("from gitmem.store import blob_id\n", False),
    ):
        sample.write_text(text, encoding="utf-8")
        try:
            assert imports_pygit2(sample) is expected, text
        finally:
            sample.unlink()
