"""The Anthropic memory stores wire format: JSON objects out, checked request fields in, cursors.

Objects: ``memory_store``, ``memory``, ``memory_prefix``, ``memory_version`` and the actor union
(``session_actor``, ``api_actor``, ``user_actor``, ``service_account_actor``), with RFC 3339 times.
Every bad field raises InvalidInputError naming it (a 400), never a 422 or a 500.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from gitmem.config import StoreSettings
from gitmem.errors import InvalidInputError
from gitmem.model.versions import Version
from gitmem.server.ops import MemoryRecord
from gitmem.server.tokens import parse_time

Json = dict[str, Any]
VIEWS = ("basic", "full")
MAX_FULL_PAGE = 20
_SURROGATE = re.compile("[\ud800-\udfff]")


# ---------------------------------------------------------------------- times and actors
def rfc3339(value: dt.datetime | int | str | None) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        value = dt.datetime.fromtimestamp(value, dt.UTC)
    return value.astimezone(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def actor_json(actor: str, session: str | None = None) -> Json:
    """The Anthropic actor of a gitmem actor string (``user:alice``, ``api:apikey_...``, ...)."""
    if session is not None:
        return {"type": "session_actor", "session_id": session}
    kind, _, ident = actor.partition(":")
    if kind == "api":
        return {"type": "api_actor", "api_key_id": ident}
    if kind == "service":
        return {"type": "service_account_actor", "service_account_id": ident}
    if kind == "session":
        return {"type": "session_actor", "session_id": ident}
    return {"type": "user_actor", "user_id": ident}


# ---------------------------------------------------------------------- objects
def store_json(s: StoreSettings) -> Json:
    return {
        "id": s.id,
        "type": "memory_store",
        "name": s.name,
        "description": s.description,
        "metadata": dict(s.metadata),
        "created_at": rfc3339(s.created_at),
        "updated_at": rfc3339(s.updated_at or s.created_at),
        "archived_at": rfc3339(s.archived_at),
    }


def memory_json(m: MemoryRecord, store_id: str) -> Json:
    return {
        "id": m.id,
        "type": "memory",
        "memory_store_id": store_id,
        "path": m.path,
        "content": m.content,
        "content_sha256": m.content_sha256,
        "content_size_bytes": m.size,
        "memory_version_id": m.version_id,
        "created_at": rfc3339(m.created_at),
        "updated_at": rfc3339(m.updated_at),
    }


def prefix_json(path: str) -> Json:
    return {"type": "memory_prefix", "path": path}


def version_json(v: Version, store_id: str, content: str | None) -> Json:
    redacted = v.redaction is not None
    gone = redacted or v.operation == "deleted"
    return {
        "id": v.id,
        "type": "memory_version",
        "memory_id": v.memory_id,
        "memory_store_id": store_id,
        "operation": v.operation,
        "path": None if redacted else v.path,
        "content": None if gone else content,
        "content_sha256": None if gone else v.content_sha256,
        "content_size_bytes": None if gone else v.size,
        "created_at": rfc3339(v.created_at),
        "created_by": actor_json(v.actor, v.session),
        "redacted_at": rfc3339(v.redaction.redacted_at) if v.redaction else None,
        "redacted_by": actor_json(v.redaction.actor) if v.redaction else None,
    }


def page(data: list[Json], next_page: str | None) -> Json:
    return {"data": data, "next_page": next_page}


# ---------------------------------------------------------------------- request bodies
def body(raw: bytes, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> Json:
    """A JSON object body with only ``allowed`` fields (an empty body is ``{}``)."""
    if not raw.strip():
        data: Any = {}
    else:
        try:
            data = json.loads(raw)  # bytes: UTF-8 is checked here, invalid sequences are errors
        except (ValueError, RecursionError) as exc:
            raise InvalidInputError(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidInputError("the request body must be a JSON object")
    bad = _surrogate_field(data)
    if bad is not None:
        raise InvalidInputError(f"{bad}: not valid UTF-8 text (it contains a lone surrogate)")
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise InvalidInputError(f"{unknown[0]}: unknown field (allowed: {', '.join(allowed)})")
    for name in required:
        if name not in data:
            raise InvalidInputError(f"{name}: this field is required")
    return data


def _surrogate_field(data: Json) -> str | None:
    """The field (``metadata.k``) holding a lone surrogate: JSON can say ``"\\ud800"``, UTF-8 cannot,
    so such text could be neither stored nor ever rendered again. Iterative: bodies nest deeply."""
    todo: list[tuple[str, Any]] = [("", data)]
    while todo:
        name, value = todo.pop()
        if isinstance(value, str):
            if _SURROGATE.search(value):
                return name or "body"
        elif isinstance(value, dict):
            for key, item in value.items():
                field = f"{name}.{ascii(key)[1:-1]}" if name else ascii(key)[1:-1]
                if _SURROGATE.search(key):
                    return field
                todo.append((field, item))
        elif isinstance(value, list):
            todo.extend((f"{name}[{i}]", item) for i, item in enumerate(value))
    return None


def string(data: Mapping[str, Any], name: str, *, nullable: bool = False) -> str | None:
    value = data.get(name)
    if value is None and (nullable or name not in data):
        return None
    if not isinstance(value, str):
        raise InvalidInputError(f"{name}: expected a string")
    return value


def metadata_patch(value: Any, *, patch: bool) -> dict[str, str | None]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInputError("metadata: expected an object of string values")
    for key, v in value.items():
        if not (isinstance(v, str) or (patch and v is None)):
            raise InvalidInputError(f"metadata.{key}: expected a string{' or null' if patch else ''}")
    return dict(value)


def precondition(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") != "content_sha256":
        raise InvalidInputError('precondition: expected {"type": "content_sha256", "content_sha256": ...}')
    unknown = sorted(set(value) - {"type", "content_sha256"})
    if unknown:
        raise InvalidInputError(f"precondition.{unknown[0]}: unknown field")
    return sha256_field(value.get("content_sha256"), "precondition.content_sha256")


def sha256_field(value: Any, name: str) -> str:
    if not isinstance(value, str) or len(value) != 64 or any(c not in "0123456789abcdef" for c in value):
        raise InvalidInputError(f"{name}: expected 64 lowercase hex characters")
    return value


# ---------------------------------------------------------------------- query parameters
def view(query: Mapping[str, str], default: str) -> str:
    value = query.get("view", default)
    if value not in VIEWS:
        raise InvalidInputError(f"view: expected basic or full, got {value!r}")
    return value


def integer(query: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    text = query.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise InvalidInputError(f"{name}: expected an integer, got {text!r}") from None
    if not lo <= value <= hi:
        raise InvalidInputError(f"{name}: must be between {lo} and {hi}, got {value}")
    return value


def limit(query: Mapping[str, str], chosen_view: str = "basic") -> int:
    value = integer(query, "limit", 20, 1, 100)
    return min(value, MAX_FULL_PAGE) if chosen_view == "full" else value


def boolean(query: Mapping[str, str], name: str) -> bool:
    text = query.get(name, "false").lower()
    if text not in ("true", "false", "1", "0"):
        raise InvalidInputError(f"{name}: expected true or false, got {text!r}")
    return text in ("true", "1")


def time_param(query: Mapping[str, str], name: str) -> dt.datetime | None:
    text = query.get(name)
    if text is None:
        return None
    try:
        return parse_time(text)
    except InvalidInputError:
        raise InvalidInputError(f"{name}: expected an RFC 3339 time, got {text!r}") from None


def id_param(value: str | None, prefix: str, name: str) -> str | None:
    from gitmem.ids import is_id

    if value is None:
        return None
    if not is_id(value, prefix):
        raise InvalidInputError(f"{name}: expected a {prefix}_ id, got {value!r}")
    return value


# ---------------------------------------------------------------------- cursors
def _fingerprint(what: tuple[Any, ...]) -> str:
    return hashlib.sha256(json.dumps(what).encode("utf-8")).hexdigest()[:16]


def encode_cursor(key: Any, what: tuple[Any, ...]) -> str:
    """An opaque cursor: the last key served, bound to the listing's filters."""
    raw = json.dumps({"k": key, "q": _fingerprint(what)}, separators=(",", ":")).encode("utf-8")
    return "page_" + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(text: str | None, what: tuple[Any, ...]) -> Any:
    if text is None or text == "":
        return None
    try:
        if not text.startswith("page_"):
            raise ValueError
        raw = text[5:]
        data = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        if not isinstance(data, dict) or data.get("q") != _fingerprint(what) or "k" not in data:
            raise ValueError
    except (ValueError, UnicodeDecodeError):
        raise InvalidInputError(
            "page: not a cursor of this listing (pass next_page from the previous page, with the same filters)"
        ) from None
    return data["k"]


def versions_after(found: list[Version], cursor: Any) -> list[Version]:
    """The versions of ``found`` after a versions cursor (``[last id, its created_at]``)."""
    if not (
        isinstance(cursor, list)
        and len(cursor) == 2
        and isinstance(cursor[0], str)
        and isinstance(cursor[1], int)
    ):
        raise InvalidInputError("page: not a cursor of this listing")
    for i, v in enumerate(found):
        if v.id == cursor[0]:
            return found[i + 1 :]
    return [v for v in found if int(v.created_at.timestamp()) < cursor[1]]
