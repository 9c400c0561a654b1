"""``session sync --watch``: poll the mounts and the stores, sync after a quiet period (debounce)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from gitmem.errors import GitmemError
from gitmem.sessions import state
from gitmem.sessions.lifecycle import Home, sync_session
from gitmem.sessions.mount import read_marker, snapshot
from gitmem.sessions.state import Session
from gitmem.sessions.sync import SyncReport
from gitmem.store import open_store


def _files(session: Session) -> tuple[frozenset[tuple[str, int, int]], ...]:
    return tuple(snapshot(Path(m.path)) for m in session.mounts)


def _tips(session: Session) -> tuple[str | None, ...]:
    out = []
    for m in session.mounts:
        with open_store(m.store_path) as store:
            out.append(store.tip(m.scope))
    return tuple(out)


def _bases(session: Session, tips: tuple[str | None, ...]) -> tuple[str | None, ...]:
    """What each mount was last synced against (a mount that cannot sync: the tip, so it stays quiet)."""
    out = []
    for m, tip in zip(session.mounts, tips, strict=True):
        try:
            out.append(read_marker(m).base)
        except GitmemError:
            out.append(tip)
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
        # Files as the sync left them; stores as it saw them (a write since then is a change).
        settled = (_files(session), _bases(session, _tips(session)))
        if on_sync is not None:
            on_sync(report)
        return settled

    settled = run()
    seen, changed_at = settled, time.monotonic()
    while (deadline is None or time.monotonic() < deadline) and not (should_stop and should_stop()):
        time.sleep(poll)
        now = (_files(session), _tips(session))
        if now != seen:
            seen, changed_at = now, time.monotonic()
        elif now != settled and time.monotonic() - changed_at >= debounce:
            settled = seen = run()
    return syncs
