"""``gitmem cluster init|join|status|move|drain``: the cluster's shared state (docs/cluster.md)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gitmem import config
from gitmem.cli import common
from gitmem.errors import InvalidInputError

cluster_app = typer.Typer(
    help="A gitmem cluster: PostgreSQL holds nodes, placement, leases and tokens.", no_args_is_help=True
)
DatabaseOpt = Annotated[
    str | None,
    typer.Option(
        "--database", help="PostgreSQL URL ($GITMEM_CLUSTER_DATABASE), e.g. postgresql://host/gitmem."
    ),
]


def register(app: typer.Typer) -> None:
    app.add_typer(cluster_app, name="cluster")


def _state(database: str | None) -> Any:
    from gitmem.cluster.state import ClusterState

    url = database or config.env("GITMEM_CLUSTER_DATABASE")
    if not url:
        raise InvalidInputError("no cluster database: give --database URL or set GITMEM_CLUSTER_DATABASE")
    return ClusterState(url)


@cluster_app.command("init")
def init(
    database: DatabaseOpt = None,
    import_tokens: Annotated[
        bool, typer.Option("--import-tokens", help="Copy this workspace's tokens into the cluster.")
    ] = False,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Create or upgrade the cluster's schema (each migration once, whoever runs it first)."""

    def call() -> dict[str, Any]:
        from gitmem.cluster.tokens import ClusterTokenStore
        from gitmem.server.tokens import TokenStore

        with _state(database) as state:
            applied = state.init()
            imported = (
                ClusterTokenStore(state).import_records(TokenStore(common.home(home))) if import_tokens else 0
            )
        return {"migrations_applied": applied, "tokens_imported": imported}

    common.run(
        json,
        call,
        lambda v: typer.echo(
            f"schema up to date (applied {v['migrations_applied'] or 'none'}); "
            f"{v['tokens_imported']} token(s) imported"
        ),
    )


@cluster_app.command("join")
def join(
    name: Annotated[str, typer.Argument(help="This node's name, unique in the cluster.")],
    url: Annotated[
        str, typer.Option("--url", help="The base URL other nodes reach this node's gitmem serve at.")
    ],
    database: DatabaseOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Register a node (again: its URL is updated)."""

    def call() -> Any:
        with _state(database) as state:
            state.check_schema()
            return state.join(name, url)

    common.run(json, call, lambda n: typer.echo(f"node {n.name} joined at {n.url}"))


@cluster_app.command("status")
def status(database: DatabaseOpt = None, json: common.JsonOpt = False) -> None:
    """Nodes with their health, and where each store lives."""

    def call() -> dict[str, Any]:
        with _state(database) as state:
            state.check_schema()
            from gitmem.cluster import handoff, purges

            return {
                "nodes": state.nodes(),
                "placements": state.placements(),
                "pending": state.pending(),
                "lost_writes": handoff.lost_writes(state),
                "purges_unproved": purges.unproved(state),
            }

    def render(v: dict[str, Any]) -> None:
        common.print_table(
            ["NODE", "URL", "HEALTH", "SEEN"],
            [
                [
                    n.name,
                    n.url,
                    ("draining" if n.draining else "up") if n.healthy else "down",
                    f"{n.seen_seconds_ago:.0f}s ago",
                ]
                for n in v["nodes"]
            ],
        )
        common.print_table(
            ["STORE", "HOME", "REPLICAS"],
            [[p.store_id, p.home, ",".join(p.replicas) or "-"] for p in v["placements"]],
        )
        typer.echo(f"{v['pending']} replication item(s) pending")
        for w in v["lost_writes"]:  # the async tail a failover lost, kept on the old home
            typer.echo(
                f"lost at failover: {w.store_id} {w.ref} {w.commit[:12]} {w.summary} (kept in {w.node}:{w.bundle})"
            )

    common.run(json, call, render)


WaitOpt = Annotated[
    float, typer.Option("--wait", min=0.0, help="Seconds to wait for the home to hand the store over.")
]


@cluster_app.command("move")
def move(
    store: Annotated[str, typer.Argument(help="The store's id.")],
    node: Annotated[str, typer.Argument(help="The node to make its home.")],
    wait: WaitOpt = 60.0,
    database: DatabaseOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Hand the store to NODE: its home stops taking writes, sends NODE its last state and hands
    it the lease; the old home stays as a replica."""
    from gitmem.cluster import handoff

    def call() -> Any:
        with _state(database) as state:
            state.check_schema()
            handoff.request_move(state, store, node)
            return handoff.wait_moved(state, store, node, wait)

    def render(p: Any) -> None:
        how = "moved" if p.home == node else ("handoff pending" if p.moving_to == node else "move withdrawn")
        typer.echo(f"{p.store_id}: {how}; home {p.home}, replicas {','.join(p.replicas) or '-'}")

    common.run(json, call, render)


@cluster_app.command("drain")
def drain(
    node: Annotated[str, typer.Argument(help="The node to empty.")],
    wait: WaitOpt = 60.0,
    database: DatabaseOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Take a node out of placement and hand every store it homes to a healthy replica."""
    from gitmem.cluster import handoff

    def call() -> Any:
        with _state(database) as state:
            state.check_schema()
            asked = handoff.drain(state, node)
            return [handoff.wait_moved(state, p.store_id, p.moving_to or p.home, wait) for p in asked]

    def render(moved: Any) -> None:
        done = sum(1 for p in moved if p.home != node)
        typer.echo(f"moved {done} of {len(moved)} store(s) off {node}")

    common.run(json, call, render)
