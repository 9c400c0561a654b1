"""Two handles opening one index of format 3 at once (docs/architecture.md: an older format is
derived again): the second removes the file the first has just derived and opened, so the first
goes on writing a deleted file; what only the index keeps (the redaction marks it records as a
redaction runs) is then lost for every later reader."""

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


@pytest.mark.xfail(
    strict=True,
    reason="index_db._connect removes an index of another format with no lock and no check that it "
    "is still the file it read: a second opener deletes the index the first just derived; the "
    "first handle's later records (a redaction's marks) land in the unlinked file",
)
def test_a_redaction_through_the_first_opener_is_marked_for_later_readers(
    store: Store, workspace: Path
) -> None:
    _history(store)
    store.write("/k", "token=abc123\n")
    leaked = store.versions("/k")[0].id
    store.write("/k", "token=(rotated)\n")
    index_file = store.core.gitmem_dir / INDEX_FILE
    store.close()
    _to_format_3(index_file)

    a = gitmem.open_store("notes", home=workspace)
    b = gitmem.open_store("notes", home=workspace)
    remove = IndexDb._remove_files
    raced: list[bool] = []

    def remove_after_a(self: Any) -> None:
        if self is b.core.index and not raced:  # b read format 3; a opens and derives it meanwhile
            raced.append(True)
            a.versions(scope="main")
        remove(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(IndexDb, "_remove_files", remove_after_a)
        b.versions(scope="main")
    assert raced
    redact.redact(a.core, leaked, reason="leaked token", actor="user:admin")
    assert [v.redaction is not None for v in a.versions("/k") if v.id == leaked] == [True]
    a.close()
    b.close()
    c = gitmem.open_store("notes", home=workspace)
    assert [v.redaction is not None for v in c.versions("/k") if v.id == leaked] == [True]
    c.close()


def test_control_without_the_race_the_mark_is_kept(store: Store, workspace: Path) -> None:
    _history(store)
    store.write("/k", "token=abc123\n")
    leaked = store.versions("/k")[0].id
    store.write("/k", "token=(rotated)\n")
    index_file = store.core.gitmem_dir / INDEX_FILE
    store.close()
    _to_format_3(index_file)
    a = gitmem.open_store("notes", home=workspace)
    b = gitmem.open_store("notes", home=workspace)
    b.versions(scope="main")
    a.versions(scope="main")
    redact.redact(a.core, leaked, reason="leaked token", actor="user:admin")
    a.close()
    b.close()
    c = gitmem.open_store("notes", home=workspace)
    assert [v.redaction is not None for v in c.versions("/k") if v.id == leaked] == [True]
    c.close()
