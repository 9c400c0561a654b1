"""Moves and promotions on real nodes and a real PostgreSQL: a move under load loses no
acknowledged write (the home hands over: no new write, the ones in flight finished, its last state
sent, the lease handed at the next epoch); a sync failover never promotes a replica that lacks an
acknowledged write; an async failover's lost tail is exactly what the old home held unreplicated,
and is reported; a sync create is answered only once a replica holds the store."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import anthropic
import pytest

import gitmem
from gitmem.cluster import handoff
from gitmem.cluster.node import ClusterNode
from gitmem.cluster.replication import refs_of
from gitmem.cluster.tokens import ClusterTokenStore
from tests.cluster.test_cluster_nodes import cluster, halt, serving, the_copy
from tests.cluster.test_cluster_sigkill import clean
from tests.helpers import CheckedThread, join_all

pytestmark = pytest.mark.slow  # real clusters, moved under load and failed over


def _until(check: object, what: str, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _paths(git_dir: Path) -> set[str]:
    with gitmem.open_store(git_dir) as s:
        return {m.path for m in s.list("/")}


def _fsck(git_dir: Path) -> None:
    fsck = subprocess.run(["git", f"--git-dir={git_dir}", "fsck", "--full"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr


def test_a_move_under_load_loses_no_acknowledged_write(database: str, tmp_path: Path) -> None:
    with cluster(database, tmp_path, n=3) as nodes:
        state = nodes[0].node.state
        _t, admin = ClusterTokenStore(state).create(actor="user:admin", admin=True)
        # clients retry a 503 (the home answers it while it hands over, and a stale route after)
        sdk = [anthropic.Anthropic(base_url=r.url, api_key=admin, max_retries=8, timeout=60) for r in nodes]
        store = sdk[0].beta.memory_stores.create(name="moving")
        assert state.placement(store.id).home == "n0"
        acked: list[str] = []
        lock = threading.Lock()
        stop = threading.Event()

        def writer(k: int) -> None:
            i = 0
            while not stop.is_set():
                path = f"/w{k}/{i}.md"
                i += 1
                try:
                    sdk[k % 3].beta.memory_stores.memories.create(store.id, path=path, content=f"{k} {i}\n")
                except anthropic.APIError:  # not acknowledged (a retry after a lost answer: a conflict)
                    continue
                with lock:
                    acked.append(path)

        threads = [CheckedThread(writer, (k,)) for k in range(3)]
        for t in threads:
            t.start()
        _until(lambda: len(acked) >= 10, "no writes were acknowledged")
        target = "n2" if "n2" not in state.placement(store.id).replicas else "n1"
        handoff.request_move(state, store.id, target)
        _until(lambda: state.placement(store.id).home == target, "the home never handed the store over")
        moved_at = len(acked)
        _until(lambda: len(acked) >= moved_at + 10, "no writes after the move")
        stop.set()
        join_all(threads, timeout=300)
        assert nodes[0].node.moves == [(store.id, target, 2)], nodes[0].node.replication_errors
        new_home = the_copy(tmp_path / target)
        present = _paths(new_home)
        missing = [p for p in acked if p not in present]
        assert not missing, f"acknowledged writes lost in the move: {missing[:10]}"
        _fsck(new_home)
        lease = state.lease(store.id)
        assert (lease.holder, lease.epoch) == (target, 2)
        # the old home is a replica now: it publishes nothing, and is brought level
        old = the_copy(tmp_path / "n0")
        with gitmem.open_store(old) as s, pytest.raises(gitmem.errors.ForbiddenError):
            s.write("/stale.md", "x\n")
        _until(lambda: refs_of(old) == refs_of(new_home), "the old home was never brought level")
        for copy in [new_home, *(the_copy(tmp_path / r) for r in state.placement(store.id).replicas)]:
            _until(lambda c=copy: refs_of(c) == refs_of(new_home), f"{copy} was never brought level")
            clean(copy)  # fsck and verify on every copy, the old home's included
        assert handoff.lost_writes(state) == []  # a handoff loses nothing, and so reports nothing
        import httpx2 as httpx

        by_name = {f"n{i}": r for i, r in enumerate(nodes)}
        assert "gitmem_cluster_moves 1" in httpx.get(nodes[0].url + "/metrics").text
        assert httpx.get(by_name[target].url + "/healthz").json()["cluster"]["leases_held"] == 1


def test_a_sync_failover_never_promotes_a_replica_without_every_acknowledged_write(
    database: str, tmp_path: Path
) -> None:
    with cluster(
        database, tmp_path, n=3, lease_seconds=5.0, healthy_seconds=3.0, replicas=2, sync=True
    ) as nodes:
        n0, n1, n2 = nodes
        state = n0.node.state
        _t, admin = ClusterTokenStore(state).create(actor="user:admin", admin=True)
        sdk = anthropic.Anthropic(base_url=n0.url, api_key=admin, max_retries=0, timeout=60)
        store = sdk.beta.memory_stores.create(name="sync")
        assert state.placement(store.id).replicas == ("n1", "n2")
        sdk.beta.memory_stores.memories.create(store.id, path="/both.md", content="on both replicas\n")
        # n2 stops answering (its heartbeats go on: it looks healthy); writes are confirmed by n1
        halt(n2, node=False)
        for i in range(3):
            sdk.beta.memory_stores.memories.create(store.id, path=f"/n1-only-{i}.md", content=f"{i}\n")
        assert "/n1-only-2.md" not in _paths(the_copy(tmp_path / "n2"))
        # the home and n1 are lost: n2, alive and stale, must not take over
        halt(n0)
        halt(n1)
        time.sleep(5.0 * 2)  # two lease lengths: n2 beats and looks at the store again and again
        assert not n2.node.failovers
        assert state.placement(store.id).home == "n0"
        # n1 comes back: it holds every acknowledged write, and is promoted
        back = serving(ClusterNode(tmp_path / "n1", database, "n1", n1.url, heartbeat_seconds=0.5,
                                   lease_seconds=5.0, healthy_seconds=3.0, sync=True, replicas=2))  # fmt: skip
        try:
            _until(lambda: state.placement(store.id).home == "n1", "n1 was never promoted")
            got = _paths(the_copy(tmp_path / "n1"))
            assert {"/both.md", "/n1-only-0.md", "/n1-only-1.md", "/n1-only-2.md"} <= got
            assert not n2.node.failovers
        finally:
            halt(back)
        halt(n2)


def test_an_async_failover_reports_exactly_the_lost_tail(database: str, tmp_path: Path) -> None:
    with cluster(database, tmp_path, n=2, lease_seconds=8.0, healthy_seconds=3.0) as nodes:
        n0, n1 = nodes
        state = n0.node.state
        _t, admin = ClusterTokenStore(state).create(actor="user:admin", admin=True)
        sdk = anthropic.Anthropic(base_url=n1.url, api_key=admin, max_retries=0, timeout=60)
        store = anthropic.Anthropic(base_url=n0.url, api_key=admin).beta.memory_stores.create(name="async")
        assert state.placement(store.id).home == "n0"
        for i in range(3):
            sdk.beta.memory_stores.memories.create(store.id, path=f"/r{i}.md", content=f"{i}\n")
        n0.node.tick()  # replicated
        home_git = the_copy(tmp_path / "n0")
        # the home stops beating; before its fence runs out it takes two more writes, never sent
        n0.node.stop()
        with gitmem.open_store(home_git) as s:
            s.write("/tail-a.md", "acknowledged at the home only\n")
            s.write("/tail-b.md", "this one too\n")
        halt(n0)
        held = refs_of(home_git)
        _until(lambda: n1.node.failovers, "the replica never took over")
        new_home = the_copy(tmp_path / "n1")
        assert {"/r0.md", "/r1.md", "/r2.md"} <= _paths(new_home)
        assert "/tail-a.md" not in _paths(new_home)
        # what the old home holds that the new home lacks, computed here by git itself
        ours = "".join(f"{oid}\n" for oid in held.values())
        theirs = "".join(f"^{oid}\n" for oid in refs_of(new_home).values())
        expected = set(
            subprocess.run(
                ["git", f"--git-dir={home_git}", "rev-list", "--stdin"],
                input=ours + theirs, capture_output=True, text=True, check=True,
            ).stdout.split()
        )  # fmt: skip
        assert expected
        # the old home comes back and is brought level: the tail is reported, and kept
        back = serving(ClusterNode(tmp_path / "n0", database, "n0", n0.url, heartbeat_seconds=0.5,
                                   lease_seconds=8.0, healthy_seconds=3.0))  # fmt: skip
        try:
            _until(lambda: refs_of(home_git) == refs_of(new_home), "the old home was never brought level")
            lost = handoff.lost_writes(state, store.id)
            assert {w.commit for w in lost} == expected
            assert all(w.node == "n0" and w.epoch == 1 for w in lost)
            assert any("tail-a.md" in w.summary for w in lost), [w.summary for w in lost]
            bundle = home_git / lost[0].bundle
            heads = subprocess.run(
                ["git", "bundle", "list-heads", str(bundle)], capture_output=True, text=True, check=True
            ).stdout
            assert {line.split()[0] for line in heads.splitlines()} <= set(held.values())
            subprocess.run(
                ["git", f"--git-dir={home_git}", "bundle", "verify", "-q", str(bundle)], check=True
            )
            assert "/tail-a.md" not in _paths(home_git)  # level with the new home
            clean(new_home)  # fsck and verify on both copies, the old home brought level
            clean(home_git)
        finally:
            halt(back)


def test_a_sync_create_is_answered_only_once_a_replica_holds_the_store(database: str, tmp_path: Path) -> None:
    with cluster(database, tmp_path, n=2, sync=True) as nodes:
        n0, n1 = nodes
        _t, admin = ClusterTokenStore(n0.node.state).create(actor="user:admin", admin=True)
        sdk = anthropic.Anthropic(base_url=n0.url, api_key=admin, max_retries=0, timeout=60)
        store = sdk.beta.memory_stores.create(name="first")
        copy = the_copy(tmp_path / "n1")  # there before the answer: no beat in between
        assert refs_of(copy) == refs_of(the_copy(tmp_path / "n0"))
        halt(n1, node=False)  # the replica stops answering (it still looks healthy)
        with pytest.raises(anthropic.APIStatusError) as refused:
            sdk.beta.memory_stores.create(name="second")
        assert refused.value.status_code == 503 and "no replica confirmed" in str(refused.value)
        assert store.id
