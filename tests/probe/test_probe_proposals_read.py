"""Probe: who may read a proposal. docs/access.md ("Who receives which refs") says the APIs, MCP and
the console give a proposal only to its proposer and to reviewers, and ``/git`` hides
``refs/gitmem/proposals/*`` from read-only and ``--review`` tokens. The review API's read endpoints
must keep the same rule: a read-only token or another review token is no reviewer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from serverkit import client, running, token

import gitmem

UNREVIEWED = "unreviewed draft: the merger closes on Friday\n"


@pytest.fixture
def env(workspace: Path) -> Iterator[dict[str, Any]]:
    with gitmem.create_store("notes", home=workspace) as s:
        s.write("/keep.md", "kept\n", actor="user:alice")
    agent = token(workspace, actor="user:agent", stores={"notes": "rw"}, review=True)
    peer = token(workspace, actor="user:peer", stores={"notes": "rw"}, review=True)
    reader = token(workspace, actor="user:ro", stores={"notes": "ro"})
    with running(workspace) as url:
        a = client(url, agent)
        sid = next(s for s in a.beta.memory_stores.list() if s.name == "notes").id
        a.beta.memory_stores.memories.create(sid, path="/draft.md", content=UNREVIEWED)
        with gitmem.open_store("notes", workspace) as s:
            (p,) = s.proposals()
        yield {"url": url, "peer": peer, "reader": reader, "pid": p.id}


@pytest.mark.xfail(
    strict=True,
    reason="review API (gitmem/server/review_api.py: list_proposals/show/diff) gives any reader another "
    "caller's proposal, though docs/access.md and /git's hideRefs give it only to proposer and reviewers",
)
@pytest.mark.parametrize("who", ["reader", "peer"])
def test_a_non_reviewer_cannot_read_another_callers_proposal(env: dict[str, Any], who: str) -> None:
    base = f"{env['url']}/v1/gitmem/stores/notes/proposals"
    headers = {"authorization": f"Bearer {env[who]}"}
    leaked = []
    for url in (base, f"{base}/{env['pid']}", f"{base}/{env['pid']}/diff"):
        r = httpx.get(url, headers=headers, timeout=30)
        if r.status_code == 200 and (env["pid"] in r.text or "merger closes" in r.text):
            leaked.append(url.rsplit("/", 1)[-1])
    assert leaked == [], f"a {who} token read the proposal through: {leaked}"
