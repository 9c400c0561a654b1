"""Versions shared by forked scopes: reading by id answers for the scope asked, and the same row
every time when no scope is given."""

from __future__ import annotations

import subprocess
from pathlib import Path

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
    with pytest.raises(NotFoundError, match="does not exist"):  # as an unknown id (docs/access.md)
        store.read("/a.md", scope="main", version=v2.id)
    store.core.index.rebuild()
    assert store.version(v1.id).scope == "main"


def _forked(store: Store) -> tuple[str, str]:
    """main: /a.md one, two; fork (branched at two): three. Returns the ids of one and two."""
    v1 = store.write("/a.md", "one\n")
    v2 = store.write("/a.md", "two\n")
    assert v1 is not None and v2 is not None
    subprocess.run(["git", f"--git-dir={store.path}", "branch", "fork", "main"], check=True)
    store.write("/a.md", "three\n", scope="fork")
    return v1.id, v2.id


def test_restore_of_a_shared_version_in_a_fork_writes_the_fork(store: Store) -> None:
    """Before: ``restore`` took the row main answers for, so restoring a version of the fork's
    history (shared with main) wrote main (which had moved on separately) and left the fork as it
    was; there was no way to name the scope."""
    v1, v2 = _forked(store)
    main_head = store.read("/a.md").version_id
    restored = store.restore(v1, scope="fork")
    assert restored is not None and restored.scope == "fork"
    assert store.read("/a.md", scope="fork").content == "one\n"
    assert store.read("/a.md").version_id == main_head  # main untouched
    assert store.version(v1, scope="fork").scope == "fork"
    assert store.version(v1).scope == "main"
    fork_only = store.write("/b.md", "fork only\n", scope="fork")
    assert fork_only is not None
    with pytest.raises(NotFoundError, match="does not exist"):  # as an unknown id (docs/access.md)
        store.restore(fork_only.id, scope="main")
    assert v2 in {v.id for v in store.versions(scope="fork")}


def test_the_managed_api_reads_a_shared_version_in_a_fork(store: Store, workspace: Path) -> None:
    """``retrieve_version`` on scope ``fork`` of a version the fork shares with main: before, the
    row main answers for was compared with the scope asked, so the fork's own history was a 404 for
    a token confined to the fork."""
    import anthropic
    from serverkit import client, running, token

    v1, _v2 = _forked(store)
    secret = token(workspace, stores={"notes": "rw"}, scope="fork")
    with running(workspace) as url:
        c = client(url, secret)
        sid = next(s for s in c.beta.memory_stores.list() if s.name == "notes").id
        got = c.beta.memory_stores.memory_versions.retrieve(v1, memory_store_id=sid)
        assert got.content == "one\n"
        only_main = store.write("/m.md", "main only\n")
        assert only_main is not None
        with pytest.raises(anthropic.NotFoundError):
            c.beta.memory_stores.memory_versions.retrieve(only_main.id, memory_store_id=sid)


def test_the_console_restores_a_shared_version_in_the_fork_it_was_picked_in(
    store: Store, workspace: Path
) -> None:
    """The restore link on a fork's memory page names the fork; before, the console restored the
    version into main (the row main answers for), a write to a scope nobody picked."""
    pytest.importorskip("jinja2", reason="the console needs jinja2 (pip install 'gitmem-store[server]')")
    from serverkit import running

    from gitmem.server.tokens import TokenStore
    from tests.consolekit import csrf_of, sign_in

    v1, _v2 = _forked(store)
    main_head = store.read("/a.md").version_id
    memory_id = store.read("/a.md", scope="fork").memory_id
    secret = TokenStore(workspace).create(actor="user:alice", stores={"notes": "rw"})[1]
    with running(workspace) as url, sign_in(url, secret) as c:
        page = c.get(f"/console/stores/notes/memory?scope=fork&id={memory_id}")
        assert page.status_code == 200
        assert f"/console/stores/{store.id}/restore?version={v1}&amp;scope=fork" in page.text
        confirm = c.get(f"/console/stores/notes/restore?version={v1}&scope=fork")
        done = c.post(
            "/console/stores/notes/restore",
            data={"csrf": csrf_of(confirm.text), "version": v1, "scope": "fork", "confirm": "yes"},
        )
    assert done.status_code == 303 and "scope=fork" in done.headers["location"]
    store.core.index.forget("fork")
    assert store.read("/a.md", scope="fork").content == "one\n"
    assert store.read("/a.md").version_id == main_head
