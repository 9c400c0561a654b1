"""One ``Store`` shared by many threads (and processes on top): no crash, no lost or duplicated
version, each caller's versions in the order it made them (group commit, docs/durability.md)."""

from __future__ import annotations

import multiprocessing
import threading

import gitmem
from gitmem import Memory
from gitmem.store import Store
from tests.helpers import commit_count, git

THREADS = 8
WRITES = 15


def _run_threads(target: object, n: int) -> list[BaseException]:
    errors: list[BaseException] = []

    def wrap(i: int) -> None:
        try:
            target(i)  # type: ignore[operator]
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def _commit_order(store: Store, scope: str = "main") -> list[str]:
    """Version ids in commit order (oldest first), from the trailers."""
    out = git(store.path, "log", "--reverse", "--format=%(trailers:key=Gitmem-Version,valueonly)", scope)
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def test_threads_sharing_one_store_lose_nothing(store: Store) -> None:
    store.write("/shared", "".join(f"t{i}: 0\n" for i in range(THREADS)))
    acked: dict[int, list[str]] = {i: [] for i in range(THREADS)}

    def writer(i: int) -> None:
        for k in range(WRITES):
            v = store.write(f"/t{i}/m{k}", f"thread {i} memory {k}\n", actor=f"service:t{i}")
            assert v is not None
            acked[i].append(v.id)
            e = store.str_replace("/shared", f"t{i}: {k}\n", f"t{i}: {k + 1}\n", actor=f"service:t{i}")
            assert e is not None
            acked[i].append(e.id)
            # reads interleave with the other threads' writes
            m = store.read(f"/t{i}/m{k}")
            assert m.content == f"thread {i} memory {k}\n"
            assert store.version(m.version_id).content_sha256 == m.content_sha256
            store.list("/")
            store.search(f"thread {i}")

    errors = _run_threads(writer, THREADS)
    assert not errors, errors
    all_ids = [v for ids in acked.values() for v in ids]
    assert len(all_ids) == len(set(all_ids)) == THREADS * WRITES * 2
    assert store.read("/shared").content == "".join(f"t{i}: {WRITES}\n" for i in range(THREADS))
    order = _commit_order(store)
    assert len(order) == len(set(order)) == commit_count(store) == 1 + THREADS * WRITES * 2
    position = {vid: n for n, vid in enumerate(order)}
    for ids in acked.values():  # each version once, each thread's in its own order
        assert [position[v] for v in ids] == sorted(position[v] for v in ids)
    versions = store.versions()
    assert {v.id for v in versions} >= set(all_ids)
    before = sorted((v.id, v.memory_id, v.path) for v in versions)
    store.core.index.rebuild()
    assert sorted((v.id, v.memory_id, v.path) for v in store.versions()) == before
    fsck = git(store.path, "fsck", "--full", "--strict", "--no-dangling", check=False)
    assert fsck.returncode == 0, fsck.stderr


def test_group_commit_refuses_one_caller_and_commits_the_others(store: Store) -> None:
    """A write whose precondition fails inside a group gets its own error; the rest land."""
    store.write("/x", "x0\n")
    results: dict[int, object] = {}

    def writer(i: int) -> None:
        try:
            if i % 2:
                results[i] = store.create("/x", f"clash {i}\n")  # always a conflict
            else:
                results[i] = store.write(f"/ok{i}", f"ok {i}\n")
        except gitmem.errors.GitmemError as exc:
            results[i] = exc

    assert not _run_threads(writer, THREADS)
    for i, r in results.items():
        if i % 2:
            assert isinstance(r, gitmem.errors.PathConflictError)
        else:
            assert store.read(f"/ok{i}").content == f"ok {i}\n"
    assert commit_count(store) == 1 + THREADS // 2
    assert store.read("/x").content == "x0\n"


def test_threads_creating_one_path_make_one_memory(store: Store) -> None:
    """Creates of one path chained in one group: the first wins, every other one is refused."""
    won: list[str] = []
    refused: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            won.append(store.create("/same", f"from {i}\n").id)
        except gitmem.errors.PathConflictError as exc:
            refused.append(exc)

    assert not _run_threads(writer, THREADS)
    assert len(won) == 1 and len(refused) == THREADS - 1
    assert len(store.versions("/same")) == 1


def _process_writer(args: tuple[str, int, int, int]) -> dict[int, list[str]]:
    """In a spawned process: ``threads`` threads sharing one store, ``n`` writes each."""
    path, proc, threads, n = args
    acked: dict[int, list[str]] = {}
    with gitmem.open_store(path) as store:

        def writer(i: int) -> None:
            ids = acked.setdefault(i, [])
            for k in range(n):
                v = store.write(f"/p{proc}/t{i}/m{k}", f"{proc} {i} {k}\n", actor=f"service:p{proc}")
                assert v is not None
                ids.append(v.id)

        errors = _run_threads(writer, threads)
        assert not errors, errors
    return {proc * 100 + i: ids for i, ids in acked.items()}


def test_processes_of_threads_group_commit(store: Store) -> None:
    path = str(store.path)
    procs, threads, n = 3, 4, 8
    with multiprocessing.get_context("spawn").Pool(procs) as pool:
        parts = pool.map(_process_writer, [(path, p, threads, n) for p in range(procs)])
    acked = {k: v for part in parts for k, v in part.items()}
    all_ids = [v for ids in acked.values() for v in ids]
    assert len(all_ids) == len(set(all_ids)) == procs * threads * n
    order = _commit_order(store)
    assert len(order) == len(set(order)) == procs * threads * n
    position = {vid: i for i, vid in enumerate(order)}
    for ids in acked.values():
        assert [position[v] for v in ids] == sorted(position[v] for v in ids)
    listed = {m.path for m in store.list() if isinstance(m, Memory)}
    assert len(listed) == procs * threads * n
    assert git(store.path, "fsck", "--full", "--no-dangling", check=False).returncode == 0
