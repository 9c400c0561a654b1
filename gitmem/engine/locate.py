"""Finding a store's repository (by id, handle, name or path; a store or a clone of one) and reading
a blob at a scope's tip, without a store handle: what opening one starts with
(gitmem.engine.opening), and all that ``gitmem read`` needs when opening has nothing else to do
(gitmem.facade.headread). Kept light: no settings parse, no index, no handle.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import pygit2

from gitmem import config
from gitmem.engine.resolve import StoreRef, resolve
from gitmem.errors import ForbiddenError, NotFoundError
from gitmem.git.repo import Repo, lookup, open_repository

GITMEM_DIR = "gitmem"  # $GIT_DIR/gitmem: index, journal, deny-list, secrets (never cloned)


class Located(NamedTuple):
    """A store's open repository, its git directory, and for a clone the URL it was cloned from."""

    repo: pygit2.Repository
    path: Path
    clone_of: str | None


def locate(name_or_path: str | os.PathLike[str], home: str | os.PathLike[str] | None = None) -> Located:
    """The repository of the store (or clone) ``name_or_path`` names: the resolver's precedence
    (gitmem.engine.resolve); ForbiddenError for one this process may not read."""
    try:
        return _locate(name_or_path, home)
    except PermissionError as exc:
        raise ForbiddenError(f"permission denied: {exc.filename or name_or_path}") from None


def _locate(name_or_path: str | os.PathLike[str], home: str | os.PathLike[str] | None) -> Located:
    found = resolve(name_or_path, home, paths=True)  # id > path > name (gitmem.engine.resolve)
    if isinstance(found, StoreRef):
        _check_readable(found.path)
        return Located(open_repository(found.path), found.path, None)
    path = found
    _check_readable(path)
    repo = open_repository(path)
    if repo.is_bare:
        if (path / config.SETTINGS_FILE).exists():
            return Located(repo, path, None)
        if not (path / GITMEM_DIR / config.SETTINGS_FILE).exists():
            raise NotFoundError(
                f"{path} is a git repository but not a gitmem store (no {config.SETTINGS_FILE})"
            )
        return Located(repo, path, origin_url(repo) or str(path))
    gitdir = Path(repo.path).resolve()
    return Located(repo, gitdir, origin_url(repo) or str(path))


def origin_url(repo: pygit2.Repository) -> str | None:
    try:
        return str(repo.remotes["origin"].url)
    except (KeyError, ValueError):
        return None


def _check_readable(path: Path) -> None:
    """Another user's store (or one this process may not read) is "permission denied" (exit 6),
    not "not a git repository"."""
    try:
        for p in (path, path / "objects", path / "refs", path / "HEAD", path / ".git"):
            if p.exists() and not os.access(p, os.R_OK | (os.X_OK if p.is_dir() else 0)):
                raise ForbiddenError(f"permission denied: {p} belongs to another user or is not readable")
    except PermissionError:
        raise ForbiddenError(f"permission denied: {path} belongs to another user") from None


def blob_at(repo: Repo, tip: pygit2.Oid | None, scope: str, path: str) -> pygit2.Blob:
    """The blob of memory ``path`` in commit ``tip``, the head of ``scope`` (None: an empty scope);
    NotFoundError when there is none."""
    if tip is None:
        raise NotFoundError(f"memory {path} does not exist: scope {scope!r} is empty")
    try:
        obj = lookup(repo.commit(tip).tree, path[1:])
    except KeyError:
        obj = None
    if not isinstance(obj, pygit2.Blob):
        raise NotFoundError(f"memory {path} does not exist in scope {scope!r}")
    return obj
