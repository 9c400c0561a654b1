"""What the MCP tools return (their output schemas), opaque page cursors, and short argument errors."""

import base64
import binascii
import json
from collections.abc import Sequence
from typing import (
    Any,
    NotRequired,  # pydantic needs these on Python < 3.12
)

from pydantic import ValidationError
from typing_extensions import TypedDict

from gitmem.errors import InvalidInputError
from gitmem.model.versions import Version

RESULT_BUDGET = 16_000  # characters of a tool result's JSON: well inside a model's context


# ---------------------------------------------------------------------- result shapes (output schemas)
class VersionResult(TypedDict):
    """``changed`` false (and nothing else) when the write changed nothing."""

    changed: bool
    version: NotRequired[str]
    memory_id: NotRequired[str]
    operation: NotRequired[str]
    path: NotRequired[str]
    previous_path: NotRequired[str | None]
    content_sha256: NotRequired[str | None]
    size: NotRequired[int | None]
    session: NotRequired[str | None]
    actor: NotRequired[str]
    created_at: NotRequired[str]


class MemoryEntry(TypedDict):
    path: str
    size: int
    description: str | None
    content_sha256: str


class PrefixEntry(TypedDict):
    prefix: str
    memories: int


class MemoryPage(TypedDict):
    store: str
    scope: str
    prefix: str
    total: int
    memories: list[MemoryEntry]
    prefixes: list[PrefixEntry]
    next_cursor: str | None


class MemoryContent(TypedDict):
    path: str
    content: str
    description: str | None
    content_sha256: str
    version: str
    size: int


class History(TypedDict):
    versions: list[VersionResult]


class SearchHitResult(TypedDict):
    path: str
    description: str | None
    score: float
    snippet: str


class SearchResults(TypedDict):
    query: str
    hits: list[SearchHitResult]
    mode: str  # the search mode that answered (docs/search.md)


def _version_dict(v: Version | None) -> VersionResult:
    if v is None:
        return VersionResult(changed=False)
    return VersionResult(
        changed=True,
        version=v.id,
        memory_id=v.memory_id,
        operation=v.operation,
        path=v.path,
        previous_path=v.previous_path,
        content_sha256=v.content_sha256,
        size=v.size,
        session=v.session,
        actor=v.actor,
        created_at=v.created_at.isoformat().replace("+00:00", "Z"),
    )


def encode_cursor(after: str) -> str:
    """An opaque cursor: the last path of the page (pages stay right while others write)."""
    return base64.urlsafe_b64encode(json.dumps({"after": after}).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        after = data["after"]
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise InvalidInputError("invalid cursor: pass next_cursor of the previous page unchanged") from None
    if not isinstance(after, str):
        raise InvalidInputError("invalid cursor: pass next_cursor of the previous page unchanged")
    return after


def _fit(items: Sequence[Any], limit: int, budget: int = RESULT_BUDGET) -> list[Any]:
    """The first ``limit`` items, fewer when their JSON would pass ``budget`` characters (long paths
    and descriptions): a page always fits in a model's context, and holds at least one item."""
    out: list[Any] = []
    used = 200  # the page's own fields
    for item in items[:limit]:
        fields = (item.path, getattr(item, "description", None) or "", getattr(item, "content_sha256", ""))
        used += 110 + sum(len(json.dumps(f, ensure_ascii=False)) for f in fields)
        if out and used > budget:
            break
        out.append(item)
    return out


def _short(exc: ValidationError) -> str:
    """One sentence for a pydantic validation error: which argument, and what it must be."""
    parts = []
    for err in exc.errors()[:3]:
        name = ".".join(str(p) for p in err["loc"]) or "arguments"
        kind = err.get("type", "")
        if kind == "missing":
            parts.append(f"argument {name!r} is required")
        else:
            parts.append(f"argument {name!r}: {str(err.get('msg', 'invalid value')).rstrip('.').lower()}")
    return "invalid_input: " + "; ".join(parts)
