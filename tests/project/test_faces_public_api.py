"""Faces live on the public API (docs/access.md, docs/architecture.md): a module of ``gitmem/cli``,
``server``, ``sessions`` or ``integrations`` imports no ``gitmem.engine``, ``gitmem.audit``,
``gitmem.git`` or ``gitmem.push`` module and touches no ``.core``; and none imports pygit2 (only
the library layers ``git``, ``engine``, ``audit`` and ``push`` do: the facade hands out ids and
bytes, never pygit2 objects).

Not all of them do yet. ``ALLOWED`` names every module that still does and how often: the
allow-list only shrinks. A module over its count, a module not listed, or an entry higher than
the module's real count (shrink it) fails the test.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import gitmem

PACKAGE = Path(gitmem.__file__).parent
FACES = ("cli", "server", "sessions", "integrations", "cluster")
INTERNAL = ("gitmem.engine", "gitmem.audit", "gitmem.git", "gitmem.push")

# module (relative to gitmem/) -> internal imports plus ``.core`` uses it still has. Shrink it.
ALLOWED: dict[str, int] = {
    "cli/hooks.py": 8,
    "cluster/endpoints.py": 2,
    "cluster/node.py": 1,
    "cluster/purges.py": 1,
    "server/console/internals.py": 11,
    "server/conversations_api.py": 15,
    "server/git_http.py": 1,
    "server/ops.py": 10,
    "server/past_views.py": 2,
    "server/proposed.py": 4,
    "server/responses_proxy.py": 5,
    "server/tokens.py": 2,
}

# Face modules that still import pygit2 (owned by other work in progress). Shrink it.
PYGIT2_ALLOWED: set[str] = {
    "server/console/internals.py",
    "server/ops.py",
    "server/past_views.py",
    "server/proposed.py",
}
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


def test_faces_reach_no_further_than_the_allow_list() -> None:
    found = counts()
    over = {m: (n, ALLOWED.get(m, 0)) for m, n in found.items() if n > ALLOWED.get(m, 0)}
    assert not over, f"faces reaching below the public API beyond the allow-list (found, allowed): {over}"


def test_the_allow_list_only_shrinks() -> None:
    found = counts()
    stale = {m: (ALLOWED[m], found.get(m, 0)) for m in ALLOWED if ALLOWED[m] > found.get(m, 0)}
    assert not stale, f"lower these allow-list entries to what the modules still use (listed, found): {stale}"


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
    extra = pygit2_importers() - PYGIT2_ALLOWED
    assert not extra, f"faces importing pygit2 (the facade gives ids and bytes instead): {sorted(extra)}"


def test_the_pygit2_allow_list_only_shrinks() -> None:
    stale = PYGIT2_ALLOWED - pygit2_importers()
    assert not stale, f"these no longer import pygit2: take them off PYGIT2_ALLOWED: {sorted(stale)}"


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
