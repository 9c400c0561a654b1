"""Temporary directories a process makes inside a store (``$GIT_DIR/gitmem/tmp/<prefix>*``, the
store's own filesystem), and the sweep of those a killed process left.

A directory is made under a name the sweep never takes (``new-<prefix>*``), flocked, and only then
renamed to its ``<prefix>*`` name: every ``<prefix>*`` directory is either held (its maker is alive)
or a leftover, at any age. :func:`sweep` removes the unheld ones (and ``new-`` ones, empty, of a
maker killed in that instant, once old); a purge sweeps at any age, since a leftover bundle can hold
a retired object (gitmem/git/purge.py)."""

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
NEW = "new-"
#: An unheld ``new-`` directory older than this is a killed maker's (it is held the instant after).
STALE_NEW_SECONDS = 60.0

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC


@contextlib.contextmanager
def held_dir(git_dir: Path, prefix: str) -> Iterator[Path]:
    """A new ``gitmem/tmp/<prefix>*`` directory of ``git_dir``, flocked while the caller uses it and
    removed after."""
    base = git_dir / TMP_DIR
    base.mkdir(parents=True, exist_ok=True)
    made = Path(tempfile.mkdtemp(prefix=NEW + prefix, dir=base))
    fd = os.open(made, _DIR_FLAGS)
    path = base / made.name[len(NEW) :]
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # no sweep takes a new- directory this young: never waited on
        os.rename(made, path)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        shutil.rmtree(made, ignore_errors=True)
        os.close(fd)


def sweep(git_dir: Path, prefix: str) -> list[str]:
    """Remove the ``<prefix>*`` directories no live process holds (any age) and the unheld
    ``new-<prefix>*`` ones older than :data:`STALE_NEW_SECONDS`; the names removed."""
    removed: list[str] = []
    try:
        entries = list(os.scandir(git_dir / TMP_DIR))
    except OSError:
        return removed
    for entry in entries:
        fresh = entry.name.startswith(NEW + prefix)
        if not (fresh or entry.name.startswith(prefix)) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            fd = os.open(entry.path, _DIR_FLAGS)
        except OSError:
            continue  # removed meanwhile (or not a directory any more)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live process's
            if fresh and abs(time.time() - os.fstat(fd).st_mtime) < STALE_NEW_SECONDS:
                continue  # just made: its maker takes the flock next
            shutil.rmtree(entry.path, ignore_errors=True)
            removed.append(entry.name)
        finally:
            os.close(fd)
    return removed
