"""Ref lock files left behind by a killed writer (docs/durability.md, "Stale ref locks").

git and libgit2 move a ref by creating ``<ref>.lock``, writing the new value there and renaming it
over the ref; a deletion of a packed ref, ``git pack-refs`` and ``git gc`` hold ``packed-refs.lock``
the same way. No process ever removes another's lock, so a writer killed in between wedges every
later move of that ref (or every deletion and ref packing), in every process, for good. Every ref
move and deletion of gitmem goes through here when it meets a held lock."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Literal, Protocol, TypeVar

import pygit2

from gitmem.git.locks import LOGGER, close_lock_fd, open_lock_fd

#: A ref's ``.lock`` file older than this is a crashed writer's: git and libgit2 hold one for the
#: few microseconds between writing the new value and renaming it into place, and no process takes
#: it for longer, so one this old is not held (docs/durability.md, "Stale ref locks"). The one
#: longer holder, a history rewrite's swap (gitmem.audit.journal), holds the store lock
#: ``gitmem/lock`` exclusively meanwhile, and no lock is broken while it does.
STALE_REF_LOCK_SECONDS = 2.0
#: ``packed-refs.lock`` is held by git for a whole ``git pack-refs`` / ``git gc`` (every ref written
#: out) and by a deletion of a packed ref: broken only once it is this old.
STALE_PACKED_REFS_LOCK_SECONDS = 30.0

#: How long a ref move waits for a history rewrite that holds the store lock (its swap holds the
#: branch lock for as long as its flushes take) before its caller's retries go on.
REWRITE_WAIT_SECONDS = 10.0

T = TypeVar("T")

STORE_LOCK_FILE = "lock"  # $GIT_DIR/gitmem/lock (gitmem.git.repo.STORE_LOCK)
BREAK_LOCK_FILE = "ref-break.lock"  # $GIT_DIR/gitmem/ref-break.lock: one breaker at a time

# Git dirs (real paths) whose store lock a thread of this process holds exclusively, with that
# thread: a rewrite's own thread may break a crashed writer's lock (recovery and its ledger entry
# move refs while it holds the store lock); every other thread sees the rewrite and breaks none.
_REWRITING: dict[str, int] = {}


@contextmanager
def rewriting(git_dir: str | os.PathLike[str]) -> Iterator[None]:
    """Declare that the calling thread holds ``gitmem/lock`` exclusively (a history rewrite)."""
    key = os.path.realpath(git_dir)
    before = _REWRITING.get(key)
    _REWRITING[key] = threading.get_ident()
    try:
        yield
    finally:
        if before is None:
            _REWRITING.pop(key, None)
        else:
            _REWRITING[key] = before


def is_lock_error(exc: BaseException) -> bool:
    """A libgit2 error saying a ref's (or packed-refs') lock file is held."""
    return "lock" in str(exc).lower()


def wait_or_break_ref_lock(git_dir: str | os.PathLike[str], ref: str) -> bool:
    """After a ref move that found ``<ref>.lock`` held: wait until the lock goes, or, when it
    outlives :data:`STALE_REF_LOCK_SECONDS` (its writer was killed between creating and renaming
    it: git and libgit2 never remove another process's lock, so until then every move of that ref
    fails, in every process, for good), remove it. Returns True when a stale lock was removed.
    ``ref`` ``packed-refs`` is the packed-refs file (:data:`STALE_PACKED_REFS_LOCK_SECONDS`);
    any other file git locks the same way (``config``, ``FETCH_HEAD``) may be named too.

    A lock whose ``flock`` is held is a live gitmem writer's (:func:`hold`), whatever its age: it
    is waited for, never removed. Never while a history rewrite holds the store lock in another
    thread or process (its swap holds the branch locks for as long as its flushes take). Breakers
    take turns (``gitmem/ref-break.lock``), and the lock is renamed aside and compared there with
    the file judged stale (same inode, still old): a live writer's lock that replaced it meanwhile
    is linked back in place, untouched."""
    import time

    git_dir = os.fspath(git_dir)
    lock = os.path.join(git_dir, ref + ".lock")
    stale_after = _stale_after(ref)
    deadline = time.monotonic() + STALE_REF_LOCK_SECONDS
    rewrite_deadline = time.monotonic() + REWRITE_WAIT_SECONDS
    pause = 0.0005
    while True:
        seen = _stale(lock, stale_after)
        if seen is None:
            return False  # released: the caller moves the ref again
        if seen:
            broke = _break(git_dir, ref)
            if broke == "removed":
                return True
            if broke == "gone":
                return False  # its writer finished meanwhile: the caller moves the ref again
            if broke == "rewrite":
                if time.monotonic() >= rewrite_deadline:
                    return False  # a rewrite holds it still: the caller's retries go on
            elif time.monotonic() >= deadline:
                return False  # held by a live (stalled) gitmem writer: retried later
        elif time.monotonic() >= deadline:
            return False  # held by a live writer (or not old enough yet): retried later
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def break_if_stale(git_dir: str | os.PathLike[str], ref: str) -> bool:
    """Remove ``<ref>.lock`` now if it is stale (see :func:`wait_or_break_ref_lock`), without waiting."""
    return _break(git_dir, ref) == "removed"


def hold(fd: int) -> bool:
    """Mark the lock file ``fd`` this process just created (``O_EXCL``) as held by a live process:
    an exclusive ``flock`` on it, released when ``fd`` is closed (open it with
    :func:`gitmem.git.locks.open_lock_fd`, so a forked child does not keep it). A breaker that finds
    the flock held never removes the lock, however old it is (a holder stopped or starved past the
    stale age). False when a breaker has the file flocked this instant (it is looking at it): the
    caller gives the lock up (removes its own file) and moves the ref again. One syscall. On a
    filesystem that has no ``flock`` (ENOLCK: some network filesystems) the lock is held unflocked,
    judged by its age alone as git's are."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        pass  # no flock here: the age rule alone
    return True


Outcome = Literal["removed", "gone", "young", "live", "rewrite", "busy"]


def _stale_after(ref: str) -> float:
    return STALE_PACKED_REFS_LOCK_SECONDS if ref == "packed-refs" else STALE_REF_LOCK_SECONDS


def _break(git_dir: str | os.PathLike[str], ref: str) -> Outcome:
    """removed: the stale lock was removed; gone: there is none (any more); young: not old enough;
    live: its flock is held (a live gitmem holder, whatever its age); rewrite: a history rewrite
    holds the store lock, so the lock may be its own; busy: another breaker is stopped in its turn."""
    import time

    git_dir = os.fspath(git_dir)
    lock = os.path.join(git_dir, ref + ".lock")
    stale_after = _stale_after(ref)
    # A history rewrite holds ref locks only (its branches'): a config.lock is never its own.
    with _breaking(git_dir, gated=ref == "packed-refs" or ref.startswith("refs/")) as turn:
        if turn != "ok":
            return turn  # a history rewrite runs (its locks are live), or a stopped breaker's turn
        try:
            fd = open_lock_fd(lock, os.O_RDONLY | _NOFOLLOW | os.O_NONBLOCK, 0)
        except FileNotFoundError:
            return "gone"
        except OSError:  # not ours to read (or not a file): judged by its age alone
            fd = -1
        try:
            if fd >= 0:
                try:  # held by a live gitmem writer (gitmem.git.refmove) for as long as it holds it
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return "live"
                except OSError:
                    pass  # a filesystem without flock: the age rule alone
                judged = os.fstat(fd)  # the file now flocked by this breaker: no gitmem holder
                if not _old(judged, stale_after):
                    return "young"
            else:
                seen = _stale(lock, stale_after)
                if not seen:
                    return "gone" if seen is None else "young"
                judged = seen
            outcome = _remove(lock, judged, stale_after)
        finally:
            if fd >= 0:
                close_lock_fd(fd)
        if outcome != "removed":
            return outcome
        if ref == "packed-refs":  # git writes packed-refs.new under the lock: orphaned with it
            _remove_stale(os.path.join(git_dir, "packed-refs.new"), stale_after)
    import logging

    logging.getLogger(LOGGER).warning(
        "removed the stale lock %s (%.1f s old: its writer was killed before it renamed it)",
        lock,
        time.time() - judged.st_mtime,
    )
    return "removed"


def _remove(lock: str, judged: os.stat_result, stale_after: float) -> Outcome:
    """Remove ``lock`` if it is still the file ``judged`` (same inode, still old): renamed aside
    and compared there, so a live writer's lock made at that path after the look stays."""
    try:
        there = os.lstat(lock)
    except OSError:
        return "gone"
    if (there.st_dev, there.st_ino) != (judged.st_dev, judged.st_ino):
        return "gone"  # replaced since the look: another writer's, judged on the next look
    aside = f"{lock}.stale.{os.getpid()}.{threading.get_ident()}"
    try:
        os.rename(lock, aside)
    except OSError:
        return "gone"  # its writer finished meanwhile
    try:
        moved = os.lstat(aside)
        if (moved.st_dev, moved.st_ino) != (judged.st_dev, judged.st_ino) or not _old(moved, stale_after):
            with suppress(OSError):  # a live writer's lock, made after the look above: put back
                os.link(aside, lock)
            return "gone"
    finally:
        with suppress(OSError):
            os.unlink(aside)
    return "removed"


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def clear_stale_packed_refs(git_dir: str | os.PathLike[str]) -> None:
    """Before git rewrites packed-refs (``git pack-refs``, ``git update-ref -d``): a stale
    ``packed-refs.lock``, and a stale ``packed-refs.new`` (git writes the new file there, with
    O_EXCL, under the lock) left by a killed git, are removed; else that git fails, for good."""
    git_dir = os.fspath(git_dir)
    break_if_stale(git_dir, "packed-refs")
    if not os.path.exists(os.path.join(git_dir, "packed-refs.lock")):
        with _breaking(git_dir) as turn:
            if turn == "ok":
                _remove_stale(os.path.join(git_dir, "packed-refs.new"), STALE_PACKED_REFS_LOCK_SECONDS)


def _remove_stale(path: str, stale_after: float) -> None:
    with suppress(OSError):
        if _old(os.lstat(path), stale_after):
            os.unlink(path)


def _old(st: os.stat_result, stale_after: float) -> bool:
    import time

    # A time far ahead of the clock is no live writer's either (the clock was set back since).
    return abs(time.time() - st.st_mtime) >= stale_after


def _stale(lock: str, stale_after: float) -> os.stat_result | Literal[False] | None:
    """The lock's stat when it is stale, False while it is young, None when it is gone."""
    try:
        st = os.lstat(lock)
    except OSError:
        return None
    return st if _old(st, stale_after) else False


@contextmanager
def _breaking(git_dir: str, gated: bool = True) -> Iterator[Literal["ok", "rewrite", "busy"]]:
    """Yields ok holding the breakers' turn, and the store lock shared (no rewrite can start) unless
    this thread is the rewrite (or not ``gated``: a lock no rewrite takes); rewrite when another
    thread or process is rewriting (or the store's gitmem/ cannot be written); busy when another
    breaker kept its turn for :data:`STALE_REF_LOCK_SECONDS` (a turn lasts microseconds: that
    breaker is stopped, and waiting for it would hang every writer that meets a held lock)."""
    fds: list[int] = []
    try:
        d = os.path.join(git_dir, "gitmem")
        try:
            os.makedirs(d, exist_ok=True)
            if gated and _REWRITING.get(os.path.realpath(git_dir)) != threading.get_ident():
                fds.append(open_lock_fd(os.path.join(d, STORE_LOCK_FILE)))
                try:
                    fcntl.flock(fds[-1], fcntl.LOCK_SH | fcntl.LOCK_NB)
                except BlockingIOError:
                    yield "rewrite"
                    return
            fds.append(open_lock_fd(os.path.join(d, BREAK_LOCK_FILE)))
        except OSError:
            yield "rewrite"  # a store whose gitmem/ cannot be written: it cannot be told apart
            return
        yield "ok" if _take_turn(fds[-1]) else "busy"  # held for a flock, a stat and a rename
    finally:
        for fd in reversed(fds):
            close_lock_fd(fd)


def _take_turn(fd: int) -> bool:
    """The breakers' turn (``fd``: gitmem/ref-break.lock), waited for up to the stale age."""
    import time

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        pass
    deadline = time.monotonic() + STALE_REF_LOCK_SECONDS
    pause = 0.0002
    while time.monotonic() < deadline:
        time.sleep(pause)
        pause = min(pause * 2, 0.01)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            continue
    return False


def locked_file(exc: BaseException, ref: str) -> str | None:
    """The ref whose lock a libgit2 error says is held (``packed-refs`` for its lock), or None."""
    text = str(exc)
    if "lock" not in text.lower():
        return None
    return "packed-refs" if "packed-refs.lock" in text else ref


def delete_ref(repo: pygit2.Repository, name: str) -> None:
    """Delete ref ``name`` (nothing when it is gone), past a stale lock left on it or on
    ``packed-refs`` (libgit2 rewrites packed-refs, under its lock, to delete a packed ref).

    Each attempt through a repository opened for it, never ``repo``: libgit2 drops a packed ref
    from its handle's cached list before it takes packed-refs.lock, and keeps it dropped when the
    lock is held, so that handle no longer lists the ref (a purge walking its refs would miss it)
    and a second deletion through it finds the ref nowhere, reports it deleted and leaves it."""
    from gitmem.errors import ConflictError, GitmemError

    for _attempt in range(3):
        fresh = pygit2.Repository(repo.path)
        try:
            ref = fresh.references.get(name)
            if ref is None:
                return
            try:
                ref.delete()
            except (pygit2.GitError, OSError) as exc:  # libgit2 reports a held lock as an OSError
                held = locked_file(exc, name)
                if held is None:
                    raise
                wait_or_break_ref_lock(repo.path, held)
                if held == "packed-refs":
                    clear_stale_packed_refs(repo.path)
                continue
        finally:
            fresh.free()
        if pygit2.Repository(repo.path).references.get(name) is not None:
            raise GitmemError(f"cannot delete {name} in {repo.path}: it is still there")
        return
    raise ConflictError(
        f"cannot delete {name}: its lock or packed-refs.lock is held (by a running git, or one killed "
        f"less than {STALE_PACKED_REFS_LOCK_SECONDS:.0f} s ago); try again"
    )


def held_locks(git_dir: str | os.PathLike[str], under: str = "refs") -> list[str]:
    """The refs under ``under`` whose ``<ref>.lock`` exists, and ``packed-refs`` when its lock does
    (what :func:`wait_or_break_ref_lock` takes)."""
    git_dir = os.fspath(git_dir)
    found = []
    for dirpath, _dirs, files in os.walk(os.path.join(git_dir, under)):
        for f in files:
            if f.endswith(".lock"):
                found.append(os.path.relpath(os.path.join(dirpath, f[: -len(".lock")]), git_dir))
    if os.path.exists(os.path.join(git_dir, "packed-refs.lock")):
        found.append("packed-refs")
    return sorted(found)


def break_stale_locks(git_dir: str | os.PathLike[str]) -> None:
    """Remove every stale ref lock under ``refs/``, and a stale ``packed-refs.lock`` and
    ``packed-refs.new`` (before a git command that may take any of them: a fetch, ``git gc``)."""
    for name in held_locks(git_dir):
        break_if_stale(git_dir, name)
    clear_stale_packed_refs(git_dir)


def past_stale_locks(git_dir: str | os.PathLike[str], run: Callable[[], T], attempts: int = 3) -> T:
    """``run()`` (a ``git fetch``, libgit2's or git's, which moves refs itself), past the stale
    ref locks a killed process left under ``refs/`` (and a stale ``packed-refs.lock``, which a
    pruning fetch takes): those stale now are removed first; when ``run`` fails while a lock is
    held, each is waited for (or removed once stale) and ``run`` tried again. git names the lock
    only in the middle of its message and libgit2 at its end, so the locks are looked for, not
    parsed from the error."""
    break_stale_locks(git_dir)
    for attempt in range(attempts):
        try:
            return run()
        except Exception:
            held = held_locks(git_dir)
            if not held or attempt == attempts - 1:
                raise
            for name in held:
                wait_or_break_ref_lock(git_dir, name)
    raise AssertionError("not reached")  # pragma: no cover


class _Refs(Protocol):
    """What :func:`set_ref` uses of a repository handle (gitmem.git.repo.Repo, fenced moves)."""

    def ref_target(self, name: str) -> pygit2.Oid | None: ...

    def cas(self, name: str, old: pygit2.Oid | None, new: pygit2.Oid, message: str = "gitmem") -> bool: ...


def set_ref(handle: _Refs, name: str, new: pygit2.Oid, message: str, attempts: int = 8) -> None:
    """Point ``name`` at ``new`` (create it when it is missing) by compare-and-swap through the
    handle (a cluster's fence checked; a held lock waited for, a stale one removed), whatever it
    points at now; ConflictError when it kept moving or stayed locked."""
    from gitmem.errors import ConflictError

    for _attempt in range(attempts):
        current = handle.ref_target(name)
        if current == new or handle.cas(name, current, new, message):
            return
    raise ConflictError(f"{name} kept moving or stayed locked ({attempts} attempts); try again")
