"""What open proposals hold, for the limits a proposal write is checked against (docs/review.md#limits).

A proposal's chain keeps its content in the store until it is decided, whether or not anyone ever
accepts it; a store has one open proposal per session, and a caller may open many sessions. So a
write to a proposal counts, besides its own chain, every *other* open proposal of the store toward
``max_store_bytes`` and every other open proposal of its scope toward ``max_memories``: together they
never hold more than the room the store's published content leaves.

What a chain changes is its tree diff from its base to its tip. That is a function of the two
commits, so it is kept (:func:`chain_delta`, a bounded cache) and computed once per chain tip: a
write reads the other proposals' records and refs once, and diffs only the chains that moved since.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import pygit2

from gitmem.git.treedelta import tree_deltas

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

# (path, memories, bytes) per path a chain changes: +1/-1 for a file added/removed, its size change
PathDelta = tuple[str, int, int]
_CACHE_SIZE = 512
_cache: OrderedDict[tuple[str, str | None, str | None], tuple[PathDelta, ...]] = OrderedDict()
_lock = threading.Lock()


def chain_delta(store: StoreCore, base: pygit2.Oid | None, tip: pygit2.Oid | None) -> tuple[PathDelta, ...]:
    """What the chain from ``base`` to ``tip`` changes, path by path."""
    key = (str(store.path), str(base) if base else None, str(tip) if tip else None)
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    out: list[PathDelta] = []
    if tip is not None:
        old = store.tree_of(base) if base is not None else None
        for d in tree_deltas(old, store.tree_of(tip)):
            size = 0
            for oid, sign in ((d.old_id, -1), (d.new_id, 1)):
                obj = store.repo.get(oid) if oid is not None else None
                size += sign * obj.size if isinstance(obj, pygit2.Blob) else 0
            path = "/" + d.raw_path.decode("utf-8", "surrogateescape")
            out.append((path, {"added": 1, "deleted": -1}.get(d.kind, 0), size))
    result = tuple(out)
    with _lock:
        _cache[key] = result
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return result


def totals(deltas: tuple[PathDelta, ...], skip: set[str] | frozenset[str] = frozenset()) -> tuple[int, int]:
    """(memories, bytes) a chain adds, leaving out the paths in ``skip``."""
    count = size = 0
    for path, c, s in deltas:
        if path not in skip:
            count, size = count + c, size + s
    return count, size


class Chain(Protocol):
    """What is read of a proposal (gitmem.engine.proposals.Proposal)."""

    @property
    def id(self) -> str: ...
    @property
    def scope(self) -> str: ...
    @property
    def base(self) -> str | None: ...
    @property
    def decided_paths(self) -> set[str]: ...
    @property
    def ref(self) -> str: ...


@dataclass(frozen=True)
class Held:
    """What the other open proposals hold: ``bytes`` over the store, ``memories`` in the scope
    (each proposal's net growth, never below zero; paths already decided left out), and
    ``seen``, which proposals and tips that was counted from (a publish compares it)."""

    memories: int
    bytes: int
    seen: frozenset[tuple[str, str | None]]


def held_elsewhere(store: StoreCore, mine: Chain, open_now: Iterable[Chain]) -> Held:
    """What every open proposal of ``open_now`` (their records) but ``mine`` holds."""
    count = size = 0
    seen: set[tuple[str, str | None]] = set()
    for p in open_now:
        if p.id == mine.id:
            continue
        tip = store.ref_target(p.ref)
        seen.add((p.id, str(tip) if tip is not None else None))
        if tip is None:
            continue
        c, s = totals(chain_delta(store, pygit2.Oid(hex=p.base) if p.base else None, tip), p.decided_paths)
        size += max(s, 0)
        count += max(c, 0) if p.scope == mine.scope else 0
    return Held(count, size, frozenset(seen))


def unchanged(store: StoreCore, mine: Chain, held: Held, open_now: Iterable[Chain]) -> bool:
    """Whether the other open proposals are still the ones (at the same tips) ``held`` counted."""
    tips = ((p.id, store.ref_target(p.ref)) for p in open_now if p.id != mine.id)
    return {(i, str(t) if t is not None else None) for i, t in tips} == held.seen


class Planned(Protocol):
    """What is read of a proposal write's planned state (gitmem.engine.proposals.ProposalState)."""

    needs_store_lock: bool
    delta_bytes: int
    elsewhere: Held


def raced(
    store: StoreCore, mine: Chain, planned: Planned | None, open_now: Callable[[], Iterable[Chain]]
) -> bool:
    """Whether a proposal write must be planned again before it is published (under
    ``proposals.lock``): planned near ``max_store_bytes`` (or growing by more than one memory, as
    several writers would), and another open proposal moved since it was planned."""
    if planned is None:
        return False
    if not (planned.needs_store_lock or planned.delta_bytes > store.settings.limits.max_memory_bytes):
        return False
    return not unchanged(store, mine, planned.elsewhere, open_now())
