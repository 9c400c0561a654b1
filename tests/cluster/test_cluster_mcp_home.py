"""MCP and a store's home: a resource read through a node that is not the home is made at the home
(its copy there may be stale, or not have the memory), and a tool call made straight to a sync
home is answered only once a replica holds its write (one that moved no ref, a read, is answered
with the replica down). The home's beats are stopped in both, so
only the home's own answers can bring anything to the other node."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio  # noqa: E402

import gitmem  # noqa: E402
from gitmem.cluster.mcp_route import URI_PREFIX, store_call  # noqa: E402
from gitmem.cluster.tokens import ClusterTokenStore  # noqa: E402
from gitmem.integrations import mcp_server  # noqa: E402
from tests.cluster.test_cluster_mcp import _connect, _text  # noqa: E402
from tests.cluster.test_cluster_mcp_oracle import mcp_post  # noqa: E402
from tests.cluster.test_cluster_nodes import cluster, the_copy  # noqa: E402


def _stop_beats(node: Any) -> None:
    node.heartbeat_seconds = 3600.0  # its next wait outlasts the test: no beat replicates
    time.sleep(2.0)  # (the wait under way, 0.5 s, ends and the long one begins)


def _contents(result: Any) -> str:
    return "".join(c.text for c in result.contents)


def test_the_router_names_a_resource_s_store_as_the_mcp_face_does() -> None:
    assert URI_PREFIX == mcp_server.URI_PREFIX
    read = b'{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"gitmem://notes/a/b.md"}}'
    call = store_call(read)
    assert call is not None and (call.method, call.store, call.name) == (
        "resources/read",
        "notes",
        "gitmem://notes/a/b.md",
    )
    for bad in (
        b'"gitmem://notes"',
        b'"gitmem:///a.md"',
        b'"gitmem://notes/"',
        b'"file:///etc/passwd"',
        b"7",
    ):
        assert (
            store_call(b'{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":' + bad + b"}}")
            is None
        )
    assert store_call(b'{"jsonrpc":"2.0","method":"resources/read","params":{"uri":"gitmem://n/a"}}') is None
    tool = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{"store":"s"}}}'
    assert store_call(tool) is not None and store_call(tool).store == "s"  # type: ignore[union-attr]
    assert store_call(b"[" + tool + b"]") is None  # a batch is served here, never routed


def test_a_resource_read_through_a_replica_node_returns_what_the_home_has(
    database: str, tmp_path: Path
) -> None:
    with cluster(database, tmp_path, n=2, replicas=1, lease_seconds=60.0, healthy_seconds=120.0) as nodes:
        n0, n1 = nodes
        with gitmem.open_store(gitmem.create_store("notes", home=tmp_path / "n0").path) as s:
            s.write("/seed.md", "seed\n", actor="user:seed")
        gitmem.create_store("elsewhere", home=tmp_path / "n0").close()
        n0.node.tick()  # placed on n0, replica n1, brought level
        sid = n0.node.state.resolve("notes").store_id
        assert n0.node.state.placement(sid).replicas == ("n1",)
        tokens = ClusterTokenStore(n0.node.state)
        _w, writer = tokens.create(actor="user:ada", stores={"notes": "rw"})
        _o, other = tokens.create(actor="user:eve", stores={"elsewhere": "rw"})
        _stop_beats(n0.node)

        async def at_home() -> None:
            async with _connect(n0.url, writer) as c:  # straight to the home
                made = await c.call_tool(
                    "write_memory", {"store": "notes", "path": "/fresh.md", "content": "new\n"}
                )
                assert not made.is_error, _text(made)
                made = await c.call_tool(
                    "write_memory", {"store": "notes", "path": "/seed.md", "content": "v2\n"}
                )
                assert not made.is_error, _text(made)

        anyio.run(at_home)
        with gitmem.open_store(tmp_path / "n1" / "stores" / f"{sid}.git") as copy:  # n1's copy is behind
            assert copy.read("/seed.md").content == "seed\n"  # type: ignore[union-attr]
            assert not copy.versions(path="/fresh.md")
        before = n1.node.forwarded

        async def through_n1() -> None:
            async with _connect(n1.url, writer) as c:
                assert _contents(await c.read_resource(f"{URI_PREFIX}notes/fresh.md")) == "new\n"
                assert _contents(await c.read_resource(f"{URI_PREFIX}notes/seed.md")) == "v2\n"
                assert _contents(await c.read_resource(f"{URI_PREFIX}{sid}/seed.md")) == "v2\n"  # by id

        anyio.run(through_n1)
        assert n1.node.forwarded - before == 3  # each read was made at the home
        # no oracle: a caller with no grant for the store gets n1's answer for a store that is not there
        for secret in ("gm_not_a_token", other):
            assert _read(n1.url, secret, "notes") == _read(n1.url, secret, "no-such-store"), secret
        assert n1.node.forwarded - before == 3


def _read(url: str, secret: str, store: str) -> tuple[int, str]:
    return mcp_post(url, secret, store, "resources/read", {"uri": f"{URI_PREFIX}{store}/seed.md"})


def test_an_mcp_write_straight_to_a_sync_home_is_answered_once_a_replica_holds_it(
    database: str, tmp_path: Path
) -> None:
    with cluster(
        database, tmp_path, n=2, replicas=1, sync=True, lease_seconds=60.0, healthy_seconds=120.0
    ) as nodes:
        n0, n1 = nodes
        gitmem.create_store("notes", home=tmp_path / "n0").close()
        n0.node.tick()
        sid = n0.node.state.resolve("notes").store_id
        assert n0.node.state.placement(sid).replicas == ("n1",)
        _stop_beats(n0.node)
        _w, writer = ClusterTokenStore(n0.node.state).create(actor="user:ada", stores={"notes": "rw"})
        before = n0.node.forwarded

        async def session() -> None:
            async with _connect(n0.url, writer) as c:  # the home itself, not routed
                made = await c.call_tool(
                    "write_memory", {"store": sid, "path": "/direct.md", "content": "held\n"}
                )
                assert not made.is_error, _text(made)

        anyio.run(session)
        assert n0.node.forwarded == before
        with gitmem.open_store(the_copy(tmp_path / "n1")) as copy:  # at the answer, not a beat later
            assert copy.read("/direct.md").content == "held\n"  # type: ignore[union-attr]
        # the replica is down: a tool call that changes nothing (a read) is still answered, the
        # home's replication finding it already sent the replica exactly this state
        n1.server.should_exit = True
        n1.thread.join(timeout=30)

        async def read() -> None:
            async with _connect(n0.url, writer) as c:
                got = await c.call_tool("read_memory", {"store": "notes", "path": "/direct.md"})
                assert not got.is_error and json.loads(_text(got))["content"] == "held\n", _text(got)

        anyio.run(read)
