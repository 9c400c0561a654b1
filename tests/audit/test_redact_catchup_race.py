"""A writer whose index catch-up meets a redaction: the tip it read before the rewrite is gone
(rewritten, then purged) by the time its catch-up runs, or the purge deletes objects while it
walks. Its write must succeed on the rewritten history, the index must not hold the erased
content, and no acknowledged version is lost (the race behind a rare failure of
tests/audit/test_redact_stress.py, made deterministic by pausing the two sides at hook points)."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pygit2
import pytest

import gitmem
from gitmem.audit import journal, redact
from gitmem.audit.verify import verify
from gitmem.store import Store
from tests.helpers import CheckedThread, plain_commit
from tests.secret_scan import scan_store

SECRET = "sk-race-0001-zz"


def _wait(event: threading.Event, thread: threading.Thread) -> None:
    """Wait for ``event`` while ``thread`` lives (a thread that died never sets it)."""
    while not event.wait(0.05):
        if not thread.is_alive():
            return


def _in_git(store: Store, oid: str) -> bool:
    """Whether plain git can read ``oid`` (a handle's libgit2 may still see a removed pack)."""
    res = subprocess.run(["git", f"--git-dir={store.path}", "cat-file", "-e", oid], check=False)
    return res.returncode == 0


def _secret_history(store: Store) -> tuple[str, str]:
    """A secret version, then the memory rotated (so it can be redacted); (version id, blob)."""
    v = store.write("/secret.md", f"key {SECRET}\n", actor="user:r")
    store.write("/secret.md", "rotated\n", actor="user:r")
    assert v is not None
    return v.id, str(store.core.index.version_rows("id=?", (v.id,))[0].blob)


def _check_clean(store: Store, w: Any, blob: str, acked: list[tuple[str, str, str]]) -> None:
    db = w.core.index.db
    assert db.execute("SELECT COUNT(*) FROM versions WHERE blob=?", (blob,)).fetchone()[0] == 0
    assert list(w.search("0001")) == []  # the full-text rows hold no erased text
    by_id = {v.id: v for v in w.versions(scope="main")}
    for vid, path, text in acked:  # no acknowledged write is lost
        v = by_id[vid]
        assert v.path == path
        entry = w.core.commit(v.commit).tree[path[1:]]
        assert w.core.blob_data(entry.id).decode() == text
    assert w.read("/w/1.md").content == "w1\n"
    report = verify(w.core, raise_on_failure=False)
    assert report.ok, [c for c in report.checks if not c.ok]
    assert scan_store(store.path, SECRET.encode()) == []


def test_redaction_between_a_writers_tip_and_its_catch_up(store: Store) -> None:
    """The writer read the tip, a redaction rewrote and purged that history, then the writer's
    catch-up runs against the tip it read: it must not walk the purged history."""
    store.write("/a/0.md", "a\n")
    with gitmem.open_store(str(store.path)) as w:
        v0 = w.write("/w/0.md", "w0\n", actor="user:w")
        assert v0 is not None
        vid, blob = _secret_history(store)  # the writer's index is behind: it must catch up
        index = w.core.index
        original: Callable[..., None] = index._catch_up
        ran: list[str] = []

        def catch_up(scope: str, tip: pygit2.Oid | None) -> None:
            if not ran:
                ran.append(str(tip))
                redact.redact(store.core, vid, reason="race")  # rewrite, ledger, index, purge
                assert not _in_git(store, str(tip))  # the tip the writer read is purged
            original(scope, tip)

        index._catch_up = catch_up  # type: ignore[method-assign]
        v1 = w.write("/w/1.md", "w1\n", actor="user:w")
        assert ran and v1 is not None
        _check_clean(store, w, blob, [(v0.id, "/w/0.md", "w0\n"), (v1.id, "/w/1.md", "w1\n")])


@pytest.mark.parametrize("purge_in_walk", [True, False])
def test_purge_while_a_writers_catch_up_walks(
    store: Store, monkeypatch: pytest.MonkeyPatch, purge_in_walk: bool
) -> None:
    """The redaction swapped the branch and updated the index; the writer, holding the tip it read
    before, starts its catch-up, and the purge deletes the retired objects while it walks (or
    waits until it is done: the catch-up must not have indexed the erased history meanwhile)."""
    store.write("/a/0.md", "a\n")
    with gitmem.open_store(str(store.path)) as w:
        v0 = w.write("/w/0.md", "w0\n", actor="user:w")
        assert v0 is not None
        vid, blob = _secret_history(store)
        before_purge, go, purged = threading.Event(), threading.Event(), threading.Event()
        real_purge = journal.purge

        def paused_purge(core: Any, oids: list[str]) -> None:
            before_purge.set()
            go.wait()
            try:
                real_purge(core, oids)
            finally:
                purged.set()

        monkeypatch.setattr(journal, "purge", paused_purge)
        redactor = CheckedThread(lambda: redact.redact(store.core, vid, reason="race"))
        index, core = w.core.index, w.core
        original: Callable[..., None] = index._catch_up
        real_walk = core.walk
        ran: list[str] = []

        def walk(tip: pygit2.Oid, hide: pygit2.Oid | None = None) -> Iterator[pygit2.Commit]:
            commits = list(real_walk(tip, hide))  # the commit list resolved before the purge
            if purge_in_walk and before_purge.is_set() and not go.is_set():
                go.set()
                _wait(purged, redactor)
            return iter(commits)

        def catch_up(scope: str, tip: pygit2.Oid | None) -> None:
            if ran:
                original(scope, tip)
                return
            ran.append(str(tip))
            redactor.start()
            _wait(before_purge, redactor)  # swapped, ledger and index written, purge not yet
            try:
                original(scope, tip)
                found = index.db.execute("SELECT COUNT(*) FROM versions WHERE blob=?", (blob,)).fetchone()
                assert found[0] == 0, "the catch-up indexed the history being erased"
            finally:
                go.set()
                _wait(purged, redactor)

        index._catch_up = catch_up  # type: ignore[method-assign]
        core.walk = walk  # type: ignore[method-assign]
        v1 = w.write("/w/1.md", "w1\n", actor="user:w")
        redactor.check()
        assert ran and v1 is not None
        core.walk = real_walk  # type: ignore[method-assign]
        _check_clean(store, w, blob, [(v0.id, "/w/0.md", "w0\n"), (v1.id, "/w/1.md", "w1\n")])


def test_objects_gone_under_a_walk_after_a_plain_git_rewrite(store: Store) -> None:
    """Not gitmem's own rewrite (which the catch-up detects before walking): the branch is reset
    with plain git and the dropped commits' trees deleted while a writer's catch-up walks them.
    The missing object is a lost race, not the user's error: the write lands on the reset branch."""
    store.write("/a/0.md", "a\n")
    with gitmem.open_store(str(store.path)) as w:
        v0 = w.write("/w/0.md", "w0\n", actor="user:w")
        assert v0 is not None
        base = store.core.tip("main")
        plain_commit(store, {"b/1.md": b"b1\n"})  # behind the index's back: the writer must walk them
        plain_commit(store, {"b/2.md": b"b2\n"})
        dropped = list(store.core.walk(store.core.tip("main"), base))  # oldest first
        core = w.core
        real_walk = core.walk
        ran: list[str] = []

        def walk(tip: pygit2.Oid, hide: pygit2.Oid | None = None) -> Iterator[pygit2.Commit]:
            commits = list(real_walk(tip, hide))
            if not ran:
                ran.append(str(tip))
                subprocess.run(
                    ["git", f"--git-dir={store.path}", "update-ref", "refs/heads/main", str(base)], check=True
                )
                for c in dropped[:-1]:  # as a prune would: root trees (the tip's the writer holds)
                    oid = str(c.tree_id)
                    (store.path / "objects" / oid[:2] / oid[2:]).unlink()
                    assert not _in_git(store, oid)
            return iter(commits)

        core.walk = walk  # type: ignore[method-assign]
        v1 = w.write("/w/1.md", "w1\n", actor="user:w")
        core.walk = real_walk  # type: ignore[method-assign]
        assert ran and v1 is not None
        assert w.core.commit(w.core.tip("main")).parents[0].id == base  # on the reset branch
        assert {v.path for v in w.list(scope="main")} >= {"/a/0.md", "/w/0.md", "/w/1.md"}
        assert "/b/1.md" not in {v.path for v in w.list(scope="main")}
