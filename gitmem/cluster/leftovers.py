"""What a node killed mid-replication leaves in a store's copy, and how it is cleared
(docs/cluster.md#what-a-killed-node-leaves).

- **Bundle directories**: a replication makes its ``git bundle`` (the home) or writes the one it
  received (the replica) in ``$GIT_DIR/gitmem/tmp/bundle-*``, inside the store (the same
  filesystem, never the system's temporary directory, where a SIGKILLed node's would stay
  forever). The process using one holds an ``flock`` on the directory for as long as it does;
  :func:`sweep_bundles` (at node start and at every replication start) removes only those whose
  flock it can take *and* that are older than :data:`STALE_BUNDLE_SECONDS` (the age covers the
  instant between a directory's creation and its flock).
- **git's lock and temporary files**: ``<ref>.lock`` anywhere under ``refs/`` (those of the refs a
  replication fetches into, ``refs/gitmem-incoming/``, included), ``HEAD.lock``,
  ``packed-refs.lock`` and ``packed-refs.new``, ``config.lock`` and ``shallow.lock``. A git killed
  while holding one makes every later git that needs it fail, for good. :func:`clear_stale_locks`
  removes them with the stale-age rule of ref moves (``gitmem.store.break_stale_lock``: a ref's
  lock, ``HEAD``'s, ``config``'s and ``shallow``'s once 2 s old, ``packed-refs``' and its ``.new``
  once 30 s old; a time far ahead of the clock counts as old), renamed aside and compared first,
  so a lock a live writer made meanwhile is put back.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

TMP_DIR = "gitmem/tmp"
BUNDLE_PREFIX = "bundle-"
#: An unlocked bundle directory older than this is a killed node's. A live one is flocked from the
#: instant after its creation until it is removed, so the age only has to outlast that instant.
STALE_BUNDLE_SECONDS = 60.0

# git's own lock and temporary files outside refs/ (``<name>.lock``; packed-refs' ``.new`` is
# cleared with its lock). index.lock is a work tree's: a bare copy has none.
TOP_LOCKS = ("HEAD", "config", "shallow")

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC


@contextlib.contextmanager
def bundle_dir(git_dir: Path) -> Iterator[Path]:
    """A new ``gitmem/tmp/bundle-*`` directory of ``git_dir``, flocked while the caller uses it and
    removed after; leftovers of killed nodes are swept first (module docstring)."""
    sweep_bundles(git_dir)
    base = git_dir / TMP_DIR
    base.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=BUNDLE_PREFIX, dir=base))
    fd = os.open(path, _DIR_FLAGS)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a sweeper takes no young directory: never waited on
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)


def sweep_bundles(git_dir: Path, older_than: float = STALE_BUNDLE_SECONDS) -> list[str]:
    """Remove the bundle directories no live process holds, older than ``older_than``; their names."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(git_dir / TMP_DIR))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(BUNDLE_PREFIX) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            fd = os.open(entry.path, _DIR_FLAGS)
        except OSError:
            continue  # removed meanwhile (or not a directory any more)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live replication's
            if abs(time.time() - os.fstat(fd).st_mtime) < older_than:
                continue  # just made: its maker takes the flock next
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.name)
        finally:
            os.close(fd)
    return removed


def sweep_store_copies(paths: list[Path]) -> None:
    """At node start: the leftover bundles of every local copy."""
    for path in paths:
        with contextlib.suppress(OSError):
            sweep_bundles(path)


def clear_stale_locks(git_dir: Path) -> list[str]:
    """Remove the stale lock and temporary files git leaves in ``git_dir`` (module docstring); the
    names (relative to ``git_dir``) of those removed."""
    from gitmem.store import break_stale_lock, clear_stale_packed_refs

    names = [*TOP_LOCKS, *_ref_locks(git_dir)]
    removed = [f"{n}.lock" for n in names if break_stale_lock(git_dir, n)]
    leftovers = [f for f in ("packed-refs.lock", "packed-refs.new") if (git_dir / f).exists()]
    clear_stale_packed_refs(git_dir)
    removed += [f for f in leftovers if not (git_dir / f).exists()]
    return removed


def _ref_locks(git_dir: Path) -> list[str]:
    """The refs (``refs/...``) whose ``.lock`` file is there, under ``refs/`` (no symlink followed)."""
    found: list[str] = []
    for top, dirs, files in os.walk(git_dir / "refs"):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
        for name in files:
            if name.endswith(".lock") and ".lock.stale." not in name:
                rel = os.path.relpath(os.path.join(top, name), git_dir)
                found.append(rel[: -len(".lock")])
    return sorted(found)
