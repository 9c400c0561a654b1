"""The summary reads the console shows (gitmem/engine/overview.py through Store's console methods):
a scope's counters, a memory's head by id, each session's writes, marked search, redaction
dry-runs, and the caller each of them admits."""

from __future__ import annotations

import pytest

from gitmem.errors import ForbiddenError, InvalidInputError, NotFoundError
from gitmem.model.caller import Caller
from gitmem.store import RedactionPreview, SessionWrites, Store, Version


def test_scope_counts_follow_writes_and_deletes(store: Store) -> None:
    assert store.scope_counts("main", caller=None) == (0, 0)
    store.write("/a.md", "abc\n")
    store.write("/b.md", "hello\n")
    assert store.scope_counts("main", caller=None) == (2, 10)
    store.delete("/a.md")
    assert store.scope_counts("main", caller=None) == (1, 6)
    assert store.scope_counts("nowhere", caller=None) == (0, 0)


def test_memory_head_is_the_newest_version_and_none_once_deleted(store: Store) -> None:
    v1 = store.write("/a.md", "one\n")
    assert v1 is not None
    v2 = store.rename("/a.md", "/b.md")
    assert v2 is not None
    head = store.memory_head(v1.memory_id, scope="main", caller=None)
    assert isinstance(head, Version)
    assert (head.id, head.path, head.memory_id) == (v2.id, "/b.md", v1.memory_id)
    assert store.memory_head(v1.memory_id, scope="other", caller=None) is None
    store.delete("/b.md")
    assert store.memory_head(v1.memory_id, scope="main", caller=None) is None


def test_session_writes_are_grouped_per_session_and_scope(store: Store) -> None:
    store.write("/a.md", "1\n", session="sesn_one", actor="user:a")
    store.write("/b.md", "2\n", session="sesn_one", actor="user:b")
    store.write("/c.md", "3\n", session="sesn_one", actor="user:a", scope="team")
    store.write("/d.md", "4\n", actor="user:a")  # no session: not listed
    store.write("/e.md", "5\n", session="sesn_two", actor="user:c")
    found = store.session_writes(["main", "team"], caller=None)
    assert all(isinstance(w, SessionWrites) for w in found)
    by = {(w.session, w.scope): w for w in found}
    assert set(by) == {("sesn_one", "main"), ("sesn_one", "team"), ("sesn_two", "main")}
    one = by[("sesn_one", "main")]
    assert (one.versions, one.actors) == (2, ("user:a", "user:b"))
    assert one.first_at <= one.last_at
    assert [(w.session, w.scope) for w in store.session_writes(["team"], caller=None)] == [
        ("sesn_one", "team")
    ]
    assert store.session_writes([], caller=None) == []


def test_search_marked_puts_the_callers_marks_around_matches(store: Store) -> None:
    store.write("/a.md", "the **word** ferret lives here\n")
    (hit,) = store.search_marked(
        "ferret", marks=("<<", ">>"), scope="main", limit=5, path_prefix=None, mode="lexical", caller=None
    )
    assert "<<ferret>>" in hit.snippet and hit.path == "/a.md"


def test_redaction_preview_of_a_version(store: Store) -> None:
    old = store.write("/a.md", "secret\n")
    live = store.write("/a.md", "public\n")
    assert old is not None and live is not None
    preview = store.redaction_preview(old.id, caller=None)
    assert isinstance(preview, RedactionPreview)
    assert (preview.scope, [v.id for v in preview.versions], preview.blocking) == ("main", [old.id], [])
    blocked = store.redaction_preview(live.id, caller=None)
    assert blocked.blocking == ["/a.md currently holds this content (write a new version or delete it first)"]
    store.write("/b.md", "secret\n", scope="team")  # the same content in another scope
    shared = store.redaction_preview(old.id, caller=None)
    assert shared.blocking == ["the same content is also in scope 'team': redact it there too"]
    gone = store.delete("/a.md")
    assert store.redaction_preview(gone.id, caller=None).blocking == ["it deleted /a.md: there is no content"]
    store.delete("/b.md", scope="team")
    done = store.redact_pattern("secret", reason="test", scope=None)
    assert done.versions
    again = store.redaction_preview(old.id, caller=None)
    assert again.blocking and again.blocking[0].startswith("it was already redacted (")
    assert again.versions[0].redaction is not None
    with pytest.raises(InvalidInputError):
        store.redaction_preview("nope", caller=None)
    with pytest.raises(NotFoundError):
        store.redaction_preview("memver_" + "0" * 26, caller=None)


def test_unredacted_blobs_and_a_preview_of_them(store: Store) -> None:
    a = store.write("/a.md", "one\n")
    store.write("/a.md", "two\n")
    store.write("/b.md", "one\n")  # the same blob as a's first version
    assert a is not None
    blobs = store.unredacted_blobs("main", caller=None)
    assert sorted(store.blob(b) for b in blobs) == [b"one\n", b"two\n"]
    (one,) = [b for b in blobs if store.blob(b) == b"one\n"]
    preview = store.redaction_preview_blobs([one], scope="main", caller=None)
    assert sorted(v.path for v in preview.versions) == ["/a.md", "/b.md"]
    assert preview.blocking == ["/b.md currently holds this content (write a new version or delete it first)"]
    assert store.redaction_preview_blobs([], scope="main", caller=None) == RedactionPreview("main")
    assert store.unredacted_blobs("nowhere", caller=None) == []


def test_the_caller_is_asked(store: Store) -> None:
    v = store.write("/a.md", "x\n")
    assert v is not None
    confined = Caller(actor="user:t", stores={store.id: "ro"}, scope="team", rights=frozenset())
    for call in (
        lambda: store.scope_counts("main", caller=confined),
        lambda: store.memory_head(v.memory_id, scope="main", caller=confined),
        lambda: store.session_writes(["team", "main"], caller=confined),
        lambda: store.search_marked(
            "x", marks=("<", ">"), scope="main", limit=1, path_prefix=None, mode="lexical", caller=confined
        ),
        lambda: store.redaction_preview(v.id, caller=confined),  # no redact right
        lambda: store.unredacted_blobs("team", caller=confined),
        lambda: store.redaction_preview_blobs([], scope="team", caller=confined),
    ):
        with pytest.raises(ForbiddenError):
            call()
    stranger = Caller(actor="user:s", stores={"memstore_other": "rw"}, rights=frozenset({"write"}))
    with pytest.raises(ForbiddenError):
        store.scope_counts("main", caller=stranger)
    assert store.scope_counts("team", caller=confined) == (0, 0)
    assert store.session_writes(["team"], caller=confined) == []
    admin = Caller(actor="user:root", stores={store.id: "rw"}, rights=frozenset({"redact"}))
    assert store.redaction_preview(v.id, caller=admin).blocking
