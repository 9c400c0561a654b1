"""What a node killed mid-replication leaves in a store's copy, and how it is cleared
(docs/cluster.md#what-a-killed-node-leaves).

- **Bundle directories**: a replication makes its ``git bundle`` (the home) or writes the one it
  received (the replica) in ``$GIT_DIR/gitmem/tmp/bundle-*``, inside the store (the same
  filesystem, never the system's temporary directory, where a SIGKILLed node's would stay
  forever). The process using one holds an ``flock`` on the directory for as long as it does
  (made under another name, flocked, then renamed: gitmem/git/tmpdirs.py); :func:`sweep_bundles`
  (at node start and at every replication start) removes those whose flock it can take, at any age;
  so does every purge (a leftover bundle can hold a redacted object).
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
import os
from collections.abc import Iterator
from pathlib import Path

BUNDLE_PREFIX = "bundle-"

# git's own lock and temporary files outside refs/ (``<name>.lock``; packed-refs' ``.new`` is
# cleared with its lock). index.lock is a work tree's: a bare copy has none.
TOP_LOCKS = ("HEAD", "config", "shallow")


@contextlib.contextmanager
def bundle_dir(git_dir: Path) -> Iterator[Path]:
    """A new ``gitmem/tmp/bundle-*`` directory of ``git_dir``, flocked while the caller uses it and
    removed after; leftovers of killed nodes are swept first (module docstring)."""
    from gitmem.store import held_tmp_dir

    sweep_bundles(git_dir)
    with held_tmp_dir(git_dir, BUNDLE_PREFIX) as path:
        yield path


def sweep_bundles(git_dir: Path) -> list[str]:
    """Remove the bundle directories no live process holds; their names."""
    from gitmem.store import sweep_tmp_dirs

    return sweep_tmp_dirs(git_dir, BUNDLE_PREFIX)


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
