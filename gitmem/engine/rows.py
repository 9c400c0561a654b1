"""Row types of the derived index: one ``VersionRow`` per version, one ``HeadRow`` per live memory;
and the public record of a memory (``Memory``, ``Prefix``), which reads, history and proposals return."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

VERSION_COLUMNS = (
    "id, memory_id, scope, path, prev_path, operation, actor, session, created_at, sha256, size, "
    "blob, commit_id, redaction_id"
)


@dataclass(frozen=True)
class VersionRow:
    """A version as the index stores it (see gitmem.model.versions.Version for the public type)."""

    id: str
    memory_id: str
    scope: str
    path: str
    prev_path: str | None
    operation: str
    actor: str
    session: str | None
    created_at: int
    sha256: str | None
    size: int | None
    blob: str | None
    commit_id: str
    redaction_id: str | None = None
    description: str | None = None  # for heads only; not stored in versions


@dataclass(frozen=True)
class HeadRow:
    scope: str
    path: str
    memory_id: str
    version_id: str
    sha256: str
    size: int
    blob: str
    description: str | None
    created_at: int
    updated_at: int


@dataclass(frozen=True)
class Memory:
    """A memory: the file is the memory (``content`` is its bytes decoded as UTF-8).

    ``content`` is None in listings made without ``with_content``.
    """

    path: str
    scope: str
    content: str | None
    content_sha256: str
    size: int
    description: str | None
    memory_id: str
    version_id: str
    created_at: dt.datetime | None = None  # time of the memory's first version
    updated_at: dt.datetime | None = None  # time of its current version


@dataclass(frozen=True)
class Prefix:
    """A directory roll-up in a ``depth=1`` listing; ``path`` ends with ``/``."""

    path: str
    memories: int
