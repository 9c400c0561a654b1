"""History verbs of :class:`gitmem.Store`: versions, diffs, restore, redaction, batches, search."""

from __future__ import annotations

import builtins
import datetime as dt
from typing import TYPE_CHECKING, Any

from gitmem.engine.batch import BatchOp, BatchResult
from gitmem.model.caller import Caller

if TYPE_CHECKING:
    from gitmem.audit.redaction_plan import Redaction
    from gitmem.engine.core import StoreCore
    from gitmem.engine.hybrid import SearchResults
    from gitmem.engine.revert import RevertResult
    from gitmem.model.versions import Version


class History:
    """History verbs (mixed into :class:`gitmem.Store`)."""

    _core: StoreCore

    def versions(
        self,
        path: str | None = None,
        *,
        memory_id: str | None = None,
        scope: str | None = None,
        session: str | None = None,
        actor: str | None = None,
        operation: str | None = None,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        limit: int | None = None,
        caller: Caller | None = None,
    ) -> builtins.list[Version]:
        """Versions, newest first, filtered by path/memory, scope, session, actor, operation, time.
        A scope-confined ``caller`` sees only its scope's (docs/access.md)."""
        from gitmem.engine import access, history

        scope = access.history_scope(self._core, caller, scope)
        return history.versions(
            self._core,
            path,
            memory_id=memory_id,
            scope=scope,
            session=session,
            actor=actor,
            operation=operation,
            since=since,
            until=until,
            limit=limit,
        )

    def version(self, version_id: str, *, scope: str | None = None, caller: Caller | None = None) -> Version:
        """One version by id; ``scope`` picks that scope's row of a version forked scopes share
        (without it: main first, then by scope name). A version of a scope ``caller`` may not read
        is not found."""
        from gitmem.engine import access, history

        scope = access.history_scope(self._core, caller, scope) if caller is not None else scope
        v = history.version(self._core, version_id, scope)
        access.admit_version(self._core, caller, version_id, v.scope)
        return v

    def version_scopes(self, version_id: str) -> builtins.list[str]:
        """Every scope whose history holds version ``version_id`` (forked scopes share versions)."""
        return sorted({r.scope for r in self._core.index.version_rows("id=?", (version_id,))})

    def diff(self, old_id: str, new_id: str | None = None, *, caller: Caller | None = None) -> str:
        """A unified diff from ``old_id`` to ``new_id`` (default: from the version before ``old_id``);
        with a ``caller``, both must be versions it may read."""
        from gitmem.engine import history

        if caller is not None:
            for vid in (old_id, new_id):
                if vid is not None:
                    self.version(vid, caller=caller)
        return history.diff(self._core, old_id, new_id)

    def state_at(
        self, at: str, *, scope: str = "main", caller: Caller | None = None
    ) -> tuple[str | None, str | None]:
        """Which state of ``scope`` the moment ``at`` (a time, version or commit) names: ``(commit id,
        version time)``, both None before the scope's first version (docs/point-in-time.md); a
        read-only session mount of a past state uses it."""
        from gitmem.engine import access, past

        access.admit_read(self._core, caller, scope)
        state = past.state_at(self._core, scope, at)
        return state.commit, state.time

    def diff_at(self, start: str, end: str, *, scope: str = "main") -> str:
        """The whole scope's unified diff between two moments (times, versions or commits): what
        ``git diff`` of the two trees prints (docs/point-in-time.md)."""
        from gitmem.engine import past

        return past.diff_between(self._core, scope, start, end)

    def restore(
        self,
        version_id: str,
        *,
        actor: str | None = None,
        session: str | None = None,
        scope: str | None = None,
        caller: Caller | None = None,
    ) -> Version | None:
        """Write an old version's content back as a new version (no history rewrite), in ``scope``
        (default: the scope :meth:`version` answers for)."""
        from gitmem.engine import memories

        return memories.restore(
            self._core, version_id, actor=actor, session=session, scope=scope, caller=caller
        )

    def redact(
        self,
        version_id: str,
        *,
        reason: str,
        actor: str | None = None,
        dry_run: bool = False,
        caller: Caller | None = None,
    ) -> Redaction:
        """Erase a version's content from history, keeping who and when (see docs/security.md).
        With a ``caller``: it needs the ``redact`` right, may not be in review mode and must be able
        to write every scope whose history holds that content (docs/access.md)."""
        from gitmem.audit import redact

        return redact.redact(
            self._core, version_id, reason=reason, actor=actor, dry_run=dry_run, caller=caller
        )

    def redact_pattern(
        self,
        pattern: str,
        *,
        reason: str,
        scope: str | None = None,
        actor: str | None = None,
        dry_run: bool = False,
        remember: bool = True,
        caller: Caller | None = None,
    ) -> Redaction:
        """Redact every match of ``pattern`` in history (``scope`` only when given); ``remember``
        keeps the pattern so that later writes and pushes matching it are refused."""
        from gitmem.audit import redact

        return redact.redact_pattern(
            self._core,
            pattern,
            reason=reason,
            scope=scope,
            actor=actor,
            dry_run=dry_run,
            remember=remember,
            caller=caller,
        )

    def batch(
        self,
        ops: builtins.list[BatchOp],
        *,
        scope: str = "main",
        actor: str | None = None,
        session: str | None = None,
        skip_refused: bool = False,
        caller: Caller | None = None,
    ) -> BatchResult:
        """Apply ``ops`` (:class:`BatchOp`) in order as one version each, moving the scope once
        (a review-mode ``caller``: onto its proposal); ``skip_refused`` keeps going past refusals."""
        from gitmem.engine.batch import apply_batch

        return apply_batch(
            self._core,
            ops,
            scope=scope,
            actor=actor,
            session=session,
            skip_refused=skip_refused,
            caller=caller,
        )

    def check_writable(self) -> None:
        """ForbiddenError when nothing may be written: an archived store, or a read-only clone."""
        self._core.check_writable()

    def redaction_receipt(self, redaction_id: str, *, caller: Caller | None = None) -> dict[str, Any]:
        """The tlog-proof receipt of a redaction, ``pending`` until the witnesses' quorum cosigned
        (docs/transparency.md#receipts). A ``caller`` that may not read every scope the redaction
        rewrote is refused (ForbiddenError): the receipt is its whole ledger entry or nothing."""
        from gitmem.audit import redaction_receipts as rr

        return rr.receipt(self._core, redaction_id, rr.workspace_policy(self._core), caller=caller).to_dict()

    def search(
        self,
        query: str,
        *,
        scope: str = "main",
        limit: int = 10,
        path_prefix: str | None = None,
        raw: bool = False,
        caller: Caller | None = None,
        mode: str = "lexical",
        at: str | None = None,
        background: str = "thread",
    ) -> SearchResults:
        """Memories at the head of ``scope`` matching ``query``, best first. ``mode``: ``lexical``,
        ``semantic``, ``hybrid`` or ``auto`` (docs/search.md); the result's ``mode`` says which answered.
        With ``at``: lexical search over the scope as it was then (docs/point-in-time.md). Vectors
        that are behind catch up off the caller's path: in a daemon ``thread``, or (a one-shot
        process) a detached ``process``."""
        from gitmem.engine import access, hybrid

        access.admit_read(self._core, caller, scope)

        if at is not None:
            return hybrid.search_at(
                self._core, query, scope=scope, at=at, limit=limit, path_prefix=path_prefix, mode=mode
            )

        return hybrid.search(
            self._core,
            query,
            scope=scope,
            limit=limit,
            path_prefix=path_prefix,
            raw=raw,
            mode=mode,
            background=background,
        )

    def revert_session(
        self,
        session_id: str,
        *,
        scope: str | None = None,
        dry_run: bool = False,
        actor: str | None = None,
        session: str | None = None,
        caller: Caller | None = None,
    ) -> RevertResult:
        """Undo every version ``session_id`` wrote (in ``scope``, or every scope) as new versions:
        prior content back, created memories deleted, deleted ones recreated under their ids.
        ``caller`` (docs/access.md): a scope-confined caller reverts in its scope only, a
        review-mode caller's revert becomes its proposal, a read-only one is refused."""
        from gitmem.engine.revert import revert_session

        return revert_session(
            self._core, session_id, scope=scope, dry_run=dry_run, actor=actor, session=session, caller=caller
        )
