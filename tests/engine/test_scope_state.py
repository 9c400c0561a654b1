"""A scope state's blob lookups are cached per tree: a state a batch moves on (``commit_change``
sets ``state.tree``) must see the new tree, never what it looked up in the old one."""

from __future__ import annotations

import gitmem
from gitmem.engine.batch import BatchOp, apply_batch
from gitmem.engine.overlay import BatchState
from gitmem.engine.writer import Change, ScopeState, commit_change
from gitmem.ids import new_id
from gitmem.store import Store


def test_a_state_moved_on_by_a_commit_sees_the_new_tree(store: Store) -> None:
    store.write("/a.md", "one\n")
    tip = store.core.tip("main")
    state = ScopeState(store.core, "main", tip)
    old = state.blob("/a.md")
    assert old is not None and old.data == b"one\n"
    assert state.blob("/b.md") is None  # a miss is cached too
    mid = state.memory_id("/a.md")
    commit_change(store.core, state, Change("modified", "/a.md", b"two\n", mid), tip, "user:t", None)
    new = state.blob("/a.md")
    assert new is not None and new.data == b"two\n"
    commit_change(store.core, state, Change("created", "/b.md", b"bee\n", new_id("mem")), tip, "user:t", None)
    b = state.blob("/b.md")
    assert b is not None and b.data == b"bee\n"
    commit_change(store.core, state, Change("deleted", "/a.md", None, mid), tip, "user:t", None)
    assert state.blob("/a.md") is None


def test_a_batch_state_sees_its_own_changes_over_cached_base_lookups(store: Store) -> None:
    store.write("/a.md", "one\n")
    state = BatchState(store.core, "main", store.core.tip("main"))
    base = state.blob("/a.md")
    assert base is not None and base.data == b"one\n"
    state.applied(Change("modified", "/a.md", b"two\n", "mem_x"), len(base.data))
    assert state.blob("/a.md").data == b"two\n"
    state.applied(Change("deleted", "/a.md", None, "mem_x"), 4)
    assert state.blob("/a.md") is None
    assert state.base_tree is not None and state._base_blob("/a.md") is base  # the base is unchanged


def test_a_batch_that_rewrites_one_path_many_times_ends_at_its_last_content(store: Store) -> None:
    store.write("/a.md", "zero\n")
    ops = [BatchOp("write", "/a.md", f"v{i}\n") for i in range(5)] + [BatchOp("write", "/b.md", "b\n")]
    apply_batch(store.core, ops, actor="user:t")
    assert store.read("/a.md").content == "v4\n"
    assert [v.operation for v in store.versions(scope="main") if v.path == "/a.md"].count("modified") == 5
    with gitmem.open_store("notes", store.core.path.parent.parent) as again:
        assert again.read("/b.md").content == "b\n"
