"""Pushes and history rewrites exclude each other (docs/redaction.md#pushes-during-a-redaction).

A rewrite (redaction, compaction) holds the store lock ``$GIT_DIR/gitmem/lock`` exclusively from
its plan to its purge. The pre-receive hook takes the same lock *shared* before it checks a push
(waiting while a rewrite runs), and hands it to a small child process that keeps it until
``git receive-pack`` (the hook's parent) exits: git moves the refs after pre-receive returns, so
the lock must outlive the hook, or a rewrite could start between the check and the ref update and
then purge what the new ref needs. Pushes share the lock with each other.

Kept import-light (the hook imports it on every push): ``fcntl``, ``os``, ``time``.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

LOCK_FILE = "lock"  # gitmem.audit.journal.LOCK_FILE
PUSH_WAIT = 60.0  # seconds a push waits for a running rewrite
HOLD_LIMIT = 300.0  # seconds a push may keep the lock (a receive-pack that hangs must not block forever)


def acquire_shared(git_dir: Path, wait: float) -> int | None:
    """An fd holding the store lock shared, waiting up to ``wait`` seconds while a rewrite holds it
    exclusively; None when it stays busy."""
    d = git_dir / "gitmem"
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.05)


BYTES_LOCK_FILE = "store-bytes.lock"  # gitmem.engine.writer.STORE_BYTES_LOCK


def acquire_bytes_lock(git_dir: Path, wait: float) -> int | None:
    """The store-bytes lock, exclusive (the library's writers near the limit take the same one):
    pushes that add content check ``max_store_bytes`` and land one at a time, so two of them
    cannot both fit in the room only one has. None when it stays busy ``wait`` seconds."""
    d = git_dir / "gitmem"
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / BYTES_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.005)


def refs_at(git_dir: Path, wanted: dict[str, str]) -> bool:
    """Whether every ref in ``wanted`` is at its value (loose ref files, then ``packed-refs``)."""
    packed: dict[str, str] | None = None
    for ref, value in wanted.items():
        try:
            got = (git_dir / ref).read_text().strip()
        except OSError:
            if packed is None:
                packed = {}
                try:
                    for line in (git_dir / "packed-refs").read_text().splitlines():
                        parts = line.split(" ", 1)
                        if len(parts) == 2 and not line.startswith(("#", "^")):
                            packed[parts[1]] = parts[0]
                except OSError:
                    pass
            got = packed.get(ref, "")
        if got != value:
            return False
    return True


def hold_until_landed(
    fd: int, pid: int, git_dir: Path, wanted: dict[str, str], limit: float = HOLD_LIMIT
) -> None:
    """Like :func:`hold_until_exit`, but released as soon as git has moved every ref of the push
    (``wanted``: ref -> new value): the post-receive work (indexing, replicas) runs unlocked."""
    _hold(fd, pid, limit, lambda: refs_at(git_dir, wanted))


def hold_until_exit(fd: int, pid: int, limit: float = HOLD_LIMIT) -> None:
    """Keep ``fd`` (and the lock on it) open in a detached child until process ``pid`` ends; the
    caller's copy is closed. The child holds none of the caller's other files (git waits for the
    hook's output pipes to close)."""
    _hold(fd, pid, limit, None)


def _hold(fd: int, pid: int, limit: float, done: object) -> None:
    try:
        child = os.fork()
    except OSError:
        # No child: release at once (the rewrite's reachability check still keeps the store whole).
        os.close(fd)
        return
    if child:
        os.close(fd)
        return
    try:  # the child: never returns
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for std in (0, 1, 2):
            os.dup2(null, std)
        os.closerange(3, fd)
        os.closerange(fd + 1, 4096)
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline and _alive(pid):
            if callable(done) and done():
                break
            time.sleep(0.02 if done is None else 0.002)
    finally:
        os._exit(0)


def receive_pack_pid(start: int | None = None, depth: int = 6) -> int:
    """The ``git receive-pack`` process this hook runs under: the parent, or the nearest ancestor
    running receive-pack when a server's dispatcher sits between them (Gitea's ``pre-receive``
    runs each ``pre-receive.d/`` script and exits before git moves the refs). The parent when
    none is found (no ``/proc``)."""
    parent = os.getppid() if start is None else start
    pid = parent
    for _ in range(depth):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            with open(f"/proc/{pid}/stat", "rb") as fh:
                ppid = int(fh.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return parent
        if any(a.endswith(b"receive-pack") for a in argv[:2]):
            return pid
        if ppid <= 1:
            return parent
        pid = ppid
    return parent


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def rewrite_running(git_dir: Path) -> bool:
    """Whether a history rewrite holds the store lock now (one non-blocking shared flock)."""
    try:
        fd = os.open(git_dir / "gitmem" / "lock", os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def exclude_rewrites(git_dir: Path) -> tuple[int | None, list[str]]:
    """Finish an interrupted rewrite, then take the store lock shared (waiting while a rewrite
    runs): the lock and no lines, or no lock and the refusal."""
    if (git_dir / "gitmem" / "journal.json").exists():
        from gitmem.audit.journal import guard_push

        refused = guard_push(git_dir)
        if refused is not None:
            return None, [refused]
    lock = acquire_shared(git_dir, PUSH_WAIT)
    if lock is None:
        return None, [
            "gitmem: a history rewrite (redaction or compaction) of this store is in progress and it is "
            "still running; nothing was changed: push again when it has finished"
        ]
    return lock, []
