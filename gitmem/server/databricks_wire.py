"""The Databricks entries API's wire format: errors, JSON shapes of stores and entries, field checks."""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from starlette.responses import JSONResponse, Response

from gitmem.config import StoreSettings
from gitmem.errors import (
    AuthenticationError,
    ConflictError,
    ForbiddenError,
    GitmemError,
    InvalidInputError,
    LimitExceededError,
    NotFoundError,
    PathConflictError,
    PreconditionFailedError,
)
from gitmem.model.frontmatter import parse_description
from gitmem.model.paths import validate_path
from gitmem.store import Memory

MARKER_PATH = "/.anthropic-memory-store"  # the SDK sync engine's marker file (as gitmem.server.ops)

log = logging.getLogger("gitmem.server.databricks")
Json = dict[str, Any]
BASE = "/api/2.1/unity-catalog/memory-stores"
MAX_TOP_K = 50
MAX_PAGE = 1000
_PART_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*\Z")
_ONLY_DESCRIPTION = re.compile(r"\A---\r?\n(description[ \t]*:[^\r\n]*)\r?\n---[ \t]*(?:\r?\n|\Z)")
_EDITS = ("str_replace", "insert", "replace_all")


class DatabricksError(GitmemError):
    """An error in Databricks' own words (``error_code`` and status given)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


# Most specific first. 409 ABORTED is what Databricks answers a concurrent write (retryable).
_CODES: tuple[tuple[type[GitmemError], int, str], ...] = (
    (AuthenticationError, 401, "UNAUTHENTICATED"),
    (PathConflictError, 409, "ALREADY_EXISTS"),
    (PreconditionFailedError, 409, "ABORTED"),
    (ConflictError, 409, "ABORTED"),
    (NotFoundError, 404, "NOT_FOUND"),
    (LimitExceededError, 400, "INVALID_PARAMETER_VALUE"),
    (InvalidInputError, 400, "INVALID_PARAMETER_VALUE"),
    (ForbiddenError, 403, "PERMISSION_DENIED"),
)


def error_of(exc: GitmemError) -> tuple[int, str, str]:
    """(status, error_code, message) of a gitmem error: the one mapping of this API."""
    if isinstance(exc, DatabricksError):
        return exc.status, exc.code, exc.message
    for cls, status, code in _CODES:
        if isinstance(exc, cls):
            return status, code, exc.message
    return 500, "INTERNAL_ERROR", f"internal error: {exc.message}"


def error_response(status: int, code: str, message: str) -> Response:
    return JSONResponse({"error_code": code, "message": message}, status_code=status)


# ---------------------------------------------------------------------- names and contents
def full_name(catalog: Any, schema: Any, name: Any) -> str:
    """``catalog.schema.name`` as a gitmem store name (Databricks names are case-insensitive)."""
    parts = []
    for field, value in (("catalog_name", catalog), ("schema_name", schema), ("name", name)):
        if not isinstance(value, str) or not value:
            raise InvalidInputError(f"{field} is required and must be a non-empty string")
        part = value.lower()
        if not _PART_RE.match(part):
            raise InvalidInputError(
                f"{field} {value!r}: use letters, digits, '_' and '-' (starting with a letter or digit)"
            )
        parts.append(part)
    full = ".".join(parts)
    if len(full) > 255:
        raise InvalidInputError(f"full name {full!r} is over 255 characters")
    return full


def split_full_name(text: str) -> tuple[str, str, str]:
    parts = text.lower().split(".")
    if len(parts) != 3 or not all(_PART_RE.match(p) for p in parts):
        raise InvalidInputError(f"full_name {text!r}: expected catalog.schema.name")
    return parts[0], parts[1], parts[2]


def split_contents(text: str) -> tuple[str | None, str]:
    """(description, contents) of a memory's text."""
    description = parse_description(text)
    m = _ONLY_DESCRIPTION.match(text)
    if description is not None and m is not None:
        return description, text[m.end() :]
    return description, text


def _millis(value: str | dt.datetime | None) -> int | None:
    if not value:
        return None
    when = dt.datetime.fromisoformat(value) if isinstance(value, str) else value
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def store_json(s: StoreSettings, full: str) -> Json:
    """A store as Databricks shows it; ``full`` its unique ``catalog.schema.name`` (the free-text
    display name is ``display_name``, a gitmem extension)."""
    catalog, schema, name = full.split(".")
    return {
        "name": name,
        "catalog_name": catalog,
        "schema_name": schema,
        "full_name": full,
        "display_name": s.name,
        "memory_store_id": s.id,
        "description": s.description,
        "comment": s.description,
        "owner": s.metadata.get("owner", ""),
        "created_at": _millis(s.created_at),
        "updated_at": _millis(s.updated_at),
        "archived": s.archived_at is not None,
    }


def entry_json(m: Memory, *, with_contents: bool = True) -> Json:
    description, contents = split_contents(m.content or "")
    out: Json = {
        "path": m.path,
        "scope": m.scope,
        "description": description if with_contents else m.description,
    }
    if with_contents:
        out["contents"] = contents
    out.update(
        {
            "memory_id": m.memory_id,
            "version_id": m.version_id,
            "content_sha256": m.content_sha256,
            "size_bytes": m.size,
            "created_at": _millis(m.created_at),
            "updated_at": _millis(m.updated_at),
        }
    )
    return out


# ---------------------------------------------------------------------- request fields
def json_body(raw: bytes) -> Json:
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InvalidInputError(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInputError("the request body must be a JSON object")
    return data


def text_field(data: Mapping[str, Any], name: str, *, required: bool = False) -> str | None:
    value = data.get(name)
    if value is None:
        if required:
            raise InvalidInputError(f"{name} is required")
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"{name} must be a string")
    return value


def int_field(value: Any, name: str, default: int, lo: int, hi: int) -> int:
    if value is None or value == "":
        return default
    try:
        number = int(value)
        if isinstance(value, bool) or (isinstance(value, float) and value != number):
            raise ValueError
    except (TypeError, ValueError):
        raise InvalidInputError(f"{name} must be an integer") from None
    if not lo <= number <= hi:
        raise InvalidInputError(f"{name} must be between {lo} and {hi}, got {number}")
    return number


def entry_path(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInputError("path is required and must be a string")
    try:
        path = validate_path(value)
    except InvalidInputError as exc:
        raise InvalidInputError(f"path: {exc.message}") from None
    # As the Anthropic API refuses it (gitmem.server.ops.check_path): the SDK's sync marker.
    if path.split("/")[1].casefold() == MARKER_PATH[1:]:
        raise InvalidInputError(f"path: {MARKER_PATH} is reserved for the SDK's sync marker")
    return path
