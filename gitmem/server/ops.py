"""The Anthropic API's memory record and path rule, over the library's memory values.

A memory by its ``mem_`` id (look up, update, delete), a listing page as a review token sees it
(its own open proposal on top, docs/review.md) and ``?at=`` (docs/point-in-time.md) are the
library's (``Store.memory_by_id``, ``update_by_id``, ``delete_by_id``, ``list_page``); this module
only translates their :class:`gitmem.store.Memory` values into what the API shows.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from gitmem.errors import InvalidInputError
from gitmem.model.paths import validate_path
from gitmem.model.versions import Version
from gitmem.store import Memory

MARKER_PATH = "/.anthropic-memory-store"  # the SDK sync engine's marker file: never a memory


@dataclass(frozen=True)
class MemoryRecord:
    """A memory as the API shows it (``content`` None: not asked for)."""

    id: str
    path: str
    content: str | None
    content_sha256: str
    size: int
    version_id: str
    created_at: int
    updated_at: int


def check_path(path: object, field: str = "path") -> str:
    if not isinstance(path, str):
        raise InvalidInputError(f"{field}: expected a string")
    try:
        validate_path(path)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{field}: {exc.message}") from None
    # Also as a folder and in any case: the SDK writes its marker file at the root of a local
    # folder, where /.anthropic-memory-store/x (or, on a case-insensitive disk, /.Anthropic-...)
    # would take its place and break every session's download of the store.
    if path.split("/")[1].casefold() == MARKER_PATH[1:]:
        raise InvalidInputError(f"{field}: {MARKER_PATH} is reserved for the SDK's sync marker")
    return path


def record(m: Memory, *, with_content: bool) -> MemoryRecord:
    """The API's record of a memory (its times in whole seconds; 0: not known)."""
    return MemoryRecord(
        m.memory_id,
        m.path,
        m.content if with_content else None,
        m.content_sha256,
        m.size,
        m.version_id,
        int(m.created_at.timestamp()) if m.created_at else 0,
        int(m.updated_at.timestamp()) if m.updated_at else 0,
    )


def created(version: Version, content: str, *, with_content: bool) -> MemoryRecord:
    """The record of the memory ``version`` created with ``content`` (its first version: created
    and updated then), not what a later writer may have put there since."""
    data = content.encode("utf-8")
    at = int(version.created_at.timestamp())
    return MemoryRecord(
        version.memory_id,
        version.path,
        content if with_content else None,
        hashlib.sha256(data).hexdigest(),
        len(data),
        version.id,
        at,
        at,
    )
