"""Handles of one index file while another handle removes it and derives a new one
(docs/architecture.md "The index and search": an older format, a corrupt file, a rebuild). What only
the index keeps (the redaction marks it records as a redaction runs) must reach the file later
readers open: a stale file is removed only if it is still the one judged (IndexDb._remove_stale),
and a write through a connection to a removed file opens the new one first (IndexDb.writable_db)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import gitmem
from gitmem.audit import redact
from gitmem.engine.index import INDEX_FILE
from gitmem.engine.index_db import IndexDb
from gitmem.store import Store
from tests.engine.test_index_format import _history, _to_format_3


def _format_3_with_leak(store: Store) -> str:
    """A history in an index of format 3 (derived again when opened), with a leaked version."""
    _history(store)
    leaked = _leak(store)
    index_file = store.core.gitmem_dir / INDEX_FILE
    store.close()
    _to_format_3(index_file)
    return leaked


def test_a_redaction_through_the_first_opener_is_marked_for_later_readers(
    store: Store, workspace: Path
) -> None:
    leaked = _format_3_with_leak(store)
    a = gitmem.open_store("notes", home=workspace)
    b = gitmem.open_store("notes", home=workspace)
    remove = IndexDb._remove_stale
    raced: list[bool] = []

    def remove_after_a(self: Any) -> None:
        if self is b.core.index and not raced:  # b read format 3; a opens and derives it meanwhile
            raced.append(True)
            a.versions(scope="main")
        remove(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(IndexDb, "_remove_stale", remove_after_a)
        b.versions(scope="main")
    assert raced
    redact.redact(a.core, leaked, reason="leaked token", actor="user:admin")
    assert [v.redaction is not None for v in a.versions("/k") if v.id == leaked] == [True]
    a.close()
    b.close()
    assert _marked(workspace, leaked) == [True]


def test_control_without_the_race_the_mark_is_kept(store: Store, workspace: Path) -> None:
    leaked = _format_3_with_leak(store)
    a = gitmem.open_store("notes", home=workspace)
    b = gitmem.open_store("notes", home=workspace)
    b.versions(scope="main")
    a.versions(scope="main")
    redact.redact(a.core, leaked, reason="leaked token", actor="user:admin")
    a.close()
    b.close()
    assert _marked(workspace, leaked) == [True]


def _leak(store: Store) -> str:
    store.write("/k", "token=abc123\n")
    leaked = store.versions("/k")[0].id
    store.write("/k", "token=(rotated)\n")
    return leaked


def _marked(workspace: Path, leaked: str) -> list[bool]:
    with gitmem.open_store("notes", home=workspace) as c:
        return [v.redaction is not None for v in c.versions("/k") if v.id == leaked]


def test_a_handle_open_across_another_handles_rebuild_writes_the_new_file(
    store: Store, workspace: Path
) -> None:
    leaked = _leak(store)
    a = gitmem.open_store("notes", home=workspace)
    a.versions(scope="main")  # a's connection is open on the file
    with gitmem.open_store("notes", home=workspace) as b:
        b.core.index.rebuild()  # removes the file and derives a new one
    redact.redact(a.core, leaked, reason="leaked token", actor="user:admin")
    a.close()
    assert _marked(workspace, leaked) == [True]


def test_a_corrupt_index_found_by_two_handles_is_derived_once_and_keeps_the_marks(
    store: Store, workspace: Path
) -> None:
    leaked = _leak(store)
    index_file = store.core.gitmem_dir / INDEX_FILE
    store.close()
    a = gitmem.open_store("notes", home=workspace)
    b = gitmem.open_store("notes", home=workspace)
    a.versions(scope="main")
    b.versions(scope="main")
    for suffix in ("-wal", "-shm"):
        index_file.with_name(INDEX_FILE + suffix).unlink(missing_ok=True)
    index_file.write_bytes(b"not an index" * 100)  # a new, corrupt file in its place
    # b finds it corrupt and derives a new one; a, whose connection is to the old, unlinked file,
    # then writes the redaction's marks to the new one.
    b.write("/other", "x\n")
    inode = index_file.stat().st_ino
    redact.redact(a.core, leaked, reason="leaked token", actor="user:admin")
    assert index_file.stat().st_ino == inode  # a did not remove b's new file
    a.close()
    b.close()
    assert _marked(workspace, leaked) == [True]


def test_only_a_stale_file_is_removed(store: Store) -> None:
    store.write("/a", "one\n")
    index = store.core.index
    path = index.path
    store.close()
    inode = path.stat().st_ino
    index._remove_stale()
    assert path.stat().st_ino == inode  # of this format: another opener derived it, it stays
    _to_format_3(path)
    index._remove_stale()
    assert not path.exists()  # of an older format: removed
    index._remove_stale()  # none there: nothing to do
    path.write_bytes(b"not an index" * 100)
    index._remove_stale()
    assert not path.exists()  # corrupt: removed
    path.write_bytes(b"")
    index._remove_stale()
    assert path.exists()  # a new, empty database another opener is making: left
