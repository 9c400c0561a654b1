"""A review-mode reader's memories through its own open proposal (docs/review.md, "Reading").

A review-mode writer writes proposals, not the scope. So that its client keeps working with what
it wrote, reads by memory id and listings can show that reader its open proposal on top of the
scope: for the paths the proposal changed, the proposal's content (a path it deleted is not found,
a memory it renamed is at its new path, a memory it created is there); for the rest, the scope.
The reader is an owner (a session, else an actor), as :func:`gitmem.engine.access.reader` names it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pygit2

from gitmem.engine import by_id, proposals
from gitmem.engine.core import StoreCore
from gitmem.engine.memories import list_memories
from gitmem.engine.rows import Memory, Prefix
from gitmem.engine.writer import decode_content, sha256_hex
from gitmem.errors import InvalidInputError, NotFoundError
from gitmem.model.frontmatter import parse_description
from gitmem.model.versions import timestamp


@dataclass(frozen=True)
class ProposalView:
    """What a reader's open proposal changes on a scope: path -> the memory the proposal has
    there, or None where it deletes (or renames away) what the scope has."""

    proposal: proposals.Proposal
    memories: dict[str, Memory | None]

    def by_id(self, memory_id: str) -> Memory | None:
        for m in self.memories.values():
            if m is not None and m.memory_id == memory_id:
                return m
        return None


def view(store: StoreCore, scope: str, owner: str | None) -> ProposalView | None:
    """The reader's open proposal on ``scope`` as memories (None: no reader, or nothing proposed)."""
    if owner is None:
        return None
    p = proposals.open_proposal(store, scope, owner)
    if p is None:
        return None
    paths = proposals.touched(store, p)
    tip = proposals.tip_of(store, p)
    if not paths or tip is None:
        return None
    tree = store.tree_of(tip)
    versions = proposals.versions(store, p.id)
    ids = proposals.memory_ids(store, p)
    out: dict[str, Memory | None] = {}
    for path in paths:
        try:
            blob = tree[path[1:]] if tree is not None else None
        except KeyError:
            blob = None
        if not isinstance(blob, pygit2.Blob):
            out[path] = None
            continue
        mine = [v for v in versions if v.path == path]
        memory_id = ids.get(path) or (mine[-1].memory_id if mine else "")
        scoped = by_id.head(store, scope, memory_id) if memory_id else None
        text = decode_content(blob.data)
        out[path] = Memory(
            path=path,
            scope=scope,
            content=text,
            content_sha256=sha256_hex(blob.data),
            size=len(blob.data),
            description=parse_description(text) if text.startswith("---") else None,
            memory_id=memory_id,
            version_id=mine[-1].id if mine else "",
            created_at=timestamp(scoped.created_at) if scoped else (mine[0].created_at if mine else None),
            updated_at=mine[-1].created_at if mine else None,
        )
    return ProposalView(p, out)


def _without_content(m: Memory) -> Memory:
    return replace(m, content=None)


def get(store: StoreCore, scope: str, memory_id: str, *, with_content: bool, owner: str | None) -> Memory:
    """The memory ``memory_id`` as the reader ``owner`` sees it (the scope's for no owner)."""
    v = view(store, scope, owner)
    if v is not None:
        mine = v.by_id(memory_id)
        if mine is not None:
            return mine if with_content else _without_content(mine)
        row = by_id.head(store, scope, memory_id)
        if row is not None and row.path in v.memories:  # the proposal deleted it, or put another there
            raise NotFoundError(
                f"memory {memory_id} does not exist in scope {scope!r} (your proposal {v.proposal.id} removes it)"
            )
    return by_id.get(store, scope, memory_id, with_content=with_content)


def listing(
    store: StoreCore, prefix: str, scope: str, depth: int, owner: str | None
) -> tuple[list[Memory | Prefix], set[str]]:
    """The listing under ``prefix`` (as ``Store.list`` makes it, without content) as the reader
    ``owner`` sees it, and the ids of the memories in it that come from its proposal (with
    content)."""
    v = view(store, scope, owner)
    if v is None:
        return list_memories(store, prefix, scope=scope, depth=depth), set()
    mine = [m for path, m in v.memories.items() if m is not None and path.startswith(prefix)]
    theirs = [
        m
        for m in list_memories(store, prefix, scope=scope)
        if isinstance(m, Memory) and m.path not in v.memories
    ]
    merged = sorted([*theirs, *mine], key=lambda m: m.path)
    out: list[Memory | Prefix] = []
    rollup: dict[str, int] = {}
    for m in merged:
        rest = m.path[len(prefix) :]
        if depth == 1 and "/" in rest:  # rolled up as Store.list(depth=1) does
            sub = prefix + rest.split("/", 1)[0] + "/"
            if sub not in rollup:
                rollup[sub] = 0
                out.append(Prefix(sub, 0))
            rollup[sub] += 1
            continue
        out.append(m)
    items = [Prefix(i.path, rollup[i.path]) if isinstance(i, Prefix) else i for i in out]
    return items, {m.memory_id for m in mine}


@dataclass(frozen=True)
class MemoryPage:
    """One page of a listing (:func:`page`): its items, whether more follow, and the path of its
    last item (where the next page starts after; None for an empty page)."""

    items: list[Memory | Prefix]
    more: bool
    last: str | None


def _after(item: Memory | Prefix, after: str) -> bool:
    return item.path > after and not (after.endswith("/") and item.path.startswith(after))


def page(
    store: StoreCore,
    prefix: str,
    scope: str,
    depth: int,
    *,
    at: str | None,
    after: str | None,
    limit: int,
    with_content: bool,
    owner: str | None,
) -> MemoryPage:
    """Up to ``limit`` items of the listing under ``prefix`` after the path ``after`` (after a
    prefix ``a/``: after all of it): as the reader ``owner`` sees it now, or as the scope held it
    ``at`` (no proposal is part of a past state). With content, a scope's memory is read again by
    its id, as it is now (one deleted since the listing is left out)."""
    if limit < 1:
        raise InvalidInputError(f"invalid limit {limit}: expected at least 1")
    if at is None:
        items, proposed = listing(store, prefix, scope, depth, owner)
    else:
        from gitmem.engine import past

        items = past.list_at(store, prefix, scope=scope, at=at, depth=depth, with_content=True)
        proposed = set()
    if after is not None:
        items = [i for i in items if _after(i, after)]
    chosen = items[:limit]
    out: list[Memory | Prefix] = []
    for item in chosen:
        if not isinstance(item, Memory):
            out.append(item)
        elif not with_content:
            out.append(_without_content(item))
        elif item.memory_id in proposed or at is not None:
            out.append(item)
        else:
            row = by_id.head(store, scope, item.memory_id)
            if row is not None:  # deleted since the listing: left out
                out.append(by_id.memory_of(store, row, with_content=True))
    return MemoryPage(out, len(items) > limit, chosen[-1].path if chosen else None)
