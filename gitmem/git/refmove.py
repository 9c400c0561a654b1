"""A loose ref's compare-and-swap with git's own lock protocol, without libgit2 (docs/durability.md,
"The ref move").

git (``refs/files-backend.c``) and libgit2 move a loose ref the same way: create ``<ref>.lock``
with ``O_CREAT | O_EXCL`` (whoever creates it holds the ref), read the ref's value under it and
compare it with the expected old one, write the new value and a newline into the lock, rename the
lock over the ref. :func:`move` does exactly that, so a concurrent ``git push``, ``git update-ref``
or libgit2 writer (another gitmem process) and this one exclude each other through the one lock
file, across processes, as two gits do. What libgit2 adds on its way (a look at the config files,
reading the ref two more times, reading the new target's object to check it exists, which the
caller has just written and flushed) costs the write path more than the lock protocol itself.

Only the plain case is handled here: a loose ref file holding an object id, no reflog
(``core.logAllRefUpdates`` off or unset in a bare repository, as a store is made: libgit2 then
writes none either, even to an existing ``logs/<ref>``), no shared-repository permissions. Anything else (a packed ref, a symbolic one, a reflog) answers :data:`UNHANDLED` and
the caller moves the ref through libgit2.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Protocol

import pygit2

from gitmem.errors import GitmemError
from gitmem.git import refgen
from gitmem.git.locks import close_lock_fd, open_lock_fd
from gitmem.git.reflocks import hold, wait_or_break_ref_lock

#: :func:`move` could not take this case (see the module docstring): move the ref through libgit2.
UNHANDLED = None

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


class Handle(Protocol):
    """What a ref move uses of a repository handle (gitmem.git.repo.Repo)."""

    path: Path

    @property
    def git_dir(self) -> str: ...

    @property
    def repo(self) -> pygit2.Repository: ...

    def reopen_thread_repository(self) -> None: ...


def cas(handle: Handle, name: str, old: pygit2.Oid | None, new: pygit2.Oid, message: str) -> bool:
    """Move ref ``name`` from ``old`` (None: create it) to ``new`` if it still points at ``old``;
    False on a lost race (the ref moved, or another writer holds its lock: waited for, or broken
    when stale). A plain loose ref moves by :func:`move`; any other case, and a target this
    thread's object database does not find, through libgit2 (which checks the target, looking
    again when a pack swap hid it, and fails naming the ref when it is missing). Every move bumps
    the store's ref generation (gitmem.git.refgen, docs/cluster.md)."""
    git_dir, repo = handle.git_dir, handle.repo
    if old is not None and repo.odb.exists(new) and plain_config(git_dir, repo):
        try:
            moved = move(git_dir, name, str(old), str(new))
        except LockHeld:  # held by a writer, or left behind by one that was killed
            wait_or_break_ref_lock(git_dir, name)
            return False
        except OSError as exc:
            raise GitmemError(f"cannot update {name} in {handle.path}: {exc}") from None
        if moved is not UNHANDLED:
            return refgen.moved(handle.path, moved)
    return _libgit2_cas(handle, name, old, new, message)


def _libgit2_cas(handle: Handle, name: str, old: pygit2.Oid | None, new: pygit2.Oid, message: str) -> bool:
    try:
        if old is None:
            return seen_target(handle, new, lambda repo: bool(repo.references.create(name, new, force=False)))

        def swap(repo: pygit2.Repository) -> bool:
            ref = repo.references.get(name)
            if ref is None or ref.target != old:
                return False
            # libgit2 compares the ref against the value it was loaded with under the ref
            # lock, so this is a compare-and-swap even across processes.
            ref.set_target(new, message)
            return True

        return seen_target(handle, new, swap)
    except pygit2.AlreadyExistsError:
        return False
    except (pygit2.GitError, OSError) as exc:
        # "old reference value does not match" (moved) or "failed to lock file" (a writer
        # holds the ref lock; libgit2 reports it as an OS error): lost races, retried by the caller.
        text = str(exc).lower()
        if "lock" in text:  # held by a writer, or left behind by one that was killed
            wait_or_break_ref_lock(handle.git_dir, name)
            return False
        if "does not match" in text or "exists" in text:
            return False
        raise GitmemError(f"cannot update {name} in {handle.path}: {exc}") from None


def seen_target(handle: Handle, new: pygit2.Oid, move_ref: Callable[[pygit2.Repository], bool]) -> bool:
    """``move_ref(repo)``, again if libgit2 did not find ``new``: it checks that a ref's target
    exists, and a repack or merge swapping packs in another process can hide the (written,
    flushed) object from this thread's object database: from one look at the pack directory
    (listed while the packs were swapped), or for good (a pack whose index it loaded was
    deleted before it opened the pack, and is found first again and again). The first retry
    looks once more; later ones reopen this thread's repository, whose fresh object database
    lists the packs as they are now. Retries back off (1, 2, 4 ... ms, 255 ms in all)."""
    for attempt in range(MISSING_TARGET_RETRIES + 1):
        try:
            return refgen.moved(handle.path, move_ref(handle.repo))  # counted: docs/cluster.md
        except pygit2.GitError as exc:
            if "doesn't exist" not in str(exc) or attempt == MISSING_TARGET_RETRIES:
                raise
        time.sleep(0.001 * (1 << attempt))
        if attempt == 0:
            handle.repo.odb.exists(new)  # a miss makes libgit2 list the pack directory again
        else:
            handle.reopen_thread_repository()
    return False  # not reached: the last attempt returns or raises


MISSING_TARGET_RETRIES = 8  # looks again for a new target a pack swap hid


class LockHeld(Exception):
    """``<ref>.lock`` exists: another writer holds the ref (or was killed holding it)."""


def move(git_dir: str, name: str, old: str, new: str) -> bool | None:
    """Move the loose ref ``name`` of the repository at ``git_dir`` from ``old`` to ``new`` (hex
    ids) if it still points at ``old``: True moved, False it points elsewhere, None
    (:data:`UNHANDLED`) when the ref is not a plain loose one here. Raises :class:`LockHeld`
    when the lock file exists (the caller waits for it or breaks a stale one). The lock is
    ``flock``-ed from its creation until it is renamed or removed (:func:`gitmem.git.reflocks.hold`):
    however long this writer stalls, no breaker takes it as a killed writer's."""
    path = os.path.join(git_dir, name)
    lock = path + ".lock"
    try:
        fd = open_lock_fd(lock, _FLAGS, 0o666)
    except FileExistsError:
        raise LockHeld(lock) from None
    except OSError:  # no such directory (a ref not created yet), permissions: libgit2 says why
        return UNHANDLED
    renamed = False
    try:
        mine = os.fstat(fd)
        if not hold(fd):  # flocked while held: no breaker takes it from a stalled (live) writer
            _unlink_if_mine(lock, mine)  # a breaker is looking at it this instant: give it up
            raise LockHeld(lock)
    except BaseException:
        close_lock_fd(fd)
        raise
    try:
        os.write(fd, f"{new}\n".encode("ascii"))
        current = _loose_value(path)
        if current is None or current != old:
            _unlink_if_mine(lock, mine)
            return UNHANDLED if current is None else False
        if not _is_mine(lock, mine):
            # Our lock was taken for a dead writer's (gitmem.git.reflocks: we stalled past the
            # stale age) and the file there now is another writer's: a lost race, touch nothing.
            return False
        os.rename(lock, path)
        renamed = True
        return True
    except BaseException:
        if not renamed:
            with suppress(OSError):
                _unlink_if_mine(lock, mine)
        raise
    finally:
        close_lock_fd(fd)  # the flock goes with it, after the rename


def _is_mine(lock: str, mine: os.stat_result) -> bool:
    """Whether the file at ``lock`` is the one this writer created (same device and inode)."""
    try:
        there = os.lstat(lock)
    except OSError:
        return False
    return (there.st_dev, there.st_ino) == (mine.st_dev, mine.st_ino)


def _unlink_if_mine(lock: str, mine: os.stat_result) -> None:
    if _is_mine(lock, mine):
        with suppress(FileNotFoundError):
            os.unlink(lock)


def _loose_value(path: str) -> str | None:
    """The object id the loose ref file at ``path`` holds; None when it is missing (the ref may be
    packed), symbolic, a symlink or not a ref file (libgit2 decides those)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError:
        return None
    try:
        raw = os.read(fd, 128)
    except OSError:
        return None
    finally:
        os.close(fd)
    value = raw.rstrip(b"\n").decode("ascii", "replace")
    if len(value) not in (40, 64) or value.strip("0123456789abcdef"):
        return None
    return value


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_PLAIN: dict[str, tuple[int, bool]] = {}  # git_dir -> (config's mtime, refs move plainly)
_PLAIN_LOCK = threading.Lock()


def plain_config(git_dir: str, repo: pygit2.Repository) -> bool:
    """Whether the repository's config lets :func:`move` write its refs as git would: no reflog
    for every ref (``core.logAllRefUpdates`` off or unset, as in a bare store), no
    ``core.sharedRepository`` permissions, the files ref backend. Read again when the repository's
    config file changes (one stat a move)."""
    try:
        key = os.stat(os.path.join(git_dir, "config")).st_mtime_ns
    except OSError:
        key = -1
    seen = _PLAIN.get(git_dir)
    if seen is not None and seen[0] == key:
        return seen[1]
    cfg = repo.config
    plain = (
        _off(cfg, "core.logAllRefUpdates", repo.is_bare)
        and _off(cfg, "core.sharedRepository", True, ("umask",))
        and _get(cfg, "extensions.refStorage") in (None, "files")
    )
    with _PLAIN_LOCK:
        _PLAIN[git_dir] = (key, plain)
    return plain


def _get(cfg: pygit2.Config, name: str) -> str | None:
    try:
        value = cfg[name]
    except (KeyError, pygit2.GitError, ValueError):
        return None
    return str(value).strip().lower()


def _off(cfg: pygit2.Config, name: str, unset_off: bool, also: tuple[str, ...] = ()) -> bool:
    value = _get(cfg, name)
    if value is None:
        return unset_off
    return value in ("false", "no", "off", "0", "") or value in also
