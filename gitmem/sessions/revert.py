"""``revert-session``: new versions that undo everything one session wrote in a store.

The operation is the library's (``Store.revert_session``: the caller's access, review mode and
attribution are decided there, docs/access.md); the sessions face offers it by this name.
"""

from __future__ import annotations

from gitmem.model.caller import Caller
from gitmem.store import RevertItem, RevertResult, Store

__all__ = ["RevertItem", "RevertResult", "revert_session"]


def revert_session(
    store: Store,
    session_id: str,
    *,
    scope: str | None = None,
    dry_run: bool = False,
    actor: str | None = None,
    session: str | None = None,
    caller: Caller | None = None,
) -> RevertResult:
    """Undo every version ``session_id`` wrote in ``store`` (:meth:`gitmem.Store.revert_session`)."""
    return store.revert_session(
        session_id, scope=scope, dry_run=dry_run, actor=actor, session=session, caller=caller
    )
