"""Batches: many versions in one scope, committed as a chain and published with one ref move.

Import and session sync use this. The branch moves once, by compare-and-swap, so readers see the
whole batch or none of it; a lost race re-plans the whole batch against the new tip. With
``skip_refused`` a refused operation (bad path, limit, conflict) is reported and the rest applies.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pygit2

from gitmem.engine import access
from gitmem.engine.core import StoreCore
from gitmem.engine.guard import flag_trailer, record_flags
from gitmem.engine.memories import refuse_conflict, with_description
from gitmem.engine.overlay import BatchState
from gitmem.engine.rows import VersionRow
from gitmem.engine.writer import (
    MAX_ATTEMPTS,
    Change,
    ScopeState,
    authorize,
    backoff,
    check_limits,
    commit_change,
    current_size,
    denied_since_planned,
    encode_content,
    maintain_quietly,
    make_row,
    publish_recorded,
    sha256_hex,
    store_bytes_lock,
    version_from_row,
)
from gitmem.errors import ConflictError, GitmemError, InvalidInputError, PreconditionFailedError
from gitmem.git.fastimport import Pending, write_commits
from gitmem.git.packwriter import Staging
from gitmem.ids import is_id, new_id
from gitmem.model.caller import Caller
from gitmem.model.paths import validate_path
from gitmem.model.versions import Version, format_message


@dataclass(frozen=True)
class BatchOp:
    """One operation of a batch: ``write`` (create or replace), ``create``, ``delete`` or ``rename``."""

    op: str
    path: str
    content: str | bytes | None = None
    new_path: str | None = None
    description: str | None = None
    if_sha256: str | None = None
    memory_id: str | None = None  # a new memory takes this id unless a live memory has it
    reverts: str | None = None  # revert-session: the session this version undoes


@dataclass(frozen=True)
class Refused:
    op: BatchOp
    error: GitmemError


@dataclass(frozen=True)
class BatchResult:
    versions: list[Version] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    commit: str | None = None


def _revived_id(state: ScopeState, memory_id: str | None) -> str | None:
    """``memory_id`` when a create may take it: well-formed and not the id of a live memory."""
    if memory_id is None or not is_id(memory_id, "mem"):
        return None
    if state.has_live_memory(memory_id):
        return None
    if isinstance(state, BatchState):
        if memory_id in state.taken_ids:
            return None
        state.taken_ids.add(memory_id)
    return memory_id


def _plan(state: ScopeState, op: BatchOp) -> Change | None:
    validate_path(op.path)
    if op.op in ("write", "create"):
        if op.content is None:
            raise InvalidInputError(f"{op.op} of {op.path} needs content")
        data = with_description(encode_content(op.content), op.description)
        blob = state.blob(op.path)
        if op.op == "write" and blob is not None:
            if blob.data == data:
                return None
            if op.if_sha256 is not None and sha256_hex(blob.data) != op.if_sha256:
                raise PreconditionFailedError(
                    f"{op.path} changed: its sha256 is {sha256_hex(blob.data)}, not {op.if_sha256}"
                )
            return Change("modified", op.path, data, state.memory_id(op.path))
        if op.op == "write" and op.if_sha256 is not None:  # as StoreCore.write: nothing there to match
            raise PreconditionFailedError(f"{op.path} does not exist, so it cannot match if_sha256")
        refuse_conflict(state, op.path)
        return Change("created", op.path, data, _revived_id(state, op.memory_id) or new_id("mem"))
    if op.op == "delete":
        blob = state.require(op.path)
        if op.if_sha256 is not None and sha256_hex(blob.data) != op.if_sha256:
            raise PreconditionFailedError(
                f"{op.path} changed: its sha256 is {sha256_hex(blob.data)}, not {op.if_sha256}"
            )
        return Change("deleted", op.path, None, state.memory_id(op.path))
    if op.op == "rename":
        if op.new_path is None:
            raise InvalidInputError(f"rename of {op.path} needs new_path")
        validate_path(op.new_path)
        blob = state.require(op.path)
        if op.if_sha256 is not None and sha256_hex(blob.data) != op.if_sha256:
            raise PreconditionFailedError(
                f"{op.path} changed: its sha256 is {sha256_hex(blob.data)}, not {op.if_sha256}"
            )
        data = blob.data if op.content is None else encode_content(op.content)
        if op.new_path == op.path:
            return None if data == blob.data else Change("modified", op.path, data, state.memory_id(op.path))
        refuse_conflict(state, op.new_path, ignore=op.path)
        return Change("modified", op.new_path, data, state.memory_id(op.path), previous_path=op.path)
    raise InvalidInputError(f"unknown batch operation {op.op!r}")


def apply_batch(
    store: StoreCore,
    ops: Sequence[BatchOp],
    *,
    scope: str = "main",
    actor: str | None = None,
    session: str | None = None,
    skip_refused: bool = False,
    progress: Callable[[int, int], None] | None = None,
    reviewed_by: str | None = None,
    caller: Caller | None = None,
) -> BatchResult:
    """Apply ``ops`` in order as one version each (no-ops skipped), moving the branch once.

    Every operation is planned (preconditions, conflicts, limits) against the tip plus the
    batch's earlier operations; then the commits are written, with pygit2 for small batches and
    ``git fast-import`` for large ones, and published by one compare-and-swap of the branch.
    A writer in review mode gets the batch on its proposal instead (gitmem.engine.proposals);
    ``reviewed_by`` publishes an accepted proposal (the reviewer's acl, a Gitmem-Reviewed-By trailer).
    """
    if reviewed_by is None:
        from gitmem.engine import (
            proposals,
        )  # cycle-ok: a routed write is planned by proposals with writer's own pieces

        admitted = access.admit_write(store, caller, scope, actor, session)
        actor, session = admitted.actor, admitted.session
        owner = proposals.route(store, scope, actor, session, admitted.review)
        if owner is not None:
            planners = [lambda st, op=op: _plan(st, op) for op in ops]
            done = proposals.propose(
                store, scope, planners, actor=actor, session=session, owner=owner, skip_refused=skip_refused
            )
            return BatchResult(done.versions, [Refused(ops[n], e) for n, e in done.refused], None)
    actor, session, limits = authorize(store, scope, actor, session, reviewed_by)
    with contextlib.ExitStack() as held:
        locked = False
        for attempt in range(MAX_ATTEMPTS):
            tip = store.tip(scope)
            state = BatchState(store, scope, tip)
            changes: list[Change] = []
            refused: list[Refused] = []
            for n, op in enumerate(ops):
                try:
                    change = _plan(state, op)
                    if change is not None and op.reverts is not None:
                        change = dataclasses.replace(change, reverts=op.reverts)
                    if change is not None:
                        check_limits(store, state, change, limits)
                except GitmemError as exc:
                    if not skip_refused:
                        raise
                    refused.append(Refused(op, exc))
                    continue
                if change is not None:
                    state.applied(change, current_size(state, change))
                    changes.append(change)
                if progress is not None:
                    progress(n + 1, len(ops))
            # A batch that grows the store by more than one memory's worth races like several
            # writers: it always checks and publishes under the store-bytes lock.
            if state.delta_bytes > limits.max_memory_bytes:
                state.needs_store_lock = True
            if state.needs_store_lock and not locked:
                held.enter_context(store_bytes_lock(store))
                locked = True
                # Only the store's total can have changed under us (this scope's tip is checked
                # by the compare-and-swap): re-plan only when it now leaves no room for the batch.
                if not _fits_now(store, scope, tip, state, limits):
                    continue
            if not changes:
                return BatchResult([], refused, str(tip) if tip is not None else None)
            now = int(time.time())
            written: list[pygit2.Oid] = []
            if len(changes) >= FAST_IMPORT_MIN:
                head, rows = _write_fast_import(store, scope, tip, changes, actor, session, now, reviewed_by)
                written = [pygit2.Oid(hex=r.commit_id) for r in rows]  # in one pack: the commits tell
            else:
                # Two versions or more: their objects go into one pack, written in-process.
                staging = store.staged() if len(changes) >= PACK_MIN else contextlib.nullcontext()
                with staging as stage:
                    head, rows = _write_pygit2(
                        store, scope, tip, changes, actor, session, now, written, reviewed_by, stage
                    )
                    if stage is not None and not denied_since_planned(store, rows):
                        stage.write()
            if denied_since_planned(store, rows):
                continue  # redacted meanwhile: re-planned, that write is refused
            contents = {
                r.blob: c.data for r, c in zip(rows, changes, strict=True) if r.blob and c.data is not None
            }
            if publish_recorded(store, scope, tip, head, written, rows, contents):
                record_flags(store, scope, changes, rows, actor, session)
                maintain_quietly(store)
                logging.getLogger("gitmem.write").info(
                    "batch of %d version(s) in scope %r of %s (commit %s), %d refused",
                    len(rows), scope, store.name, str(head)[:12], len(refused),
                )  # fmt: skip
                return BatchResult([version_from_row(r) for r in rows], refused, str(head))
            backoff(attempt)
    raise ConflictError(f"could not write the batch to scope {scope!r}: the branch kept moving; try again")


def _fits_now(store: StoreCore, scope: str, tip: pygit2.Oid | None, state: BatchState, limits: Any) -> bool:
    """Whether the batch planned on ``state`` still fits ``max_store_bytes`` at every step, counted
    afresh over every scope (under the store-bytes lock), with this scope still at ``tip``."""
    if store.tip(scope) != tip:
        return False
    fresh = ScopeState(store, scope, tip).store_bytes(exact=True)
    return bool(fresh + state.peak_delta <= limits.max_store_bytes)


# From this many versions on, ``git fast-import`` writes the pack (it deltas, and holds less in
# memory); below, the objects are staged in memory and written as one pack in-process, which
# spares spawning git and reparsing the stream (a single version stays loose).
FAST_IMPORT_MIN = 20_000
PACK_MIN = 2


def _write_pygit2(
    store: StoreCore,
    scope: str,
    tip: pygit2.Oid | None,
    changes: list[Change],
    actor: str,
    session: str | None,
    now: int,
    written: list[pygit2.Oid],
    reviewed_by: str | None = None,
    stage: Staging | None = None,
) -> tuple[pygit2.Oid, list[VersionRow]]:
    state = ScopeState(store, scope, tip)
    parent = tip
    rows = []
    for change in changes:
        parent, row = commit_change(
            store, state, change, parent, actor, session, now, written, reviewed_by=reviewed_by
        )
        rows.append(row)
        if stage is not None:
            stage.write_if_large()
    assert parent is not None
    return parent, rows


def _write_fast_import(
    store: StoreCore,
    scope: str,
    tip: pygit2.Oid | None,
    changes: list[Change],
    actor: str,
    session: str | None,
    now: int,
    reviewed_by: str | None = None,
) -> tuple[pygit2.Oid, list[VersionRow]]:
    version_ids = [new_id("memver") for _ in changes]
    pending = []
    for change, vid in zip(changes, version_ids, strict=True):
        files: list[tuple[str, bytes | None]] = []
        if change.previous_path is not None and change.previous_path != change.path:
            files.append((change.previous_path[1:], None))
        files.append((change.path[1:], change.data))
        message = format_message(
            change.operation,
            change.path,
            vid,
            change.memory_id,
            actor,
            session,
            change.previous_path,
            change.reverts,
            flag=flag_trailer(change.flags),
            reviewed_by=reviewed_by,
        )
        pending.append(Pending(message, actor, now, files))
    commits = write_commits(store, pending, tip)
    rows = [
        make_row(
            scope,
            change,
            vid,
            actor,
            session,
            now,
            pygit2.hash(change.data) if change.data is not None else None,
            commit,
        )
        for change, vid, commit in zip(changes, version_ids, commits, strict=True)
    ]
    return commits[-1], rows
