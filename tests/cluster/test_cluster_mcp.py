"""MCP through any node: the real ``mcp`` client on a node that is not the store's home; a tool call
that writes lands once, at the home (which checks the token's grant and scope), and reaches the
replicas by the home's replication; a read after it sees it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio  # noqa: E402
import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

import gitmem  # noqa: E402
from gitmem.cluster.tokens import ClusterTokenStore  # noqa: E402
from tests.cluster.test_cluster_nodes import cluster, the_copy  # noqa: E402


def _text(result: Any) -> str:
    return "".join(c.text for c in result.content)


def _connect(url: str, secret: str, query: str = "") -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=60)
    return Client(streamable_http_client(f"{url}/mcp{query}", http_client=http))


def test_an_mcp_write_through_a_replica_node_lands_once_at_the_home(database: str, tmp_path: Path) -> None:
    with cluster(database, tmp_path, n=3, replicas=2) as nodes:
        n0, n1, _n2 = nodes
        with gitmem.open_store(gitmem.create_store("notes", home=tmp_path / "n0").path) as s:
            s.write("/seed.md", "seed\n", actor="user:seed")
            s.write("/other/x.md", "another scope\n", actor="user:seed", scope="other")
        n0.node.tick()  # placed on n0, replicas n1 and n2, brought level
        sid = n0.node.state.resolve("notes").store_id
        assert sorted(n0.node.state.placement(sid).replicas) == ["n1", "n2"]
        tokens = ClusterTokenStore(n0.node.state)
        _w, writer = tokens.create(actor="user:ada", stores={"notes": "rw"})
        _r, reader = tokens.create(actor="user:bob", stores={"notes": "ro"})
        _s, scoped = tokens.create(actor="user:cy", stores={"notes": "rw"}, scope="other")
        before = n1.node.forwarded

        async def session() -> None:
            async with _connect(n1.url, writer) as c:  # n1 holds a replica copy, not the lease
                tools = {t.name for t in (await c.list_tools()).tools}
                assert "write_memory" in tools
                made = await c.call_tool(
                    "write_memory", {"store": "notes", "path": "/via-n1.md", "content": "through n1\n"}
                )
                assert not made.is_error, _text(made)
                assert json.loads(_text(made))["actor"] == "user:ada"
                read = await c.call_tool("read_memory", {"store": "notes", "path": "/via-n1.md"})
                assert not read.is_error and json.loads(_text(read))["content"] == "through n1\n"
                edited = await c.call_tool(
                    "edit_memory",
                    {"store": sid, "path": "/via-n1.md", "old_str": "n1", "new_str": "node one"},
                )
                assert not edited.is_error, _text(edited)
            async with _connect(n1.url, reader) as c:  # read-only: refused by the home
                refused = await c.call_tool(
                    "write_memory", {"store": "notes", "path": "/bob.md", "content": "no\n"}
                )
                # the home serves this token no write tool for the store: refused there
                assert refused.is_error and "Unknown tool: write_memory" in _text(refused), _text(refused)
            async with _connect(n1.url, scoped, "?scope=other") as c:  # its scope reaches the home
                made = await c.call_tool(
                    "write_memory", {"store": "notes", "path": "/other/y.md", "content": "scoped\n"}
                )
                assert not made.is_error, _text(made)

        anyio.run(session)
        assert n1.node.forwarded - before == 5  # each tool call was made at the home
        with gitmem.open_store(the_copy(tmp_path / "n0")) as s:  # landed once, at the home
            mine = s.versions(path="/via-n1.md")
            assert [v.operation for v in mine] == ["modified", "created"]
            assert {v.actor for v in mine} == {"user:ada"}
            assert s.read("/via-n1.md").content == "through node one\n"  # type: ignore[union-attr]
            assert not s.versions(path="/bob.md")
            assert s.read("/other/y.md", scope="other").content == "scoped\n"  # type: ignore[union-attr]
            assert not s.versions(path="/other/y.md")  # not in main
        n0.node.tick()  # the home's replication brings both replicas level
        for name in ("n1", "n2"):
            with gitmem.open_store(the_copy(tmp_path / name)) as copy:
                assert copy.read("/via-n1.md").content == "through node one\n"  # type: ignore[union-attr]
                assert len(copy.versions(path="/via-n1.md")) == 2


def test_an_mcp_write_routed_to_a_sync_home_is_answered_once_a_replica_holds_it(
    database: str, tmp_path: Path
) -> None:
    """Under ``replication: sync`` the home holds a routed tool call's answer until a replica has
    the write (its beats are stopped, so only the write's own replication can bring it there)."""
    import time

    with cluster(database, tmp_path, n=2, replicas=1, sync=True) as nodes:
        n0, n1 = nodes
        gitmem.create_store("notes", home=tmp_path / "n0").close()
        n0.node.tick()
        sid = n0.node.state.resolve("notes").store_id
        assert n0.node.state.placement(sid).replicas == ("n1",)
        n0.node.heartbeat_seconds = 3600.0  # n0's next wait outlasts the test: no beat replicates
        time.sleep(2.0)  # (the wait under way, 0.5 s, ends and the long one begins)
        _w, writer = ClusterTokenStore(n0.node.state).create(actor="user:ada", stores={"notes": "rw"})

        async def session() -> None:
            async with _connect(n1.url, writer) as c:
                made = await c.call_tool(
                    "write_memory", {"store": "notes", "path": "/synced.md", "content": "held\n"}
                )
                assert not made.is_error, _text(made)

        anyio.run(session)
        with gitmem.open_store(the_copy(tmp_path / "n1")) as copy:  # at the answer, not a beat later
            assert copy.read("/synced.md").content == "held\n"  # type: ignore[union-attr]
