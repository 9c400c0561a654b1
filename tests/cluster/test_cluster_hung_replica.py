"""A replica that accepts connections and never answers delays no lease renewal: the home's
heartbeat renews its leases and keeps its fence open while the beat's replication to that replica
hangs (it runs beside the beat), so the home neither fences itself nor loses its stores to a
failover; once the replica answers again it is brought level."""

from __future__ import annotations

import time
from pathlib import Path

import gitmem
from gitmem.cluster.replication import refs_of
from tests.cluster.test_cluster_nodes import cluster, halt, hang, serving, the_copy
from tests.helpers import patience

LEASE = 3.0


def test_a_hung_replica_does_not_stop_the_home_renewing_its_lease(database: str, tmp_path: Path) -> None:
    with cluster(database, tmp_path, n=2, lease_seconds=LEASE, healthy_seconds=1.5 * LEASE) as nodes:
        n0, n1 = nodes
        store = gitmem.create_store("notes", home=tmp_path / "n0")
        n0.node.tick()  # placed here, its replica on n1
        sid = store.settings.id
        state = n0.node.state
        assert state.placement(sid).replicas == ("n1",)
        n0.node.tick()  # the replica holds the empty store
        hung = hang(n1)  # n1 still beats (healthy), but its port now hangs every request
        try:
            with gitmem.open_store(store.path) as s:
                s.write("/a.md", "written while the replica hangs\n")
            # wait for the heartbeat thread to start the replication that hangs
            hanging = n0.node._beat_sends
            deadline = patience(60)
            while sid not in hanging or hanging[sid].done():
                assert time.monotonic() < deadline, "no beat replication started"
                time.sleep(0.05)
            beat = hanging[sid]
            # three lease lengths: a beat that waited on the replication would let the lease run out
            # (and the replica, seeing the home silent, would take the store over)
            until = time.monotonic() + 3 * LEASE
            while time.monotonic() < until:
                time.sleep(0.1)
            assert not beat.done(), "the replication should still hang (its read timeout is 120 s)"
            lease = state.lease(sid)
            assert (lease.holder, lease.epoch, lease.valid) == ("n0", 1, True), lease
            assert state.placement(sid).home == "n0"
            assert not n0.node.failovers and not n1.node.failovers
            with gitmem.open_store(store.path) as s:  # the fence is open: the home takes writes
                assert s.write("/b.md", "and one more\n") is not None
        finally:
            hung.close()  # the queued connections are reset: the hung replication gives up
        back = serving(n1.node, start=False)
        try:
            home_refs = refs_of(store.path)
            deadline = patience(60)
            while refs_of(the_copy(tmp_path / "n1")) != home_refs:  # the hung one gives up, then a beat
                assert time.monotonic() < deadline, "the replica was not brought level"
                n0.node.tick()  # a caller's tick waits for the replications it starts
                time.sleep(0.1)
            with gitmem.open_store(the_copy(tmp_path / "n1")) as r:  # both writes are on the replica
                assert [r.read(p).content for p in ("/a.md", "/b.md")] == [  # type: ignore[union-attr]
                    "written while the replica hangs\n",
                    "and one more\n",
                ]
        finally:
            halt(back, node=False)
        store.close()
