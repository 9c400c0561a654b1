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
