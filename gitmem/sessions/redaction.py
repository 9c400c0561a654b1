"""Which session mounts still hold redacted content (docs/redaction.md#sessions).

A redaction rewrites the store; a mount is a plain directory, so its files keep whatever they were
last synced with. :func:`mounts_holding` names the active mounts of a store with a file whose bytes
are a redacted blob (or match the redacted pattern); their next sync replaces such a file by the
store's version (:mod:`gitmem.sessions.sync`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from gitmem.errors import GitmemError
from gitmem.sessions import state
from gitmem.sessions.mount import MARKER_DIR
from gitmem.store import blob_id


def mounts_holding(
    store_path: str | os.PathLike[str],
    blobs: Iterable[str],
    *,
    pattern: str | None = None,
    home: str | os.PathLike[str] | None = None,
) -> list[str]:
    """``<session>:<mount dir>`` of every active mount of the store at ``store_path`` with a file
    whose content is one of ``blobs`` or matches ``pattern``."""
    wanted = set(blobs)
    regex = re.compile(pattern) if pattern is not None else None
    target = os.path.realpath(store_path)
    if home is None:
        home = Path(target).parent.parent  # <home>/stores/<name>.git
    try:
        sessions = state.all_sessions(home)
    except (OSError, GitmemError):
        return []
    found = set()
    for session in sessions:
        if session.status != "active":
            continue
        for m in session.mounts:
            if os.path.realpath(m.store_path) != target:
                continue
            if _holds(Path(m.path), wanted, regex):
                found.add(f"{session.id}:{m.path}")
    return sorted(found)


def _holds(root: Path, blobs: set[str], regex: re.Pattern[str] | None) -> bool:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != MARKER_DIR]
        for name in filenames:
            path = Path(dirpath) / name
            try:
                if path.is_symlink() or not path.is_file():
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            if blob_id(data) in blobs:
                return True
            if regex is not None and regex.search(data.decode("utf-8", "surrogateescape")):
                return True
    return False
