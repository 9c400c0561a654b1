"""A cluster node's ASGI app (the server's faces behind the proxy, the MCP router and the
replica endpoints) and ``gitmem serve --cluster-node``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gitmem.cluster import endpoints, purges, webhook_state
from gitmem.cluster.node import ClusterNode
from gitmem.cluster.tokens import ClusterTokenStore


def node_app(node: ClusterNode) -> Any:
    """This node's ASGI app: the server's app on the cluster's tokens, behind the proxy."""
    import httpx2 as httpx

    from gitmem.cluster.mcp_route import McpRouter, granted
    from gitmem.cluster.proxy import ClusterProxy
    from gitmem.server.app import create_app
    from gitmem.server.dream_jobs import DIR as DREAMS_DIR

    inner = create_app(
        node.home, tokens=ClusterTokenStore(node.state), webhook_cursors=webhook_state.ClusterCursors(node)
    )
    client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=5.0))

    def counted(_node: str) -> None:
        node.forwarded += 1

    served: Any = endpoints.Placing(inner, node)
    if node.sync:
        served = endpoints.SyncAck(served, node)
    served = purges.PurgeAnswer(served, node)  # after a sync hold: its replication came first
    served = endpoints.Inflight(served, node)

    def has_dream(dream_id: str) -> bool:  # the id is checked by the proxy's pattern: drm_<ULID>
        return (node.home / DREAMS_DIR / f"{dream_id}.json").is_file()

    def peers() -> list[tuple[str, str]]:
        return [(n.name, n.url) for n in node.state.nodes() if n.healthy and n.name != node.name]

    proxy = ClusterProxy(
        served, node=node.name, secret=node.state.secret(), home_of=node.home_of,
        client=client, on_forward=counted, has_dream=has_dream, peers=peers,
        conversation_store=endpoints.conversation_store,
    )  # fmt: skip
    replica = endpoints.replica_app(node)
    routed = McpRouter(
        proxy, node=node.name, home_of=node.home_of, on_forward=counted,
        store_id_of=lambda store: node.state.resolve(store).store_id,
        may_use=granted(ClusterTokenStore(node.state)),
    )  # fmt: skip

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/cluster/v1/"):
            await replica(scope, receive, send)
        else:
            await routed(scope, receive, send)

    return endpoints.Figures(app, node)


def serve_node(
    home: Path,
    *,
    database: str,
    name: str,
    url: str,
    host: str,
    port: int,
    log_level: str,
    sync: bool,
    replicas: int = 1,
    lease_seconds: float = 10.0,
) -> None:
    """``gitmem serve --cluster-node NAME``: join, serve every face behind the proxy, leave the
    heartbeat (and so the leases) when stopped."""
    import uvicorn

    from gitmem.server.app import uvicorn_options

    node = ClusterNode(
        Path(home), database, name, url, sync=sync, replicas=replicas, lease_seconds=lease_seconds,
        heartbeat_seconds=min(2.0, lease_seconds / 4),
    )  # fmt: skip
    node.start()
    try:
        uvicorn.run(node_app(node), **uvicorn_options(host=host, port=port, log_level=log_level))
    finally:
        node.stop()
