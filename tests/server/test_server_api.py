"""The 14 memory-store endpoints through the official anthropic SDK against a real `gitmem serve`."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2 as httpx
import pytest
from serverkit import client, running, token
from typer.testing import CliRunner

import gitmem
from gitmem.cli.app import app as cli_app
from gitmem.server.tokens import TokenStore

Env = dict[str, Any]


@pytest.fixture
def env(workspace: Path) -> Iterator[Env]:
    gitmem.create_store("notes", description="Team notes", home=workspace).close()
    admin = token(workspace, admin=True, actor="user:admin")
    with running(workspace) as url:
        c = client(url, admin)
        store = next(s for s in c.beta.memory_stores.list() if s.name == "notes")
        yield {"url": url, "home": workspace, "admin": c, "store": store.id}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def count_requests(url: str, secret: str) -> tuple[anthropic.Anthropic, list[str]]:
    seen: list[str] = []
    http = httpx.Client(event_hooks={"request": [lambda r: seen.append(str(r.url))]})
    return client(url, secret, http_client=http), seen


# ---------------------------------------------------------------------- stores
def test_store_create_retrieve_update_archive_delete(env: Env) -> None:
    c = env["admin"]
    s = c.beta.memory_stores.create(
        name="prefs", description="User prefs", metadata={"team": "core", "x": "1"}
    )
    assert s.id.startswith("memstore_") and s.name == "prefs" and s.archived_at is None
    assert c.beta.memory_stores.retrieve(s.id).description == "User prefs"
    u = c.beta.memory_stores.update(s.id, description="", metadata={"team": "ops", "x": None})
    assert u.description == "" and u.metadata == {"team": "ops"}
    a = c.beta.memory_stores.archive(s.id)
    assert a.archived_at is not None
    names = [x.name for x in c.beta.memory_stores.list()]
    assert "prefs" not in names and "prefs" in [
        x.name for x in c.beta.memory_stores.list(include_archived=True)
    ]
    with pytest.raises(anthropic.ConflictError):
        c.beta.memory_stores.memories.create(s.id, path="/a.md", content="x")
    d = c.beta.memory_stores.delete(s.id)
    assert d.id == s.id and d.type == "memory_store_deleted"
    with pytest.raises(anthropic.NotFoundError):
        c.beta.memory_stores.retrieve(s.id)


def test_store_list_pages_with_cursors(env: Env) -> None:
    c = env["admin"]
    for i in range(5):
        c.beta.memory_stores.create(name=f"s{i}")
    first = c.beta.memory_stores.list(limit=2)
    assert len(first.data) == 2 and first.next_page and first.next_page.startswith("page_")
    assert sorted(s.name for s in c.beta.memory_stores.list(limit=2)) == sorted(
        ["notes", "s0", "s1", "s2", "s3", "s4"]
    )


def test_store_management_needs_admin(env: Env) -> None:
    rw = client(env["url"], token(env["home"], stores={"notes": "rw"}))
    with pytest.raises(anthropic.PermissionDeniedError):
        rw.beta.memory_stores.create(name="mine")
    with pytest.raises(anthropic.PermissionDeniedError):
        rw.beta.memory_stores.update(env["store"], description="x")
    assert [s.name for s in rw.beta.memory_stores.list()] == ["notes"]


def test_store_bad_name_is_400_and_a_taken_name_makes_another_store(env: Env) -> None:
    c = env["admin"]
    for bad in ("", "x" * 256, "tab\there", "nul\x00"):
        with pytest.raises(anthropic.BadRequestError, match="store name"):
            c.beta.memory_stores.create(name=bad)
    again = c.beta.memory_stores.create(name="notes")  # names need not be unique (Anthropic's rule)
    assert again.id != env["store"] and again.name == "notes"
    assert c.beta.memory_stores.create(name="Bad Name!").name == "Bad Name!"


# ---------------------------------------------------------------------- memories
def test_memory_create_retrieve_views(env: Env) -> None:
    c, sid = env["admin"], env["store"]
    text = "Caf\u00e9 \r\n line\u2028two"  # no normalisation, ever
    m = c.beta.memory_stores.memories.create(sid, path="/prefs/editor.md", content=text)
    assert m.id.startswith("mem_") and m.memory_version_id.startswith("memver_")
    assert m.content is None and m.content_sha256 == sha(text) and m.content_size_bytes == len(text.encode())
    full = c.beta.memory_stores.memories.retrieve(m.id, memory_store_id=sid)
    assert full.content == text and full.path == "/prefs/editor.md"
    basic = c.beta.memory_stores.memories.retrieve(m.id, memory_store_id=sid, view="basic")
    assert basic.content is None and basic.memory_version_id == m.memory_version_id
    empty = c.beta.memory_stores.memories.create(sid, path="/empty.md", content="")
    assert empty.content_size_bytes == 0 and empty.content_sha256 == sha("")


def test_memory_create_never_overwrites_and_conflict_is_one_attempt(env: Env) -> None:
    c, sid = env["admin"], env["store"]
    first = c.beta.memory_stores.memories.create(sid, path="/a/b.md", content="x")
    counted, seen = count_requests(env["url"], token(env["home"], admin=True))
    with pytest.raises(anthropic.ConflictError) as info:
        counted.beta.memory_stores.memories.create(sid, path="/a/b.md", content="y")
    assert len(seen) == 1
    err = info.value.body["error"]  # type: ignore[index]
    assert err["type"] == "memory_path_conflict_error"
    assert err["conflicting_path"] == "/a/b.md" and err["conflicting_memory_id"] == first.id
    assert info.value.response.headers["x-should-retry"] == "false"
    assert info.value.request_id and info.value.request_id.startswith("req_")
    with pytest.raises(anthropic.ConflictError) as overlap:
        c.beta.memory_stores.memories.create(sid, path="/a/b.md/c.md", content="y")
    assert overlap.value.body["error"]["conflicting_path"] == "/a/b.md"  # type: ignore[index]


def test_memory_list_prefix_depth_pages(env: Env) -> None:
    c, sid = env["admin"], env["store"]
    for p in ["/notes/a.md", "/notes/b.md", "/notes/deep/c.md", "/notes-archive/x.md", "/top.md"]:
        c.beta.memory_stores.memories.create(sid, path=p, content=p)
    whole = [m.path for m in c.beta.memory_stores.memories.list(sid)]
    assert whole == ["/notes-archive/x.md", "/notes/a.md", "/notes/b.md", "/notes/deep/c.md", "/top.md"]
    under = [m.path for m in c.beta.memory_stores.memories.list(sid, path_prefix="/notes/")]
    assert under == ["/notes/a.md", "/notes/b.md", "/notes/deep/c.md"]
    ls = [(m.type, m.path) for m in c.beta.memory_stores.memories.list(sid, path_prefix="/notes/", depth=1)]
    assert ls == [("memory", "/notes/a.md"), ("memory", "/notes/b.md"), ("memory_prefix", "/notes/deep/")]
    paged = [m.path for m in c.beta.memory_stores.memories.list(sid, limit=2, depth=1)]
    assert paged == ["/notes-archive/", "/notes/", "/top.md"]
    full = list(c.beta.memory_stores.memories.list(sid, view="full", limit=100))
    assert [m.content for m in full] == whole
    first = c.beta.memory_stores.memories.list(sid, view="full", limit=100)
    assert len(first.data) == 5  # capped at 20, the store has 5


def test_cursor_stays_right_while_others_write(env: Env) -> None:
    c, sid = env["admin"], env["store"]
    for i in range(6):
        c.beta.memory_stores.memories.create(sid, path=f"/m{i}.md", content=str(i))
    page1 = c.beta.memory_stores.memories.list(sid, limit=3)
    c.beta.memory_stores.memories.create(sid, path="/m0a.md", content="new, before the cursor")
    c.beta.memory_stores.memories.delete(page1.data[0].id, memory_store_id=sid)
    assert page1.next_page
    rest = c.beta.memory_stores.memories.list(sid, limit=3, page=page1.next_page)
    assert [m.path for m in rest.data] == ["/m3.md", "/m4.md", "/m5.md"]


def test_update_content_path_and_preconditions(env: Env) -> None:
    c, sid = env["admin"], env["store"]
    m = c.beta.memory_stores.memories.create(sid, path="/a.md", content="one")
    u = c.beta.memory_stores.memories.update(
        m.id,
        memory_store_id=sid,
        content="two",
        path="/b.md",
        precondition={"type": "content_sha256", "content_sha256": sha("one")},
    )
    assert (u.id, u.path, u.content_sha256) == (m.id, "/b.md", sha("two"))
    versions = list(c.beta.memory_stores.memory_versions.list(sid, memory_id=m.id))
    assert [v.operation for v in versions] == ["modified", "created"]  # one version for both changes
    again = c.beta.memory_stores.memories.update(
        m.id,
        memory_store_id=sid,
        content="two",
        precondition={"type": "content_sha256", "content_sha256": sha("one")},
    )
    assert again.memory_version_id == u.memory_version_id  # already the requested state: 200, no version
    with pytest.raises(anthropic.ConflictError) as info:
        c.beta.memory_stores.memories.update(
            m.id,
            memory_store_id=sid,
            content="three",
            precondition={"type": "content_sha256", "content_sha256": sha("one")},
        )
    assert info.value.body["error"]["type"] == "memory_precondition_failed_error"  # type: ignore[index]
    assert c.beta.memory_stores.memories.retrieve(m.id, memory_store_id=sid).content == "two"


def test_rename_onto_taken_path_is_path_conflict(env: Env) -> None:
    c, sid = env["admin"], env["store"]
    a = c.beta.memory_stores.memories.create(sid, path="/a.md", content="a")
    b = c.beta.memory_stores.memories.create(sid, path="/b.md", content="b")
    with pytest.raises(anthropic.ConflictError) as info:
        c.beta.memory_stores.memories.update(a.id, memory_store_id=sid, path="/b.md")
    assert info.value.body["error"]["conflicting_memory_id"] == b.id  # type: ignore[index]


def test_delete_with_expected_sha(env: Env) -> None:
    c, sid = env["admin"], env["store"]
    m = c.beta.memory_stores.memories.create(sid, path="/a.md", content="a")
    with pytest.raises(anthropic.ConflictError):
        c.beta.memory_stores.memories.delete(m.id, memory_store_id=sid, expected_content_sha256=sha("b"))
    d = c.beta.memory_stores.memories.delete(m.id, memory_store_id=sid, expected_content_sha256=sha("a"))
    assert d.id == m.id and d.type == "memory_deleted"
    with pytest.raises(anthropic.NotFoundError):
        c.beta.memory_stores.memories.retrieve(m.id, memory_store_id=sid)
    with pytest.raises(anthropic.NotFoundError):
        c.beta.memory_stores.memories.delete(m.id, memory_store_id=sid)
    ops = [v.operation for v in c.beta.memory_stores.memory_versions.list(sid, memory_id=m.id)]
    assert ops == ["deleted", "created"]


# ---------------------------------------------------------------------- versions
def test_versions_list_filters_retrieve_and_redact(env: Env) -> None:
    c, sid = env["admin"], env["store"]
    m = c.beta.memory_stores.memories.create(sid, path="/s.md", content="secret: hunter2")
    u = c.beta.memory_stores.memories.update(m.id, memory_store_id=sid, content="no secret")
    other = c.beta.memory_stores.memories.create(sid, path="/o.md", content="o")
    versions = list(c.beta.memory_stores.memory_versions.list(sid))
    assert [v.memory_id for v in versions] == [other.id, m.id, m.id]  # newest first
    assert [v.id for v in c.beta.memory_stores.memory_versions.list(sid, operation="created")] == [
        other.memory_version_id,
        m.memory_version_id,
    ]
    assert len(list(c.beta.memory_stores.memory_versions.list(sid, limit=1))) == 3  # auto-paged
    full = list(c.beta.memory_stores.memory_versions.list(sid, memory_id=m.id, view="full"))
    assert [v.content for v in full] == ["no secret", "secret: hunter2"]
    head = c.beta.memory_stores.memory_versions.retrieve(u.memory_version_id, memory_store_id=sid)
    assert head.content == "no secret" and head.created_by.type == "user_actor"  # type: ignore[union-attr]
    with pytest.raises(anthropic.ConflictError):  # the head of a live memory
        c.beta.memory_stores.memory_versions.redact(u.memory_version_id, memory_store_id=sid)
    r = c.beta.memory_stores.memory_versions.redact(m.memory_version_id, memory_store_id=sid)
    assert r.redacted_at is not None and r.redacted_by is not None
    got = c.beta.memory_stores.memory_versions.retrieve(m.memory_version_id, memory_store_id=sid)
    assert (got.content, got.path, got.content_sha256, got.content_size_bytes) == (None, None, None, None)
    assert got.operation == "created" and got.created_by is not None


def test_version_filters_by_session_and_api_key(env: Env) -> None:
    home, sid = env["home"], env["store"]
    key_secret = token(home, stores={"notes": "rw"})
    key_id = TokenStore(home).authenticate(key_secret).id
    by_key = client(env["url"], key_secret)
    by_session = client(env["url"], token(home, stores={"notes": "rw"}, session="sesn_abc"))
    by_key.beta.memory_stores.memories.create(sid, path="/k.md", content="k")
    by_session.beta.memory_stores.memories.create(sid, path="/s.md", content="s")
    c = env["admin"]
    k = list(c.beta.memory_stores.memory_versions.list(sid, api_key_id=key_id))
    assert [v.path for v in k] == ["/k.md"] and k[0].created_by.api_key_id == key_id  # type: ignore[union-attr]
    s = list(c.beta.memory_stores.memory_versions.list(sid, session_id="sesn_abc"))
    assert [v.path for v in s] == ["/s.md"]
    assert s[0].created_by.type == "session_actor" and s[0].created_by.session_id == "sesn_abc"  # type: ignore[union-attr]


# ---------------------------------------------------------------------- identity in git
def test_git_log_shows_the_tokens_actor_and_session(env: Env) -> None:
    home, sid = env["home"], env["store"]
    alice = client(env["url"], token(home, actor="user:alice", stores={"notes": "rw"}, session="sesn_42"))
    m = alice.beta.memory_stores.memories.create(sid, path="/who.md", content="alice wrote this")
    out = subprocess.run(
        [
            "git",
            "--git-dir",
            str(home / "stores" / f"{env['store']}.git"),
            "log",
            "-1",
            "--format=%B",
            "main",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Gitmem-Actor: user:alice" in out and "Gitmem-Session: sesn_42" in out
    assert f"Gitmem-Memory: {m.id}" in out and f"Gitmem-Version: {m.memory_version_id}" in out
    result = CliRunner().invoke(cli_app, ["--json", "log", "notes", "--home", str(home)])
    assert result.exit_code == 0, result.output
    assert '"actor": "user:alice"' in result.output and '"session": "sesn_42"' in result.output


def test_scope_from_token_and_query(env: Env) -> None:
    home, sid = env["home"], env["store"]
    team = client(env["url"], token(home, stores={"notes": "rw"}, scope="team"))
    team.beta.memory_stores.memories.create(sid, path="/t.md", content="team")
    assert [m.path for m in env["admin"].beta.memory_stores.memories.list(sid)] == []
    listed = env["admin"].beta.memory_stores.memories.list(sid, extra_query={"scope": "team"})
    assert [m.path for m in listed] == ["/t.md"]
    with pytest.raises(anthropic.PermissionDeniedError):
        team.beta.memory_stores.memories.list(sid, extra_query={"scope": "main"})
    store = gitmem.open_store("notes", home)
    assert store.read("/t.md", scope="team").content == "team"
    store.close()


def test_memories_can_be_deleted_and_versions_redacted_in_an_archived_store(env: Env) -> None:
    c = env["admin"]
    s = c.beta.memory_stores.create(name="arch")
    m = c.beta.memory_stores.memories.create(s.id, path="/a.md", content="first")
    c.beta.memory_stores.memories.update(m.id, memory_store_id=s.id, content="second")
    old = [v for v in c.beta.memory_stores.memory_versions.list(s.id) if v.operation == "created"][0]
    c.beta.memory_stores.archive(s.id)
    with pytest.raises(anthropic.ConflictError):
        c.beta.memory_stores.memories.create(s.id, path="/b.md", content="new")
    assert c.beta.memory_stores.memory_versions.redact(old.id, memory_store_id=s.id).content is None
    c.beta.memory_stores.memories.delete(m.id, memory_store_id=s.id)
    assert list(c.beta.memory_stores.memories.list(s.id)) == []
