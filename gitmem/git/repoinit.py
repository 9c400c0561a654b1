"""Making, opening and flushing repositories, and reads without re-hashing: the pieces of
:mod:`gitmem.git.repo` that need no ``Repo`` (importable from there too)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pygit2

from gitmem.errors import NotFoundError

_UNVERIFIED_LOCK = threading.Lock()
_unverified = 0  # walks running with unverified reads (see unverified_reads)


@contextlib.contextmanager
def unverified_reads() -> Iterator[None]:
    """Read objects without libgit2 hashing each one again on the way in (its strict hash
    verification off), as git itself reads them: a long walk (an index catch-up, a rebuild)
    otherwise spends about a third of its CPU re-hashing every tree and blob it reads. The
    option is process-wide, so it is off while any such walk runs and back on after the last.
    Corruption is still caught: pack and loose objects are zlib streams with a checksum, pushed
    packs are hashed by ``index-pack``, and ``gitmem verify`` runs ``git fsck``."""
    global _unverified
    with _UNVERIFIED_LOCK:
        if _unverified == 0:
            pygit2.settings.enable_strict_hash_verification(False)
        _unverified += 1
    try:
        yield
    finally:
        with _UNVERIFIED_LOCK:
            _unverified -= 1
            if _unverified == 0:
                pygit2.settings.enable_strict_hash_verification(True)


def fsync_path(path: str) -> bool:
    """fsync one file or directory; False when it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` (0600), durably: temp file (one per process and thread),
    fsync, rename, fsync the directory. Readers see the old file or the new one, never a part."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_path(str(path.parent))


#: A libgit2 repository, for the type hints of layers that do not import pygit2.
Repository = pygit2.Repository


def init_bare_repository(path: Path) -> pygit2.Repository:
    """A new, empty bare repository at ``path`` whose HEAD names ``main``."""
    return pygit2.init_repository(str(path), bare=True, initial_head="main")


def configure_new_store(repo: pygit2.Repository) -> None:
    """The git config of a new store's repository (hooks set theirs: gitmem.push.hookinstall); frees ``repo``."""
    from gitmem.git.configwrite import set_config

    # gc.auto; gc.autoPackLimit is set with the hooks (gitmem.push.hookinstall)
    set_config(repo, {"gc.auto": 6700, "core.logAllRefUpdates": False})
    repo.free()


def open_repository(path: Path) -> pygit2.Repository:
    try:
        return pygit2.Repository(str(path))
    except pygit2.GitError:
        raise NotFoundError(f"{path} is not a git repository") from None
