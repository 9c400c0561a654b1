"""The cluster's shared state on a real PostgreSQL: migrations, nodes, placement, leases with fencing
epochs, the replication queue and tokens shared by every node."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from gitmem.cluster import schema
from gitmem.cluster.state import ClusterState, Lease
from gitmem.cluster.tokens import ClusterTokenStore
from gitmem.errors import AuthenticationError, ConfigError, ConflictError, NotFoundError
from gitmem.server.tokens import TokenStore
from tests.helpers import patience, run_threads


@pytest.fixture
def state(database: str) -> ClusterState:
    s = ClusterState(database)
    s.init()
    yield s
    s.close()


def test_migrations_apply_once_even_when_nodes_start_together(database: str) -> None:
    applied: list[list[int]] = []

    def start(_k: int) -> None:
        with ClusterState(database) as s:
            applied.append(s.init())

    run_threads(start, 6)
    assert sorted(applied, key=len) == [[]] * 5 + [[v for v, _d, _s in schema.MIGRATIONS]]
    with psycopg.connect(database) as conn:
        assert conn.execute("SELECT version FROM gitmem_schema").fetchall() == [(1,), (2,), (3,), (4,), (5,)]


def test_a_newer_schema_is_refused(database: str) -> None:
    with ClusterState(database) as s:
        s.init()
        s.conn().execute("INSERT INTO gitmem_schema (version, description) VALUES (99, 'from the future')")
        with pytest.raises(ConfigError, match="schema version 99"):
            s.init()
        with pytest.raises(ConfigError, match="upgrade this node"):
            s.check_schema()


def test_an_uninitialised_database_is_refused(database: str) -> None:
    with ClusterState(database) as s, pytest.raises(ConfigError, match="cluster init"):
        s.check_schema()


def test_nodes_join_and_report_health(state: ClusterState) -> None:
    state.join("n1", "http://127.0.0.1:1")
    state.join("n2", "http://127.0.0.1:2")
    assert [n.name for n in state.nodes()] == ["n1", "n2"]
    assert all(n.healthy for n in state.nodes())
    state.conn().execute("UPDATE nodes SET last_seen = now() - interval '1 hour' WHERE name = 'n2'")
    assert {n.name: n.healthy for n in state.nodes()} == {"n1": True, "n2": False}
    state.heartbeat("n2")
    assert state.node("n2").healthy
    with pytest.raises(NotFoundError):
        state.heartbeat("n3")


def test_placement_spreads_homes_and_picks_replicas(state: ClusterState) -> None:
    for n in ("n1", "n2", "n3"):
        state.join(n, f"http://{n}")
    homes = [state.place(f"memstore_{i}", replicas=1) for i in range(6)]
    assert sorted(p.home for p in homes) == ["n1", "n1", "n2", "n2", "n3", "n3"]
    assert all(len(p.replicas) == 1 and p.replicas[0] != p.home for p in homes)
    with pytest.raises(ConflictError, match="already placed"):
        state.place("memstore_0")
    moved = state.move("memstore_0", "n3" if homes[0].home != "n3" else "n2")
    assert homes[0].home in moved.replicas and moved.home not in moved.replicas
    assert state.placement("memstore_0") == moved


def test_drain_moves_every_home_to_a_healthy_replica(state: ClusterState) -> None:
    for n in ("n1", "n2", "n3"):
        state.join(n, f"http://{n}")
    for i in range(4):
        state.place(f"memstore_{i}", home="n1", replicas=["n2", "n3"])
    from gitmem.cluster import handoff

    asked = handoff.drain(state, "n1")  # asked of the home, which hands each store over
    assert len(asked) == 4 and all(p.home == "n1" and p.moving_to == "n2" for p in asked)
    assert state.place("memstore_new").home != "n1"  # a draining node gets no new store


def test_a_handoff_moves_home_and_lease_at_once_and_only_from_the_holder(state: ClusterState) -> None:
    from gitmem.cluster import handoff

    for n in ("n1", "n2", "n3"):
        state.join(n, f"http://{n}")
    state.place("memstore_m", home="n1", replicas=["n2"])
    lease = state.acquire("memstore_m", "n1", seconds=30)
    asked = handoff.request_move(state, "memstore_m", "n3")  # not a replica yet: made one
    assert asked.moving_to == "n3" and "n3" in asked.replicas and asked.home == "n1"
    with pytest.raises(ConflictError):  # a stale epoch cannot finish it
        handoff.finish_move(state, "memstore_m", "n1", lease.epoch + 7, "n3", 30)
    with pytest.raises(ConflictError):  # nor a node that is not the home
        handoff.finish_move(state, "memstore_m", "n2", lease.epoch, "n3", 30)
    epoch = handoff.finish_move(state, "memstore_m", "n1", lease.epoch, "n3", 30, seq=12)
    assert epoch == lease.epoch + 1
    # the old home's copy is as fresh as the handoff's replication: it may be promoted
    assert handoff.promotable(state, "memstore_m", ["n1", "n2"]) == "n1"
    p = state.placement("memstore_m")
    assert p.home == "n3" and p.moving_to is None and "n1" in p.replicas and "n3" not in p.replicas
    assert state.lease("memstore_m") == Lease("memstore_m", "n3", epoch, True)
    assert not state.fence_ok("memstore_m", "n1", lease.epoch)
    assert state.acquire("memstore_m", "n3", seconds=30).epoch == epoch  # the new home renews it
    with pytest.raises(ConflictError):  # done once: not again
        handoff.finish_move(state, "memstore_m", "n1", lease.epoch, "n3", 30)


def test_promotion_picks_the_newest_copy_and_never_one_behind_the_ack_point(state: ClusterState) -> None:
    from gitmem.cluster import handoff

    for n in ("n1", "n2", "n3"):
        state.join(n, f"http://{n}")
    state.place("memstore_p", home="n1", replicas=["n2", "n3"])
    state.record_position("memstore_p", "n2", "#5", 5)
    state.record_position("memstore_p", "n3", "#9", 9)
    state.record_position("memstore_p", "n2", "#7", 7)  # n2 applied last, but n3's copy is newer
    assert handoff.promotable(state, "memstore_p", ["n2", "n3"]) == "n3"
    assert handoff.promotable(state, "memstore_p", ["n2"]) == "n2"  # async: the freshest alive
    handoff.record_acked(state, "memstore_p", 9)  # sync: a write was confirmed by #9 (n3)
    handoff.record_acked(state, "memstore_p", 4)  # the ack point only grows
    assert handoff.ack_point(state, "memstore_p") == 9
    assert handoff.promotable(state, "memstore_p", ["n2"]) is None  # n3 is down: n2 lacks a write
    assert handoff.promotable(state, "memstore_p", ["n2", "n3"]) == "n3"


def test_lease_epochs_only_grow_and_fence_the_old_holder(state: ClusterState) -> None:
    for n in ("n1", "n2"):
        state.join(n, f"http://{n}")
    a = state.acquire("memstore_x", "n1", seconds=30)
    assert a.epoch == 1 and state.fence_ok("memstore_x", "n1", 1)
    assert state.acquire("memstore_x", "n1", seconds=30).epoch == 1  # a renewal keeps the epoch
    with pytest.raises(ConflictError, match="held by n1"):
        state.acquire("memstore_x", "n2")
    # n1 stops renewing: its lease runs out by PostgreSQL's clock, and n2 takes over with epoch 2
    state.conn().execute("UPDATE leases SET expires_at = now() - interval '1 second'")
    assert not state.fence_ok("memstore_x", "n1", 1)
    b = state.acquire("memstore_x", "n2")
    assert b.epoch == 2 and state.fence_ok("memstore_x", "n2", 2)
    # the old home comes back: its epoch is stale, it can neither renew nor publish
    assert not state.renew("memstore_x", "n1", 1)
    assert not state.fence_ok("memstore_x", "n1", 1)
    with pytest.raises(ConflictError):
        state.acquire("memstore_x", "n1")
    state.release("memstore_x", "n2", 2)
    assert state.acquire("memstore_x", "n1").epoch == 3


def test_only_one_of_many_racing_takeovers_wins_each_epoch(database: str) -> None:
    with ClusterState(database) as s:
        s.init()
        for n in range(6):
            s.join(f"n{n}", "http://x")
    wins: list[int] = []
    lock = threading.Lock()

    def racer(k: int) -> None:
        with ClusterState(database) as s:
            try:
                lease = s.acquire("memstore_r", f"n{k}", seconds=60)
            except ConflictError:
                return
            with lock:
                wins.append(lease.epoch)

    run_threads(racer, 6)
    assert wins == [1]


def test_the_replication_queue_hands_each_item_to_one_claimer(state: ClusterState) -> None:
    state.join("n2", "http://n2")
    ids = [
        state.enqueue("memstore_q", "n2", 1, "push", {"ref": "refs/heads/main", "n": i}) for i in range(20)
    ]
    claimed: list[int] = []
    lock = threading.Lock()
    dsn = state.dsn

    def claimer(_k: int) -> None:
        with ClusterState(dsn) as s:
            got = s.claim("n2", limit=7)
            with lock:
                claimed.extend(i.id for i in got)

    run_threads(claimer, 4)
    assert sorted(claimed) == ids  # each exactly once
    assert state.claim("n2") == []  # all claimed, none acknowledged yet
    state.ack(ids[0])
    state.fail(ids[1], "replica down", backoff_seconds=0)
    again = state.claim("n2")
    assert [i.id for i in again] == [ids[1]] and again[0].attempts == 2
    assert state.pending("memstore_q") == 19


def test_a_token_works_on_every_node_and_a_revocation_is_refused_everywhere(state: ClusterState) -> None:
    state.join("n1", "http://n1")
    state.place("memstore_01M8TEZ543XZ8RZEPZK95SNDH6", home="n1", replicas=0, name="notes")
    node_a, node_b = ClusterTokenStore(state), ClusterTokenStore(ClusterState(state.dsn))
    token, secret = node_a.create(actor="user:alice", stores={"notes": "rw"})  # the name, as a grant by id
    assert node_b.authenticate(secret).actor == "user:alice"
    assert node_b.authenticate(secret).may_write("memstore_01M8TEZ543XZ8RZEPZK95SNDH6")
    assert token.stores == {"memstore_01M8TEZ543XZ8RZEPZK95SNDH6": "rw"}
    node_a.revoke(token.id)
    with pytest.raises(AuthenticationError):
        node_b.authenticate(secret)  # no cache outlives the revocation
    with pytest.raises(AuthenticationError):
        node_b.authenticate(secret[:-1] + ("A" if secret[-1] != "A" else "B"))
    node_b.state.close()


def test_a_workspace_s_tokens_are_imported_once(state: ClusterState, tmp_path) -> None:
    local = TokenStore(tmp_path / "ws")
    token, secret = local.create(actor="user:bob", stores={"*": "ro"})
    cluster = ClusterTokenStore(state)
    assert cluster.import_records(local) == 1
    assert cluster.import_records(local) == 0
    assert cluster.authenticate(secret).id == token.id


def test_concurrent_token_creations_are_all_kept(state: ClusterState) -> None:
    secrets: list[str] = []
    lock = threading.Lock()

    def create(k: int) -> None:
        store = ClusterTokenStore(ClusterState(state.dsn))
        _t, s = store.create(actor=f"user:u{k}")
        with lock:
            secrets.append(s)
        store.state.close()

    run_threads(create, 8)
    tokens = ClusterTokenStore(state)
    assert len(tokens.list()) == 8
    assert {tokens.authenticate(s).actor for s in secrets} == {f"user:u{k}" for k in range(8)}


def test_a_lease_expires_by_the_database_clock(state: ClusterState) -> None:
    state.join("n1", "http://n1")
    state.acquire("memstore_t", "n1", seconds=0.2)
    deadline = patience(60)
    while state.fence_ok("memstore_t", "n1", 1):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert not state.lease("memstore_t").valid
