"""``revert-session``: new versions that undo everything one session wrote in a store.

For every memory the session touched, the state before the session's first version of it comes
back: its prior content (and path) is restored, a memory the session created is deleted, and one it
deleted is recreated under its old memory id. Nothing is rewritten; each undo is a new version,
guarded by ``if_sha256`` against the head it was planned on.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pygit2

from gitmem.engine.batch import BatchOp, apply_batch
from gitmem.engine.core import StoreCore
from gitmem.engine.rows import VersionRow
from gitmem.errors import NotFoundError
from gitmem.model.caller import Caller
from gitmem.model.issues import FileIssue
from gitmem.model.paths import validate_scope
from gitmem.model.versions import Version, validate_session

_ORDER = {"delete": 0, "rename": 1, "restore": 2, "recreate": 3}


@dataclass(frozen=True)
class RevertItem:
    """One memory the revert changes back."""

    scope: str
    memory_id: str
    action: str  # delete | rename | restore | recreate
    path: str  # where the memory is now (recreate: where it comes back)
    target_path: str | None  # where it ends up (None: deleted)
    restores_version: str | None  # the version whose content comes back
    later_versions: int  # versions by others after the session's, also undone


@dataclass(frozen=True)
class RevertResult:
    store: str
    session: str
    dry_run: bool
    items: list[RevertItem] = field(default_factory=list)
    versions: list[Version] = field(default_factory=list)
    refused: list[FileIssue] = field(default_factory=list)


def revert_session(
    store: StoreCore,
    session_id: str,
    *,
    scope: str | None = None,
    dry_run: bool = False,
    actor: str | None = None,
    session: str | None = None,
    caller: Caller | None = None,
) -> RevertResult:
    """Undo every version ``session_id`` wrote in ``store`` (in ``scope``, or in every scope).
    ``caller``: who asks (docs/access.md): a scope-confined caller reverts in its scope only; a
    review-mode caller's revert becomes its proposal; a read-only one is refused."""
    validate_session(session_id)
    if scope is None and caller is not None:
        scope = caller.scope
    if scope is not None:
        validate_scope(scope)
        if caller is not None:  # before looking: whether a session wrote elsewhere is not its business
            caller.check_read(store.settings.id, scope)
    if not dry_run:
        store.check_writable()
    plans = _plan(store, session_id, scope)
    if plans is None:
        raise NotFoundError(f"session {session_id} wrote no versions in store {store.name!r}")
    items = sorted((item for item, _op in plans), key=lambda i: (i.scope, _ORDER[i.action], i.path))
    result = RevertResult(store.name, session_id, dry_run, items)
    if dry_run:
        return result
    for sc in sorted({item.scope for item in items}):  # every scope allowed before anything is written
        if caller is not None:
            caller.check_write(store.settings.id, sc)
    for sc in sorted({item.scope for item in items}):
        ops = [
            op
            for item, op in sorted(plans, key=lambda p: (_ORDER[p[0].action], p[0].path))
            if item.scope == sc and op is not None
        ]
        ops = [dataclasses.replace(op, reverts=session_id) for op in ops]
        batch = apply_batch(
            store, ops, scope=sc, actor=actor, session=session, skip_refused=True, caller=caller
        )
        result.versions.extend(batch.versions)
        result.refused.extend(FileIssue(r.op.path, r.error.message) for r in batch.refused)
    result.refused.extend(
        FileIssue(item.path, f"{item.restores_version} was redacted: its content cannot come back")
        for item, op in plans
        if op is None
    )
    if result.versions:  # the audit links the revert to the session it undid
        from gitmem.engine import ledger

        ledger.append(
            store,
            "revert_session",
            {
                "session": session_id,
                "scope": scope,
                "versions": [{"version": v.id, "scope": v.scope} for v in result.versions],
                "refused": len(result.refused),
            },
            actor=result.versions[0].actor,
        )
    return result


def _plan(
    store: StoreCore, session_id: str, scope: str | None
) -> list[tuple[RevertItem, BatchOp | None]] | None:
    """What to undo, memory by memory (empty: all undone already); None: the session wrote nothing."""
    index = store.index
    if scope is None:
        index.ensure_all()
        rows = index.version_rows("session=?", (session_id,))
    else:
        index.ensure(scope)
        rows = index.version_rows("session=? AND scope=?", (session_id, scope))
    if not rows:
        return None
    first: dict[tuple[str, str], VersionRow] = {}
    for row in rows:  # newest first: the last one seen is the session's first version
        first[(row.scope, row.memory_id)] = row
    out: list[tuple[RevertItem, BatchOp | None]] = []
    for (sc, mid), row in sorted(first.items()):
        planned = _plan_memory(store, session_id, sc, mid, row)
        if planned is not None:
            out.append(planned)
    return out


_BEFORE = "memory_id=? AND scope=? AND (created_at < ? OR (created_at = ? AND seq < {seq}))"
_AFTER = "memory_id=? AND scope=? AND (session IS NULL OR session != ?) AND seq > {seq}"
_SEQ = "(SELECT seq FROM versions WHERE id=? AND scope=?)"


def _plan_memory(
    store: StoreCore, session_id: str, scope: str, mid: str, first: VersionRow
) -> tuple[RevertItem, BatchOp | None] | None:
    index = store.index
    prior_rows = index.version_rows(
        _BEFORE.format(seq=_SEQ), (mid, scope, first.created_at, first.created_at, first.id, scope), 1
    )
    prior = prior_rows[0] if prior_rows and prior_rows[0].operation != "deleted" else None
    later = len(index.version_rows(_AFTER.format(seq=_SEQ), (mid, scope, session_id, first.id, scope)))
    head = index.head_by_memory(scope, mid)
    if prior is None:
        if head is None:
            return None
        item = RevertItem(scope, mid, "delete", head.path, None, None, later)
        return item, BatchOp("delete", head.path, if_sha256=head.sha256)
    if prior.redaction_id is not None or prior.blob is None:
        item = RevertItem(
            scope, mid, "restore", head.path if head else prior.path, prior.path, prior.id, later
        )
        return item, None  # redacted: nothing to bring back
    content = store.blob_data(pygit2.Oid(hex=prior.blob))
    if head is None:
        item = RevertItem(scope, mid, "recreate", prior.path, prior.path, prior.id, later)
        return item, BatchOp("create", prior.path, content=content, memory_id=mid)
    if head.path != prior.path:
        item = RevertItem(scope, mid, "rename", head.path, prior.path, prior.id, later)
        op = BatchOp("rename", head.path, new_path=prior.path, content=content, if_sha256=head.sha256)
        return item, op
    if head.sha256 == prior.sha256:
        return None
    item = RevertItem(scope, mid, "restore", head.path, head.path, prior.id, later)
    return item, BatchOp("write", head.path, content=content, if_sha256=head.sha256)
