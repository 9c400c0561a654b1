"""The cluster against its failures and liars, on real nodes: PostgreSQL down mid-write (503s, no
driver errors; the fences close; the beat survives and writes resume once it is back; nothing
acknowledged is lost), an old home partitioned from the database (it publishes nothing, a replica
takes over, and healed it is brought level with nothing to report), a node lying about its epoch."""

from __future__ import annotations

import time
from pathlib import Path

import anthropic
import httpx2 as httpx
import pytest

import gitmem
from gitmem.cluster import handoff
from gitmem.cluster.replication import refs_of
from gitmem.cluster.tokens import ClusterTokenStore
from gitmem.errors import ConflictError, ForbiddenError
from gitmem.git.fence import check_fence
from tests.cluster.test_cluster_nodes import cluster, the_copy
from tests.pgkit import Postgres, stopped


def _until(check: object, what: str, seconds: float = 180, floor: float = 0.0) -> None:
    """Wait for ``check``; the deadline scales with ``floor`` (a beat timed in the same test: a
    loaded machine's slower beats get a later deadline, at least ``seconds``)."""
    deadline = time.monotonic() + max(seconds, 400 * floor)
    while True:
        try:
            if check():  # type: ignore[operator]
                return
        except (anthropic.APIError, gitmem.errors.GitmemError):
            pass
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _fenced(git_dir: Path) -> bool:
    try:
        check_fence(git_dir)
    except ForbiddenError:
        return True
    return False


def _paths(git_dir: Path) -> set[str]:
    with gitmem.open_store(git_dir) as s:
        return {m.path for m in s.list("/")}


def test_postgresql_down_mid_write(postgres: Postgres, database: str, tmp_path: Path) -> None:
    with cluster(database, tmp_path, n=2, lease_seconds=4.0, healthy_seconds=3.0) as nodes:
        n0, n1 = nodes
        _t, admin = ClusterTokenStore(n0.node.state).create(actor="user:admin", admin=True)
        sdk = [anthropic.Anthropic(base_url=r.url, api_key=admin, max_retries=0, timeout=60) for r in nodes]
        store = sdk[0].beta.memory_stores.create(name="db-down")
        for i in range(3):
            sdk[1].beta.memory_stores.memories.create(store.id, path=f"/before{i}.md", content=f"{i}\n")
        home = the_copy(tmp_path / "n0")
        with stopped(postgres):
            for c in sdk:  # every node: 503 (retry), never a 500 from the driver
                with pytest.raises(anthropic.APIStatusError) as down:
                    c.beta.memory_stores.memories.create(store.id, path="/during.md", content="x\n")
                assert down.value.status_code == 503, down.value
            _until(lambda: _fenced(home), "the home's fence never closed without the database")
            with gitmem.open_store(home) as s, pytest.raises(ForbiddenError):
                s.write("/during.md", "no lease can be renewed: no write\n")
            health = httpx.get(n0.url + "/healthz").json()
            assert health["status"] == "degraded" and health["cluster"]["database"] == "down"
            assert "gitmem_cluster_database_up 0" in httpx.get(n1.url + "/metrics").text
            time.sleep(1.0)  # a few beats against the dead database
            assert n0.node._thread is not None and n0.node._thread.is_alive()
            assert any("cannot be reached" in e for e in n0.node.replication_errors)
        # back: the beats resume, a home takes the lease again, writes go on
        _until(
            lambda: sdk[1].beta.memory_stores.memories.create(store.id, path="/after.md", content="y\n"),
            "writes never resumed once the database was back",
        )
        state = n0.node.state
        _until(lambda: state.placement(store.id), "the database never answered again")  # a connection
        # broken by the restart fails its next statement once (503), then reconnects
        # every node was silent while the database was down: none may take the live home's store
        assert state.placement(store.id).home == "n0" and not n1.node.failovers
        current = the_copy(tmp_path / "n0")
        assert {"/before0.md", "/before1.md", "/before2.md", "/after.md"} <= _paths(current)
        assert handoff.lost_writes(state) == []
        assert "/during.md" not in _paths(current)
        _until(lambda: httpx.get(n1.url + "/healthz").json()["cluster"]["database"] == "up", "no figures")
        health = httpx.get(n1.url + "/healthz").json()
        assert health["status"] == "ok" and health["cluster"]["nodes"] == 2
        metrics = httpx.get(n0.url + "/metrics").text
        assert "gitmem_cluster_database_up 1" in metrics and "gitmem_http_requests_total" in metrics


def test_a_partitioned_old_home_publishes_nothing_and_rejoins_level(database: str, tmp_path: Path) -> None:
    with cluster(database, tmp_path, n=2, lease_seconds=4.0, healthy_seconds=3.0) as nodes:
        n0, n1 = nodes
        _t, admin = ClusterTokenStore(n0.node.state).create(actor="user:admin", admin=True)
        sdk = [anthropic.Anthropic(base_url=r.url, api_key=admin, max_retries=0, timeout=60) for r in nodes]
        store = sdk[0].beta.memory_stores.create(name="partitioned")
        sdk[0].beta.memory_stores.memories.create(store.id, path="/a.md", content="a\n")
        home = the_copy(tmp_path / "n0")
        started = time.monotonic()
        n0.node.tick()
        beat = time.monotonic() - started  # the floor the waits below scale with

        def replica_level() -> bool:
            # a beat replicates only to nodes seen healthy: on a loaded machine one beat may skip
            # n1, and a replica without the copy can never take over (the cut comes after this)
            n0.node.tick()
            copy = the_copy(tmp_path / "n1", None)
            return copy is not None and refs_of(copy) == refs_of(home)

        _until(replica_level, "the replica never got the home's copy", floor=beat)
        # n0 is cut off from the database (it keeps running and serving)
        real = n0.node.state.dsn
        n0.node.state.dsn = real.rsplit(":", 1)[0] + ":1/nowhere"
        n0.node.state.close()
        _until(lambda: n1.node.failovers, "the replica never took over", floor=beat)
        assert _fenced(home)
        with gitmem.open_store(home) as s, pytest.raises(ForbiddenError):
            s.write("/split-brain.md", "the old home must not publish\n")
        with pytest.raises(anthropic.APIStatusError) as cut:  # through the cut-off node: retry later
            sdk[0].beta.memory_stores.memories.create(store.id, path="/b.md", content="b\n")
        assert cut.value.status_code == 503
        sdk[1].beta.memory_stores.memories.create(store.id, path="/b.md", content="b\n")
        # healed: the old home is deposed, brought level, and had nothing unreplicated to report
        n0.node.state.dsn = real
        new_home = the_copy(tmp_path / "n1")
        _until(lambda: refs_of(home) == refs_of(new_home), "the old home was never brought level", floor=beat)
        assert "/b.md" in _paths(home)
        assert handoff.lost_writes(n1.node.state, store.id) == []
        assert _fenced(home)
        lease = n1.node.state.lease(store.id)
        assert (lease.holder, lease.epoch) == ("n1", 2)


def test_a_node_lying_about_its_epoch_gets_nothing(database: str, tmp_path: Path) -> None:
    with cluster(database, tmp_path, n=2) as nodes:
        n0, n1 = nodes
        store = gitmem.create_store("liar", home=tmp_path / "n0")
        n0.node.tick()
        state = n1.node.state
        sid = store.settings.id
        held = state.lease(sid)
        # n1 claims the lease at a higher epoch, or the holder's own: no renewal, no fence, no move
        assert not state.renew(sid, "n1", held.epoch + 1)
        assert not state.renew(sid, "n1", held.epoch)
        assert not state.fence_ok(sid, "n1", held.epoch)
        with pytest.raises(ConflictError):
            state.acquire(sid, "n1")
        handoff.request_move(state, sid, "n1")
        with pytest.raises(ConflictError):  # only the holder, at its epoch, finishes a move
            handoff.finish_move(state, sid, "n1", held.epoch + 1, "n1", 10)
        with pytest.raises(ConflictError):
            handoff.finish_move(state, sid, "n0", held.epoch + 1, "n1", 10)
        assert state.lease(sid) == held
        handoff.cancel_move(state, sid)
        # a fence file forged to a later epoch on a replica's copy is shut again at the next beat
        n0.node.tick()
        copy = the_copy(tmp_path / "n1")
        from gitmem.git.fence import write_fence

        write_fence(copy, node="n1", epoch=held.epoch + 5, renewed_at=time.monotonic(), lease_seconds=60)
        n1.node.tick()
        assert _fenced(copy)
        store.close()


def test_a_handoff_whose_commit_answer_is_lost_keeps_the_old_home_shut(
    database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database commits the move but the old home never hears it (the connection dropped):
    the old home must not reopen its fence, or two homes would take writes."""
    from gitmem.errors import UnavailableError

    real = handoff.finish_move

    def committed_then_lost(*args: object, **kwargs: object) -> int:
        real(*args, **kwargs)  # type: ignore[arg-type]
        raise UnavailableError("the cluster database cannot be reached: the answer was lost")

    with cluster(database, tmp_path, n=2) as nodes:
        n0, n1 = nodes
        store = gitmem.create_store("ambiguous", home=tmp_path / "n0")
        n0.node.tick()
        sid = store.settings.id
        monkeypatch.setattr(handoff, "finish_move", committed_then_lost)
        handoff.request_move(n0.node.state, sid, "n1")
        _until(lambda: any("interrupted" in e for e in n0.node.replication_errors), "no handoff ran")
        for _ in range(20):  # through several of n0's beats: never open again
            assert _fenced(store.path)
            time.sleep(0.1)
        assert n0.node.state.placement(sid).home == "n1"
        copy = the_copy(tmp_path / "n1")
        _until(lambda: not _fenced(copy), "the new home never opened its fence")
        with gitmem.open_store(copy) as s:
            assert s.write("/after.md", "the one home writes\n") is not None
        store.close()
