"""``session sync --watch``: poll the mounts and the stores, sync after a quiet period (debounce)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from gitmem.sessions import state
from gitmem.sessions.lifecycle import Home, sync_session
from gitmem.sessions.mount import snapshot
from gitmem.sessions.state import Session
from gitmem.sessions.sync import SyncReport
from gitmem.store import open_store


def _look(session: Session) -> tuple[object, ...]:
    """What a sync would react to: every mount's files (mtime, size) and every store's tip."""
    out: list[object] = []
    for m in session.mounts:
        out.append(snapshot(Path(m.path)))
        with open_store(m.store_path) as store:
            out.append(store.tip(m.scope))
    return tuple(out)


def watch_session(
    session_id: str | None = None,
    *,
    home: Home = None,
    actor: str | None = None,
    debounce: float = 1.0,
    poll: float = 0.25,
    max_seconds: float | None = None,
    on_sync: Callable[[SyncReport], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> int:
    """Sync now, then whenever the mounts or stores change and stay quiet for ``debounce`` seconds.

    Runs until ``max_seconds`` pass, ``should_stop()`` is true, or the process is interrupted.
    Returns the number of syncs made; ``on_sync`` receives each report.
    """
    session = state.resolve(session_id, home)
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    syncs = 0

    def run() -> tuple[object, ...]:
        nonlocal syncs
        report = sync_session(session.id, home=home, actor=actor)
        syncs += 1
        if on_sync is not None:
            on_sync(report)
        return _look(session)

    settled = run()
    seen, changed_at = settled, time.monotonic()
    while (deadline is None or time.monotonic() < deadline) and not (should_stop and should_stop()):
        time.sleep(poll)
        now = _look(session)
        if now != seen:
            seen, changed_at = now, time.monotonic()
        elif now != settled and time.monotonic() - changed_at >= debounce:
            settled = seen = run()
    return syncs
