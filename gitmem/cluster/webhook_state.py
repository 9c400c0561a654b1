"""Webhooks in a cluster (docs/cluster.md#webhooks): the endpoints, the workspace's ids and every
store's delivery cursors are kept in PostgreSQL, so whichever node homes a store delivers its
events from where the last delivery of it stopped, on whichever node that was.

- **Endpoints** (``webhook_endpoints``): each node keeps its ``<home>/webhooks/endpoints.json`` as
  a copy, brought level at every beat (:func:`sync_endpoints`): an endpoint added on a node (API or
  CLI) is recorded in PostgreSQL, with the cursors its addition began (``begin``: each store at
  its tips then); one recorded by another node is added here (its cursor file begun here); one
  removed on a node is marked removed and removed from every other; ``enable`` (the resume count)
  is carried by the highest count. The body holds the endpoint's signing secret, as the
  database holds the cluster's own.
- **Workspace ids** (``webhook_workspace``): the first node's ``organization_id`` and
  ``workspace_id`` are every node's, so an event's body is the same whichever node sends it.
- **Cursors** (``webhook_cursors``, :class:`ClusterCursors`): a node delivers the version events
  of the stores it homes only (checked again before each event), reads their cursors from
  PostgreSQL at the start of each run, and records a store's cursor there after each delivered
  event, in the same step as its local file, only while it is still the store's home (a
  conditional write): an old home that finishes an event after a move or failover cannot move
  the shared cursor back.
- **The store-level journal** (created, archived, deleted; ``webhook_journal``): each node's
  entries are copied there at every beat (:func:`push_journal`, and before a sync write is
  acknowledged), and an entry is sent by its store's home (by the node that recorded it, for a
  store no longer placed), whichever node recorded it; ``webhook_journal_sent`` records each
  endpoint's sent entries (only while the sender is still the store's home), so a store's entry
  queued on a home that failed over is sent once, by the new home. An endpoint gets the entries
  copied after its row was made (``journal_from``) and made no earlier than it; for an endpoint
  from before the journal was shared, the entries a node's own cursor had sent are marked sent
  when they are copied.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from gitmem import webhook_local as local_files
from gitmem import webhooks
from gitmem.cluster.nodeview import NodeView
from gitmem.errors import GitmemError

State = dict[str, Any]


class ClusterCursors:
    """:class:`gitmem.webhooks.SharedCursors` of one node (module docstring)."""

    def __init__(self, node: NodeView) -> None:
        self.node = node

    def delivers(self, store_id: str) -> bool:
        try:
            home = self.node.home_of(store_id)
        except GitmemError:  # the shared state cannot be read: deliver nothing now, retry
            return False
        return home is None or home[0] == self.node.name

    def load(self, endpoint_id: str, state: State) -> None:
        rows = (
            self.node.state.conn()
            .execute(
                "SELECT c.store_id, c.cursor FROM webhook_cursors c JOIN placements p"
                " ON p.store_id = c.store_id WHERE c.endpoint_id = %s AND p.home = %s",
                (endpoint_id, self.node.name),
            )
            .fetchall()
        )
        for store_id, cursor in rows:
            state["stores"][store_id] = cursor

    def save(self, endpoint_id: str, store_id: str, cursor: dict[str, Any] | None) -> bool:
        conn = self.node.state.conn()
        placed = conn.execute("SELECT home FROM placements WHERE store_id = %s", (store_id,)).fetchone()
        if placed is None:
            return True  # not a cluster store: its local cursor is the whole story
        if cursor is None:
            conn.execute(
                "DELETE FROM webhook_cursors WHERE endpoint_id = %s AND store_id = %s",
                (endpoint_id, store_id),
            )
            return True
        row = conn.execute(
            "INSERT INTO webhook_cursors (endpoint_id, store_id, cursor, node)"
            " SELECT %s, %s, %s::jsonb, %s WHERE EXISTS"
            " (SELECT 1 FROM placements WHERE store_id = %s AND home = %s)"
            " ON CONFLICT (endpoint_id, store_id) DO UPDATE SET cursor = EXCLUDED.cursor,"
            " node = EXCLUDED.node, updated_at = now() RETURNING 1",
            (endpoint_id, store_id, json.dumps(cursor), self.node.name, store_id, self.node.name),
        ).fetchone()
        return row is not None

    def journal(self, endpoint_id: str) -> list[dict[str, Any]] | None:
        rows = (
            self.node.state.conn()
            .execute(
                "SELECT j.id, j.type, j.store_id, j.created_at FROM webhook_journal j"
                " JOIN webhook_endpoints e ON e.id = %s LEFT JOIN placements p ON p.store_id = j.store_id"
                " WHERE j.seq > coalesce(e.journal_from, 0) AND j.created_at >= coalesce(e.body->>'created_at', '')"
                " AND NOT EXISTS (SELECT 1 FROM webhook_journal_sent s"
                " WHERE s.endpoint_id = e.id AND s.event_id = j.id)"
                " AND (p.home = %s OR (p.store_id IS NULL AND j.node = %s)) ORDER BY j.seq",
                (endpoint_id, self.node.name, self.node.name),
            )
            .fetchall()
        )
        return [{"id": i, "type": t, "store_id": sid, "created_at": at} for i, t, sid, at in rows]

    def journal_sent(self, endpoint_id: str, entry_id: str) -> bool:
        row = (
            self.node.state.conn()
            .execute(
                "INSERT INTO webhook_journal_sent (endpoint_id, event_id, node) SELECT %s, j.id, %s"
                " FROM webhook_journal j LEFT JOIN placements p ON p.store_id = j.store_id WHERE j.id = %s"
                " AND (p.home = %s OR (p.store_id IS NULL AND j.node = %s))"
                " ON CONFLICT (endpoint_id, event_id) DO UPDATE SET node = webhook_journal_sent.node"
                " RETURNING 1",
                (endpoint_id, self.node.name, entry_id, self.node.name, self.node.name),
            )
            .fetchone()
        )
        return row is not None


_marked: dict[tuple[str, str], int] = {}  # (node, endpoint) -> the local journal seq marked sent up to


def push_journal(node: NodeView, conn: Any, endpoints: list[str]) -> None:
    """Copy this node's store-level journal entries PostgreSQL lacks into ``webhook_journal``; for
    an endpoint from before the journal was shared (no ``journal_from``), mark the entries its own
    cursor file had sent as sent. The caller holds the webhooks lock (no entry is being appended)."""
    entries = local_files.journal(node.home)
    if not entries:
        return
    last = conn.execute(
        "SELECT coalesce(max(node_seq), 0) FROM webhook_journal WHERE node = %s", (node.name,)
    ).fetchone()[0]
    for e in entries:
        if e["seq"] > last:
            conn.execute(
                "INSERT INTO webhook_journal (id, store_id, type, created_at, node, node_seq)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
                (e["id"], e["store_id"], e["type"], e["created_at"], node.name, e["seq"]),
            )
    older = [  # endpoints from before the journal was shared: their cursor files sent entries
        r[0]
        for r in conn.execute(
            "SELECT id FROM webhook_endpoints WHERE journal_from IS NULL AND id = ANY(%s)", (endpoints,)
        ).fetchall()
    ]
    for eid in older:
        upto = local_files.journal_cursor(node.home, eid)
        if upto > _marked.get((node.name, eid), 0):
            conn.execute(
                "INSERT INTO webhook_journal_sent (endpoint_id, event_id, node) SELECT %s, id, node"
                " FROM webhook_journal WHERE node = %s AND node_seq <= %s ON CONFLICT DO NOTHING",
                (eid, node.name, upto),
            )
            _marked[(node.name, eid)] = upto


def sync_endpoints(node: NodeView) -> None:
    """Bring this node's endpoints file and PostgreSQL's endpoints level (module docstring)."""
    home: Path = node.home
    conn = node.state.conn()
    rows = {
        i: (b, bool(r))
        for i, b, r in conn.execute("SELECT id, body, removed FROM webhook_endpoints").fetchall()
    }
    if not rows and not local_files.configured(home):
        return  # no webhooks anywhere: nothing written
    with local_files.locked(home):
        _sync_ids(conn, home)
        local = {e.id: e for e in webhooks.load_endpoints(home)}
        seen = local_files.seen(home)
        changed = False
        for eid, ep in list(local.items()):
            if eid not in rows:  # added on this node
                conn.execute(  # it gets the shared journal's entries from now on
                    "INSERT INTO webhook_endpoints (id, body, journal_from) VALUES (%s, %s::jsonb,"
                    " (SELECT coalesce(max(seq), 0) FROM webhook_journal)) ON CONFLICT DO NOTHING",
                    (eid, json.dumps(local_files.row(ep))),
                )
                for store_id, cursor in local_files.store_cursors(home, eid).items():
                    conn.execute(
                        "INSERT INTO webhook_cursors (endpoint_id, store_id, cursor, node)"
                        " VALUES (%s, %s, %s::jsonb, %s) ON CONFLICT DO NOTHING",
                        (eid, store_id, json.dumps(cursor), node.name),
                    )
            elif rows[eid][1]:  # removed on another node
                del local[eid]
                local_files.forget(home, eid)
                changed = True
            else:
                theirs = int(rows[eid][0].get("resumes", 0))
                if ep.resumes > theirs:  # enabled here
                    conn.execute(
                        "UPDATE webhook_endpoints SET body = %s::jsonb, updated_at = now() WHERE id = %s",
                        (json.dumps(local_files.row(ep)), eid),
                    )
                elif theirs > ep.resumes:  # enabled on another node
                    local[eid] = replace(ep, resumes=theirs)
                    changed = True
        for eid, (body, removed) in rows.items():
            if removed or eid in local:
                continue
            if eid in seen:  # removed on this node
                conn.execute(
                    "UPDATE webhook_endpoints SET removed = true, updated_at = now() WHERE id = %s", (eid,)
                )
                conn.execute("DELETE FROM webhook_cursors WHERE endpoint_id = %s", (eid,))
                continue
            local[eid] = local_files.endpoint(body)  # added on another node
            local_files.begin(home, eid)
            changed = True
        if changed:
            webhooks.replace_endpoints(home, sorted(local.values(), key=lambda e: (e.created_at, e.id)))
        local_files.set_seen(home, set(local))
        push_journal(node, conn, sorted(local))


def _sync_ids(conn: Any, home: Path) -> None:
    """The cluster's workspace ids, the first node's, in this node's ``workspace.json``."""
    mine = local_files.workspace_ids(home)
    conn.execute(
        "INSERT INTO webhook_workspace (one, ids) VALUES (true, %s::jsonb) ON CONFLICT DO NOTHING",
        (json.dumps(mine),),
    )
    got = conn.execute("SELECT ids FROM webhook_workspace").fetchone()
    if got is not None and got[0] != mine:
        with contextlib.suppress(OSError):
            local_files.set_workspace_ids(home, got[0])
