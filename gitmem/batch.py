"""Batches: many versions in one scope, committed as a chain and published with one ref move.

Import and session sync use this. The branch moves once, by compare-and-swap, so readers see the
whole batch or none of it; a lost race re-plans the whole batch against the new tip. With
``skip_refused`` a refused operation (bad path, limit, conflict) is reported and the rest applies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pygit2

from gitmem.errors import ConflictError, GitmemError, InvalidInputError, PreconditionFailedError
from gitmem.ids import new_id
from gitmem.index import VersionRow
from gitmem.memories import (
    MAX_ATTEMPTS,
    Change,
    ScopeState,
    _encode,
    _refuse_conflict,
    _sha,
    _version,
    _with_description,
    backoff,
    check_limits,
    commit_change,
    current_size,
)
from gitmem.paths import validate_path, validate_scope
from gitmem.store import Store
from gitmem.versions import Version, resolve_actor, validate_session


@dataclass(frozen=True)
class BatchOp:
    """One operation of a batch: ``write`` (create or replace), ``create``, ``delete`` or ``rename``."""

    op: str
    path: str
    content: str | bytes | None = None
    new_path: str | None = None
    description: str | None = None
    if_sha256: str | None = None
    memory_id: str | None = None  # for ``create``: revive this memory id


@dataclass(frozen=True)
class Refused:
    op: BatchOp
    error: GitmemError


@dataclass(frozen=True)
class BatchResult:
    versions: list[Version] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    commit: str | None = None


def _plan(state: ScopeState, op: BatchOp) -> Change | None:
    validate_path(op.path)
    if op.op in ("write", "create"):
        if op.content is None:
            raise InvalidInputError(f"{op.op} of {op.path} needs content")
        data = _with_description(_encode(op.content), op.description)
        blob = state.blob(op.path)
        if op.op == "write" and blob is not None:
            if blob.data == data:
                return None
            if op.if_sha256 is not None and _sha(blob.data) != op.if_sha256:
                raise PreconditionFailedError(
                    f"{op.path} changed: its sha256 is {_sha(blob.data)}, not {op.if_sha256}"
                )
            return Change("modified", op.path, data, state.memory_id(op.path))
        if op.op == "write" and op.if_sha256 is not None:  # as Store.write: nothing there to match
            raise PreconditionFailedError(f"{op.path} does not exist, so it cannot match if_sha256")
        _refuse_conflict(state, op.path)
        return Change("created", op.path, data, op.memory_id or new_id("mem"))
    if op.op == "delete":
        blob = state.require(op.path)
        if op.if_sha256 is not None and _sha(blob.data) != op.if_sha256:
            raise PreconditionFailedError(
                f"{op.path} changed: its sha256 is {_sha(blob.data)}, not {op.if_sha256}"
            )
        return Change("deleted", op.path, None, state.memory_id(op.path))
    if op.op == "rename":
        if op.new_path is None:
            raise InvalidInputError(f"rename of {op.path} needs new_path")
        validate_path(op.new_path)
        blob = state.require(op.path)
        if op.if_sha256 is not None and _sha(blob.data) != op.if_sha256:
            raise PreconditionFailedError(
                f"{op.path} changed: its sha256 is {_sha(blob.data)}, not {op.if_sha256}"
            )
        data = blob.data if op.content is None else _encode(op.content)
        if op.new_path == op.path:
            return None if data == blob.data else Change("modified", op.path, data, state.memory_id(op.path))
        _refuse_conflict(state, op.new_path, ignore=op.path)
        return Change("modified", op.new_path, data, state.memory_id(op.path), previous_path=op.path)
    raise InvalidInputError(f"unknown batch operation {op.op!r}")


def apply_batch(
    store: Store,
    ops: Sequence[BatchOp],
    *,
    scope: str = "main",
    actor: str | None = None,
    session: str | None = None,
    skip_refused: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> BatchResult:
    """Apply ``ops`` in order as one version each (no-ops skipped), moving the branch once."""
    validate_scope(scope)
    session = validate_session(session)
    actor = resolve_actor(actor, session)
    store.check_writable()
    limits = store.settings.limits
    for attempt in range(MAX_ATTEMPTS):
        tip = store.tip(scope)
        state = ScopeState(store, scope, tip)
        parent = tip
        rows: list[VersionRow] = []
        refused: list[Refused] = []
        for n, op in enumerate(ops):
            try:
                change = _plan(state, op)
                if change is not None:
                    check_limits(store, state, change, limits)
            except GitmemError as exc:
                if not skip_refused:
                    raise
                refused.append(Refused(op, exc))
                continue
            if change is None:
                continue
            old_size = current_size(state, change)
            parent_commit, row = commit_change(store, state, change, parent, actor, session)
            parent = parent_commit
            state.applied(change, old_size)
            rows.append(row)
            if progress is not None:
                progress(n + 1, len(ops))
        if parent == tip:
            return BatchResult([], refused, str(tip) if tip is not None else None)
        assert isinstance(parent, pygit2.Oid)
        store.sync_all()
        if store.cas_ref(scope, tip, parent):
            store.sync_ref(scope)
            store.index.record(scope, tip, parent, rows)
            return BatchResult([_version(r) for r in rows], refused, str(parent))
        backoff(attempt)
    raise ConflictError(f"could not write the batch to scope {scope!r}: the branch kept moving; try again")
