"""``limits.max_store_bytes`` against review tokens (docs/review.md#limits; a red-team probe
first). There is one open proposal per session, and over ``/mcp`` a token without a session of its
own may name sub-sessions (``sesn_mcp_<ulid>.<name>``, docs/access.md), each with its own proposal:
a ``--review`` token stored a fresh ``max_store_bytes`` in every one of them, past the limit the
store set, when each proposal was checked alone. A proposed write counts every open proposal."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from serverkit import running, token

import gitmem
from gitmem import config

MAX_STORE = 3000
ONE = "x" * 2500 + "\n"  # fits the store alone; a second one does not
ROUNDS = 5


@pytest.fixture
def env(workspace: Path) -> Iterator[dict[str, Any]]:
    with gitmem.create_store("notes", home=workspace) as s:
        s.update_settings(
            actor="user:alice", limits=config.Limits(max_memory_bytes=2600, max_store_bytes=MAX_STORE)
        )
        s.write("/keep.md", "kept\n", actor="user:alice")
    agent = token(workspace, actor="user:agent", stores={"notes": "rw"}, review=True)
    with running(workspace) as url:
        yield {"home": workspace, "url": url, "agent": agent}


async def _write(url: str, secret: str, session: str, path: str) -> bool:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx.AsyncClient(headers={"authorization": f"Bearer {secret}"}, timeout=30)
    async with Client(streamable_http_client(f"{url}/mcp?session={session}", http_client=http)) as c:
        res = await c.call_tool("create_memory", {"store": "notes", "path": path, "content": ONE})
        return not res.is_error


def test_a_review_token_cannot_store_more_than_max_store_bytes_in_proposals(env: dict[str, Any]) -> None:
    stored = 0
    for n in range(ROUNDS):
        if asyncio.run(_write(env["url"], env["agent"], f"s{n}", f"/big{n}.md")):
            stored += len(ONE)
    with gitmem.open_store("notes", env["home"]) as s:
        held = len([p for p in s.proposals() if p.status == "open"])
    assert stored <= MAX_STORE, (
        f"one review token stored {stored} bytes in {held} proposals (limit {MAX_STORE})"
    )
