"""Row types of the derived index: one ``VersionRow`` per version, one ``HeadRow`` per live memory."""

from __future__ import annotations

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
