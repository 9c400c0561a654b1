"""``Store``'s verbs by memory id and listing pages (gitmem/facade/server_ops.py): what the
Anthropic API's memory endpoints are made of, on the library itself."""

from __future__ import annotations

import hashlib

import pytest

import gitmem
from gitmem.errors import ForbiddenError, NotFoundError, PathConflictError, PreconditionFailedError
from gitmem.model.caller import Caller
from gitmem.store import Memory, MemoryPage, Prefix, Version


def written(v: Version | None) -> Version:
    assert v is not None
    return v


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_update_by_id_changes_content_and_path_in_one_version(store: gitmem.Store) -> None:
    mid = written(store.write("/a.md", "one")).memory_id
    m = store.update_by_id(mid, content="two", path="/b.md", if_sha256=sha("one"), with_content=True)
    assert (m.path, m.content, m.memory_id, m.content_sha256) == ("/b.md", "two", mid, sha("two"))
    assert [v.operation for v in store.versions(memory_id=mid)] == ["modified", "created"]
    assert store.memory_by_id(mid).content == "two"
    with pytest.raises(NotFoundError):
        store.read("/a.md")
    # a failed precondition is refused, unless the memory already is what was asked (no version)
    with pytest.raises(PreconditionFailedError):
        store.update_by_id(mid, content="three", if_sha256=sha("one"))
    same = store.update_by_id(mid, content="two", if_sha256=sha("one"))
    assert same.version_id == m.version_id and same.content is None
    store.write("/c.md", "other")
    with pytest.raises(PathConflictError):
        store.update_by_id(mid, path="/c.md")


def test_delete_by_id_checks_the_precondition_and_unknown_ids_are_not_found(store: gitmem.Store) -> None:
    mid = written(store.write("/a.md", "one")).memory_id
    with pytest.raises(PreconditionFailedError):
        store.delete_by_id(mid, if_sha256=sha("other"))
    assert store.read("/a.md").content == "one"
    assert store.delete_by_id(mid, if_sha256=sha("one")).operation == "deleted"
    for call in (store.memory_by_id, store.delete_by_id):
        with pytest.raises(NotFoundError):
            call(mid)


def test_memory_by_id_at_a_past_moment(store: gitmem.Store) -> None:
    v1 = written(store.write("/a.md", "one"))
    store.write("/a.md", "two")
    assert store.memory_by_id(v1.memory_id, at=v1.id).content == "one"
    assert store.memory_by_id(v1.memory_id, at=v1.id, with_content=False).content is None
    store.delete("/a.md")
    with pytest.raises(NotFoundError):
        store.memory_by_id(v1.memory_id)


def test_list_page_pages_after_a_path_and_rolls_up(store: gitmem.Store) -> None:
    for path in ("/a.md", "/d/x.md", "/d/y.md", "/e.md"):
        store.write(path, path)
    page = store.list_page(limit=2, with_content=True)
    assert isinstance(page, MemoryPage)
    assert [i.path for i in page.items] == ["/a.md", "/d/x.md"] and page.more and page.last == "/d/x.md"
    assert all(isinstance(i, Memory) and i.content == i.path for i in page.items)
    rest = store.list_page(after=page.last, limit=2)
    assert [i.path for i in rest.items] == ["/d/y.md", "/e.md"] and not rest.more
    assert all(isinstance(i, Memory) and i.content is None for i in rest.items)
    top = store.list_page(depth=1, limit=10)
    assert [(i.path, isinstance(i, Prefix)) for i in top.items] == [
        ("/a.md", False),
        ("/d/", True),
        ("/e.md", False),
    ]
    assert [i.path for i in store.list_page(depth=1, after="/d/", limit=10).items] == ["/e.md"]


def test_a_review_caller_reads_and_writes_through_its_own_proposal(store: gitmem.Store) -> None:
    kept = written(store.write("/kept.md", "scope")).memory_id
    gone = written(store.write("/gone.md", "scope")).memory_id
    reviewed = Caller(actor="user:rev", review=True)
    m = store.update_by_id(kept, content="proposed", caller=reviewed, with_content=True)
    assert m.content == "proposed"
    store.delete_by_id(gone, caller=reviewed)
    new = store.create("/new.md", "mine", caller=reviewed)
    # the scope is untouched; the reviewed caller sees its proposal on top
    assert store.memory_by_id(kept).content == "scope"
    assert store.memory_by_id(kept, caller=reviewed).content == "proposed"
    with pytest.raises(NotFoundError):
        store.memory_by_id(gone, caller=reviewed)
    assert store.memory_by_id(new.memory_id, caller=reviewed).content == "mine"
    page = store.list_page(caller=reviewed, with_content=True)
    assert [(i.path, getattr(i, "content", None)) for i in page.items] == [
        ("/kept.md", "proposed"),
        ("/new.md", "mine"),
    ]
    assert [i.path for i in store.list_page().items] == ["/gone.md", "/kept.md"]


def test_a_confined_caller_is_refused_another_scope(store: gitmem.Store) -> None:
    mid = written(store.write("/a.md", "x", scope="other")).memory_id
    confined = Caller(actor="user:c", scope="main")
    for call in (
        lambda: store.memory_by_id(mid, scope="other", caller=confined),
        lambda: store.list_page(scope="other", caller=confined),
        lambda: store.update_by_id(mid, scope="other", content="y", caller=confined),
        lambda: store.delete_by_id(mid, scope="other", caller=confined),
    ):
        with pytest.raises(ForbiddenError):
            call()
    assert store.memory_by_id(mid, scope="other").content == "x"
