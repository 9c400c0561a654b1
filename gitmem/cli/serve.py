"""``gitmem serve``: the Anthropic-compatible memory stores API over HTTP (extra ``server``)."""

from __future__ import annotations

from typing import Annotated

import typer

from gitmem.cli import common
from gitmem.errors import GitmemError


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    home: common.HomeOpt = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on (TLS: see docs/server.md).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="TCP port.")] = 8080,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Worker processes.")] = 1,
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning or error.")] = "info",
    cluster_node: Annotated[
        str | None, typer.Option("--cluster-node", help="Serve as this node of a cluster (docs/cluster.md).")
    ] = None,
    cluster_url: Annotated[
        str | None,
        typer.Option(
            "--cluster-url", help="The URL other nodes reach this one at (default http://HOST:PORT)."
        ),
    ] = None,
    database: Annotated[
        str | None,
        typer.Option("--database", help="The cluster's PostgreSQL URL ($GITMEM_CLUSTER_DATABASE)."),
    ] = None,
    replication: Annotated[
        str,
        typer.Option("--replication", help="async (acknowledged at the home) or sync (and at a replica)."),
    ] = "async",
    replicas: Annotated[
        int, typer.Option("--replicas", min=0, help="Replicas of each store this node creates (cluster).")
    ] = 1,
    lease_seconds: Annotated[
        float,
        typer.Option(
            "--lease-seconds", min=1.0, help="A cluster write lease's length (failover takes longer)."
        ),
    ] = 10.0,
    json: common.JsonOpt = False,
) -> None:
    """Serve the workspace's stores as Anthropic's memory stores API (base_url for the SDK).

    Every request needs an API token (gitmem token create). Stops cleanly on Ctrl-C or SIGTERM:
    requests in flight finish first.
    """

    def call() -> None:
        try:
            from gitmem.server.app import serve as run
        except ImportError as exc:  # the optional extra is missing
            raise GitmemError(
                f"gitmem serve needs the 'server' extra: pip install 'gitmem-store[server]' ({exc})"
            ) from None
        if cluster_node is not None:
            from gitmem import config
            from gitmem.cluster.serving import serve_node
            from gitmem.errors import InvalidInputError

            url = database or config.env("GITMEM_CLUSTER_DATABASE")
            if not url:
                raise InvalidInputError("--cluster-node needs --database URL or GITMEM_CLUSTER_DATABASE")
            if workers != 1:
                raise InvalidInputError("a cluster node runs one worker process (--workers 1)")
            if replication not in ("async", "sync"):
                raise InvalidInputError(f"--replication must be async or sync, not {replication!r}")
            serve_node(
                config.workspace_home(common.home(home)), database=url, name=cluster_node, url=cluster_url or f"http://{host}:{port}",
                host=host, port=port, log_level=log_level, sync=replication == "sync", replicas=replicas,
                lease_seconds=lease_seconds,
            )  # fmt: skip
            return
        run(common.home(home), host=host, port=port, workers=workers, log_level=log_level)

    common.run(json, call)
