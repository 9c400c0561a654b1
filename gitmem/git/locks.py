"""Advisory file locks (fcntl) for the few things git's ref locks do not cover."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOGGER = "gitmem.lock"  # logging is imported only when a lock is contended (the hook never pays for it)


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created 0600) for the ``with`` block."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except FileNotFoundError:  # the first lock of its directory
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            import logging

            log = logging.getLogger(LOGGER)
            log.info("waiting for lock %s", path)
            fcntl.flock(fd, fcntl.LOCK_EX)
            log.info("got lock %s", path)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextmanager
def lock_file(path: Path) -> Iterator[int]:
    """The open lock file ``path`` (created 0600), unlocked (closed) after the ``with`` block; take
    it with :func:`try_lock` or :func:`lock`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        yield fd
    finally:
        os.close(fd)


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
