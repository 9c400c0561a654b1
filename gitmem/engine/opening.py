"""Opening a store handle: by id, handle, name or path; a clone of a store; after a reboot, the
intent log's ref moves replayed first. The handle (gitmem.engine.core.StoreCore) gets its derived
index (gitmem.engine.index.Index) here, so the core never imports the index that reads through it.
No journal recovery here (``gitmem.audit.journal.open_recovered`` and ``gitmem.store.open_store`` add it).
Finding the repository is gitmem.engine.locate's.
"""

from __future__ import annotations

import os
from pathlib import Path

import pygit2

from gitmem.engine.core import StoreCore
from gitmem.engine.index import Index
from gitmem.engine.locate import locate


def handle(repo: pygit2.Repository, path: Path, *, clone_of: str | None = None) -> StoreCore:
    """A store handle on an open repository, with its index."""
    return StoreCore(repo, path, clone_of=clone_of, index=Index)


def open_core(name_or_path: str | os.PathLike[str], home: str | os.PathLike[str] | None = None) -> StoreCore:
    """A store handle by name in the workspace, or by path to a bare store or a clone of one.

    After a reboot, ref moves that were flushed but not yet on disk are replayed first (the
    intent log, docs/durability.md); no journal recovery here (``gitmem.store.open_store`` adds it)."""
    found = locate(name_or_path, home)
    core = handle(found.repo, found.path, clone_of=found.clone_of)
    if not core.is_clone:
        core.recover()
        core.drain_pushes()
    return core
