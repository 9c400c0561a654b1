"""The shared store-level webhook journal's rules on a real PostgreSQL (gitmem/cluster/webhook_state.py):
a node's entries are copied once; an endpoint from before the journal was shared has the entries its
own cursor file sent marked sent; a new endpoint gets only the entries made since; an entry is sent
by its store's home alone, and recorded sent only while the sender is that home."""

from __future__ import annotations

import json
from pathlib import Path

import gitmem
from gitmem import webhook_local, webhooks
from gitmem.cluster import webhook_state
from gitmem.cluster.node import ClusterNode
from gitmem.cluster.state import ClusterState
from gitmem.engine import events


def test_the_shared_journal_sends_each_entry_once_from_the_stores_home(database: str, tmp_path: Path) -> None:
    with ClusterState(database) as s:
        s.init()
    home = tmp_path / "n0"
    home.mkdir()
    old, _secret = webhooks.add_endpoint(home, "http://127.0.0.1:9/hook", allow_private=True)
    made = []
    for name in ("a", "b"):
        created = gitmem.create_store(name, home=home)  # journaled: an endpoint is configured
        made.append(created.id)
        created.close()
    entries = webhook_local.journal(home)
    assert [(e["type"], e["store_id"]) for e in entries] == [("memory_store.created", sid) for sid in made]
    # before the journal was shared: the endpoint's row has no journal_from, its cursor file sent the first
    state = events.load_state(home, old.id)
    state["journal"] = entries[0]["seq"]
    events.save_state(home, old.id, state)
    node = ClusterNode(home, database, "n0", "http://127.0.0.1:9")
    try:
        conn = node.state.conn()
        conn.execute(
            "INSERT INTO webhook_endpoints (id, body) VALUES (%s, %s::jsonb)",
            (old.id, json.dumps(webhook_local.row(old))),
        )
        cursors = webhook_state.ClusterCursors(node)
        webhook_state.sync_endpoints(node)
        webhook_state.sync_endpoints(node)  # copied once
        assert conn.execute("SELECT count(*) FROM webhook_journal").fetchone()[0] == 2
        assert [e["id"] for e in cursors.journal(old.id) or []] == [entries[1]["id"]]
        # a new endpoint: none of the entries made before it, the next one
        new, _ = webhooks.add_endpoint(home, "http://127.0.0.1:9/other", allow_private=True)
        webhook_state.sync_endpoints(node)
        assert cursors.journal(new.id) == []
        third = gitmem.create_store("c", home=home)
        third.close()
        webhook_state.sync_endpoints(node)
        latest = webhook_local.journal(home)[-1]["id"]
        assert [e["id"] for e in cursors.journal(new.id) or []] == [latest]
        assert [e["id"] for e in cursors.journal(old.id) or []] == [entries[1]["id"], latest]
        assert cursors.journal_sent(old.id, entries[1]["id"])  # sent by the node that recorded it
        assert [e["id"] for e in cursors.journal(old.id) or []] == [latest]
        # the store is homed on another node: it sends the entry, this node neither lists nor records it
        node.state.join("n1", "http://127.0.0.1:8")
        node.state.place(third.id, home="n1", replicas=0, name="c")
        assert cursors.journal(old.id) == [] and cursors.journal(new.id) == []
        assert not cursors.journal_sent(old.id, latest)
        sent = conn.execute(
            "SELECT endpoint_id, event_id FROM webhook_journal_sent ORDER BY event_id"
        ).fetchall()
        assert sorted(sent) == sorted([(old.id, entries[0]["id"]), (old.id, entries[1]["id"])])
    finally:
        node.state.close()
