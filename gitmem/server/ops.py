"""The memory operations of the Anthropic API that the public ``Store`` methods do not offer as such:
look up, update and delete a memory by its ``mem_`` id, and update content and path in one version.

These are the only places the server uses library internals (the index's heads, the writer's
``mutate`` loop); each plan resolves the memory id against the very tip it commits on, so a
concurrent rename or delete is never overwritten, and a precondition is never checked against a
stale state.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pygit2

from gitmem.engine.group import mutate
from gitmem.engine.memories import refuse_conflict
from gitmem.engine.rows import HeadRow
from gitmem.engine.writer import Change, ScopeState, decode_content, encode_content, sha256_hex
from gitmem.errors import InvalidInputError, NotFoundError, PreconditionFailedError
from gitmem.git.blobs import StoredBlob
from gitmem.model.caller import Caller
from gitmem.model.paths import validate_path
from gitmem.model.versions import Version
from gitmem.store import Store

MARKER_PATH = "/.anthropic-memory-store"  # the SDK sync engine's marker file: never a memory
_STALE_RETRIES = 50


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


class _Stale(Exception):
    """The index is ahead of the tip this plan runs on: plan again on the newer tip."""


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


def head(store: Store, scope: str, memory_id: str) -> HeadRow | None:
    store.core.index.ensure(scope)
    return store.core.index.head_by_memory(scope, memory_id)


def record(store: Store, row: HeadRow, *, with_content: bool) -> MemoryRecord:
    content = decode_content(store.core.blob_data(pygit2.Oid(hex=row.blob))) if with_content else None
    return MemoryRecord(
        row.memory_id, row.path, content, row.sha256, row.size, row.version_id, row.created_at, row.updated_at
    )


def get(store: Store, scope: str, memory_id: str, *, with_content: bool) -> MemoryRecord:
    row = head(store, scope, memory_id)
    if row is None:
        raise NotFoundError(f"memory {memory_id} does not exist in scope {scope!r}")
    return record(store, row, with_content=with_content)


def written(store: Store, scope: str, version: Version, data: bytes, *, with_content: bool) -> MemoryRecord:
    """The record of what ``version`` wrote (not what a later writer may have put there since)."""
    row = head(store, scope, version.memory_id)
    created = row.created_at if row is not None else int(version.created_at.timestamp())
    return MemoryRecord(
        version.memory_id,
        version.path,
        decode_content(data) if with_content else None,
        sha256_hex(data),
        len(data),
        version.id,
        created,
        int(version.created_at.timestamp()),
    )


def _resolve(state: ScopeState, memory_id: str) -> tuple[HeadRow, StoredBlob]:
    state.has_live_memory(memory_id)  # brings the index up to this state's tip
    if getattr(state, "proposal", None) is not None:
        return _resolve_proposed(state, memory_id)
    row = state.store.index.head_by_memory(state.scope, memory_id)
    if row is None:
        raise NotFoundError(f"memory {memory_id} does not exist in scope {state.scope!r}")
    blob = state.blob(row.path)
    # planned content of an earlier write in this group (no stored blob yet): the row is the tip's,
    # so its sha256 would check a precondition against stale content; resolved again on the new tip
    if not isinstance(blob, StoredBlob) or str(blob.id) != row.blob:
        raise _Stale
    return row, blob


def _resolve_proposed(state: ScopeState, memory_id: str) -> tuple[HeadRow, StoredBlob]:
    """The memory as a review token's write sees it (docs/review.md): where its open proposal put
    it (created, changed or renamed there), else the scope's, unless the proposal removed it."""
    from gitmem.engine import proposals

    p = state.proposal  # type: ignore[attr-defined]
    ids: dict[str, str | None] = state.ids  # type: ignore[attr-defined]
    row = state.store.index.head_by_memory(state.scope, memory_id)
    path = next((q for q, m in ids.items() if m == memory_id and state.blob(q) is not None), None)
    if path is None and row is not None and row.path not in ids:
        path = row.path  # a memory the proposal did not touch
    blob = state.blob(path) if path is not None else None
    if path is None or blob is None:
        raise NotFoundError(f"memory {memory_id} does not exist in scope {state.scope!r}")
    mine = [v for v in proposals.versions(state.store, p.id) if v.memory_id == memory_id]
    first = row.created_at if row is not None else int(mine[0].created_at.timestamp()) if mine else 0
    return (
        HeadRow(
            state.scope,
            path,
            memory_id,
            mine[-1].id if mine else row.version_id if row is not None else "",
            sha256_hex(blob.data),
            len(blob.data),
            str(getattr(blob, "id", "")),  # a blob a batch has only planned has no id yet
            None,
            first,
            int(mine[-1].created_at.timestamp()) if mine else row.updated_at if row is not None else first,
        ),
        blob,
    )


def _mutate(
    store: Store,
    scope: str,
    plan: Callable[[ScopeState], Change | None],
    actor: str,
    session: str | None,
    erasing: bool = False,
    caller: Caller | None = None,
) -> Version | None:
    for _attempt in range(_STALE_RETRIES):
        try:
            return mutate(
                store.core, scope, plan, actor=actor, session=session, erasing=erasing, caller=caller
            )
        except _Stale:
            time.sleep(0.001)
    raise NotFoundError("the memory kept changing while it was looked up; try again")


def update(
    store: Store,
    scope: str,
    memory_id: str,
    *,
    content: str | None,
    path: str | None,
    if_sha256: str | None,
    actor: str,
    session: str | None,
    with_content: bool,
    caller: Caller | None = None,
) -> MemoryRecord:
    """Change a memory's content and/or path as one version.

    A failed precondition is a 409 unless the memory already is exactly what was asked (then the
    current memory, and no version). Nothing to change: the current memory, no version.
    """
    data = encode_content(content) if content is not None else None
    result: list[tuple[HeadRow, bytes]] = []

    def plan(state: ScopeState) -> Change | None:
        row, blob = _resolve(state, memory_id)
        new_path = path if path is not None else row.path
        new_data = data if data is not None else blob.data
        result[:] = [(row, new_data)]
        unchanged = new_path == row.path and new_data == blob.data
        if if_sha256 is not None and row.sha256 != if_sha256:
            if unchanged:
                return None
            raise PreconditionFailedError(
                f"memory {memory_id} changed: its content_sha256 is {row.sha256}, not {if_sha256}"
            )
        if unchanged:
            return None
        if new_path != row.path:
            refuse_conflict(state, new_path, ignore=row.path)
            return Change("modified", new_path, new_data, memory_id, previous_path=row.path)
        return Change("modified", row.path, new_data, memory_id)

    version = _mutate(store, scope, plan, actor, session, caller=caller)
    if version is None:
        row, _data = result[0]
        return record(store, row, with_content=with_content)
    return written(store, scope, version, result[0][1], with_content=with_content)


def delete(
    store: Store,
    scope: str,
    memory_id: str,
    *,
    if_sha256: str | None,
    actor: str,
    session: str | None,
    caller: Caller | None = None,
) -> Version:
    """Delete a memory by id, only if its content still hashes to ``if_sha256`` (when given)."""

    def plan(state: ScopeState) -> Change:
        row, _blob = _resolve(state, memory_id)
        if if_sha256 is not None and row.sha256 != if_sha256:
            raise PreconditionFailedError(
                f"memory {memory_id} changed: its content_sha256 is {row.sha256}, not {if_sha256}; "
                "nothing was deleted"
            )
        return Change("deleted", row.path, None, memory_id)

    version = _mutate(store, scope, plan, actor, session, erasing=True, caller=caller)  # archived: allowed
    assert version is not None
    return version
