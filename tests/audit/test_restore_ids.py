"""A restored store's id (docs/stores.md#restore): the original's only when no store has it."""

from __future__ import annotations

from pathlib import Path

from test_restore import backup, gm

import gitmem
from gitmem.audit.verify import verify
from gitmem.store import Store


def test_a_restore_next_to_its_original_gets_a_new_id_and_keep_id_is_refused(
    store: Store, tmp_path: Path, workspace: Path
) -> None:
    store.write("/a.md", "alpha", actor="user:alice")
    original = store.id
    bundle, files = backup(store, tmp_path)
    refused = gm("store", "create", "copy", "--from-bundle", str(bundle), "--backup", str(files), "--keep-id")
    assert refused.exit_code == 4 and original in refused.stderr and "still exists" in refused.stderr
    assert [s.id for s in gitmem.list_stores(workspace)] == [original]  # nothing left behind
    r = gm("store", "create", "copy", "--from-bundle", str(bundle), "--backup", str(files), "--json")
    assert r.exit_code == 0, r.output
    copies = [s for s in gitmem.list_stores(workspace) if s.name == "copy"]
    assert len(copies) == 1 and copies[0].id != original
    with gitmem.open_store(copies[0].id, workspace) as copy:
        assert copy.read("/a.md").content == "alpha" and verify(copy.core).ok
        assert copy.path.name == f"{copies[0].id}.git"
    with gitmem.open_store(original, workspace) as again:  # the original is untouched
        assert again.name == "notes" and again.read("/a.md").content == "alpha"


def test_a_restore_of_a_deleted_store_keeps_its_id(store: Store, tmp_path: Path, workspace: Path) -> None:
    store.write("/a.md", "alpha", actor="user:alice")
    original = store.id
    bundle, files = backup(store, tmp_path)
    store.close()
    gitmem.delete_store(original, workspace)
    r = gm("store", "create", "notes", "--from-bundle", str(bundle), "--backup", str(files), "--keep-id")
    assert r.exit_code == 0, r.output
    with gitmem.open_store(original, workspace) as back:
        assert back.read("/a.md").content == "alpha" and back.path.name == f"{original}.git"
    # without the backup the ledger's id is kept too (when no store has it)
    gitmem.delete_store(original, workspace)
    plain = gm("store", "create", "notes", "--from-bundle", str(bundle), "--allow-unverified")
    assert plain.exit_code in (0, 7), plain.output
    assert [s.id for s in gitmem.list_stores(workspace)] == [original]
