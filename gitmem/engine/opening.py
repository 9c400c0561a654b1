"""Opening a store handle: by id, handle, name or path; a clone of a store; after a reboot, the
intent log's ref moves replayed first. The handle (gitmem.engine.core.StoreCore) gets its derived
index (gitmem.engine.index.Index) here, so the core never imports the index that reads through it.
No journal recovery here (``gitmem.audit.journal.open_recovered`` and ``gitmem.store.open_store`` add it).
"""

from __future__ import annotations

import os
from pathlib import Path

import pygit2

from gitmem import config
from gitmem.engine.core import GITMEM_DIR, StoreCore
from gitmem.engine.index import Index
from gitmem.engine.resolve import StoreRef, resolve
from gitmem.errors import ForbiddenError, NotFoundError
from gitmem.git.repo import open_repository


def handle(repo: pygit2.Repository, path: Path, *, clone_of: str | None = None) -> StoreCore:
    """A store handle on an open repository, with its index."""
    return StoreCore(repo, path, clone_of=clone_of, index=Index)


def origin_url(repo: pygit2.Repository) -> str | None:
    try:
        return str(repo.remotes["origin"].url)
    except (KeyError, ValueError):
        return None


def open_core(name_or_path: str | os.PathLike[str], home: str | os.PathLike[str] | None = None) -> StoreCore:
    """A store handle by name in the workspace, or by path to a bare store or a clone of one.

    After a reboot, ref moves that were flushed but not yet on disk are replayed first (the
    intent log, docs/durability.md); no journal recovery here (``gitmem.store.open_store`` adds it)."""
    try:
        core = _open_core(name_or_path, home)
    except PermissionError as exc:
        raise ForbiddenError(f"permission denied: {exc.filename or name_or_path}") from None
    if not core.is_clone:
        core.recover()
        core.drain_pushes()
    return core


def _open_core(name_or_path: str | os.PathLike[str], home: str | os.PathLike[str] | None) -> StoreCore:
    found = resolve(name_or_path, home, paths=True)  # id > path > name (gitmem.engine.resolve)
    if isinstance(found, StoreRef):
        _check_readable(found.path)
        return handle(open_repository(found.path), found.path)
    path = found
    _check_readable(path)
    repo = open_repository(path)
    if repo.is_bare:
        if (path / config.SETTINGS_FILE).exists():
            return handle(repo, path)
        if not (path / GITMEM_DIR / config.SETTINGS_FILE).exists():
            raise NotFoundError(
                f"{path} is a git repository but not a gitmem store (no {config.SETTINGS_FILE})"
            )
        return handle(repo, path, clone_of=origin_url(repo) or str(path))
    gitdir = Path(repo.path).resolve()
    return handle(repo, gitdir, clone_of=origin_url(repo) or str(path))


def _check_readable(path: Path) -> None:
    """Another user's store (or one this process may not read) is "permission denied" (exit 6),
    not "not a git repository"."""
    try:
        for p in (path, path / "objects", path / "refs", path / "HEAD", path / ".git"):
            if p.exists() and not os.access(p, os.R_OK | (os.X_OK if p.is_dir() else 0)):
                raise ForbiddenError(f"permission denied: {p} belongs to another user or is not readable")
    except PermissionError:
        raise ForbiddenError(f"permission denied: {path} belongs to another user") from None
