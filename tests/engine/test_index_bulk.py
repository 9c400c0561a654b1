"""A catch-up over many commits (a rebuild) derives exactly what one-at-a-time indexing derives,
whichever way it diffs (libgit2 in process, or ``git log --raw`` for long walks) and with version
rows buffered: a copied gitmem commit in the same walk as its original still gets its own id."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gitmem.engine import index_catchup as index_mod
from gitmem.store import Store
from tests.helpers import git, plain_commit


def _rows(store: Store) -> list[tuple[Any, ...]]:
    db = store.core.index.db
    versions = db.execute(
        "SELECT seq, id, memory_id, scope, path, prev_path, operation, actor, session, created_at, sha256, "
        "size, blob, commit_id FROM versions ORDER BY seq"
    ).fetchall()
    heads = db.execute("SELECT * FROM heads ORDER BY scope, path").fetchall()
    stats = db.execute("SELECT scope, memories, bytes FROM scopes ORDER BY scope").fetchall()
    return [*versions, *heads, *stats]


def _history(store: Store, tmp_path: Path) -> None:
    store.write("/a", "one\n")
    v2 = store.write("/a", "two\n", description="the second")
    store.write("/a", "one\n")
    for i in range(12):
        store.write(f"/notes/n{i}.md", f"---\ndescription: note {i}\n---\nbody {i}\n")
    store.write("/notes.md", "beside the directory\n")
    body1 = b"---\ndescription: note 1\n---\nbody 1\n"
    plain_commit(store, {"notes/n1.md": None, "notes.md": b"changed\n", "moved.md": body1})  # a move
    plain_commit(store, {"notes/n2.md": b"x\n", "notes/n3.md": None, "b": b"---\ndescription: yes\n---\n"})
    work = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(store.path), str(work))
    git(work, "cherry-pick", v2.commit)  # type: ignore[union-attr]
    git(work, "push", "-q", "origin", "HEAD:main")
    store.read("/a")  # one-at-a-time catch-up of the push
    # a local copy of v2's commit (no push, so no receipt: its trailers are checked as the store's own)
    message = store.core.repo[v2.commit].message  # type: ignore[union-attr,attr-defined]
    plain_commit(store, {"a": b"three\n"}, message=message)
    store.read("/a")


def test_rebuild_matches_incremental_indexing(store: Store, tmp_path: Path) -> None:
    _history(store, tmp_path)
    incremental = _rows(store)
    assert store.core.index.rebuild() == len([r for r in incremental if len(r) == 14])
    assert _rows(store) == incremental
    versions = store.versions("/a")
    assert len(versions) == 5 == len({v.id for v in versions})
    # the late secondary indexes are back after the rebuild
    names = {r[0] for r in store.core.index.db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
    assert set(index_mod._LATE_INDEXES) <= names


def test_buffered_rows_are_flushed_before_a_copy_is_checked(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the whole walk buffered (no batch flush), the cherry-picked copy still sees its
    original's row and is derived as plain git."""
    _history(store, tmp_path)
    incremental = _rows(store)
    monkeypatch.setattr(index_mod, "_FLUSH_ROWS", 10**9)
    store.core.index.rebuild()
    assert _rows(store) == incremental
