"""Advisory file locks (fcntl) for the few things git's ref locks do not cover."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from pathlib import Path

LOGGER = "gitmem.lock"  # logging is imported only when a lock is contended (the hook never pays for it)

# A flock belongs to the open file, which a forked child shares: a lock a thread of the parent
# holds when another thread forks would stay held by the child (its copy of the descriptor) after
# the parent let it go, so both wait forever. The lock files open in this process, and the thread
# that opened each, are kept here; a forked child closes those of the threads it does not have.
_OPEN: dict[int, int] = {}  # fd -> threading.get_ident() of its opener
_OPEN_LOCK = threading.Lock()  # held from open to record and from close to forget (and over fork)


def open_lock_fd(path: Path | str, flags: int = os.O_RDWR | os.O_CREAT, mode: int = 0o600) -> int:
    """``os.open`` of a file this process will flock (closed by :func:`close_lock_fd`): a child
    forked while another thread has it open does not keep its lock."""
    with _OPEN_LOCK:
        fd = os.open(path, flags, mode)
        _OPEN[fd] = threading.get_ident()
    return fd


def close_lock_fd(fd: int) -> None:
    """Close a file opened by :func:`open_lock_fd` (its lock is released)."""
    with _OPEN_LOCK:
        _OPEN.pop(fd, None)
        os.close(fd)


def _before_fork() -> None:
    _OPEN_LOCK.acquire()


def _after_fork_in_parent() -> None:
    _OPEN_LOCK.release()


def _after_fork_in_child() -> None:
    global _OPEN_LOCK
    me = threading.get_ident()
    for fd, opener in list(_OPEN.items()):
        if opener != me:  # its thread is not in this process: its with-block never ends here
            del _OPEN[fd]
            with suppress(OSError):
                os.close(fd)
    _OPEN_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
    )


@contextmanager
def file_lock(path: Path, *, shared: bool = False) -> Iterator[None]:
    """Hold an exclusive (or ``shared``) lock on ``path`` (created 0600) for the ``with`` block."""
    mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    try:
        fd = open_lock_fd(path)
    except FileNotFoundError:  # the first lock of its directory
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_lock_fd(path)
    try:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            import logging

            log = logging.getLogger(LOGGER)
            log.info("waiting for lock %s", path)
            fcntl.flock(fd, mode)
            log.info("got lock %s", path)
        yield
    finally:
        close_lock_fd(fd)  # closing releases the lock


# ---------------------------------------------------------------------- lock order
#: The order in which a thread takes the engine's locks (docs/durability.md#lock-order): holding
#: one, it never waits for one listed before it. A scope's group-commit lock
#: (gitmem.engine.writer.scope_lock), the store lock ``gitmem/lock`` (gitmem.audit.journal.store_lock),
#: the purge lock (:func:`purge_lock`), ``proposals.lock`` (:func:`proposals_lock`), the store-bytes
#: lock (gitmem.engine.writer.store_bytes_lock), the intent log (gitmem.git.intent, innermost).
LOCK_ORDER = ("scope", "store", "purge", "proposals", "store-bytes", "intent")

_HELD = threading.local()  # .names: the ordered locks this thread holds, in the order it took them


class LockOrderError(RuntimeError):
    """A thread asked for a lock while it holds one that comes later in :data:`LOCK_ORDER`: a bug in
    gitmem (two processes taking two locks in opposite orders wait for each other forever), raised
    before it waits."""


def held_locks() -> tuple[str, ...]:
    """The locks of :data:`LOCK_ORDER` this thread holds, in the order it took them."""
    return tuple(_names())


def _names() -> list[str]:
    names: list[str] | None = getattr(_HELD, "names", None)
    if names is None:
        names = _HELD.names = []
    return names


def check_order(name: str) -> None:
    """Raise :class:`LockOrderError` when this thread holds a lock that comes after ``name``."""
    rank = LOCK_ORDER.index(name)
    later = [n for n in _names() if LOCK_ORDER.index(n) > rank]
    if later:
        raise LockOrderError(
            f"lock order violated: the {name} lock was asked for while this thread holds "
            f"{', '.join(f'the {n} lock' for n in later)}; the order is {' -> '.join(LOCK_ORDER)} "
            "(docs/durability.md#lock-order)"
        )


@contextmanager
def ordered(name: str, *, wait: bool = True) -> Iterator[None]:
    """Count ``name`` (of :data:`LOCK_ORDER`) as held by this thread for the ``with`` block; first,
    when the lock may be waited for (``wait``), :func:`check_order`."""
    if wait:
        check_order(name)
    names = _names()
    names.append(name)
    try:
        yield
    finally:
        del names[len(names) - 1 - names[::-1].index(name)]


_OWN = threading.local()  # .paths: the lock files this thread holds inside :func:`owning`


def owns(path: Path | str) -> bool:
    """Whether this thread holds the lock file ``path`` (taken inside :func:`owning`): a flock
    taken again through a second descriptor of one process would wait for itself forever."""
    return os.path.realpath(path) in getattr(_OWN, "paths", ())


@contextmanager
def owning(path: Path | str) -> Iterator[None]:
    """Count the lock file ``path`` as held by this thread for the ``with`` block (:func:`owns`)."""
    paths: set[str] = _OWN.__dict__.setdefault("paths", set())
    key = os.path.realpath(path)
    paths.add(key)
    try:
        yield
    finally:
        paths.discard(key)


@contextmanager
def ordered_lock(name: str, path: Path, *, shared: bool = False) -> Iterator[None]:
    """:func:`file_lock` of ``path``, one of the engine's ordered locks (``name``, :func:`ordered`)."""
    with ordered(name), file_lock(path, shared=shared):
        yield


#: ``$GIT_DIR/gitmem/purge.lock``: a purge of deny-listed objects (a redaction's, an erased
#: proposal's) holds it exclusively from the deny-list entry to its proof; a write that holds
#: content some deny-list names takes it shared from its objects to its ref move
#: (docs/redaction.md#by-scope), as does a proposal's acceptance from before ``proposals.lock``.
PURGE_LOCK = "purge.lock"

#: ``$GIT_DIR/gitmem/proposals.lock``: one proposal decision, proposal write, chain move or scrub
#: of the proposal records at a time (gitmem.engine.proposals, gitmem.audit.review).
PROPOSALS_LOCK = "proposals.lock"


def purge_lock(git_dir: Path | str, *, shared: bool = False) -> AbstractContextManager[None]:
    """The purge lock of the store at ``git_dir`` (:data:`PURGE_LOCK`), in the lock order."""
    return ordered_lock("purge", Path(git_dir) / "gitmem" / PURGE_LOCK, shared=shared)


def proposals_lock(git_dir: Path | str) -> AbstractContextManager[None]:
    """The proposals lock of the store at ``git_dir`` (:data:`PROPOSALS_LOCK`), in the lock order."""
    return ordered_lock("proposals", Path(git_dir) / "gitmem" / PROPOSALS_LOCK)


@contextmanager
def lock_file(path: Path) -> Iterator[int]:
    """The open lock file ``path`` (created 0600), unlocked (closed) after the ``with`` block; take
    it with :func:`try_lock` or :func:`lock`."""
    try:
        fd = open_lock_fd(path)
    except FileNotFoundError:  # the first lock of its directory
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_lock_fd(path)
    try:
        yield fd
    finally:
        close_lock_fd(fd)


def try_lock(fd: int) -> bool:
    """Take the exclusive lock of ``fd`` if no one holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def lock(fd: int) -> None:
    """Take the exclusive lock of ``fd``, waiting for its holder."""
    fcntl.flock(fd, fcntl.LOCK_EX)


def wait_for_holder(fd: int) -> bool:
    """Wait until the exclusive holder of the lock file ``fd`` (see :func:`lock_file`) lets it go
    (many waiters wake together); False at once when no one holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        waited = False
    except BlockingIOError:
        fcntl.flock(fd, fcntl.LOCK_SH)
        waited = True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return waited
