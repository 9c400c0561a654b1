"""Summaries of a store the console shows: a scope's counters, the sessions that wrote to it, a
memory's head by id, and the dry-run of a redaction (which versions it would replace, which live
memories would block it). All read the derived index, made current first; nothing here writes."""

from __future__ import annotations

from dataclasses import dataclass, field

from gitmem.engine import history
from gitmem.engine.core import StoreCore
from gitmem.errors import InvalidInputError, NotFoundError
from gitmem.ids import is_id
from gitmem.model.versions import Version


def scope_counts(store: StoreCore, scope: str) -> tuple[int, int]:
    """``(memories, bytes)`` at the head of ``scope`` (0, 0 for a scope without versions)."""
    store.index.ensure(scope)
    return store.index.scope_stats(scope)


def memory_head(store: StoreCore, scope: str, memory_id: str) -> Version | None:
    """The version at the head of memory ``memory_id`` in ``scope``; None when it is deleted there
    (or was never in it)."""
    store.index.ensure(scope)
    head = store.index.head_by_memory(scope, memory_id)
    if head is None:
        return None
    (row,) = store.index.version_rows("id=? AND scope=?", (head.version_id, scope), 1)
    return history.to_version(store, row)


@dataclass(frozen=True)
class SessionWrites:
    """What one session wrote in one scope of a store: how many versions, first and last (epoch
    seconds), by which actors."""

    session: str
    scope: str
    versions: int
    first_at: int
    last_at: int
    actors: tuple[str, ...]


def session_writes(store: StoreCore, scopes: list[str]) -> list[SessionWrites]:
    """Every session's writes in ``scopes``, the most recently active first."""
    index = store.index
    for scope in scopes:
        index.ensure(scope)
    if not scopes:
        return []
    marks = ",".join("?" * len(scopes))
    rows = index.db.execute(
        "SELECT session, scope, COUNT(*), MIN(created_at), MAX(created_at), GROUP_CONCAT(DISTINCT actor) "
        f"FROM versions WHERE session IS NOT NULL AND scope IN ({marks}) GROUP BY session, scope "
        "ORDER BY MAX(created_at) DESC",
        tuple(scopes),
    ).fetchall()
    return [
        SessionWrites(r[0], r[1], int(r[2]), int(r[3]), int(r[4]), tuple(sorted(str(r[5]).split(","))))
        for r in rows
    ]


@dataclass(frozen=True)
class RedactionPreview:
    """The dry-run of a redaction in ``scope``: the versions whose content it would replace, and
    why it would be refused (``blocking``, empty when it would not be)."""

    scope: str
    versions: list[Version] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)


def preview_version(store: StoreCore, version_id: str) -> RedactionPreview:
    """The dry-run of redacting version ``version_id`` (in any scope)."""
    if not is_id(version_id, "memver"):
        raise InvalidInputError(f"invalid version id {version_id!r}: expected memver_<ulid>")
    index = store.index
    index.ensure_all()
    found = index.version_rows("id=?", (version_id,), 1)
    if not found:
        raise NotFoundError(f"version {version_id} does not exist in store {store.name!r}")
    row = found[0]
    version = history.to_version(store, row)
    if row.redaction_id is not None:
        return RedactionPreview(row.scope, [version], [f"it was already redacted ({row.redaction_id})"])
    if row.blob is None:
        return RedactionPreview(row.scope, [version], [f"it deleted {row.path}: there is no content"])
    return preview_blobs(store, row.scope, [row.blob])


def unredacted_blobs(store: StoreCore, scope: str) -> list[str]:
    """The distinct blob ids of the versions of ``scope`` that hold content not yet redacted."""
    index = store.index
    index.ensure_all()
    return [
        str(r[0])
        for r in index.db.execute(
            "SELECT DISTINCT blob FROM versions WHERE scope=? AND blob IS NOT NULL AND redaction_id IS NULL",
            (scope,),
        )
    ]


def preview_blobs(store: StoreCore, scope: str, blobs: list[str]) -> RedactionPreview:
    """The dry-run of redacting the contents ``blobs`` (blob ids) in ``scope``."""
    if not blobs:
        return RedactionPreview(scope)
    index = store.index
    index.ensure_all()
    marks = ",".join("?" * len(blobs))
    rows = index.version_rows(f"scope=? AND blob IN ({marks})", (scope, *blobs))
    blocking = [
        f"{h.path} currently holds this content (write a new version or delete it first)"
        for h in index.heads(scope)
        if h.blob in blobs
    ]
    others = index.db.execute(
        f"SELECT DISTINCT scope FROM versions WHERE blob IN ({marks}) AND scope != ?", (*blobs, scope)
    ).fetchall()
    blocking += [f"the same content is also in scope {r[0]!r}: redact it there too" for r in others]
    return RedactionPreview(scope, [history.to_version(store, r) for r in rows], blocking)
