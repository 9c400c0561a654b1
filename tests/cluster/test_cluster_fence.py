"""The write fence: a store in a cluster moves no ref, by the library or by a push, unless this node
holds its lease; a home that stops renewing is fenced before anyone can take its lease over."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

import gitmem
from gitmem.cluster.node import ClusterNode
from gitmem.cluster.state import ClusterState
from gitmem.errors import ConflictError, ForbiddenError
from gitmem.git.fence import check_fence, fence_path, write_fence
from tests.helpers import patience


def _node(database: str, home: Path, name: str, lease: float = 30.0) -> ClusterNode:
    home.mkdir(parents=True, exist_ok=True)
    return ClusterNode(home, database, name, f"http://{name}", heartbeat_seconds=3600, lease_seconds=lease)


def test_a_store_without_a_fence_is_never_fenced(tmp_path: Path) -> None:
    with gitmem.open_store(gitmem.create_store("notes", home=tmp_path).path) as s:
        assert s.write("/a.md", "a\n") is not None
        check_fence(s.path)


def test_a_garbled_or_expired_fence_refuses_every_write(tmp_path: Path) -> None:
    with gitmem.open_store(gitmem.create_store("notes", home=tmp_path).path) as s:
        fence_path(s.path).write_text("{not json")
        with pytest.raises(ForbiddenError, match="garbled"):
            s.write("/a.md", "a\n")
        write_fence(s.path, node="n0", epoch=3, renewed_at=time.monotonic(), lease_seconds=0)
        with pytest.raises(ForbiddenError, match="epoch 3"):
            s.write("/a.md", "a\n")
        body = json.loads(fence_path(s.path).read_text())
        write_fence(s.path, node="n0", epoch=3, renewed_at=time.monotonic(), lease_seconds=60)
        assert s.write("/a.md", "a\n") is not None
        body = json.loads(fence_path(s.path).read_text())
        body["boot_id"] = "another-boot"  # written before a reboot: expired, whatever it says
        fence_path(s.path).write_text(json.dumps(body))
        with pytest.raises(ForbiddenError):
            s.write("/b.md", "b\n")
        assert [m.path for m in s.list("/")] == ["/a.md"]


def test_a_home_that_stops_renewing_is_fenced_and_a_replica_takes_over(database: str, tmp_path: Path) -> None:
    with ClusterState(database) as s:
        s.init()
    old = _node(database, tmp_path / "n0", "n0", lease=4.0)
    new = _node(database, tmp_path / "n1", "n1", lease=4.0)
    old.start()
    new.start()
    try:
        store = gitmem.create_store("notes", home=tmp_path / "n0")
        old.tick()  # placed here, lease taken at epoch 1, fence open
        assert old.epochs == {store.settings.id: 1}
        with gitmem.open_store(store.path) as s:
            assert s.write("/before.md", "written while the lease held\n") is not None
        # n0 loses the database (its heartbeats stop): its fence runs out on its own clock
        deadline = patience(120)
        while True:
            try:
                check_fence(store.path)
            except ForbiddenError:
                break
            assert time.monotonic() < deadline, "the fence never closed"
            time.sleep(0.05)
        with gitmem.open_store(store.path) as s, pytest.raises(ForbiddenError, match="epoch 1"):
            s.write("/after.md", "a deposed home must not publish\n")
        # nor move the refs that live outside a scope: the ledger, a proposal's
        from gitmem.engine import ledger, proposals

        with gitmem.open_store(store.path) as s:
            tip = ledger.ledger_tip(s.core)
            with pytest.raises(ForbiddenError, match="epoch 1"):
                ledger.append(s.core, "settings_changed", {"by": "a deposed home"})
            assert ledger.ledger_tip(s.core) == tip
            with pytest.raises(ForbiddenError, match="epoch 1"):
                proposals._open_or_start(s.core, "main", "user:mallory", "user:mallory", None)
            assert not [r for r in s.core.repo.references if r.startswith(proposals.REF_PREFIX)]
        # a push straight into the deposed home's repository is refused by its hook
        work = tmp_path / "clone"
        subprocess.run(
            ["git", "clone", "-q", f"file://{store.path}", str(work)], check=True, capture_output=True
        )
        (work / "pushed.md").write_text("x\n")
        subprocess.run(["git", "-C", str(work), "add", "pushed.md"], check=True)
        subprocess.run(
            ["git", "-C", str(work), "-c", "user.name=a", "-c", "user.email=a@x", "commit", "-qm", "x"],
            check=True,
        )
        push = subprocess.run(
            ["git", "-C", str(work), "push", "origin", "main"], capture_output=True, text=True
        )
        assert push.returncode != 0 and "does not hold the store's write lease" in push.stderr
        # once the database's lease ran out, the replica takes it over at epoch 2
        new.state.move(store.settings.id, "n1")
        while True:
            try:
                lease = new.state.acquire(store.settings.id, "n1", 30)
                break
            except ConflictError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert lease.epoch == 2
        # the old home comes back: it renews nothing, takes nothing, and keeps its copy shut
        old.tick()
        assert store.settings.id not in old.epochs
        with gitmem.open_store(store.path) as s, pytest.raises(ForbiddenError):
            s.write("/after.md", "still refused\n")
        with gitmem.open_store(store.path) as s:
            assert [m.path for m in s.list("/")] == ["/before.md"]
        store.close()
    finally:
        old.stop()
        new.stop()


def test_shutting_the_fence_waits_for_a_write_between_its_check_and_its_ref_move(tmp_path: Path) -> None:
    """A write that passed the fence check holds the fence lock until its ref moved, so
    ``shut_fence`` returns only once it landed (a handoff then reads every write), and every write
    after it is refused."""
    import threading

    from gitmem.git.fence import fenced, shut_fence

    with gitmem.open_store(gitmem.create_store("notes", home=tmp_path).path) as s:
        assert s.write("/a.md", "a\n") is not None
        write_fence(s.path, node="n0", epoch=1, renewed_at=time.monotonic(), lease_seconds=30)
        tip = subprocess.run(
            ["git", f"--git-dir={s.path}", "rev-parse", "refs/heads/main"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        checked, go, landed = threading.Event(), threading.Event(), threading.Event()

        def in_flight() -> None:
            with fenced(s.path):  # passed the check; its ref moves before the block ends
                checked.set()
                go.wait()
                subprocess.run(
                    ["git", f"--git-dir={s.path}", "update-ref", "refs/heads/inflight", tip], check=True
                )
                landed.set()

        writer = threading.Thread(target=in_flight, daemon=True)
        shutting = threading.Thread(target=shut_fence, args=(s.path, "n0"), daemon=True)
        writer.start()
        try:
            assert checked.wait(patience(30) - time.monotonic())
            shutting.start()
            shutting.join(timeout=0.5)
            assert shutting.is_alive(), "the fence shut while a write was between its check and its ref move"
        finally:
            go.set()  # the write in flight ends whatever happened
        shutting.join(timeout=patience(30) - time.monotonic())
        writer.join(timeout=patience(30) - time.monotonic())
        assert not shutting.is_alive() and landed.is_set()
        with pytest.raises(ForbiddenError, match="epoch 1"):
            s.write("/b.md", "b\n")
