"""Moves, promotions and what a failover lost, in the shared state (docs/cluster.md#moves-and-failover).

A **move** of a live home is a handoff, not a change of placement: ``request_move`` only records
where the store should go (``placements.moving_to``). The home, at its next beat, shuts its fence,
waits for the writes it is answering, sends its last state to the target and then, in one
transaction (:func:`finish_move`), makes the target the home and hands it the lease at the next
epoch. Every write the old home acknowledged is in what it sent, and it can publish nothing after
(its fence is shut and its epoch is stale).

A **promotion** after a home is lost picks, among the live replicas, the one that applied the
newest replication (by the cluster-wide replication number, not by time), and never one older
than the store's *ack point*: under ``replication: sync`` the home records, before it answers a
write, the replication number a replica confirmed it with; a replica older than that lacks an
acknowledged write and is not promoted (the store waits for a replica that has it).

Under ``replication: async`` a promoted replica may lack the old home's last writes. When the old
home comes back and is brought level, the commits it held that the new home does not are recorded
here (:func:`record_lost`, ``lost_writes``), by ref, commit and subject, with the bundle on the old
node that keeps them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gitmem.errors import ConflictError, NotFoundError

if TYPE_CHECKING:
    from gitmem.cluster.state import ClusterState, Placement


@dataclass(frozen=True)
class LostWrite:
    store_id: str
    node: str  # the old home that held it
    epoch: int  # the epoch it was written under
    ref: str
    commit: str
    summary: str
    bundle: str  # the file on that node that keeps the commit


def request_move(state: ClusterState, store_id: str, node: str) -> Placement:
    """Ask the store's home to hand the store to ``node`` (a replica, added if it is not one)."""
    with state.transaction() as conn:
        if not conn.execute("SELECT 1 FROM nodes WHERE name = %s", (node,)).fetchone():
            raise NotFoundError(f"node {node!r} has not joined the cluster")
        row = conn.execute(
            "SELECT home, replicas FROM placements WHERE store_id = %s FOR UPDATE", (store_id,)
        ).fetchone()
        if row is None:
            raise NotFoundError(f"store {store_id} is not placed in the cluster")
        home, replicas = row[0], list(row[1])
        if home == node:
            conn.execute("UPDATE placements SET moving_to = NULL WHERE store_id = %s", (store_id,))
            return state_placement(home, store_id, replicas, None)
        if node not in replicas:
            replicas.append(node)
        conn.execute(
            "UPDATE placements SET moving_to = %s, replicas = %s WHERE store_id = %s",
            (node, replicas, store_id),
        )
    return state_placement(home, store_id, replicas, node)


def state_placement(home: str, store_id: str, replicas: Sequence[str], moving_to: str | None) -> Placement:
    from gitmem.cluster.state import Placement

    return Placement(store_id, home, tuple(replicas), moving_to)


def drain(state: ClusterState, node: str) -> list[Placement]:
    """Mark ``node`` draining and ask it to hand each store it homes to a healthy replica."""
    state.set_draining(node)
    healthy = {n.name for n in state.nodes() if n.healthy and not n.draining}
    moving = []
    for p in state.placements():
        if p.home != node:
            continue
        target = next((r for r in p.replicas if r in healthy), None)
        if target is None:
            raise ConflictError(f"store {p.store_id} has no healthy replica to move to")
        moving.append(request_move(state, p.store_id, target))
    return moving


def finish_move(
    state: ClusterState, store_id: str, old: str, epoch: int, new: str, seconds: float, seq: int = 0
) -> int:
    """The home ``old`` (lease at ``epoch``) sent its last state to ``new`` (replication ``seq``):
    make ``new`` the home and hand it the lease at the next epoch, in one transaction; ``old``'s
    copy, as fresh as that replication, counts as a replica at ``seq`` (a failover may promote it
    if the new home is lost before it replicated again). The new epoch."""
    with state.transaction() as conn:
        row = conn.execute(
            "SELECT home, replicas, moving_to FROM placements WHERE store_id = %s FOR UPDATE", (store_id,)
        ).fetchone()
        if row is None or row[0] != old or row[2] != new:
            raise ConflictError(f"store {store_id}'s move to {new} was withdrawn or overtaken")
        lease = conn.execute(
            "SELECT holder, epoch FROM leases WHERE store_id = %s FOR UPDATE", (store_id,)
        ).fetchone()
        if lease is None or lease[0] != old or int(lease[1]) != epoch:
            raise ConflictError(f"{old} no longer holds store {store_id}'s lease at epoch {epoch}")
        replicas = [r for r in row[1] if r != new] + ([old] if old not in row[1] else [])
        conn.execute(
            "UPDATE placements SET home = %s, replicas = %s, moving_to = NULL, placed_at = now()"
            " WHERE store_id = %s",
            (new, replicas, store_id),
        )
        conn.execute(
            "UPDATE leases SET holder = %s, epoch = %s, expires_at = now() + make_interval(secs => %s)"
            " WHERE store_id = %s",
            (new, epoch + 1, seconds, store_id),
        )
        if seq:
            conn.execute(
                "INSERT INTO replica_positions (store_id, node, refs_sha256, seq) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT (store_id, node) DO UPDATE SET refs_sha256 = EXCLUDED.refs_sha256,"
                " seq = EXCLUDED.seq, applied_at = now()",
                (store_id, old, f"#{seq}", seq),
            )
    return epoch + 1


def cancel_move(state: ClusterState, store_id: str) -> None:
    state.conn().execute("UPDATE placements SET moving_to = NULL WHERE store_id = %s", (store_id,))


def wait_moved(state: ClusterState, store_id: str, node: str, seconds: float) -> Placement:
    """The placement once ``node`` is the home, or once the move was withdrawn (the home could
    not hand over: see its errors), or as it stands after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        p = state.placement(store_id)
        if p.home == node or p.moving_to != node or time.monotonic() >= deadline:
            return p
        time.sleep(0.1)


def record_acked(state: ClusterState, store_id: str, seq: int) -> None:
    """Before a sync write is answered: a replica holds replication ``seq``, which has it."""
    state.conn().execute(
        "INSERT INTO acked (store_id, seq) VALUES (%s, %s)"
        " ON CONFLICT (store_id) DO UPDATE SET seq = GREATEST(acked.seq, EXCLUDED.seq)",
        (store_id, seq),
    )


def ack_point(state: ClusterState, store_id: str) -> int:
    row = state.conn().execute("SELECT seq FROM acked WHERE store_id = %s", (store_id,)).fetchone()
    return int(row[0]) if row else 0


def promotable(state: ClusterState, store_id: str, live: Sequence[str]) -> str | None:
    """Of the live replicas ``live``, the one to promote: the newest copy, and none that lacks an
    acknowledged write (older than the ack point); None when no live replica qualifies."""
    row = (
        state.conn()
        .execute(
            "SELECT p.node FROM replica_positions p LEFT JOIN acked a ON a.store_id = p.store_id"
            " WHERE p.store_id = %s AND p.node = ANY(%s) AND p.seq >= coalesce(a.seq, 0)"
            " ORDER BY p.seq DESC, p.node LIMIT 1",
            (store_id, list(live)),
        )
        .fetchone()
    )
    return str(row[0]) if row else None


def record_lost(state: ClusterState, lost: Sequence[LostWrite]) -> list[LostWrite]:
    """Record each lost write once (by store, old home, epoch and commit: a replication into the
    old home that failed after its tail was recorded finds the same tail again); those new here."""
    new: list[LostWrite] = []
    with state.transaction() as conn:
        for w in lost:
            row = conn.execute(
                "INSERT INTO lost_writes (store_id, node, epoch, ref, commit_id, summary, bundle)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (store_id, node, epoch, commit_id) DO NOTHING RETURNING id",
                (w.store_id, w.node, w.epoch, w.ref, w.commit, w.summary[:500], w.bundle),
            ).fetchone()
            if row is not None:
                new.append(w)
    return new


def lost_writes(state: ClusterState, store_id: str | None = None) -> list[LostWrite]:
    rows = (
        state.conn()
        .execute(
            "SELECT store_id, node, epoch, ref, commit_id, summary, bundle FROM lost_writes"
            " WHERE %s::text IS NULL OR store_id = %s ORDER BY id",
            (store_id, store_id),
        )
        .fetchall()
    )
    return [LostWrite(s, n, int(e), r, c, m, b) for s, n, e, r, c, m, b in rows]


def counts(state: ClusterState, node: str) -> dict[str, int]:
    """Cluster-wide figures for a node's /healthz and /metrics (one statement)."""
    row = (
        state.conn()
        .execute(
            "SELECT (SELECT count(*) FROM nodes),"
            " (SELECT count(*) FROM nodes WHERE last_seen > now() - make_interval(secs => %s)),"
            " (SELECT count(*) FROM placements WHERE home = %s),"
            " (SELECT count(*) FROM placements WHERE moving_to IS NOT NULL),"
            " (SELECT count(*) FROM lost_writes),"
            " (SELECT count(*) FROM purges WHERE NOT proved)",
            (state.healthy_seconds, node),
        )
        .fetchone()
    )
    keys = ("nodes", "nodes_healthy", "stores_placed_here", "moves_pending", "lost_writes", "purges_unproved")
    return {k: int(v) for k, v in zip(keys, row, strict=True)}
