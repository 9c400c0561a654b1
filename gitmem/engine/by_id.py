"""A memory looked up, changed and deleted by its ``mem_`` id (the Anthropic memory stores API
addresses memories so), and the record of what a version wrote.

Each write plans on the very tip it commits on and resolves the memory id against it (the index
is brought up to that tip first), so a concurrent rename or delete is never overwritten and a
precondition is never checked against a stale state. A review-mode writer's change goes to its
open proposal (:func:`gitmem.engine.group.mutate` routes it), and the id is resolved where that
proposal put the memory (docs/review.md). Access, review routing, the guard, limits and
attribution are :func:`mutate`'s, as for every other write.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from gitmem.engine.core import StoreCore
from gitmem.engine.group import mutate
from gitmem.engine.memories import memory_of as memory_of  # proposal_view reads rows with it too
from gitmem.engine.planners import refuse_conflict
from gitmem.engine.rows import HeadRow, Memory
from gitmem.engine.writer import Change, ScopeState, decode_content, encode_content, sha256_hex
from gitmem.errors import NotFoundError, PreconditionFailedError
from gitmem.git.blobs import StoredBlob
from gitmem.model.caller import Caller
from gitmem.model.frontmatter import parse_description
from gitmem.model.versions import Version, timestamp

_STALE_RETRIES = 50


class _Stale(Exception):
    """The index is ahead of the tip this plan runs on: plan again on the newer tip."""


def head(store: StoreCore, scope: str, memory_id: str) -> HeadRow | None:
    """The index's row of the live memory ``memory_id`` of ``scope`` (caught up first)."""
    store.index.ensure(scope)
    return store.index.head_by_memory(scope, memory_id)


def get(store: StoreCore, scope: str, memory_id: str, *, with_content: bool) -> Memory:
    """The live memory ``memory_id`` of ``scope`` (NotFoundError: none)."""
    row = head(store, scope, memory_id)
    if row is None:
        raise NotFoundError(f"memory {memory_id} does not exist in scope {scope!r}")
    return memory_of(store, row, with_content=with_content)


def written(store: StoreCore, scope: str, version: Version, data: bytes, *, with_content: bool) -> Memory:
    """The memory as ``version`` wrote it (``data``), not what a later writer may have put there
    since; its creation time is the memory's first version's (this one's when it has none yet)."""
    row = head(store, scope, version.memory_id)
    text = decode_content(data)
    return Memory(
        path=version.path,
        scope=scope,
        content=text if with_content else None,
        content_sha256=sha256_hex(data),
        size=len(data),
        description=parse_description(text),
        memory_id=version.memory_id,
        version_id=version.id,
        created_at=timestamp(row.created_at) if row is not None else version.created_at,
        updated_at=version.created_at,
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
    """The memory as a review-mode write sees it (docs/review.md): where its open proposal put
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
    store: StoreCore,
    scope: str,
    plan: Callable[[ScopeState], Change | None],
    actor: str | None,
    session: str | None,
    erasing: bool,
    caller: Caller | None,
) -> Version | None:
    for _attempt in range(_STALE_RETRIES):
        try:
            return mutate(store, scope, plan, actor=actor, session=session, erasing=erasing, caller=caller)
        except _Stale:
            time.sleep(0.001)
    raise NotFoundError("the memory kept changing while it was looked up; try again")


def update(
    store: StoreCore,
    scope: str,
    memory_id: str,
    *,
    content: str | None,
    path: str | None,
    if_sha256: str | None,
    with_content: bool,
    actor: str | None,
    session: str | None,
    caller: Caller | None,
) -> Memory:
    """Change a memory's content and/or path as one version; the memory as it then is.

    A failed precondition is PreconditionFailedError unless the memory already is exactly what was
    asked (then the current memory, and no version). Nothing to change: the current memory, no
    version.
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

    version = _mutate(store, scope, plan, actor, session, False, caller)
    if version is None:
        row, _data = result[0]
        return memory_of(store, row, with_content=with_content)
    return written(store, scope, version, result[0][1], with_content=with_content)


def delete(
    store: StoreCore,
    scope: str,
    memory_id: str,
    *,
    if_sha256: str | None,
    actor: str | None,
    session: str | None,
    caller: Caller | None,
) -> Version:
    """Delete a memory by id, only if its content still hashes to ``if_sha256`` (when given). It
    erases nothing, but works in an archived store (as deleting by path does)."""

    def plan(state: ScopeState) -> Change:
        row, _blob = _resolve(state, memory_id)
        if if_sha256 is not None and row.sha256 != if_sha256:
            raise PreconditionFailedError(
                f"memory {memory_id} changed: its content_sha256 is {row.sha256}, not {if_sha256}; "
                "nothing was deleted"
            )
        return Change("deleted", row.path, None, memory_id)

    version = _mutate(store, scope, plan, actor, session, True, caller)  # archived: allowed
    assert version is not None
    return version
