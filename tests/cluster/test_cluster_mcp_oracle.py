"""MCP routing is no oracle: a caller whose credentials do not open a store (a bad token, or a token
with no grant for it) gets, through a node that is not the store's home, the same answer as for a
store that does not exist; only a caller who may use the store is routed to its home."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("mcp")

import httpx2  # noqa: E402

import gitmem  # noqa: E402
from gitmem.cluster.tokens import ClusterTokenStore  # noqa: E402
from tests.cluster.test_cluster_nodes import cluster  # noqa: E402


def mcp_post(url: str, secret: str, store: str, method: str, params: dict[str, object]) -> tuple[int, str]:
    """One JSON-RPC request to ``url``'s /mcp with ``secret``; its status and body, the store's
    name or id masked (so answers for two stores compare)."""
    body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}
    headers = {
        "Authorization": f"Bearer {secret}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    r = httpx2.post(f"{url}/mcp", json=body, headers=headers, timeout=60)
    return r.status_code, r.text.replace(store, "<store>")


def _call(url: str, secret: str, store: str) -> tuple[int, str]:
    args = {"store": store, "path": "/seed.md"}
    return mcp_post(url, secret, store, "tools/call", {"name": "read_memory", "arguments": args})


def test_a_caller_who_may_not_use_a_store_learns_nothing_of_it_through_routing(
    database: str, tmp_path: Path
) -> None:
    with cluster(database, tmp_path, n=2, replicas=1) as nodes:
        n0, n1 = nodes
        with gitmem.open_store(gitmem.create_store("notes", home=tmp_path / "n0").path) as s:
            s.write("/seed.md", "seed\n", actor="user:seed")
        gitmem.create_store("elsewhere", home=tmp_path / "n0").close()
        n0.node.tick()
        assert n1.node.home_of("notes")[0] == "n0"  # type: ignore[index]
        tokens = ClusterTokenStore(n0.node.state)
        _o, other = tokens.create(actor="user:eve", stores={"elsewhere": "rw"})
        before = n1.node.forwarded
        for secret in ("gm_not_a_token", other):
            assert _call(n1.url, secret, "notes") == _call(n1.url, secret, "no-such-store"), secret
        assert n1.node.forwarded == before  # nothing was sent to the home
