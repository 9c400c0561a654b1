"""Batches: many versions in one scope, committed as a chain and published with one ref move.

Import and session sync use this: a front end of the commit pipeline (gitmem.engine.pipeline),
one caller with many operations. The branch moves once, by compare-and-swap, so readers see the
whole batch or none of it; a lost race re-plans the whole batch against the new tip. With
``skip_refused`` a refused operation (bad path, limit, conflict) is reported and the rest applies.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gitmem.engine import access, pipeline, proposals
from gitmem.engine.core import StoreCore
from gitmem.engine.memories import refuse_conflict, with_description
from gitmem.engine.overlay import BatchState
from gitmem.engine.writer import (
    Change,
    ScopeState,
    authorize,
    encode_content,
    maintain_quietly,
    sha256_hex,
    version_from_row,
)
from gitmem.errors import GitmemError, InvalidInputError, PreconditionFailedError
from gitmem.ids import is_id, new_id
from gitmem.model.caller import Caller
from gitmem.model.paths import validate_path
from gitmem.model.versions import Version


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
    batch's earlier operations; then the commits are written and published by one compare-and-swap
    of the branch: the commit pipeline (gitmem.engine.pipeline), with ``git fast-import`` for huge
    batches. A writer in review mode gets the batch on its proposal instead (gitmem.engine.proposals);
    ``reviewed_by`` publishes an accepted proposal (the reviewer's acl, a Gitmem-Reviewed-By trailer).
    """
    if reviewed_by is None:
        admitted = access.admit_write(store, caller, scope, actor, session)
        actor, session = admitted.actor, admitted.session
        owner = proposals.route(store, scope, actor, session, admitted.review)
        if owner is not None:
            proposed = proposals.propose(
                store,
                scope,
                planners(ops),
                actor=actor,
                session=session,
                owner=owner,
                skip_refused=skip_refused,
            )
            return BatchResult(proposed.versions, [Refused(ops[n], e) for n, e in proposed.refused], None)
    actor, session, limits = authorize(store, scope, actor, session, reviewed_by)
    items = [pipeline.Item(plan, actor, session, limits) for plan in planners(ops)]
    done = pipeline.commit(
        store, scope, lambda _tip: items, catch=GitmemError if skip_refused else (),
        reviewed_by=reviewed_by, progress=progress, what="write the batch",
    )  # fmt: skip
    refused = [Refused(ops[n], e) for n, e in sorted(done.outcome.items()) if isinstance(e, GitmemError)]
    if done.head is None:
        return BatchResult([], refused, str(done.tip) if done.tip is not None else None)
    maintain_quietly(store, len(done.rows))
    logging.getLogger("gitmem.write").info(
        "batch of %d version(s) in scope %r of %s (commit %s), %d refused",
        len(done.rows), scope, store.name, str(done.head)[:12], len(refused),
    )  # fmt: skip
    return BatchResult([version_from_row(r) for r in done.rows], refused, str(done.head))


def planners(ops: Sequence[BatchOp]) -> list[Callable[[ScopeState], Change | None]]:
    """One planner (``state -> Change | None``) per operation."""
    return [_planner(op) for op in ops]


def _planner(op: BatchOp) -> Callable[[ScopeState], Change | None]:
    def plan(state: ScopeState) -> Change | None:
        change = _plan(state, op)
        if change is not None and op.reverts is not None:
            change = dataclasses.replace(change, reverts=op.reverts)
        return change

    return plan
