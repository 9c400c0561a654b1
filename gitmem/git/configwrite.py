"""Config writes past a ``config.lock`` left behind by a killed writer (docs/durability.md,
"Stale ref locks").

git and libgit2 rewrite a repository's ``config`` as they move a ref: the new file is written to
``config.lock`` (created with ``O_EXCL``) and renamed over ``config``. A writer killed in between
leaves the lock, and every later config write fails, in every process, for good (git: "could not
lock config file"; libgit2: "failed to lock file '.../config.lock' for writing"). Every config
write of gitmem goes through here: a held lock is waited for, and removed once it is stale by the
rules of ref locks (:mod:`gitmem.git.reflocks`: older than two seconds; never one whose ``flock``
is held)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TypeVar

import pygit2

from gitmem.errors import ConflictError
from gitmem.git.reflocks import STALE_REF_LOCK_SECONDS, break_if_stale, wait_or_break_ref_lock

T = TypeVar("T")
CONFIG = "config"  # the file git locks as config.lock, under the git dir
ATTEMPTS = 3


def set_config(repo: pygit2.Repository, items: Mapping[str, bool | int | str]) -> None:
    """Set each of ``items`` in the repository's own config (libgit2), past a stale ``config.lock``."""
    for key, value in items.items():

        def write(key: str = key, value: bool | int | str = value) -> None:
            repo.config[key] = value

        config_write(repo.path, write)


def config_write(git_dir: str | os.PathLike[str], write: Callable[[], T]) -> T:
    """``write()`` (a libgit2 write of the repository's config: a key, a remote's refspec),
    again after a held ``config.lock`` was waited for or removed once stale. ConflictError when
    it stays held (a live writer's)."""
    for attempt in range(ATTEMPTS):
        try:
            return write()
        except (pygit2.GitError, OSError) as exc:
            if "config.lock" not in str(exc):
                raise
            if attempt == ATTEMPTS - 1:
                raise ConflictError(
                    f"{os.path.join(os.fspath(git_dir), CONFIG)}.lock stays held (a git or libgit2 config "
                    f"write running, or one killed less than {STALE_REF_LOCK_SECONDS:.0f} s ago); try again"
                ) from None
            wait_or_break_ref_lock(git_dir, CONFIG)
    raise AssertionError("not reached")  # pragma: no cover


def before_git_config(git_dir: str | os.PathLike[str]) -> None:
    """Before a ``git config`` or ``git remote`` that writes the config: a stale ``config.lock``
    goes (git fails at once on a held one, naming no lock gitmem could wait for)."""
    break_if_stale(git_dir, CONFIG)
