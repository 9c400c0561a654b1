"""A purge ordered against the writes of the content it removes (docs/redaction.md#by-scope).

A redaction's blobs are refused only in the scopes it rewrote: a write of the same bytes to another
scope is that scope's content, written and answered as any other. Such a write may race the purge
that removes the redacted copies; nothing may then publish a commit whose blob the purge removed.
The order, in three parts:

- the purge holds the purge lock (:data:`gitmem.git.locks.PURGE_LOCK`) exclusively from its
  deny-list entry to its proof (:func:`purging`);
- right after the entry, a barrier (:func:`gitmem.git.intent.barrier`) waits for the publishes in
  flight: each checks the deny-list where the barrier orders it (holding the intent log shared up
  to its ref move), so a write that checked the older deny-list has moved its ref before the purge
  reads the refs, and every later one sees the entry;
- a write whose content some deny-list names (any scope's) holds the purge lock shared from its
  objects to its ref move (gitmem.engine.pipeline.commit): after any purge of them that runs, and
  before any that starts. So does a chain git fast-import writes (its pack is written over seconds
  after its deny-list check): a purge waits for it.

What a scope outside the redaction reaches then (:func:`kept_for_writes`) is kept, silently: it is
that scope's content, and the redaction's proof and ``gitmem verify`` excuse it there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager

import pygit2

from gitmem.engine.core import StoreCore
from gitmem.engine.denylist import read_scoped, readmitted
from gitmem.git import intent
from gitmem.git.locks import proposals_lock, purge_lock
from gitmem.git.treediff import tree_deltas

# Commits of concurrent writers carry the time they were made; allow this much clock skew.
CLOCK_SKEW = 600


@contextmanager
def purging(store: StoreCore) -> Iterator[None]:
    """Hold the purge lock exclusively for the ``with`` block (the deny-list entry, the reads of
    the refs, the purge and its proof); :func:`settle` once the entry is made."""
    with purge_lock(store.path):
        yield


@contextmanager
def erasing(
    store: StoreCore, store_lock: Callable[[StoreCore], AbstractContextManager[object]]
) -> Iterator[None]:
    """The locks a proposal's erasure holds, in the engine's lock order (docs/durability.md#lock-order):
    the store lock (``store_lock``, gitmem.audit.journal's), the purge lock, then ``proposals.lock``
    (as a proposal write holding deny-listed content and an acceptance take the last two)."""
    with store_lock(store), purging(store), proposals_lock(store.path):
        yield


def settle(store: StoreCore) -> None:
    """After the deny-list entry: every write that checked an older deny-list has moved its ref."""
    intent.barrier(store)


def reintroduced(store: StoreCore, retired: set[str], since: int) -> dict[str, set[str]]:
    """Retired object ids that a commit made since ``since`` (a racing writer) uses again, by the
    branch that reaches that commit."""
    found: dict[str, set[str]] = {}
    repo = store.repo
    for name in list(repo.references):
        if not name.startswith("refs/heads/"):
            continue
        target = repo.references[name].target
        if not isinstance(target, pygit2.Oid):
            continue
        for commit in repo.walk(target, pygit2.enums.SortMode.TIME):
            if commit.commit_time < since - CLOCK_SKEW:
                break
            parent = commit.parents[0].tree if commit.parents else None
            for d in tree_deltas(parent, commit.tree):
                if d.new_id is not None and str(d.new_id) in retired:
                    found.setdefault(name, set()).add(str(d.new_id))
    return found


def held_elsewhere(store: StoreCore, blobs: list[str]) -> set[str]:
    """Of a redaction's ``blobs`` (deny-listed already), those a branch or proposal of a scope
    outside every redaction of them reaches: written there, that scope's content."""
    if not blobs:
        return set()
    return readmitted(store.path, read_scoped(store.path), blobs)


def kept_for_writes(
    store: StoreCore,
    retired: set[str],
    trees: set[str],
    covered: set[str],
    since: int,
    reached: Mapping[str, set[str]],
    elsewhere: set[str],
) -> tuple[set[str], list[str], set[str]]:
    """What of ``retired`` the purge keeps because a ref needs it, given the refs that reach
    retired ids beyond the rewrite's baseline (``reached``, gitmem.git.purge.reachable_retired)
    and the blobs a scope outside the rewrite (``covered``) holds (``elsewhere``): ``(keep, refs
    to report, ids written back into a covered scope)``. A branch of another scope that reaches
    only such blobs (and trees) is not reported: that is its own content, not a race."""
    back = reintroduced(store, retired, since)
    outside = {ref for ref in {*back, *reached} if ref.removeprefix("refs/heads/") not in covered}
    outside = {r for r in outside if r.startswith("refs/heads/")}
    again: set[str] = set()
    for ref, ids in back.items():
        again |= ids - elsewhere if ref in outside else ids
    refs = sorted(r for r, ids in reached.items() if not (r in outside and ids <= elsewhere | trees))
    keep = set(elsewhere).union(*back.values(), *reached.values())
    if keep:
        keep |= trees  # a racing commit may reuse a retired tree
    return keep, refs, again
