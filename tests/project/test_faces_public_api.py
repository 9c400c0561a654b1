"""Faces live on the public API (docs/access.md, docs/architecture.md): a module of ``gitmem/cli``,
``server``, ``sessions`` or ``integrations`` imports no ``gitmem.engine``, ``gitmem.audit``,
``gitmem.git`` or ``gitmem.push`` module and touches no ``.core``.

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
    "cli/app.py": 1,
    "cli/audit.py": 9,
    "cli/fastread.py": 1,
    "cli/hooks.py": 15,
    "cli/memories.py": 1,
    "cli/search.py": 3,
    "cli/stores.py": 1,
    "cli/tlog.py": 15,
    "cli/transfer.py": 7,
    "cli/versions.py": 5,
    "cluster/node.py": 2,
    "integrations/anthropic_tool.py": 3,
    "integrations/langgraph.py": 1,
    "integrations/langgraph_checkpoint.py": 12,
    "integrations/mcp_server.py": 1,
    "server/anthropic_api.py": 2,
    "server/console/audit.py": 6,
    "server/console/browse.py": 4,
    "server/console/dreams.py": 2,
    "server/console/internals.py": 11,
    "server/conversations_api.py": 16,
    "server/databricks_api.py": 1,
    "server/databricks_wire.py": 1,
    "server/dream_jobs.py": 1,
    "server/dreamer.py": 5,
    "server/git_http.py": 1,
    "server/inline.py": 1,
    "server/ops.py": 10,
    "server/past_views.py": 2,
    "server/proposed.py": 4,
    "server/responses_proxy.py": 5,
    "server/tokens.py": 2,
    "server/witness_http.py": 5,
    "sessions/mount.py": 3,
    "sessions/revert.py": 6,
    "sessions/sync.py": 20,
    "sessions/watch.py": 1,
}


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
