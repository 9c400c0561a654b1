"""A review token against a real ``gitmem serve`` (docs/review.md): through the official anthropic
SDK, the token that proposed reads its changes on top of the scope (retrieve and list, basic and full,
depth 1 roll-ups) and keeps changing what it wrote, every other token reads the scope, and once the
proposal is decided the proposer reads the scope again. And the reviewer's erase endpoint."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from serverkit import client, running, token

import gitmem
from gitmem.audit import review
from gitmem.engine import proposals
from gitmem.model.caller import Caller
from tests.secret_scan import scan_store


@pytest.fixture
def env(workspace: Path) -> Iterator[dict[str, Any]]:
    with gitmem.create_store("notes", home=workspace) as s:
        s.write("/keep.md", "kept\n", actor="user:alice")
        s.write("/old.md", "old text\n", actor="user:alice")
        s.write("/notes/a.md", "note a\n", actor="user:alice")
    agent = token(workspace, actor="user:agent", stores={"notes": "rw"}, review=True)
    other = token(workspace, actor="user:other", stores={"notes": "rw"})
    with running(workspace) as url:
        a, o = client(url, agent), client(url, other)
        sid = next(s for s in a.beta.memory_stores.list() if s.name == "notes").id
        yield {"home": workspace, "agent": a, "other": o, "sid": sid}


def paths(c: anthropic.Anthropic, sid: str, **kw: Any) -> list[tuple[str, str]]:
    return [(m.type, m.path) for m in c.beta.memory_stores.memories.list(sid, **kw)]


def test_the_proposer_reads_its_proposal_on_top_and_others_read_the_scope(env: dict[str, Any]) -> None:
    a, o, sid = env["agent"], env["other"], env["sid"]
    mems = a.beta.memory_stores.memories
    new = mems.create(sid, path="/new.md", content="proposed\n")
    deep = mems.create(sid, path="/notes/b.md", content="note b\n")
    with gitmem.open_store("notes", env["home"]) as s:
        assert {m.path for m in s.list()} == {"/keep.md", "/old.md", "/notes/a.md"}  # nothing published

    # the proposer: retrieve and list see its proposal on top of the scope
    got = mems.retrieve(new.id, memory_store_id=sid)
    assert (got.path, got.content) == ("/new.md", "proposed\n")
    assert got.content_sha256 == new.content_sha256
    assert mems.retrieve(new.id, memory_store_id=sid, view="basic").content is None
    assert paths(a, sid) == [
        ("memory", "/keep.md"),
        ("memory", "/new.md"),
        ("memory", "/notes/a.md"),
        ("memory", "/notes/b.md"),
        ("memory", "/old.md"),
    ]
    assert paths(a, sid, depth=1) == [
        ("memory", "/keep.md"),
        ("memory", "/new.md"),
        ("memory_prefix", "/notes/"),
        ("memory", "/old.md"),
    ]
    assert paths(a, sid, path_prefix="/notes/") == [("memory", "/notes/a.md"), ("memory", "/notes/b.md")]
    full = {m.path: m.content for m in mems.list(sid, view="full")}
    assert full["/notes/b.md"] == "note b\n" and full["/keep.md"] == "kept\n"
    paged = mems.list(sid, limit=2)
    rest = mems.list(sid, limit=10, page=paged.next_page)
    assert [m.path for m in paged.data] + [m.path for m in rest.data] == [p for _t, p in paths(a, sid)]

    # everyone else reads the scope only
    with pytest.raises(anthropic.NotFoundError):
        o.beta.memory_stores.memories.retrieve(new.id, memory_store_id=sid)
    assert paths(o, sid) == [("memory", "/keep.md"), ("memory", "/notes/a.md"), ("memory", "/old.md")]

    # decided: the proposal is closed, and the proposer reads the scope (with what was accepted)
    with gitmem.open_store("notes", env["home"]) as s:
        (p,) = proposals.proposals(s.core, status="open")
        review.accept(s.core, p.id, reviewer="user:rev", paths=["/notes/b.md"])
        review.reject(s.core, p.id, reviewer="user:rev", paths=["/new.md"], reason="no")
    with pytest.raises(anthropic.NotFoundError):
        mems.retrieve(new.id, memory_store_id=sid)
    assert mems.retrieve(deep.id, memory_store_id=sid).content == "note b\n"
    assert paths(a, sid) == paths(o, sid)


def test_a_deletion_and_a_rename_in_the_proposal_show_for_the_proposer_only(env: dict[str, Any]) -> None:
    a, o, sid = env["agent"], env["other"], env["sid"]
    by_path = {m.path: m for m in o.beta.memory_stores.memories.list(sid)}
    old, keep = by_path["/old.md"], by_path["/keep.md"]
    agent = Caller(actor="user:agent", review=True, local=True)
    with gitmem.open_store("notes", env["home"]) as s:
        s.delete("/old.md", caller=agent)
        s.rename("/keep.md", "/kept/renamed.md", caller=agent)
    mems = a.beta.memory_stores.memories
    with pytest.raises(anthropic.NotFoundError):
        mems.retrieve(old.id, memory_store_id=sid)
    moved = mems.retrieve(keep.id, memory_store_id=sid)
    assert (moved.id, moved.path, moved.content) == (keep.id, "/kept/renamed.md", "kept\n")
    assert paths(a, sid) == [("memory", "/kept/renamed.md"), ("memory", "/notes/a.md")]
    assert o.beta.memory_stores.memories.retrieve(old.id, memory_store_id=sid).content == "old text\n"
    assert paths(o, sid) == [("memory", "/keep.md"), ("memory", "/notes/a.md"), ("memory", "/old.md")]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_the_proposer_keeps_working_on_what_it_wrote(env: dict[str, Any]) -> None:
    """Update and delete by id work on the proposer's own view: a memory it created, one it changed
    already, a rename, a precondition; none of it reaches the scope before a reviewer accepts."""
    a, o, sid = env["agent"], env["other"], env["sid"]
    mems = a.beta.memory_stores.memories
    old = {m.path: m for m in o.beta.memory_stores.memories.list(sid)}["/old.md"]
    new = mems.create(sid, path="/new.md", content="draft\n")
    again = mems.update(new.id, memory_store_id=sid, content="second draft\n")
    assert (again.id, again.content_sha256) == (new.id, sha("second draft\n"))
    mems.update(old.id, memory_store_id=sid, content="changed once\n")
    moved = mems.update(
        old.id,
        memory_store_id=sid,
        content="changed twice\n",
        path="/moved.md",
        precondition={"type": "content_sha256", "content_sha256": sha("changed once\n")},
    )
    assert (moved.id, moved.path) == (old.id, "/moved.md")
    with pytest.raises(anthropic.ConflictError):  # a stale precondition, against the proposer's view
        mems.update(
            old.id,
            memory_store_id=sid,
            content="x\n",
            precondition={"type": "content_sha256", "content_sha256": sha("changed once\n")},
        )
    gone = mems.create(sid, path="/gone.md", content="short-lived\n")
    mems.delete(gone.id, memory_store_id=sid)
    with pytest.raises(anthropic.NotFoundError):
        mems.retrieve(gone.id, memory_store_id=sid)
    assert mems.retrieve(old.id, memory_store_id=sid).content == "changed twice\n"
    assert [p for _t, p in paths(a, sid)] == ["/keep.md", "/moved.md", "/new.md", "/notes/a.md"]
    assert o.beta.memory_stores.memories.retrieve(old.id, memory_store_id=sid).content == "old text\n"
    with gitmem.open_store("notes", env["home"]) as s:
        (p,) = proposals.proposals(s.core, status="open")
        assert {d.path: d.status for d in review.diff(s.core, p.id)} == {
            "/moved.md": "clean",
            "/new.md": "clean",
            "/old.md": "clean",
        }
        review.accept(s.core, p.id, reviewer="user:rev")
        assert (
            s.read("/moved.md").content == "changed twice\n" and s.read("/new.md").content == "second draft\n"
        )
        assert s.read("/moved.md").memory_id == old.id  # the rename kept the memory


def test_review_api_erase(env: dict[str, Any]) -> None:
    import httpx2 as httpx

    a, sid = env["agent"], env["sid"]
    a.beta.memory_stores.memories.create(sid, path="/leak.md", content="poisoned 5f3a-erase-me\n")
    home = env["home"]
    with gitmem.open_store("notes", home) as s:
        (p,) = proposals.proposals(s.core, status="open")
    base = str(a.base_url).rstrip("/") + f"/v1/gitmem/stores/notes/proposals/{p.id}/erase"
    agent_key, admin = a.api_key, token(home, actor="user:rev", admin=True)
    assert httpx.post(base, headers={"x-api-key": agent_key}, json={"reason": "x"}).status_code == 403
    assert httpx.post(base, headers={"x-api-key": admin}, json={}).status_code == 400
    assert httpx.post(base, headers={"x-api-key": admin}, json={"reason": " "}).status_code == 400
    with gitmem.open_store("notes", home) as s:
        assert proposals.get(s.core, p.id).erased is None
    done = httpx.post(base, headers={"x-api-key": admin}, json={"reason": "poisoned"})
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["erasure"].startswith("redact_") and body["purged"] > 0
    assert body["proposal"]["status"] == "rejected"
    again = httpx.post(base, headers={"x-api-key": admin}, json={"reason": "again"})
    assert again.status_code == 409
    with gitmem.open_store("notes", home) as s:
        assert scan_store(s.path, b"5f3a-erase-me") == []


def test_review_api_keeps_a_scope_bound_token_to_its_scope(env: dict[str, Any]) -> None:
    import httpx2 as httpx

    a, sid = env["agent"], env["sid"]
    a.beta.memory_stores.memories.create(sid, path="/main-only.md", content="for main\n")
    home = env["home"]
    with gitmem.open_store("notes", home) as s:
        (p,) = proposals.proposals(s.core, status="open")
    team = token(home, actor="user:teamlead", stores={"notes": "rw"}, scope="team")
    base = str(a.base_url).rstrip("/") + "/v1/gitmem/stores/notes/proposals"
    h = {"x-api-key": team}
    assert httpx.get(base, headers=h).json()["data"] == []
    assert httpx.get(f"{base}/{p.id}", headers=h).status_code == 404
    assert httpx.get(f"{base}/{p.id}/diff", headers=h).status_code == 404
    for action, body in (("accept", {}), ("reject", {"reason": "x"}), ("erase", {"reason": "x"})):
        assert httpx.post(f"{base}/{p.id}/{action}", headers=h, json=body).status_code == 404, action
    with gitmem.open_store("notes", home) as s:
        assert proposals.get(s.core, p.id).decisions == []
