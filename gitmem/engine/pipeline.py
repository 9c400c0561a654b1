"""The commit pipeline: plan -> objects -> one flush -> ref compare-and-swap -> index record -> ledger.

Every write of the library runs through :func:`commit`, once per attempt of one loop: read the
tip of the target ref, plan each item against one state (each sees the ones before it; the
limits, the deny-list and the guard check every change), take the store-bytes lock when the
changes could push the store past ``max_store_bytes`` together with other scopes, write the
objects of the chain (loose, one pack, or ``git fast-import`` for huge batches), then publish the
chain on the :class:`Sink` with one flush and one compare-and-swap, unless a redaction deny-listed
its content meanwhile (checked where a purge's barrier orders it, docs/redaction.md#by-scope); the index record is staged (before the flush, or during it for a long chain)
and committed once the ref moved (gitmem.engine.writer.publish_recorded), and flagged versions get their ``flag`` ledger entry. A
lost race re-plans against the new tip.

The front ends bring items and take answers: group commit (gitmem.engine.group: many callers,
one scope), batches (gitmem.engine.batch: one caller, many operations) and proposals
(gitmem.engine.proposals: the same pipeline on a proposal's ref, a :class:`Sink` of its own).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pygit2

from gitmem.config import Limits
from gitmem.engine.core import StoreCore
from gitmem.engine.guard import flag_trailer, record_flags
from gitmem.engine.overlay import BatchState
from gitmem.engine.rows import VersionRow
from gitmem.engine.writer import (
    MAX_ATTEMPTS,
    Change,
    ScopeState,
    backoff,
    check_limits,
    commit_change,
    current_size,
    make_row,
    publish_recorded,
    store_bytes_lock,
)
from gitmem.errors import ConflictError
from gitmem.git.fastimport import NotWritten, Pending, write_commits
from gitmem.git.locks import held_locks, purge_lock
from gitmem.ids import new_id
from gitmem.model.versions import format_message

# From this many versions on, ``git fast-import`` writes the pack (it deltas, and holds less in
# memory); below, two versions or more are staged in memory and written as one pack in-process
# (two files for the flush to carry instead of five or six loose files a version), which spares
# spawning git and reparsing the stream; a single version stays loose.
FAST_IMPORT_MIN = 20_000
PACK_MIN = 2


@dataclass
class Item:
    """One write to plan: its planner (``state -> Change | None``), who writes it, its limits, and
    the version id a write queued by another process carries."""

    plan: Callable[[ScopeState], Change | None]
    actor: str
    session: str | None
    limits: Limits
    version_id: str | None = None


@dataclass
class Committed:
    """What one run of the pipeline did: ``changes`` (item index, change) in chain order with their
    ``rows``; ``outcome`` for the items that planned nothing (None) or were refused (the error);
    ``head`` the new tip (None: nothing to commit, the ref did not move)."""

    tip: pygit2.Oid | None
    head: pygit2.Oid | None = None
    changes: list[tuple[int, Change]] = field(default_factory=list)
    rows: list[VersionRow] = field(default_factory=list)
    outcome: dict[int, BaseException | None] = field(default_factory=dict)


class Sink:
    """Where a chain is published: a scope's branch, with its index record (this class), or a
    proposal's ref (gitmem.engine.proposals.ProposalSink)."""

    #: Whether the chain counts toward ``max_store_bytes`` (the store-bytes lock may be needed).
    counts_store_bytes = True

    def __init__(self, store: StoreCore, scope: str) -> None:
        self.store, self.scope = store, scope

    def tip(self) -> pygit2.Oid | None:
        return self.store.tip(self.scope)

    def state(self, tip: pygit2.Oid | None) -> ScopeState:
        return BatchState(self.store, self.scope, tip)

    def publish(
        self,
        tip: pygit2.Oid | None,
        head: pygit2.Oid,
        written: list[pygit2.Oid],
        rows: list[VersionRow],
        contents: dict[str, bytes],
        check: Callable[[], bool] | None = None,
    ) -> bool | None:
        """Move the ref ``tip -> head`` (one flush, one compare-and-swap) unless ``check`` (run
        where a purge's barrier orders it) says no; False: a lost race or ``check`` said no (plan
        again), None: the sink moved elsewhere (plan again on its new tip)."""
        return publish_recorded(self.store, self.scope, tip, head, written, rows, contents, check)


def commit(
    store: StoreCore,
    scope: str,
    gather: Callable[[pygit2.Oid | None], Sequence[Item | None]],
    *,
    sink: Sink | None = None,
    catch: type[BaseException] | tuple[type[BaseException], ...] = Exception,
    reviewed_by: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    held: contextlib.ExitStack | None = None,
    what: str = "write",
    flag_each: bool = False,
) -> Committed:
    """Plan, write and publish the items ``gather(tip)`` gives (None: an item answered elsewhere)
    until the ref moves or nothing is left to commit; re-planned on a lost race. An item whose
    planner or limits raise ``catch`` is refused (its error in ``outcome``), others propagate.
    ``held`` keeps the store-bytes lock when the caller holds other locks with it. The guard's
    ``flag`` ledger entry is one for the chain (one caller), or one per item with ``flag_each``
    (a group of callers)."""
    sink = sink or Sink(store, scope)
    with contextlib.ExitStack() as own:
        held = held if held is not None else own
        locked = False
        purging = "purge" in held_locks()  # the caller's (an acceptance takes it before proposals.lock)
        for attempt in range(MAX_ATTEMPTS):
            tip = sink.tip()
            state = sink.state(tip)
            items = gather(tip)
            done = _plan(store, state, items, catch, progress)
            if sink.counts_store_bytes:
                limits = next((i.limits for i in items if i is not None), None)
                if limits is not None and state.delta_bytes > limits.max_memory_bytes:
                    # Growth by more than one memory's worth races like several writers.
                    state.needs_store_lock = True
                if state.needs_store_lock and not locked:
                    if not purging:  # the purge lock comes first (docs/durability.md#lock-order)
                        held.enter_context(purge_lock(store.path, shared=True))
                        purging = True
                    held.enter_context(store_bytes_lock(store))
                    locked = True
                    # Only the store's total can have changed under us (this ref's tip is checked
                    # by the compare-and-swap): re-plan only when it now leaves no room.
                    if limits is None or not _fits_now(sink, tip, state, limits):
                        continue
            if (state.needs_purge_lock or len(done.changes) >= FAST_IMPORT_MIN) and not purging:
                # content another scope's redaction deny-listed: written and published after any
                # purge of it that runs, and before any that starts (docs/redaction.md#by-scope).
                # A fast-import chain too: git fast-import writes its pack over seconds after its
                # deny-list check, and a purge landing in between would find its bytes back on
                # disk; it waits for the chain instead (docs/durability.md, step 1)
                held.enter_context(purge_lock(store.path, shared=True))
                purging = True
            done.tip = tip
            if not done.changes:
                return done
            now = int(time.time())
            planned = [(items[n], c) for n, c in done.changes]
            try:
                head, rows, written = write_chain(store, scope, tip, planned, now, reviewed_by, purging)
            except NotWritten:  # fast-import: a lost race before any object (plan again, it sees why)
                backoff(attempt)
                continue
            contents = {r.blob: c.data for r, (_i, c) in zip(rows, planned, strict=True) if r.blob and c.data}
            # checked where a purge's barrier orders it (the one deny-list check after the objects)
            check = functools.partial(publishable, store, rows, purging)
            moved = sink.publish(tip, head, written, rows, contents, check)
            if moved:
                if flag_each:
                    for (item, change), row in zip(planned, rows, strict=True):
                        assert item is not None
                        record_flags(store, scope, [change], [row], item.actor, item.session)
                else:
                    first = planned[0][0]
                    assert first is not None
                    record_flags(store, scope, [c for _i, c in planned], rows, first.actor, first.session)
                done.head, done.rows = head, rows
                return done
            if moved is False and not check():
                # redacted meanwhile: re-planned, that write is refused (its scope's redaction) or
                # made again under the purge lock (another scope's)
                if not purging and not refused_here(store, rows):
                    held.enter_context(purge_lock(store.path, shared=True))
                    purging = True
            elif moved is False:
                backoff(attempt)
    raise ConflictError(
        f"could not {what} to scope {scope!r}: the ref kept moving ({MAX_ATTEMPTS} attempts); try again"
    )


def refused_here(store: StoreCore, rows: list[VersionRow]) -> bool:
    """Whether the deny-list of its own scope names the content of one of ``rows`` now."""
    return bool(store.denied_ids()) and any(r.blob and r.blob in store.denied_in(r.scope) for r in rows)


def publishable(store: StoreCore, rows: list[VersionRow], purging: bool) -> bool:
    """Whether ``rows`` may be published: no content a redaction (or compaction) of its scope
    deny-listed since the plan (which checked), and, unless the write holds the purge lock
    shared (``purging``), no content any deny-list names. One stat when the deny-list did not
    change. Run before a staged pack is written, after the objects, and where a purge's barrier
    orders it (:func:`gitmem.git.intent.publish`): a purge of that content may have removed the
    copies written, or may be about to. The caller then re-plans (the write is refused, or made
    again under the purge lock), instead of writing its pack or moving the ref over a purged
    object; the object writers store a copy of content the store already has, so the pack would
    also put the purged content back on disk."""
    if not rows:
        return True
    return blobs_publishable(store, rows[0].scope, {r.blob for r in rows if r.blob}, purging)


def blobs_publishable(store: StoreCore, scope: str, blobs: set[str], purging: bool) -> bool:
    """:func:`publishable` for the blob ids of a chain of ``scope`` (written or not yet)."""
    denied = store.denied_ids()
    if not denied:
        return True
    return not (blobs & (store.denied_in(scope) if purging else denied))


def _plan(
    store: StoreCore,
    state: ScopeState,
    items: Sequence[Item | None],
    catch: type[BaseException] | tuple[type[BaseException], ...],
    progress: Callable[[int, int], None] | None,
) -> Committed:
    done = Committed(state.tip)
    for n, item in enumerate(items):
        if item is None:
            continue
        try:
            change = item.plan(state)
            if change is not None:
                check_limits(store, state, change, item.limits)
        except catch as exc:  # this item's error (a precondition, a limit, a bug)
            done.outcome[n] = exc
            continue
        if change is None:
            done.outcome[n] = None
        else:
            state.applied(change, current_size(state, change))
            done.changes.append((n, change))
        if progress is not None:
            progress(n + 1, len(items))
    return done


def _fits_now(sink: Sink, tip: pygit2.Oid | None, state: ScopeState, limits: Limits) -> bool:
    """Whether the chain planned on ``state`` still fits ``max_store_bytes`` at every step, counted
    afresh over every scope (under the store-bytes lock), with the ref still at ``tip``."""
    if sink.tip() != tip:
        return False
    fresh = ScopeState(sink.store, sink.scope, tip).store_bytes(exact=True)
    peak = state.peak_delta if isinstance(state, BatchState) else max(state.delta_bytes, 0)
    return bool(fresh + peak <= limits.max_store_bytes)


def write_chain(
    store: StoreCore,
    scope: str,
    tip: pygit2.Oid | None,
    planned: Sequence[tuple[Item | None, Change]],
    now: int,
    reviewed_by: str | None = None,
    purging: bool = False,
) -> tuple[pygit2.Oid, list[VersionRow], list[pygit2.Oid]]:
    """Write the commits of ``planned`` on top of ``tip`` (the ref is not moved): their head, their
    index rows and the objects written (for the flush); a staged pack only when
    :func:`publishable` (``purging``: the purge lock is held shared). A chain fast-import writes
    raises :class:`NotWritten` instead, with nothing written, when its content is not publishable
    or ``tip`` is gone (a history rewrite purged it): a lost race."""
    if len(planned) >= FAST_IMPORT_MIN:
        head, imported = _write_fast_import(store, scope, tip, planned, now, reviewed_by, purging)
        return (
            head,
            imported,
            [pygit2.Oid(hex=r.commit_id) for r in imported],
        )  # in one pack: the commits tell
    state = ScopeState(store, scope, tip)
    written: list[pygit2.Oid] = []
    parent = tip
    rows: list[VersionRow] = []
    staging = store.staged() if len(planned) >= PACK_MIN else contextlib.nullcontext()
    with staging as stage:
        for item, change in planned:
            assert item is not None
            parent, row = commit_change(
                store, state, change, parent, item.actor, item.session, now, written,
                reviewed_by=reviewed_by, version_id=item.version_id,
            )  # fmt: skip
            rows.append(row)
            if stage is not None:
                stage.write_if_large()
        if stage is not None and publishable(store, rows, purging):
            stage.write()
    assert parent is not None
    return parent, rows, written


def _write_fast_import(
    store: StoreCore,
    scope: str,
    tip: pygit2.Oid | None,
    planned: Sequence[tuple[Item | None, Change]],
    now: int,
    reviewed_by: str | None = None,
    purging: bool = False,
) -> tuple[pygit2.Oid, list[VersionRow]]:
    version_ids = [(item.version_id if item else None) or new_id("memver") for item, _c in planned]
    pending = []
    for (item, change), vid in zip(planned, version_ids, strict=True):
        assert item is not None
        files: list[tuple[str, bytes | None]] = []
        if change.previous_path is not None and change.previous_path != change.path:
            files.append((change.previous_path[1:], None))
        files.append((change.path[1:], change.data))
        message = format_message(
            change.operation, change.path, vid, change.memory_id, item.actor, item.session,
            change.previous_path, change.reverts, flag=flag_trailer(change.flags), reviewed_by=reviewed_by,
        )  # fmt: skip
        pending.append(Pending(message, item.actor, now, files))
    blobs = [pygit2.hash(change.data) if change.data is not None else None for _i, change in planned]
    # as a staged pack: checked just before the pack is written (gitmem.engine.pipeline.publishable)
    check = functools.partial(blobs_publishable, store, scope, {str(b) for b in blobs if b}, purging)
    commits = write_commits(store, pending, tip, check)
    out = []
    for (item, change), vid, c, blob in zip(planned, version_ids, commits, blobs, strict=True):
        assert item is not None
        out.append(make_row(scope, change, vid, item.actor, item.session, now, blob, c))
    return commits[-1], out
