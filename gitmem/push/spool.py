"""Pushes spooled by the post-receive shim, recorded by the next gitmem process (docs/durability.md).

The shim (``gitmem/push/hooks/post-receive``) starts no Python: it writes one file per push to
``$GIT_DIR/gitmem/push-spool/<time>-<pid>.push``, flushed before the push returns, holding the ref
updates, the push time and the variables that say who pushed (:data:`SPOOLED_ENV` and the push
options). :func:`drain` turns each into the
push log line and the ledger entry the hook used to write at once (who pushed is decided by
:func:`gitmem.push.pushenv.pusher`, as before); the index catches up from git by itself.
"""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from gitmem import config
from gitmem.git.locks import file_lock

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

_local = threading.local()
SPOOL_DIR = "push-spool"
SPOOL_LOCK = "push-spool.lock"
HEADER = "gitmem-push-spool 1"
REDACTION_JOURNAL = "journal.json"
# The variables the shim records: every one gitmem.push.hook reads to tell who pushed (a test keeps
# this, the shim and the hook in step).
SPOOLED_ENV = (
    "REMOTE_USER",
    "GL_USERNAME",
    "GITEA_PUSHER_NAME",
    "GL_USER",
    "GITMEM_ACTOR",
    "GITMEM_PUSH_SESSION",  # gitmem serve's git over HTTP: the pushing token's session
)  # a redaction under way: its recovery goes first


class SpoolRecord:
    """One spooled push: its time, the hook variables it saw, the ref updates (git's stdin)."""

    def __init__(self, time: str, env: dict[str, str], updates: str) -> None:
        self.time = time
        self.env = env
        self.updates = updates


def parse(text: str) -> SpoolRecord | None:
    """The record of one spool file, or None when it is not a whole one."""
    lines = text.split("\n")
    if not lines or lines[0] != HEADER or "end" not in lines:
        return None
    time, env, updates = "", {}, []
    for line in lines[1 : lines.index("end")]:
        kind, _, rest = line.partition(" ")
        if kind == "time":
            time = rest
        elif kind == "env":
            name, _, value = rest.partition(" ")
            try:
                env[name] = bytes.fromhex(value).decode("utf-8", "surrogateescape")
            except ValueError:
                return None
        elif kind == "update":
            updates.append(rest)
        else:
            return None
    return SpoolRecord(time, env, "".join(u + "\n" for u in updates))


def pending(store: StoreCore) -> list[Path]:
    """Spooled pushes not yet recorded, oldest first (one directory listing)."""
    return spooled(store.gitmem_dir)


def spooled(gitmem_dir: Path) -> list[Path]:
    """:func:`pending`, by the store's ``$GIT_DIR/gitmem`` (for a reader that holds no handle)."""
    try:
        names = os.listdir(gitmem_dir / SPOOL_DIR)
    except OSError:
        return []
    return [gitmem_dir / SPOOL_DIR / n for n in sorted(names, key=_order) if n.endswith(".push")]


def _order(name: str) -> tuple[int, str]:
    head = name.split("-", 1)[0]
    return (int(head) if head.isdigit() else 0, name)


def drain(store: StoreCore) -> int:
    """Record every spooled push (push log, ledger) and remove its file; returns how many.

    Under a lock, so two processes never record one push twice; a crash between the ledger
    entry and the file's removal records that push once more on the next drain (never zero times).
    A store this process may not write, a clone, one with a redaction under way, or any store
    while a git hook runs in this process's environment (a quarantine) is left as is."""
    if store.is_clone or getattr(_local, "draining", False) or not pending(store):
        return 0
    if (store.gitmem_dir / REDACTION_JOURNAL).exists() or not os.access(store.gitmem_dir, os.W_OK):
        return 0
    env = config.env_snapshot()
    if env.get("GIT_QUARANTINE_PATH") or env.get("GIT_OBJECT_DIRECTORY"):
        # Inside a receive hook: objects written here go to the push's quarantine, which git
        # deletes if the push is refused; a ledger entry written now could point at nothing.
        return 0
    done = 0
    _local.draining = True  # recording a push catches the index up, which drains: not again here
    try:
        done = _drain_locked(store)
    finally:
        _local.draining = False
    if done:
        with contextlib.suppress(Exception):
            store.maintain()  # every push adds a pack: keep them geometric
    return done


def _drain_locked(store: StoreCore) -> int:
    from gitmem.push import postreceive, pushenv, refupdates

    done = 0
    with file_lock(store.gitmem_dir / SPOOL_LOCK):
        for path in pending(store):  # listed again under the lock
            try:
                record = parse(path.read_text(encoding="utf-8", errors="surrogateescape"))
            except FileNotFoundError:
                continue
            if record is None:
                path.rename(path.with_name(path.name + ".bad"))
                continue
            # What post_receive did at once, with the variables the shim saw.
            updates = refupdates.parse_updates(record.updates)
            options = pushenv.push_options(record.env)
            trust = bool(store.settings.acl.get("trust_push_actor"))
            actor = pushenv.pusher(record.env, options, trust) or pushenv.UNKNOWN
            postreceive.update_index(store, updates)  # the ledger entry lists the versions the push brought
            session = record.env.get(pushenv.SERVER_SESSION_ENV)
            postreceive.record_push(store, updates, actor, options, session, when=record.time or None)
            postreceive.record_push_in_ledger(
                store, updates, actor, options, pushenv.push_id(record.updates), record.env
            )
            postreceive.record_push_flags(store, store.settings, updates, actor)
            path.unlink()
            done += 1
    return done
