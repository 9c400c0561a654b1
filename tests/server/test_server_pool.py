"""The server's store pool: stores open on first use, idle ones close by age and beyond a bound."""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path

import gitmem
from gitmem.server.pool import StorePool
from tests.helpers import run_threads


def _stores(workspace: Path, n: int) -> list[str]:
    names = [f"s{i:02d}" for i in range(n)]
    for name in names:
        with gitmem.create_store(name, home=workspace) as s:
            s.write("/hello.md", f"{name}\n", actor="user:alice")
    return names


def test_nothing_opens_before_a_request_and_idle_stores_stay_within_the_bound(workspace: Path) -> None:
    names = _stores(workspace, 6)
    pool = StorePool(workspace, max_idle=2)
    assert pool.opened == 0 and pool.idle_count() == 0
    for name in names:
        with pool.store(name) as s:
            assert s.read("/hello.md").content == f"{name}\n"
        assert pool.idle_count() <= 2
    assert pool.opened == 6
    # The two most recently used are still open (taken again without opening); the others reopen.
    for name in names[-2:]:
        with pool.store(name) as s:
            assert s.read("/hello.md").content == f"{name}\n"
    assert pool.opened == 6
    with pool.store(names[0]) as s:
        assert s.read("/hello.md").content == f"{names[0]}\n"
    assert pool.opened == 7 and pool.idle_count() == 2
    pool.close()
    assert pool.idle_count() == 0


def test_stores_idle_longer_than_idle_seconds_close(workspace: Path) -> None:
    names = _stores(workspace, 3)
    pool = StorePool(workspace, idle_seconds=0.0)
    for name in names:
        with pool.store(name):
            pass
    assert pool.idle_count() == 1  # only the one just given back: the others aged out
    pool.close()


def test_many_threads_over_many_stores_keep_the_bound_and_write_each_version_once(
    workspace: Path,
) -> None:
    names = _stores(workspace, 8)
    pool = StorePool(workspace, max_idle=3)
    written: dict[str, list[str]] = {n: [] for n in names}
    lock = threading.Lock()

    def worker(k: int) -> None:
        rng = random.Random(k)
        for i in range(6):
            name = rng.choice(names)
            with pool.store(name) as s:
                v = s.write(f"/t{k}/m{i}.md", f"{k} {i}\n", actor="user:alice")
                assert v is not None
            with lock:
                written[name].append(v.id)

    run_threads(worker, 6)  # re-raises what any worker raised
    assert pool.idle_count() <= 3
    pool.close()
    for name in names:
        with gitmem.open_store(name, home=workspace) as s:
            ids = [v.id for v in s.versions()]
            assert sorted(set(ids) & set(written[name])) == sorted(written[name])
            assert len(ids) == len(set(ids)) == len(written[name]) + 1


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_open_files_stay_bounded_over_more_stores_and_threads_than_the_bound(workspace: Path) -> None:
    """More stores than the pool keeps idle, lent thread after thread (as a server's thread pool
    does): the descriptors held stay those of the idle bound, a Store lent to one thread after
    another holds one index connection, not one per thread, and evicted stores reopen correctly."""
    names = _stores(workspace, 8)
    pool = StorePool(workspace, max_idle=2)
    before = _fds()
    with pool.store(names[0]) as s:
        s.list("/")
    one = _fds() - before  # what one open, idle Store holds
    assert one > 0

    def use(name: str, k: int) -> None:
        with pool.store(name) as s:
            assert s.read("/hello.md").content == f"{name}\n"
            s.write(f"/by/t{k}.md", f"{k}\n", actor="user:alice")
            s.list("/")

    # One Store, twelve threads one after the other: still one Store's descriptors.
    for k in range(12):
        t = threading.Thread(target=use, args=(names[0], k))
        t.start()
        t.join()
    assert pool.idle_count() == 1
    assert _fds() - before <= one
    # Every store, from six threads at once, many times over: at most the idle bound stays open.

    def worker(k: int) -> None:
        rng = random.Random(k)
        for i in range(10):
            use(rng.choice(names), 100 + 10 * k + i)

    run_threads(worker, 6)  # re-raises what any worker raised
    assert pool.idle_count() <= 2
    assert pool.opened > 8  # stores were evicted and opened again
    assert _fds() - before <= 2 * one + 2  # two idle Stores (a pack file more at most)
    # Evicted stores reopen with everything written through the pool.
    for name in names:
        with pool.store(name) as s:
            assert s.read("/hello.md").content == f"{name}\n"
            assert [m.path for m in s.list("/by/")] == sorted(m.path for m in s.list("/by/"))
    pool.close()
    assert _fds() <= before
    total = 0
    for name in names:
        with gitmem.open_store(name, home=workspace) as s:
            total += len(s.list("/by/"))
    assert total == 12 + 60
