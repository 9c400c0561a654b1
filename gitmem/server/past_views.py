"""``?at=`` on the memory stores API's list and retrieve: gitmem's extension (docs/point-in-time.md).

Each function stands in for the call the API makes without ``at`` (``proposed.listing``,
``ops.head``, ``proposed.get``) and gives the same shapes, as the scope was at the moment, from
history (:mod:`gitmem.engine.past`). A review token's own proposals are no part of a past state."""

from __future__ import annotations

import pygit2

from gitmem.engine.memories import Memory, Prefix
from gitmem.engine.rows import HeadRow
from gitmem.errors import NotFoundError
from gitmem.server import ops, proposed
from gitmem.store import Store


def listing(
    store: Store, prefix: str, scope: str, depth: int, at: str | None, owner: str | None = None
) -> tuple[list[Memory | Prefix], set[str]]:
    """``proposed.listing`` now (as the reader ``owner`` sees it), or the listing at ``at`` (with no
    proposed ids)."""
    if at is None:
        return proposed.listing(store, prefix, scope, depth, owner)
    return store.list(prefix, scope=scope, depth=depth, at=at, with_content=True), set()


def head(store: Store, scope: str, item: Memory, at: str | None) -> HeadRow | None:
    """``ops.head`` now, or the row of a memory of the listing at ``at`` (its blob named by its content)."""
    if at is None:
        return ops.head(store, scope, item.memory_id)
    blob = str(pygit2.hash((item.content or "").encode("utf-8")))  # the tree's blob: same bytes, same id
    created = int(item.created_at.timestamp()) if item.created_at else 0
    updated = int(item.updated_at.timestamp()) if item.updated_at else 0
    return HeadRow(
        scope,
        item.path,
        item.memory_id,
        item.version_id,
        item.content_sha256,
        item.size,
        blob,
        item.description,
        created,
        updated,
    )


def get(
    store: Store, scope: str, memory_id: str, with_content: bool, at: str | None, owner: str | None = None
) -> ops.MemoryRecord:
    """``proposed.get`` now (as the reader ``owner`` sees it), or the memory ``memory_id`` as the
    scope held it ``at``."""
    if at is None:
        return proposed.get(store, scope, memory_id, with_content=with_content, owner=owner)
    for m in store.list("/", scope=scope, at=at, with_content=True):
        if isinstance(m, Memory) and m.memory_id == memory_id:
            row = head(store, scope, m, at)
            assert row is not None
            return ops.record(store, row, with_content=with_content)
    raise NotFoundError(f"memory {memory_id} did not exist in scope {scope!r} at {at}")
