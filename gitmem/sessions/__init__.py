"""Sessions: mount stores as directories, sync changes back as versions (docs/architecture.md#sessions).

``start_session`` attaches up to 8 stores and materialises each at ``<root>/<slug>/``;
``sync_session`` turns every change in read-write mounts into versions tagged with the session
(one batch per store), merging with changes others made meanwhile; ``end_session`` syncs and
unmounts; ``revert_session`` undoes what a session wrote. Modules: ``state`` (records), ``mount``
(directories and markers), ``sync`` (3-way sync), ``prompt``, ``lifecycle``, ``revert``, ``watch``.
"""

from __future__ import annotations

from gitmem.model.issues import FileIssue
from gitmem.sessions.lifecycle import (
    EndResult,
    SessionDetail,
    end_session,
    list_sessions,
    prompt_for,
    show_session,
    start_session,
    sync_session,
)
from gitmem.sessions.prompt import PROMPT_FILE, system_prompt
from gitmem.sessions.revert import RevertItem, RevertResult, revert_session
from gitmem.sessions.state import MAX_STORES, Mount, Session, StoreSpec, parse_spec
from gitmem.sessions.sync import Conflict, MountSync, SyncReport, conflict_path
from gitmem.sessions.watch import watch_session

__all__ = [
    "MAX_STORES",
    "PROMPT_FILE",
    "Conflict",
    "EndResult",
    "FileIssue",
    "Mount",
    "MountSync",
    "RevertItem",
    "RevertResult",
    "Session",
    "SessionDetail",
    "StoreSpec",
    "SyncReport",
    "conflict_path",
    "end_session",
    "list_sessions",
    "parse_spec",
    "prompt_for",
    "revert_session",
    "show_session",
    "start_session",
    "sync_session",
    "system_prompt",
    "watch_session",
]
