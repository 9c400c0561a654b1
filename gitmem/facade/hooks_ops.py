"""Operations on a store's repository that the faces run beside a ``Store`` handle: the receive
hooks, clones for offline inspection, read replicas, and the copies of a store in a cluster.

Each calls one verb of the layers below (``gitmem.push``, ``gitmem.audit``, ``gitmem.engine``),
imported when it is first called (so that importing :mod:`gitmem.store` stays cheap). Faces import
them from :mod:`gitmem.store`; see docs/architecture.md#python-api.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gitmem.push.clone import CloneResult, FetchResult
    from gitmem.push.hookinstall import InstalledHook


# ------------------------------------------------------------------ the receive hooks (docs/git-servers.md)
def install_hooks(
    store: str | None = None, *, all_stores: bool = False, home: str | os.PathLike[str] | None = None
) -> list[InstalledHook]:
    """Install the pre-receive/post-receive shims and the receive settings into one store (a name,
    id or path) or, with ``all_stores``, into every store of the workspace. Idempotent; a foreign
    hook is kept as ``<name>.legacy`` (the shim runs it too).

    Raises:
        InvalidInputError: neither or both of ``store`` and ``all_stores``.
        ForbiddenError: ``store`` is a clone (hooks guard the store itself).
        ConflictError: a foreign hook is there and its ``.legacy`` name is taken too.
    """
    from gitmem.push import hookinstall

    return hookinstall.install(store, all_stores=all_stores, home=home)


def install_hooks_at(git_dir: Path, *, label: str | None = None) -> list[InstalledHook]:
    """Install the shims and the receive settings into the repository ``git_dir`` itself (a store's
    copy that is not opened as a store, e.g. a cluster replica's); ``label`` names it in the result."""
    from gitmem.push import hookinstall

    return hookinstall.install_hooks(git_dir, label=label)


def render_hook(name: str, python: str) -> str:
    """The text of the hook shim ``name`` (``pre-receive`` or ``post-receive``) with ``python``
    recorded as its interpreter, for a git server that owns the hook directory itself.

    Raises:
        NotFoundError: no such hook.
    """
    from gitmem.push import hookinstall

    return hookinstall.render(name, python)


# ------------------------------------------------------------------ clones and replicas
def clone_store(
    store: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    home: str | os.PathLike[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> CloneResult:
    """Clone a store (a name, id, path, or an ``http(s)://.../git/<store>.git`` URL) to ``dest``
    for offline inspection: a git working copy with the audit ledger and a read-only copy of the
    settings (docs/git-servers.md).

    Raises:
        NotFoundError: no such store.
        InvalidInputError: ``store`` is itself a clone.
        ConflictError: ``dest`` exists and is not an empty directory.
    """
    from gitmem.push import clone

    return clone.clone(store, dest, home=home, progress=progress)


def fetch_clone(clone_path: str | os.PathLike[str], *, purge: bool = False) -> FetchResult:
    """Update a clone made by :func:`clone_store` from its store, naming the scopes whose history
    was rewritten (a redaction); with ``purge``, reset the local branches built on the old history
    and remove its objects from the clone, proved gone.

    Raises:
        InvalidInputError: ``clone_path`` is not a clone of a store.
        ConflictError: ``purge`` while a local branch has commits on the old history, or the work
            tree has uncommitted changes (nothing is purged then).
        IntegrityError: the store's audit ledger was rewritten (never taken; the scopes were
            still fetched).
    """
    from gitmem.push import clone

    return clone.fetch(clone_path, purge=purge)


def init_replica(path: str | os.PathLike[str]) -> Path:
    """Make ``path`` a read replica: a bare repository whose post-receive purges rewritten history
    (sh and git only); returns its path. Name it on the primary with ``Store.add_replica``.
    Idempotent.

    Raises:
        ConflictError: ``path`` is a non-empty directory that is not a bare repository, or its
            ``hooks/post-receive`` is someone else's.
    """
    from gitmem.push import replica

    return replica.init_replica(path)


# ------------------------------------------------------------------ stores by handle, copies in a cluster
def store_id_by_handle(handle: str, home: str | os.PathLike[str]) -> str | None:
    """The id of the workspace's store whose directory is ``<handle>.git`` (an old-layout store's
    directory name), or None: no such store. Never a display name (docs/stores.md)."""
    from gitmem.engine.resolve import by_handle

    ref = by_handle(handle, home)
    return None if ref is None else ref.id


def fence_epoch(git_dir: str | os.PathLike[str], node: str) -> int:
    """The lease epoch at which ``node`` last held the copy at ``git_dir`` as its home, per the copy's
    write fence (docs/cluster.md#the-fence); 0 when it never did (no fence, another node's, a
    replica's, or one that cannot be read)."""
    from gitmem.git.fence import read_fence

    fence = read_fence(git_dir) or {}
    epoch = fence.get("epoch")
    return epoch if fence.get("node") == node and isinstance(epoch, int) and epoch > 0 else 0


def purge_and_prove(git_dir: Path) -> str:
    """Purge the copy of a store at ``git_dir`` of every object its deny-list names and prove them
    gone with the check a clone's purge uses; "" once proved, else the reason it is not
    (docs/cluster.md#redactions-on-replicas)."""
    from gitmem.audit import copy_purge

    return copy_purge.purge_and_prove(git_dir)
