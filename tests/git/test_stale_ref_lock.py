"""A ref lock left behind by a writer killed between creating ``refs/heads/<scope>.lock`` and renaming
it (SIGKILL, the OOM killer): git and libgit2 never remove another process's lock, so every later
move of that ref failed, in every process, for good; gitmem answered "the ref kept moving (64
attempts)" to every write of the scope (CI: a LangGraph saver restarted after a SIGKILL). A lock
older than STALE_REF_LOCK_SECONDS is removed; a live writer's lock is waited for, never removed."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import gitmem
from gitmem.git import reflocks as locks
from gitmem.store import Store


def _lock(store: Store, scope: str) -> Path:
    return Path(store.path) / "refs" / "heads" / f"{scope}.lock"


def test_a_crashed_writers_ref_lock_is_removed_and_the_write_lands(store: Store) -> None:
    store.write("/a.md", "a\n", scope="g")
    lock = _lock(store, "g")
    lock.write_text("0" * 40 + "\n")
    old = time.time() - 10 * locks.STALE_REF_LOCK_SECONDS
    os.utime(lock, (old, old))
    store.write("/b.md", "b\n", scope="g")
    assert not lock.exists()
    assert [m.path for m in store.list(scope="g")] == ["/a.md", "/b.md"]
    assert len(store.versions(scope="g")) == 2
    assert not list(lock.parent.glob("*.stale.*"))  # nothing left aside


def test_a_live_writers_ref_lock_is_waited_for_not_removed(store: Store) -> None:
    store.write("/a.md", "a\n", scope="g")
    lock = _lock(store, "g")
    lock.write_text("held\n")
    released: list[bool] = []

    def holder() -> None:
        time.sleep(0.3)
        lock.unlink()  # raises if the writer took the lock away from its holder
        released.append(True)

    t = threading.Thread(target=holder)
    t.start()
    store.write("/b.md", "b\n", scope="g")
    t.join()
    assert released == [True]
    assert [m.path for m in store.list(scope="g")] == ["/a.md", "/b.md"]


def test_a_lock_made_fresh_meanwhile_is_put_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Between the age check and the rename aside, the stale lock went and a live writer made a
    new one: the rename moved the live one; it is linked back in place, untouched."""
    lock = tmp_path / "refs" / "heads" / "g.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("stale\n")
    old = time.time() - 10 * locks.STALE_REF_LOCK_SECONDS
    os.utime(lock, (old, old))
    real_rename = os.rename

    def rename(src: str, dst: str) -> None:
        os.unlink(src)  # the stale one went ...
        Path(src).write_text("live\n")  # ... and a live writer made its own
        real_rename(src, dst)

    monkeypatch.setattr(locks.os, "rename", rename)
    assert locks.wait_or_break_ref_lock(tmp_path, "refs/heads/g") is False
    assert lock.read_text() == "live\n"
    assert [p.name for p in lock.parent.iterdir()] == ["g.lock"]


def test_a_released_lock_returns_at_once(tmp_path: Path) -> None:
    assert locks.wait_or_break_ref_lock(tmp_path, "refs/heads/none") is False


def test_a_stale_lock_on_a_new_scope_does_not_block_its_first_write(workspace: Path) -> None:
    store = gitmem.create_store("fresh", home=workspace)
    lock = _lock(store, "first")
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    old = time.time() - 10 * locks.STALE_REF_LOCK_SECONDS
    os.utime(lock, (old, old))
    store.write("/x.md", "x\n", scope="first")
    assert [m.path for m in store.list(scope="first")] == ["/x.md"]
    store.close()


# A gitmem writer that stops itself (SIGSTOP) holding its branch lock, between creating the lock
# and renaming it over the ref; it prints its version id once its write returned.
STOPPED_WRITER = r"""
import os, signal, sys
import gitmem
from gitmem.git import refmove
real = refmove._loose_value
def stalled(path):
    if os.path.exists(path + ".lock"):
        print("held", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)  # a loaded machine, a debugger: stalled, alive
    return real(path)
refmove._loose_value = stalled
with gitmem.open_store(sys.argv[1]) as store:
    v = store.write("/stalled.md", "written by the stalled writer\n", scope="g")
    print(v.id, flush=True)
"""


def _stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def test_a_stopped_writers_lock_is_never_broken_however_old(store: Store) -> None:
    """A live gitmem writer stopped (SIGSTOP) past the stale age holding ``<ref>.lock``: before, its
    lock was judged by its age alone and broken, so it lost its write and a second writer moved
    the ref under it. It holds an ``flock`` on its lock file: no breaker takes it, however old;
    once it runs again its write lands, and the next writer's after it."""
    import signal
    import subprocess
    import sys

    store.write("/a.md", "a\n", scope="g")
    store.write("/m.md", "m\n")
    lock = _lock(store, "g")
    child = subprocess.Popen(
        [sys.executable, "-c", STOPPED_WRITER, str(store.path)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == "held\n"
        while not _stopped(child.pid):
            time.sleep(0.01)
        ino = lock.stat().st_ino
        old = time.time() - 10 * locks.STALE_REF_LOCK_SECONDS  # stalled well past the stale age
        os.utime(lock, (old, old))
        assert locks.break_if_stale(store.path, "refs/heads/g") is False
        assert locks.wait_or_break_ref_lock(store.path, "refs/heads/g") is False  # waited, not broken
        assert lock.stat().st_ino == ino
        tip, other = store.core.tip("g"), store.core.tip("main")
        assert tip is not None and other is not None
        # A writer that takes no scope lock (a batch, a push) moving the branch meanwhile: it waits
        # and loses its race; before, it broke the lock and moved the ref under the stopped writer.
        assert store.core.cas("refs/heads/g", tip, other) is False
        assert store.core.tip("g") == tip and lock.stat().st_ino == ino
        os.kill(child.pid, signal.SIGCONT)
        vid = child.stdout.readline().strip()
        assert child.wait(60) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert vid.startswith("memver_")
    assert store.write("/b.md", "b\n", scope="g") is not None
    assert store.read("/stalled.md", scope="g").content == "written by the stalled writer\n"
    assert [m.path for m in store.list(scope="g")] == ["/a.md", "/b.md", "/stalled.md"]
    assert vid in {v.id for v in store.versions(scope="g")}
    assert not lock.exists()


def test_a_breaker_removes_only_the_inode_it_flocked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The breaker flocked the stale lock (no holder) and found it old; before it removed it, the
    file at the path was replaced by a live writer's (flocked) lock: the breaker leaves the path
    alone (before: it renamed the live lock aside and linked it back, a window in which the live
    writer found its lock gone and a third writer could take the ref)."""
    import fcntl

    lock = tmp_path / "refs" / "heads" / "g.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("stale\n")
    old = time.time() - 10 * locks.STALE_REF_LOCK_SECONDS
    os.utime(lock, (old, old))
    live: list[int] = []
    real_old = locks._old

    def judged_then_replaced(st: os.stat_result, stale_after: float) -> bool:
        if not live:
            lock.unlink()  # the stale one went (another breaker) ...
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)  # ... a live writer's
            fcntl.flock(fd, fcntl.LOCK_EX)
            live.append(fd)
        return real_old(st, stale_after)

    renamed: list[str] = []
    real_rename = os.rename

    def rename(src: str, dst: str) -> None:
        renamed.append(src)
        real_rename(src, dst)

    monkeypatch.setattr(locks, "_old", judged_then_replaced)
    monkeypatch.setattr(locks.os, "rename", rename)
    try:
        assert locks.break_if_stale(tmp_path, "refs/heads/g") is False
        assert renamed == []
        assert lock.stat().st_ino == os.fstat(live[0]).st_ino  # the live writer's, untouched
        assert locks.break_if_stale(tmp_path, "refs/heads/g") is False  # flocked: live, not stale
    finally:
        for fd in live:
            os.close(fd)
