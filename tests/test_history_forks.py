"""Versions shared by forked scopes: reading by id answers for the scope asked, and the same row
every time when no scope is given."""

from __future__ import annotations

import subprocess

import pytest

from gitmem.errors import NotFoundError
from gitmem.store import Store


def test_read_by_version_in_a_fork_answers_for_that_scope(store: Store) -> None:
    v1 = store.write("/a.md", "one\n")
    assert v1 is not None
    subprocess.run(["git", f"--git-dir={store.path}", "branch", "fork", "main"], check=True)
    v2 = store.write("/a.md", "two\n", scope="fork")
    assert v2 is not None
    for scope in ("main", "fork"):
        m = store.read("/a.md", scope=scope, version=v1.id)
        assert (m.scope, m.content) == (scope, "one\n")
    assert store.version(v1.id).scope == "main"  # the same answer every time: main first
    with pytest.raises(NotFoundError, match="not in scope 'main'"):
        store.read("/a.md", scope="main", version=v2.id)
    store.core.index.rebuild()
    assert store.version(v1.id).scope == "main"
