"""Failover under load, with ``replication: sync``: three ``gitmem serve --cluster-node`` processes
on one real PostgreSQL; clients write through the two nodes that are not the home while the home is
SIGKILLed. After the promotion every acknowledged write is on the new home; the old home, restarted,
refuses to publish with its stale epoch and is brought level as a replica; then every copy (the new
home, the other replica, the old home) passes ``git fsck --full`` and ``gitmem verify``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import anthropic
import pytest

import gitmem
from gitmem.cluster.state import ClusterState
from gitmem.cluster.tokens import ClusterTokenStore
from tests.cluster.test_cluster_nodes import the_copy
from tests.helpers import CheckedThread, join_all
from tests.serverkit import free_port

pytestmark = pytest.mark.slow  # a real cluster, killed and failed over


# The write lease: a replica takes over once the killed home's has run out and its heartbeats are
# 1.5 leases old. The default 10 s made the failover wait ~15 s; what is proven is the same at 5.
LEASE = 5.0


def _start(home: Path, name: str, port: int, database: str) -> subprocess.Popen[bytes]:
    home.mkdir(parents=True, exist_ok=True)
    # Its own temporary directory, which must stay empty: a replication's bundles are made in the
    # store (gitmem/tmp/bundle-*, swept there: gitmem/cluster/leftovers.py), so a node killed
    # mid-replication leaves none in it (before, it left one there for good).
    (home / "tmp").mkdir(exist_ok=True)
    env = {**os.environ, "GITMEM_HOME": str(home), "TMPDIR": str(home / "tmp")}
    return subprocess.Popen(
        [sys.executable, "-m", "gitmem", "serve", "--port", str(port), "--cluster-node", name,
         "--database", database, "--replication", "sync", "--replicas", "2", "--log-level", "warning",
         "--lease-seconds", str(LEASE)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip


def _until(check: object, what: str, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if check():  # type: ignore[operator]
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def clean(git_dir: Path) -> None:
    """``git fsck --full`` and ``gitmem verify`` clean on one copy."""
    fsck = subprocess.run(["git", f"--git-dir={git_dir}", "fsck", "--full"], capture_output=True, text=True)
    assert fsck.returncode == 0, f"{git_dir}: {fsck.stderr}"
    from gitmem.audit.verify import verify

    with gitmem.open_store(git_dir) as s:
        report = verify(s.core, raise_on_failure=False)
        assert report.ok, f"{git_dir}: {report}"


def test_sigkill_of_the_home_loses_no_acknowledged_write(database: str, tmp_path: Path) -> None:
    with ClusterState(database) as s:
        s.init()
    ports = [free_port() for _ in range(3)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    procs = [_start(tmp_path / f"n{i}", f"n{i}", ports[i], database) for i in range(3)]
    try:
        with ClusterState(database) as state:
            _t, admin = ClusterTokenStore(state).create(actor="user:admin", admin=True)
            sdk = [anthropic.Anthropic(base_url=u, api_key=admin, max_retries=0, timeout=60) for u in urls]
            _until(
                lambda: all(c.beta.memory_stores.list() is not None for c in sdk), "the nodes did not start"
            )
            store = sdk[0].beta.memory_stores.create(name="notes")
            home = state.placement(store.id)
            assert home.home == "n0"
            assert sorted(home.replicas) == ["n1", "n2"]
            acked: list[str] = []
            lock = threading.Lock()
            stop = threading.Event()

            def writer(k: int) -> None:
                c = sdk[1 + k % 2]  # through the nodes that are not the home
                i = 0
                while not stop.is_set():
                    path = f"/w{k}/{i}.md"
                    try:
                        c.beta.memory_stores.memories.create(store.id, path=path, content=f"{k} {i}\n")
                    except anthropic.APIError:  # refused or cut off by the failover: not acknowledged
                        time.sleep(0.05)
                        i += 1
                        continue
                    with lock:
                        acked.append(path)
                    i += 1

            threads = [CheckedThread(writer, (k,)) for k in range(4)]
            for t in threads:
                t.start()
            _until(lambda: len(acked) >= 8, "no writes were acknowledged")
            os.killpg(procs[0].pid, signal.SIGKILL)  # the home dies mid-write
            procs[0].wait(timeout=60)
            _until(lambda: state.placement(store.id).home != "n0", "no replica took over")
            replica = state.placement(store.id).home
            at_failover = len(acked)
            _until(lambda: len(acked) >= at_failover + 8, "no writes after the failover")
            stop.set()
            join_all(threads, timeout=300)
            new_home = the_copy(tmp_path / replica)
            with gitmem.open_store(new_home) as s:
                present = {m.path for m in s.list("/")}
                missing = [p for p in acked if p not in present]
                assert not missing, f"acknowledged writes lost: {missing[:10]}"
            assert state.lease(store.id).epoch >= 2
            # the old home restarts: it refuses to publish with its stale epoch, and is brought level
            procs[0] = _start(tmp_path / "n0", "n0", ports[0], database)
            old_copy = the_copy(tmp_path / "n0")
            with gitmem.open_store(old_copy) as s:
                try:
                    s.write("/stale.md", "x\n")
                    raise AssertionError("the old home published")
                except gitmem.errors.ForbiddenError:
                    pass

            def level() -> bool:
                from gitmem.cluster.replication import refs_of

                return refs_of(old_copy) == refs_of(new_home)

            _until(level, "the old home was never brought level")
            # clean on every copy: the new home, the other replica and the old home brought level
            from gitmem.cluster.replication import refs_of

            copies = [the_copy(tmp_path / f"n{i}") for i in range(3)]
            _until(lambda: all(refs_of(c) == refs_of(new_home) for c in copies), "a copy never levelled")
            for copy in copies:
                clean(copy)
            for i in range(3):  # not even the killed home left a file in its temporary directory
                assert not list((tmp_path / f"n{i}" / "tmp").iterdir()), f"n{i}"
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
