"""Builders and probes shared by the core library tests (no mocks: real repos, real git)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pygit2

from gitmem.store import Store

SHA_A = "a" * 64


def tip_hex(store: Store, scope: str = "main") -> str | None:
    tip = store.core.tip(scope)
    return str(tip) if tip is not None else None


def object_count(store: Store) -> int:
    """Every object in the store's object database (loose and packed)."""
    return len(list(store.core.repo.odb))


def snapshot(store: Store) -> tuple[dict[str, str], int]:
    """All refs and the object count: equal snapshots mean nothing was written."""
    refs = {name: str(store.core.repo.references[name].target) for name in store.core.repo.references}
    return refs, object_count(store)


def commit_count(store: Store, scope: str = "main") -> int:
    tip = store.core.tip(scope)
    return 0 if tip is None else sum(1 for _ in store.core.walk(tip))


def git(cwd: Path | str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run real git with a fixed identity (the conftest fixture already isolates HOME and config)."""
    env = dict(os.environ)
    env.pop("GIT_DIR", None)
    return subprocess.run(["git", *args], cwd=str(cwd), env=env, capture_output=True, text=True, check=check)


def plain_commit(
    store: Store,
    files: dict[str, bytes | None],
    *,
    scope: str = "main",
    message: str = "edit with plain git\n",
    email: str = "bob@example.com",
    when: int | None = None,
) -> pygit2.Oid:
    """Commit behind gitmem's back with plain pygit2: ``files`` maps tree paths to content (None: delete)."""
    repo = store.core.repo
    parent = store.core.tip(scope)
    tree = store.core.tree_of(parent)
    for path, data in files.items():
        blob = repo.create_blob(data) if data is not None else None
        oid = store.core.update_tree(tree, path.split("/"), blob)
        tree = repo[oid] if oid is not None else None  # type: ignore[assignment]
    tree_oid = tree.id if tree is not None else store.core.empty_tree()
    sig = pygit2.Signature("Bob", email, int(time.time()) if when is None else when, 0)
    return repo.create_commit(
        f"refs/heads/{scope}", sig, sig, message, tree_oid, [parent] if parent is not None else []
    )


def version_keys(versions: list[object]) -> list[tuple[str, str, str, str]]:
    return [(v.id, v.memory_id, v.path, v.operation) for v in versions]  # type: ignore[attr-defined]


def concurrent_writer(args: tuple[str, int, int]) -> list[str]:
    """Run in a spawned process: ``n`` new memories and ``n`` edits of this worker's line of /shared.

    Returns the ids of every acknowledged version.
    """
    import gitmem

    store_dir, worker, n = args
    acked: list[str] = []
    with gitmem.open_store(store_dir) as store:
        for k in range(n):
            v = store.write(f"/w{worker}/m{k}", f"worker {worker} memory {k}\n", actor=f"service:w{worker}")
            assert v is not None
            acked.append(v.id)
            e = store.str_replace(
                "/shared", f"w{worker}: {k}\n", f"w{worker}: {k + 1}\n", actor=f"service:w{worker}"
            )
            assert e is not None
            acked.append(e.id)
            m = store.read("/shared")  # others keep writing it: content and version must still agree
            assert store.version(m.version_id).content_sha256 == m.content_sha256
    return acked


def fast_workspace(tmp_path: Path, monkeypatch: Any) -> Iterator[Path]:
    """A workspace on tmpfs when there is one (for a module-level ``workspace`` fixture override).

    The library fsyncs every write; on a loaded disk that dominates a test run, and durability is
    not what these tests check. Falls back to ``tmp_path``.
    """
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    if base is None:
        ws = tmp_path / "workspace"
        monkeypatch.setenv("GITMEM_HOME", str(ws))
        yield ws
        return
    root = Path(tempfile.mkdtemp(prefix="gitmem-test-", dir=base))
    ws = root / "workspace"
    monkeypatch.setenv("GITMEM_HOME", str(ws))
    try:
        yield ws
    finally:
        shutil.rmtree(root, ignore_errors=True)


def edit_in_place(path: Path, old: bytes, new: bytes) -> None:
    """Change ``old`` to ``new`` (same length) in the file itself: same inode, same size, and
    then its old time stamps back, as an edit within one tick of the file clock leaves it."""
    st = path.stat()
    data = path.read_bytes()
    assert len(old) == len(new) and data.count(old) == 1
    with path.open("r+b") as fh:
        fh.write(data.replace(old, new))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)


class CheckedThread(threading.Thread):
    """A thread whose exception is kept and re-raised by :meth:`check` (a plain thread drops it, so a
    crashed racer would still leave exactly one "winner" behind)."""

    def __init__(self, target: Callable[..., object], args: tuple[object, ...] = ()) -> None:
        super().__init__(target=self._capture, daemon=True)
        self._fn, self._fn_args = target, args
        self.error: BaseException | None = None

    def _capture(self) -> None:
        try:
            self._fn(*self._fn_args)
        except BaseException as exc:  # kept for check(); the test thread re-raises it
            self.error = exc

    def check(self, timeout: float | None = None) -> None:
        """Join, then re-raise the thread's exception, if any; a thread still running is a failure."""
        self.join(timeout)
        if self.is_alive():
            raise AssertionError(f"thread {self.name} did not finish")
        if self.error is not None:
            raise self.error


def join_all(threads: list[CheckedThread], timeout: float | None = None) -> None:
    """Join every thread, then re-raise the first exception any of them raised."""
    for t in threads:
        t.join(timeout)
    for t in threads:
        t.check(0)


def run_threads(target: Callable[[int], object], n: int) -> None:
    """``target(0)`` ... ``target(n - 1)``, each on a thread of its own, all started before any is joined;
    an exception in any of them is re-raised here."""
    threads = [CheckedThread(target, (k,)) for k in range(n)]
    for t in threads:
        t.start()
    join_all(threads)


def patience(seconds: float) -> float:
    """A ``time.monotonic()`` deadline for a wait that a loaded machine stretches: ``seconds`` as
    measured on a quiet one, times twice the load per core (at least 1): a wait is bounded, so a
    hang still fails, but a busy CI does not."""
    try:
        per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    except OSError:
        per_core = 1.0
    return time.monotonic() + seconds * 2 * max(1.0, per_core)


def wait_until(cond: Callable[[], object], what: str, seconds: float = 30.0) -> None:
    """Poll ``cond()`` until it holds; fail naming ``what`` past :func:`patience` of ``seconds``
    (a hang fails, a loaded machine is given longer)."""
    deadline = patience(seconds)
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def run_bench(script: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``bench/<script>`` run as a script with ``args`` by this interpreter, its output captured (the
    bench smoke tests: a benchmark runs as ``make bench-all`` runs it)."""
    bench = Path(__file__).resolve().parents[1] / "bench" / script
    limit = patience(timeout) - time.monotonic()  # a hang fails; a loaded machine is given longer
    return subprocess.run(
        [sys.executable, str(bench), *args], capture_output=True, text=True, timeout=limit, check=False
    )
