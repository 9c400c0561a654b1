"""Webhooks across a failover and a move: three real nodes on a real PostgreSQL, an endpoint added on
the store's home (the library, as ``gitmem webhook add`` on its machine), a real receiver on
127.0.0.1 that verifies every signature. The home is lost; the promoted replica delivers the
store's events from where the lost home stopped; the store then moves, and its new home goes on.
Every version's event arrives, none twice, every body naming the one workspace."""

from __future__ import annotations

import time
from pathlib import Path

import anthropic
import pytest

from gitmem import webhooks
from gitmem.cluster import handoff
from gitmem.cluster.tokens import ClusterTokenStore
from tests.cluster.test_cluster_nodes import cluster, halt
from tests.helpers import patience
from tests.server.test_webhooks import Receiver


@pytest.fixture(autouse=True)
def fast_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITMEM_WEBHOOK_INTERVAL", "0.2")
    monkeypatch.setenv("GITMEM_WEBHOOK_BACKOFF", "0.2")


def _versions(r: Receiver) -> list[str]:
    return [
        p["data"]["memory_version_id"] for p in r.payloads() if p["data"]["type"] == "memory.version_created"
    ]


def _until(r: Receiver, count: int, what: str) -> list[str]:
    deadline = patience(120)
    while len(_versions(r)) < count:
        assert time.monotonic() < deadline, f"{what}: {len(_versions(r))} of {count} ({r.bad})"
        time.sleep(0.05)
    time.sleep(1.0)  # a second delivery of any of them would have arrived by now (the worker: 0.2 s)
    return _versions(r)


@pytest.mark.slow  # a real cluster, failed over
def test_a_promoted_replica_and_a_moved_home_deliver_every_event_once(database: str, tmp_path: Path) -> None:
    receiver = Receiver()
    try:
        with cluster(database, tmp_path, n=3, lease_seconds=5.0, healthy_seconds=3.0, replicas=2) as nodes:
            state = nodes[0].node.state
            _t, admin = ClusterTokenStore(state).create(actor="user:admin", admin=True)
            sdk = [
                anthropic.Anthropic(base_url=r.url, api_key=admin, max_retries=8, timeout=60) for r in nodes
            ]
            store = sdk[0].beta.memory_stores.create(name="hooked")
            assert state.placement(store.id).home == "n0"
            ep, secret = webhooks.add_endpoint(tmp_path / "n0", receiver.url, allow_private=True)
            receiver.secret = secret
            made: list[str] = []

            def write(via: int, k: int) -> None:
                for i in range(k):
                    m = sdk[via].beta.memory_stores.memories.create(
                        store.id, path=f"/w/{len(made)}.md", content=f"{i}\n"
                    )
                    assert m.memory_version_id
                    made.append(m.memory_version_id)

            write(1, 4)
            assert _until(receiver, 4, "the home's deliveries") == made
            nodes[0].node.tick()  # every copy level, and the endpoint recorded in PostgreSQL
            for r in nodes[1:]:
                r.node.tick()  # each other node holds the endpoint now
                assert [e.id for e in webhooks.load_endpoints(r.node.home)] == [ep.id]
            # the home is lost: a replica is promoted and delivers from where it stopped
            halt(nodes[0])
            deadline = patience(120)
            while state.placement(store.id).home == "n0":
                assert time.monotonic() < deadline, "no replica took over"
                time.sleep(0.1)
            promoted = state.placement(store.id).home
            alive = [i for i in (1, 2) if f"n{i}" == promoted][0]
            write(alive, 3)
            assert _until(receiver, 7, "the promoted replica's deliveries") == made
            # a move: the new home goes on where the old one stopped
            other = 3 - alive
            handoff.request_move(state, store.id, f"n{other}")
            while state.placement(store.id).home != f"n{other}":
                assert time.monotonic() < deadline, "the move never happened"
                time.sleep(0.1)
            write(alive, 3)
            got = _until(receiver, 10, "the moved home's deliveries")
            assert got == made, "every version once, in order"
            workspaces = {p["data"]["workspace_id"] for p in receiver.payloads()}
            assert len(workspaces) == 1, workspaces
            cursor = (
                state.conn()
                .execute(
                    "SELECT node, cursor FROM webhook_cursors WHERE endpoint_id = %s AND store_id = %s",
                    (ep.id, store.id),
                )
                .fetchone()
            )
            assert cursor[0] == f"n{other}" and cursor[1]["main"]["version"] == made[-1]
    finally:
        receiver.close()
    assert not receiver.bad, receiver.bad


@pytest.mark.slow  # a real cluster, failed over, and its old home back
def test_a_store_event_queued_on_a_home_that_fails_over_is_sent_once_by_the_new_home(
    database: str, tmp_path: Path
) -> None:
    """The store is archived (a store-level journal entry, on the home) while the receiver refuses
    every delivery; the home is lost before it sent it. The promoted replica sends it, once; the
    old home, back, does not send it again."""
    from gitmem.cluster.node import ClusterNode
    from tests.cluster.test_cluster_nodes import serving

    receiver = Receiver()
    receiver.fail = True
    try:
        with cluster(database, tmp_path, n=3, lease_seconds=5.0, healthy_seconds=3.0, replicas=2) as nodes:
            state = nodes[0].node.state
            _t, admin = ClusterTokenStore(state).create(actor="user:admin", admin=True)
            sdk = [
                anthropic.Anthropic(base_url=r.url, api_key=admin, max_retries=8, timeout=60) for r in nodes
            ]
            store = sdk[0].beta.memory_stores.create(name="hooked")
            assert state.placement(store.id).home == "n0"
            ep, secret = webhooks.add_endpoint(tmp_path / "n0", receiver.url, allow_private=True)
            receiver.secret = secret
            for r in nodes:
                r.node.tick()  # the endpoint in PostgreSQL, and on every node
            sdk[1].beta.memory_stores.archive(store.id)  # made at the home: its journal's entry
            deadline = patience(120)
            while not receiver.attempts:  # the home tried, and was refused: the entry waits there
                assert time.monotonic() < deadline, "the home never tried to send the event"
                time.sleep(0.05)
            nodes[0].node.tick()
            halt(nodes[0])
            while state.placement(store.id).home == "n0":
                assert time.monotonic() < deadline, "no replica took over"
                time.sleep(0.1)
            promoted = state.placement(store.id).home
            receiver.fail = False

            def archived() -> list[str]:
                return [p["id"] for p in receiver.payloads() if p["data"]["type"] == "memory_store.archived"]

            while not archived():
                assert time.monotonic() < deadline, (
                    f"the new home never sent the queued event ({receiver.bad})"
                )
                time.sleep(0.05)

            def sent() -> list[tuple[str]]:  # recorded just after the receiver's answer
                query = "SELECT node FROM webhook_journal_sent WHERE endpoint_id = %s"
                return list(state.conn().execute(query, (ep.id,)).fetchall())

            while not sent():
                assert time.monotonic() < deadline, "the sent entry was never recorded"
                time.sleep(0.05)
            assert sent() == [(promoted,)]
            # the old home comes back: it holds the entry in its own journal, and sends it no more
            back = serving(ClusterNode(tmp_path / "n0", database, "n0", nodes[0].url, heartbeat_seconds=0.5,
                                       lease_seconds=5.0, healthy_seconds=3.0))  # fmt: skip
            try:
                back.node.tick()
                time.sleep(2.0)  # ten delivery rounds (0.2 s) of every node
            finally:
                halt(back)
            assert len(archived()) == 1, archived()
            assert {p["data"]["id"] for p in receiver.payloads()} == {store.id}
    finally:
        receiver.close()
    assert not receiver.bad, receiver.bad


def test_a_sync_write_shares_its_store_event_before_it_is_answered(database: str, tmp_path: Path) -> None:
    """Under ``replication: sync`` the journal entry a write made (an archive) is in PostgreSQL when
    the write is answered, with the home's beats stopped: a home lost right after the answer
    leaves nothing of it behind."""
    receiver = Receiver()
    try:
        with cluster(database, tmp_path, n=2, sync=True) as nodes:
            state = nodes[0].node.state
            _t, admin = ClusterTokenStore(state).create(actor="user:admin", admin=True)
            sdk = [
                anthropic.Anthropic(base_url=r.url, api_key=admin, max_retries=8, timeout=60) for r in nodes
            ]
            store = sdk[0].beta.memory_stores.create(name="hooked")
            assert state.placement(store.id).home == "n0"
            _ep, receiver.secret = webhooks.add_endpoint(tmp_path / "n0", receiver.url, allow_private=True)
            nodes[0].node.tick()  # the endpoint in PostgreSQL
            nodes[0].node.heartbeat_seconds = 3600.0  # its next wait outlasts the test: no beat shares
            time.sleep(2.0)  # (the wait under way, 0.5 s, ends and the long one begins)
            sdk[1].beta.memory_stores.archive(store.id)
            rows = state.conn().execute("SELECT type, store_id, node FROM webhook_journal").fetchall()
            assert rows == [("memory_store.archived", store.id, "n0")]
    finally:
        receiver.close()
    assert not receiver.bad, receiver.bad
