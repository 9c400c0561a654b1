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
  the shared cursor back. The store-level journal (created, archived, deleted) stays per node:
  each node delivers the journal of the store events it recorded.
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
                conn.execute(
                    "INSERT INTO webhook_endpoints (id, body) VALUES (%s, %s::jsonb) ON CONFLICT DO NOTHING",
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
