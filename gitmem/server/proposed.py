"""A review token's memory reads through its own open proposal (docs/review.md, "Reading").

A token created with ``--review`` writes proposals, not the scope. So that its client keeps working
with what it wrote, the Anthropic memory endpoints show that token its open proposal on top of the
scope: for the paths the proposal changed, the proposal's content (a path it deleted is not found,
a memory it renamed is at its new path, a memory it created is there); for the rest, the scope.
Every other token reads the scope only. The reader is the owner of a review token's caller (its
session, else its actor), as the library's ``Store.read`` shows a review-mode caller.
"""

from __future__ import annotations

from dataclasses import dataclass

import pygit2

from gitmem.engine import proposals
from gitmem.engine.memories import Memory, Prefix
from gitmem.engine.writer import decode_content, sha256_hex
from gitmem.errors import NotFoundError
from gitmem.model.frontmatter import parse_description
from gitmem.model.versions import timestamp
from gitmem.server import ops
from gitmem.store import Store


@dataclass(frozen=True)
class View:
    """What the reader's open proposal changes on a scope: path -> the memory the proposal has
    there, or None where it deletes (or renames away) what the scope has."""

    proposal: proposals.Proposal
    memories: dict[str, Memory | None]

    def by_id(self, memory_id: str) -> Memory | None:
        for m in self.memories.values():
            if m is not None and m.memory_id == memory_id:
                return m
        return None


def view(store: Store, scope: str, owner: str | None) -> View | None:
    """The reader's open proposal on ``scope`` as memories (None: no reader, or nothing proposed)."""
    if owner is None:
        return None
    core = store.core
    p = proposals.open_proposal(core, scope, owner)
    if p is None:
        return None
    paths = proposals.touched(core, p)
    tip = proposals.tip_of(core, p)
    if not paths or tip is None:
        return None
    tree = core.tree_of(tip)
    versions = proposals.versions(core, p.id)
    ids = proposals.memory_ids(core, p)
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
        scoped = ops.head(store, scope, memory_id) if memory_id else None
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
    return View(p, out)


def get(
    store: Store, scope: str, memory_id: str, *, with_content: bool, owner: str | None = None
) -> ops.MemoryRecord:
    """The memory ``memory_id`` as the reader ``owner`` sees it (``ops.get`` for everyone else)."""
    v = view(store, scope, owner)
    if v is not None:
        mine = v.by_id(memory_id)
        if mine is not None:
            return record(mine, with_content=with_content)
        row = ops.head(store, scope, memory_id)
        if row is not None and row.path in v.memories:  # the proposal deleted it, or put another there
            raise NotFoundError(
                f"memory {memory_id} does not exist in scope {scope!r} (your proposal {v.proposal.id} removes it)"
            )
    return ops.get(store, scope, memory_id, with_content=with_content)


def listing(
    store: Store, prefix: str, scope: str, depth: int, owner: str | None = None
) -> tuple[list[Memory | Prefix], set[str]]:
    """``Store.list`` as the reader ``owner`` sees it, and the memory ids from its proposal."""
    v = view(store, scope, owner)
    if v is None:
        return store.list(prefix, scope=scope, depth=depth), set()
    mine = [m for path, m in v.memories.items() if m is not None and path.startswith(prefix)]
    theirs = [
        m for m in store.list(prefix, scope=scope) if isinstance(m, Memory) and m.path not in v.memories
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


def record(m: Memory, *, with_content: bool) -> ops.MemoryRecord:
    return ops.MemoryRecord(
        m.memory_id,
        m.path,
        m.content if with_content else None,
        m.content_sha256,
        m.size,
        m.version_id,
        int(m.created_at.timestamp()) if m.created_at else 0,
        int(m.updated_at.timestamp()) if m.updated_at else 0,
    )
