"""History: version lookup and filtering, reading old versions, diff, restore (docs/architecture.md#versions-and-trailers)."""

from __future__ import annotations

import datetime as dt
import difflib
import re
from collections.abc import Sequence
from typing import Any

import pygit2

from gitmem.engine.core import StoreCore
from gitmem.engine.rows import Memory, VersionRow
from gitmem.engine.writer import sha256_hex, version_from_row
from gitmem.errors import InvalidInputError, NotFoundError
from gitmem.ids import is_id
from gitmem.model.frontmatter import parse_description
from gitmem.model.paths import validate_path, validate_scope
from gitmem.model.versions import OPERATIONS, RedactionInfo, Version, timestamp


def to_version(store: StoreCore, row: VersionRow) -> Version:
    """The public :class:`Version` of an index row (with its redaction, if any)."""
    redaction = None
    if row.redaction_id is not None:
        r = store.index.db.execute(
            "SELECT id, actor, redacted_at, reason FROM redactions WHERE id=?", (row.redaction_id,)
        ).fetchone()
        if r is not None:
            redaction = RedactionInfo(r[0], r[1], timestamp(r[2]), r[3])
    return version_from_row(row, redaction)


def _epoch(value: dt.datetime | None) -> int | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return int(value.timestamp())


def versions(
    store: StoreCore,
    path: str | None = None,
    *,
    memory_id: str | None = None,
    scope: str | None = None,
    session: str | None = None,
    actor: str | None = None,
    operation: str | None = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    limit: int | None = None,
) -> list[Version]:
    """Versions newest first. ``path`` selects one memory's history (across its renames) in
    ``scope`` (default ``main``); without ``scope`` and ``path``, every scope is searched."""
    where: list[str] = []
    params: list[Any] = []
    if path is not None:
        validate_path(path)
        scope = scope or "main"
    if scope is not None:
        validate_scope(scope)
        store.index.ensure(scope)
        where.append("scope=?")
        params.append(scope)
    else:
        store.index.ensure_all()
    if path is not None:
        head = store.index.head(scope or "main", path)
        if head is not None:
            where.append("memory_id=?")
            params.append(head.memory_id)
        else:
            where.append(
                "memory_id IN (SELECT memory_id FROM versions WHERE scope=? AND (path=? OR prev_path=?))"
            )
            params += [scope, path, path]
    if memory_id is not None:
        where.append("memory_id=?")
        params.append(memory_id)
    if session is not None:
        where.append("session=?")
        params.append(session)
    if actor is not None:
        where.append("actor=?")
        params.append(actor)
    if operation is not None:
        if operation not in OPERATIONS:
            raise InvalidInputError(f"invalid operation {operation!r}: use one of {', '.join(OPERATIONS)}")
        where.append("operation=?")
        params.append(operation)
    for op, value in ((">=", _epoch(since)), ("<=", _epoch(until))):
        if value is not None:
            where.append(f"created_at {op} ?")
            params.append(value)
    rows = store.index.version_rows(" AND ".join(where), params, limit)
    return [to_version(store, r) for r in rows]


def _row(store: StoreCore, version_id: str, scope: str | None = None) -> VersionRow:
    """The row of a version. Scopes forked from one another share versions (the same commits): with
    no ``scope`` the row is chosen the same way every time, rebuilt index or not (scope ``main``
    first, then by scope name), and with one, only that scope's row answers."""
    if not is_id(version_id, "memver"):
        raise InvalidInputError(f"invalid version id {version_id!r}: expected memver_<ulid>")
    store.index.ensure_all()
    if scope is None:
        rows = store.index.version_rows("id=?", (version_id,))
        rows.sort(key=lambda r: (r.scope != "main", r.scope))
    else:
        rows = store.index.version_rows("id=? AND scope=?", (version_id, scope), 1)
        if not rows:  # another scope's version answers as an unknown one: no oracle (docs/access.md)
            raise NotFoundError(f"version {version_id} does not exist in store {store.name!r}")
    if not rows:
        raise NotFoundError(f"version {version_id} does not exist in store {store.name!r}")
    return rows[0]


def version(store: StoreCore, version_id: str, scope: str | None = None) -> Version:
    """One version by id (with ``scope``: that scope's row, for a version forked scopes share)."""
    return to_version(store, _row(store, version_id, scope))


def _content(store: StoreCore, row: VersionRow) -> bytes | None:
    if row.redaction_id is not None:
        raise NotFoundError(f"version {row.id} was redacted; its content is gone")
    if row.blob is None:
        return None
    return store.blob_data(pygit2.Oid(hex=row.blob))


def version_content(store: StoreCore, version_id: str) -> bytes | None:
    """The content bytes of a version; None for a deletion. Redacted versions raise."""
    return _content(store, _row(store, version_id))


def read_version(
    store: StoreCore, version_id: str, *, path: str | None = None, scope: str | None = None
) -> Memory:
    """A memory as it was at ``version_id``."""
    row = _row(store, version_id, scope)
    if path is not None and row.path != path:
        raise NotFoundError(f"version {version_id} is a version of {row.path}, not {path}")
    data = _content(store, row)
    if data is None:
        raise NotFoundError(f"version {version_id} deleted {row.path}; it has no content")
    text = data.decode("utf-8", "replace")
    return Memory(
        path=row.path,
        scope=row.scope,
        content=text,
        content_sha256=sha256_hex(data),
        size=len(data),
        description=parse_description(text) if data.startswith(b"---") else None,
        memory_id=row.memory_id,
        version_id=row.id,
        updated_at=timestamp(row.created_at),
    )


def diff(store: StoreCore, old_id: str, new_id: str | None = None) -> str:
    """A unified diff from ``old_id`` to ``new_id`` (default: from the version before ``old_id``)."""
    new_row = _row(store, new_id or old_id)
    if new_id is None:
        earlier = store.index.version_rows(
            "memory_id=? AND scope=? AND (created_at < ? OR (created_at = ? AND seq < "
            "(SELECT seq FROM versions WHERE id=? AND scope=?)))",
            (
                new_row.memory_id,
                new_row.scope,
                new_row.created_at,
                new_row.created_at,
                new_row.id,
                new_row.scope,
            ),
            1,
        )
        old_row = earlier[0] if earlier else None
    else:
        old_row = _row(store, old_id)
    old_text = _text(store, old_row)
    new_text = _text(store, new_row)
    old_name = f"a{old_row.path}" if old_row is not None and old_row.blob is not None else "/dev/null"
    new_name = f"b{new_row.path}" if new_row.blob is not None else "/dev/null"
    lines = difflib.unified_diff(_lines(old_text), _lines(new_text), old_name, new_name)
    return "".join(
        line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines
    )


def _lines(text: str) -> list[str]:
    # Lines end at "\n" only: splitlines() would also break at U+2028, \x0c, \x85...
    return [line for line in re.split(r"(?<=\n)", text) if line]


def _text(store: StoreCore, row: VersionRow | None) -> str:
    if row is None or row.blob is None:
        return ""
    if row.redaction_id is not None:
        return f"[redacted: {row.redaction_id}]\n"
    return store.blob_data(pygit2.Oid(hex=row.blob)).decode("utf-8", "replace")


def version_row(store: StoreCore, version_id: str, scope: str | None = None) -> VersionRow:
    """The index row of ``version_id`` (in ``scope``, else the scope :func:`version` answers for)."""
    return _row(store, version_id, scope)


def row_content(store: StoreCore, row: VersionRow) -> bytes | None:
    """The content of a version's row; None for a deletion. A redacted version raises."""
    return _content(store, row)


def rows_for(store: StoreCore, ids: Sequence[str]) -> list[VersionRow]:
    return [_row(store, i) for i in ids]
