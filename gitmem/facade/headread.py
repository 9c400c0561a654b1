"""A memory's bytes at a scope's head, read without opening the store in full: ``gitmem read``'s
common path (docs/performance.md).

:func:`gitmem.store.open_store` builds the ``Store`` facade and does what an open does: the intent
log replayed after a reboot, spooled pushes recorded, a history rewrite killed half-way finished,
a hand edit of ``gitmem.yaml`` recorded in the ledger. Each is found due here by a small read (the
intent log's first line, one directory listing, one file's existence, the settings file against
its record); the replay, the one a handle-less reader (the receive hook) does too, runs here as it
would on open. When anything else is due, or the store is a clone, :func:`read_head` returns None and
the caller opens the store in full. This module imports none of the facade, the index, the
ledger or the settings parser: ``gitmem read`` starts about as fast as ``import pygit2``.
"""

from __future__ import annotations

import os
from pathlib import Path

from gitmem import config
from gitmem.engine.locate import GITMEM_DIR, blob_at, locate
from gitmem.engine.settings_seen import read_seen, recorded
from gitmem.git.repo import Repo, recover_intent_log
from gitmem.model.paths import validate_path, validate_scope
from gitmem.push.spool import REDACTION_JOURNAL, spooled


def read_head(
    name_or_path: str | os.PathLike[str],
    path: str,
    *,
    scope: str = "main",
    home: str | os.PathLike[str] | None = None,
) -> bytes | None:
    """The exact bytes of memory ``path`` at the head of ``scope``, as
    ``open_store(name_or_path, home).head_bytes(path, scope=scope)`` gives them; None when opening
    the store has work to do first (or it is a clone): then call that instead. The same errors as
    that call for a store that cannot be found or read, or a memory that does not exist."""
    found = locate(name_or_path, home)
    if found.clone_of is not None or not _nothing_due(found.path):
        return None
    validate_path(path)
    validate_scope(scope)
    repo = Repo(found.repo, found.path)
    return blob_at(repo, repo.ref_target(f"refs/heads/{scope}"), scope, path).data


def _nothing_due(git_dir: Path) -> bool:
    """Whether an open of the store at ``git_dir`` would do nothing but open it."""
    try:
        recover_intent_log(git_dir)  # after a reboot only; else one read of the log's first line
        gitmem_dir = git_dir / GITMEM_DIR
        return (
            not spooled(gitmem_dir)
            and not (gitmem_dir / REDACTION_JOURNAL).exists()
            and recorded(read_seen(gitmem_dir), git_dir / config.SETTINGS_FILE)
        )
    except OSError:  # let the full open meet it, and report it as it does
        return False
