"""A review token whose scope moves on under its proposal, through the official anthropic SDK
against a real ``gitmem serve`` (docs/review.md, "When the scope moves"): it deletes and updates
memories another token published after its proposal opened, the reviewer's accept applies that
on the scope's current tip and keeps the other publications, and a memory both changed is a
conflict (409, nothing written) until the reviewer decides otherwise."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx2 as httpx
import pytest
from serverkit import client, running, token

import gitmem


@pytest.fixture
def env(workspace: Path) -> Iterator[dict[str, Any]]:
    with gitmem.create_store("notes", home=workspace) as s:
        s.write("/old.md", "old text\n", actor="user:alice")
    agent = token(workspace, actor="user:agent", stores={"notes": "rw"}, review=True)
    other = token(workspace, actor="user:other", stores={"notes": "rw"})
    with running(workspace) as url:
        a, o = client(url, agent), client(url, other)
        sid = next(s for s in a.beta.memory_stores.list() if s.name == "notes").id
        api = url.rstrip("/") + "/v1/gitmem/stores/notes/proposals"
        yield {"agent": a, "other": o, "sid": sid, "api": api, "other_key": other}


def listed(c: anthropic.Anthropic, sid: str) -> dict[str, str]:
    mems = c.beta.memory_stores.memories
    return {m.path: mems.retrieve(m.id, memory_store_id=sid).content or "" for m in mems.list(sid)}


def the_proposal(env: dict[str, Any]) -> str:
    h = {"x-api-key": env["other_key"]}
    (p,) = httpx.get(env["api"], params={"status": "open"}, headers=h).json()["data"]
    return str(p["id"])


def test_a_review_token_deletes_what_was_published_after_its_proposal_opened(env: dict[str, Any]) -> None:
    a, o, sid = env["agent"], env["other"], env["sid"]
    mine, theirs = a.beta.memory_stores.memories, o.beta.memory_stores.memories
    mine.create(sid, path="/draft.md", content="draft\n")  # opens the proposal
    later = theirs.create(sid, path="/later.md", content="published later\n")
    edited = theirs.create(sid, path="/edited.md", content="v1\n")
    mine.delete(later.id, memory_store_id=sid)  # was "not found": the proposal did not see it
    mine.update(edited.id, memory_store_id=sid, content="v2 (agent)\n")
    with pytest.raises(anthropic.NotFoundError):
        mine.retrieve(later.id, memory_store_id=sid)
    assert listed(a, sid) == {"/draft.md": "draft\n", "/edited.md": "v2 (agent)\n", "/old.md": "old text\n"}
    assert theirs.retrieve(later.id, memory_store_id=sid).content == "published later\n"  # not yet
    theirs.create(sid, path="/meanwhile.md", content="kept\n")  # a publication after the delete

    pid, h = the_proposal(env), {"x-api-key": env["other_key"]}
    diff = httpx.get(f"{env['api']}/{pid}/diff", headers=h).json()["data"]
    assert {d["path"]: d["status"] for d in diff} == {
        "/draft.md": "clean",
        "/edited.md": "clean",
        "/later.md": "clean",
    }
    done = httpx.post(f"{env['api']}/{pid}/accept", headers=h, json={})
    assert done.status_code == 200, done.text
    assert listed(o, sid) == {
        "/draft.md": "draft\n",
        "/edited.md": "v2 (agent)\n",
        "/meanwhile.md": "kept\n",
        "/old.md": "old text\n",
    }


def test_a_memory_both_changed_is_a_conflict_and_nothing_is_overwritten(env: dict[str, Any]) -> None:
    a, o, sid = env["agent"], env["other"], env["sid"]
    mine, theirs = a.beta.memory_stores.memories, o.beta.memory_stores.memories
    old = next(m for m in theirs.list(sid) if m.path == "/old.md")
    mine.update(old.id, memory_store_id=sid, content="agent's text\n")
    theirs.update(old.id, memory_store_id=sid, content="other's text\n")
    mine.create(sid, path="/new.md", content="new\n")  # after the scope moved: the proposal rebases
    assert mine.retrieve(old.id, memory_store_id=sid).content == "agent's text\n"

    pid, h = the_proposal(env), {"x-api-key": env["other_key"]}
    diff = {d["path"]: d for d in httpx.get(f"{env['api']}/{pid}/diff", headers=h).json()["data"]}
    assert {p: d["status"] for p, d in diff.items()} == {"/new.md": "clean", "/old.md": "conflict"}
    assert diff["/old.md"]["base"] == "old text\n" and diff["/old.md"]["current"] == "other's text\n"
    refused = httpx.post(f"{env['api']}/{pid}/accept", headers=h, json={})
    assert refused.status_code == 409, refused.text
    assert listed(o, sid) == {"/old.md": "other's text\n"}  # nothing written
    done = httpx.post(f"{env['api']}/{pid}/accept", headers=h, json={"paths": ["/new.md"]})
    assert done.status_code == 200, done.text
    assert listed(o, sid) == {"/new.md": "new\n", "/old.md": "other's text\n"}
