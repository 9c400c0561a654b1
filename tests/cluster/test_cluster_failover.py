"""Replication and failover on real nodes: the home brings its replica level (refs, objects and the
server-side state); when the home stops, the replica takes the lease at the next epoch and serves
the store; the old home, back, keeps its copy shut and is brought level as a replica."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import anthropic
import pytest

import gitmem
from gitmem.cluster.state import ClusterState
from gitmem.cluster.tokens import ClusterTokenStore
from tests.cluster.test_cluster_nodes import cluster, the_copy
from tests.helpers import patience

pytestmark = pytest.mark.slow  # a real cluster, killed and failed over


def _objects(git_dir: Path) -> set[str]:
    out = subprocess.run(
        ["git", f"--git-dir={git_dir}", "cat-file", "--batch-all-objects", "--batch-check=%(objectname)"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return set(out.split())


def _refs(git_dir: Path) -> dict[str, str]:
    out = subprocess.run(
        ["git", f"--git-dir={git_dir}", "for-each-ref", "--format=%(refname) %(objectname)"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return dict(line.split(" ", 1) for line in out.splitlines())


def _until(check: object, what: str) -> None:
    deadline = patience(120)
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_the_replica_is_level_and_takes_over_when_the_home_stops(database: str, tmp_path: Path) -> None:
    with cluster(database, tmp_path, n=2, lease_seconds=5.0, healthy_seconds=3.0) as nodes:
        home, replica = nodes
        _t, admin = ClusterTokenStore(home.node.state).create(actor="user:admin", admin=True)
        via_replica = anthropic.Anthropic(base_url=replica.url, api_key=admin, max_retries=0)
        store = anthropic.Anthropic(
            base_url=home.url, api_key=admin, max_retries=0
        ).beta.memory_stores.create(name="notes")
        placement = home.node.state.placement(store.id)
        assert placement.home == "n0" and placement.replicas == ("n1",)
        for i in range(5):
            via_replica.beta.memory_stores.memories.create(
                store.id, path=f"/m{i}.md", content=f"memory {i}\n"
            )
        home_git = the_copy(tmp_path / "n0")
        copy_git = the_copy(tmp_path / "n1")
        home.node.tick()  # replicate now rather than at the next beat
        assert not home.node.replication_errors, home.node.replication_errors
        assert _refs(copy_git) == _refs(home_git)
        assert _objects(home_git) <= _objects(copy_git)
        from gitmem.cluster.replication import STATE_FILES

        for rel in STATE_FILES:  # the server-side state came along, byte for byte
            here, there = home_git / rel, copy_git / rel
            assert here.exists() == there.exists(), rel
            assert not here.exists() or here.read_bytes() == there.read_bytes(), rel
        assert (copy_git / "gitmem.yaml").exists()
        # the home stops: no more heartbeats, no more renewals
        home.server.should_exit = True
        home.thread.join(timeout=60)
        home.node.stop()
        _until(lambda: replica.node.failovers, "the replica never took over")
        assert replica.node.failovers == [(store.id, 2)]
        assert replica.node.state.placement(store.id).home == "n1"
        # the promoted replica serves the store: every acknowledged write is there, new writes land
        got = sorted(
            m.path for m in via_replica.beta.memory_stores.memories.list(store.id) if m.type == "memory"
        )
        assert got == [f"/m{i}.md" for i in range(5)]
        via_replica.beta.memory_stores.memories.create(store.id, path="/after.md", content="after failover\n")
        with gitmem.open_store(copy_git) as s:
            assert s.read("/after.md").content == "after failover\n"  # type: ignore[union-attr]
        fsck = subprocess.run(
            ["git", f"--git-dir={copy_git}", "fsck", "--full"], capture_output=True, text=True
        )
        assert fsck.returncode == 0, fsck.stderr
        from gitmem.audit.verify import verify

        with gitmem.open_store(copy_git) as s:
            assert verify(s.core, raise_on_failure=False).ok
        # the old home comes back: its copy stays shut, and the new home brings it level
        from gitmem.cluster.node import ClusterNode

        back = ClusterNode(
            tmp_path / "n0", database, "n0", home.url, heartbeat_seconds=3600, lease_seconds=5.0
        )
        back.start()
        try:
            with gitmem.open_store(home_git) as s:
                try:
                    s.write("/stale.md", "a deposed home must not publish\n")
                    raise AssertionError("the old home published")
                except gitmem.errors.ForbiddenError:
                    pass
        finally:
            back.stop()
    with ClusterState(database) as s:
        assert s.lease(store.id).epoch == 2


def test_a_replayed_replication_cannot_roll_a_replica_back(database: str, tmp_path: Path) -> None:
    """A signed replication request captured and sent again later is refused by the replica."""
    import hashlib

    import httpx2 as httpx

    from gitmem.cluster import replication
    from gitmem.cluster.node import SIGNATURE

    with cluster(database, tmp_path, n=2) as nodes:
        home, replica = nodes
        store = gitmem.create_store("notes", home=tmp_path / "n0")
        home.node.tick()
        home_git = store.path
        with gitmem.open_store(home_git) as s:
            s.write("/a.md", "first\n")
        state = home.node.state
        old_refs, old_state = replication.refs_of(home_git), replication.state_of(home_git)
        old_env = replication.envelope(old_refs, old_state, state.next_seq())
        old_body = replication.frame(old_env, replication.make_bundle(home_git, {}) or b"")
        with gitmem.open_store(home_git) as s:
            s.write("/a.md", "second\n")
        home.node.tick()  # the replica is level with the second write (a newer seq)
        copy_git = the_copy(tmp_path / "n1")
        assert replication.refs_of(copy_git) == replication.refs_of(home_git)
        path = f"/cluster/v1/stores/{store.settings.id}/replicate"
        signed = replication.sign(state.secret(), "n0", "POST", path, hashlib.sha256(old_body).hexdigest())
        reply = httpx.post(replica.url + path, content=old_body, headers={SIGNATURE: signed})
        assert reply.status_code == 403 and "older than the one applied" in reply.text
        assert replication.refs_of(copy_git) == replication.refs_of(home_git)
        forged = httpx.post(replica.url + path, content=old_body, headers={SIGNATURE: "n0:1:" + "0" * 64})
        assert forged.status_code == 403
        store.close()
