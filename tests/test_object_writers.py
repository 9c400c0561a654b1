"""The per-thread object writers (gitmem.git.packwriter: a single write's loose writer, a group's or
a batch's staging pack) against what a store handle's life and git maintenance do to them."""

from __future__ import annotations

from pathlib import Path

import gitmem
from gitmem.engine.batch import BatchOp, apply_batch
from tests.helpers import git


def test_a_store_handle_closed_then_used_again_still_writes(workspace: Path) -> None:
    # Before: close() freed the thread's loose writer and staging repositories, which have no path
    # to reopen their object database from; the next write on the same thread failed with a raw
    # pygit2 NotFoundError 'path cannot exist in repository' (a plain repository reopens lazily).
    store = gitmem.create_store("notes", home=workspace)
    store.write("/memories/a.md", "one\n")
    apply_batch(store.core, [BatchOp("write", f"/memories/b{k}.md", f"batch {k}\n") for k in range(3)])
    store.close()
    assert store.write("/memories/a.md", "two\n") is not None
    done = apply_batch(store.core, [BatchOp("write", f"/memories/b{k}.md", f"again {k}\n") for k in range(3)])
    assert len(done.versions) == 3
    assert store.read("/memories/a.md").content == "two\n"
    assert store.read("/memories/b2.md").content == "again 2\n"
    store.close()
    assert git(store.path, "fsck", "--full", "--strict").returncode == 0
