"""Webhook events, read after the fact (docs/webhooks.md): the store-level journal and each
endpoint's durable cursor over every store's history.

Nothing is queued in the write path. A version's event comes from the store's history itself:
each endpoint keeps, per store and scope, the last commit (and version of it) it has delivered;
the delivery worker walks the commits after it, oldest first, and makes one
``memory.version_created`` event per version the index derived from each commit. Every way a
version arrives (a library or API write, a group commit, a batch, an accepted proposal, a git
push, a restore) is a commit, so every one is seen, once per scope, in commit order. A redaction
rewrites commits but keeps version ids: a cursor whose commit is gone is found again through its
version's new commit; an event read after the redaction has ``path`` null.

Store-level events (``memory_store.created``, ``.archived``, ``.deleted``) have no history to
read once a store is deleted, so they go to a small append-only journal,
``<home>/webhooks/journal.jsonl`` (one fsynced JSON line each, under a lock), written only when
some endpoint is configured; the cursor remembers its last journal sequence number.

The cursor (``<home>/webhooks/state/<endpoint>.json``) is replaced atomically after each
delivered event: a crash re-sends at most the one event in flight, with the same ``webhook-id``
(at-least-once; the id makes a repeat idempotent). This module never prints and sends nothing.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2

from gitmem.config import now_rfc3339
from gitmem.engine.core import StoreCore
from gitmem.engine.opening import open_core
from gitmem.engine.resolve import all_refs, by_handle, stores_dir
from gitmem.engine.rows import VersionRow
from gitmem.errors import ConfigError
from gitmem.git.repoinit import write_atomic as write_atomic  # gitmem.webhooks writes with it too
from gitmem.ids import derived_ulid, is_id, new_ulid
from gitmem.model.paths import is_store_handle

WEBHOOKS_DIR = "webhooks"
ENDPOINTS_FILE = "endpoints.json"
JOURNAL_FILE = "journal.jsonl"
STATE_DIR = "state"
STORE_EVENTS = ("memory_store.created", "memory_store.archived", "memory_store.deleted")
VERSION_EVENT = "memory.version_created"
EVENT_TYPES = (*STORE_EVENTS, VERSION_EVENT)
log = logging.getLogger("gitmem.webhooks")
State = dict[str, Any]


def webhooks_dir(home: Path) -> Path:
    return home / WEBHOOKS_DIR


@contextlib.contextmanager
def locked(path: Path, *, blocking: bool = True) -> Iterator[bool]:
    """An exclusive ``flock`` on ``path`` (created 0600); yields False when ``blocking`` is off
    and another process holds it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # closing drops the lock


def workspace_ids(home: Path) -> dict[str, str]:
    """``organization_id`` and ``workspace_id`` of the events, made once per workspace by the
    first ``webhook add`` (gitmem has no organizations: both name this workspace)."""
    path = webhooks_dir(home) / "workspace.json"
    if not path.is_file():
        with locked(webhooks_dir(home) / ".lock"):
            return workspace_ids_unlocked(home)
    return dict(json.loads(path.read_text()))


def workspace_ids_unlocked(home: Path) -> dict[str, str]:
    """:func:`workspace_ids` for a caller holding the webhooks lock."""
    path = webhooks_dir(home) / "workspace.json"
    if path.is_file():
        return dict(json.loads(path.read_text()))
    ulid = new_ulid()
    ids = {"organization_id": f"org_{ulid}", "workspace_id": f"wrkspc_{ulid}"}
    write_atomic(path, json.dumps(ids).encode())
    return ids


# ---------------------------------------------------------------------- the store-level journal
def _home_of(store_path: Path) -> Path | None:
    return store_path.parent.parent if store_path.parent.name == "stores" else None


def record_store_event(store_path: Path, kind: str, store_id: str) -> None:
    """Journal a store-level event of the workspace holding ``store_path`` (nothing when no
    endpoint is configured, or the store is no workspace's). A failure is logged, never raised:
    the store operation it follows has already happened."""
    home = _home_of(store_path)
    if home is None or not (webhooks_dir(home) / ENDPOINTS_FILE).is_file():
        return
    try:
        journal = webhooks_dir(home) / JOURNAL_FILE
        with locked(webhooks_dir(home) / ".lock"):
            seq = _last_seq(journal) + 1
            try:
                with journal.open("rb") as f:
                    f.seek(-1, os.SEEK_END)
                    torn = f.read(1) != b"\n"  # a crash mid-append: end that line first
            except (FileNotFoundError, OSError):
                torn = False
            at = now_rfc3339()
            ms = int(dt.datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp() * 1000)
            entry = {"seq": seq, "id": f"wevt_{derived_ulid(ms, kind, store_id, str(seq))}"}
            entry.update({"type": kind, "store_id": store_id, "created_at": at})
            fd = os.open(journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(
                    fd, ("\n" if torn else "").encode() + (json.dumps(entry, sort_keys=True) + "\n").encode()
                )
                os.fsync(fd)
            finally:
                os.close(fd)
    except OSError as exc:
        log.warning("webhook journal: %s of %s not recorded: %s", kind, store_id, exc)


def _journal(home: Path) -> list[dict[str, Any]]:
    path = webhooks_dir(home) / JOURNAL_FILE
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:  # a torn last line (a crash mid-append): never acknowledged
            continue
        if isinstance(entry, dict) and isinstance(entry.get("seq"), int):
            out.append(entry)
    return out


def journal_entries(home: Path) -> list[dict[str, Any]]:
    """The workspace's store-level journal, in order (each entry: seq, id, type, store_id, created_at)."""
    return _journal(home)


def _last_seq(journal: Path) -> int:
    entries = _journal(journal.parent.parent)
    return max((e["seq"] for e in entries), default=0)


# ---------------------------------------------------------------------- cursors
def state_path(home: Path, endpoint_id: str) -> Path:
    return webhooks_dir(home) / STATE_DIR / f"{endpoint_id}.json"


def load_state(home: Path, endpoint_id: str) -> State:
    path = state_path(home, endpoint_id)
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        return {"journal": 0, "stores": {}, "failures": 0}
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if not (
        isinstance(state, dict)
        and isinstance(state.get("journal"), int)
        and isinstance(state.get("stores"), dict)
    ):
        raise ConfigError(f"{path}: not a webhook cursor")
    return state


def save_state(home: Path, endpoint_id: str, state: State) -> None:
    path = state_path(home, endpoint_id)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_atomic(path, json.dumps(state, sort_keys=True).encode())


def begin(home: Path, endpoint_id: str) -> State:
    """The cursor of a new endpoint: events from now on (the journal's end, every scope's tip)."""
    stores: dict[str, dict[str, Any]] = {}
    for ref in all_refs(home, strict=False):
        tips = _tips(ref.path)
        if not tips:
            continue
        newest: dict[str, str | None] = {}
        try:
            with contextlib.closing(open_core(ref.path)) as core:
                newest = {s: _newest(core, s) for s in tips}
        except Exception as exc:  # noqa: BLE001 - a store that cannot be opened still starts at its tips
            log.warning("webhooks: store %s: newest versions not read: %s", ref.settings.id, exc)
        stores[ref.settings.id] = {
            s: {"commit": c, "version": newest.get(s), "done": True} for s, c in tips.items()
        }
    state: State = {"journal": _last_seq(webhooks_dir(home) / JOURNAL_FILE), "stores": stores, "failures": 0}
    save_state(home, endpoint_id, state)
    return state


def _newest(core: StoreCore, scope: str) -> str | None:
    """The newest version of a scope (what finds a cursor again after a history rewrite)."""
    core.index.ensure(scope)
    rows = core.index.version_rows("scope=?", [scope], 1)
    return rows[0].id if rows else None


_old_layout_ids: dict[str, str] = {}  # an old-layout store's directory -> its id (ids never change)


def workspace_stores(home: Path) -> dict[str, Path]:
    """Every store of the workspace by id, from one directory listing: a directory named by an
    id is that store's; only an old-layout one (named by its name) has its settings read, once
    per process (:func:`gitmem.engine.resolve.all_refs` reads every store's settings)."""
    out: dict[str, Path] = {}
    try:
        entries = list(os.scandir(stores_dir(home)))
    except FileNotFoundError:
        return out
    for entry in entries:
        handle = entry.name[: -len(".git")]
        if entry.name.startswith(".") or not entry.name.endswith(".git") or not is_store_handle(handle):
            continue  # a store being made, restored or deleted
        if is_id(handle, "memstore"):
            out[handle] = Path(entry.path)
            continue
        store_id = _old_layout_ids.get(entry.path)
        if store_id is None:
            ref = by_handle(handle, home)
            if ref is None:
                continue
            store_id = _old_layout_ids[entry.path] = ref.settings.id
        out[store_id] = Path(entry.path)
    return out


def _tips(path: Path) -> dict[str, str] | None:
    """Each scope's tip (``refs/heads/*``), read from the ref files (a few small reads: no
    repository opened); through pygit2 when they hold anything but plain object ids."""
    try:
        out: dict[str, str] = {}
        packed = path / "packed-refs"
        with contextlib.suppress(FileNotFoundError):
            for line in packed.read_text().splitlines():
                oid, _, name = line.partition(" ")
                if name.startswith("refs/heads/") and len(oid) == 40:
                    out[name[len("refs/heads/") :]] = oid
        heads = path / "refs" / "heads"
        for root, _dirs, files in os.walk(heads):
            for f in files:
                if f.endswith(".lock"):
                    continue
                text = (Path(root) / f).read_text().strip()
                if len(text) != 40 or not all(c in "0123456789abcdef" for c in text):
                    return _tips_pygit2(path)
                out[str((Path(root) / f).relative_to(heads))] = text
        if not out and not (path / "HEAD").is_file():
            return None
        return out
    except (OSError, UnicodeError):
        return _tips_pygit2(path)


def _tips_pygit2(path: Path) -> dict[str, str] | None:
    try:
        repo = pygit2.Repository(str(path))
    except (pygit2.GitError, KeyError):
        return None
    try:
        return {
            name[len("refs/heads/") :]: str(repo.references[name].target)
            for name in repo.references
            if name.startswith("refs/heads/")
        }
    finally:
        repo.free()


# ---------------------------------------------------------------------- pending events
@dataclass
class Pending:
    """One event to deliver (``event`` None: a commit with no version, only passed over) and the
    change of the cursor once it is delivered."""

    event: dict[str, Any] | None
    advance: Callable[[State], None]
    store: str | None = None  # the store whose cursor it moves (None: the journal's)
    journal_id: str | None = None  # a shared journal's entry: recorded as sent once delivered


def envelope(
    event_id: str, kind: str, created_at: str, data: dict[str, Any], ids: dict[str, str]
) -> dict[str, Any]:
    """Anthropic's webhook payload: ``{"type": "event", id, created_at, data}``; ``data`` has the
    event's ``type`` and the workspace's ids."""
    return {"type": "event", "id": event_id, "created_at": created_at, "data": {"type": kind, **data, **ids}}


def pending(
    home: Path,
    state: State,
    ids: dict[str, str],
    types: frozenset[str],
    only: Callable[[str], bool] | None = None,
    journal: list[dict[str, Any]] | None = None,
) -> Iterator[Pending]:
    """The events after ``state``, in order: the journal's first, then each store's versions
    (stores by id, ``main`` first, then the other scopes by name). Lazy: a caller that stops at
    a failed delivery reads no further. ``only(store_id)``: the stores whose versions this
    process delivers (a cluster node: the stores it homes, docs/cluster.md#webhooks).
    ``journal``: the store-level entries still to send, from a journal shared by several processes
    (a cluster's, in PostgreSQL), in place of this workspace's own."""
    if journal is not None:
        for entry in journal:
            item = _journal_pending({**entry, "seq": 0}, ids, types)  # seq 0: the local cursor stays
            item.journal_id = str(entry["id"])
            yield item
    for entry in _journal(home) if journal is None else ():
        if entry["seq"] <= state["journal"]:
            continue
        yield _journal_pending(entry, ids, types)
    stores: dict[str, Any] = state["stores"]
    present = workspace_stores(home)
    for store_id in sorted(set(stores) - set(present)):  # deleted: nothing left to read

        def forget(s: State, store_id: str = store_id) -> None:
            s["stores"].pop(store_id, None)

        yield Pending(None, forget, store_id)
    if VERSION_EVENT not in types:
        return
    for store_id, path in sorted(present.items()):
        if only is not None and not only(store_id):
            continue
        tips = _tips(path)
        if not tips:
            continue
        cursors = stores.setdefault(store_id, {})  # the very dict the cursor moves update
        if all(_done(cursors.get(s), c) for s, c in tips.items()):
            continue  # the common case: nothing new, and the store's index is not opened
        try:
            core = open_core(path)
        except Exception as exc:  # noqa: BLE001 - one broken store must not stop the others
            log.warning("webhooks: store %s not read: %s", store_id, exc)
            continue
        try:
            yield from _store_pending(core, store_id, cursors, ids)
        except Exception as exc:  # noqa: BLE001 - its events wait; the other stores' go on
            log.warning("webhooks: store %s not read: %s", store_id, exc)
        finally:
            core.close()


def _done(cursor: dict[str, Any] | None, tip: str) -> bool:
    return cursor is not None and cursor["commit"] == tip and bool(cursor.get("done"))


def _journal_pending(entry: dict[str, Any], ids: dict[str, str], types: frozenset[str]) -> Pending:
    seq = entry["seq"]

    def advance(s: State) -> None:
        s["journal"] = max(s["journal"], seq)
        if entry["type"] == "memory_store.deleted":
            s["stores"].pop(entry["store_id"], None)

    if entry["type"] not in types:
        return Pending(None, advance)
    event = envelope(entry["id"], entry["type"], entry["created_at"], {"id": entry["store_id"]}, ids)
    return Pending(event, advance)


def _rows(core: StoreCore, scope: str, commit: str) -> list[VersionRow]:
    return list(reversed(core.index.version_rows("scope=? AND commit_id=?", [scope, commit])))


def _store_pending(
    core: StoreCore, store_id: str, cursors: dict[str, Any], ids: dict[str, str]
) -> Iterator[Pending]:
    repo = core.repo
    scopes = sorted(core.scopes(), key=lambda s: (s != "main", s))
    for scope in scopes:
        tip = core.tip(scope)
        if tip is None or _done(cursors.get(scope), str(tip)):
            continue
        core.index.ensure(scope)
        cursor = cursors.get(scope)
        walker = repo.walk(tip, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
        if cursor is not None:
            at = _locate(core, scope, tip, cursor)
            if at is None:  # history rewritten past recognition: resume at the tip (logged)
                log.warning("webhooks: %s/%s: cursor %s lost, resuming at %s", store_id, scope, cursor, tip)
                yield Pending(None, _setter(store_id, scope, str(tip), None, True), store_id)
                continue
            last = cursor.get("version")
            if not cursor.get("done"):
                rows = _rows(core, scope, at)
                seen = [r.id for r in rows]
                start = seen.index(last) + 1 if last in seen else 0
                yield from _commit_pending(store_id, scope, at, rows[start:], last, ids)
            walker.hide(pygit2.Oid(hex=at))
        else:  # a scope (or store) new to this endpoint: what other scopes delivered is hidden
            last = None
            for other in cursors.values():
                with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
                    walker.hide(pygit2.Oid(hex=other["commit"]))
        for commit in walker:
            rows = _rows(core, scope, str(commit.id))
            yield from _commit_pending(store_id, scope, str(commit.id), rows, last, ids)
            last = rows[-1].id if rows else last


def _locate(core: StoreCore, scope: str, tip: pygit2.Oid, cursor: dict[str, Any]) -> str | None:
    """The cursor's commit in the scope's history now: itself, else (after a rewrite) the commit
    its version has now; None when neither is found."""
    commit = cursor["commit"]
    with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
        oid = pygit2.Oid(hex=commit)
        if oid == tip or core.repo.descendant_of(tip, oid):
            return str(commit)
    version = cursor.get("version")
    if version is None:
        return None
    rows = core.index.version_rows("scope=? AND id=?", [scope, version])
    return rows[0].commit_id if rows else None


def _setter(
    store_id: str, scope: str, commit: str, version: str | None, done: bool
) -> Callable[[State], None]:
    def advance(s: State) -> None:
        s["stores"].setdefault(store_id, {})[scope] = {"commit": commit, "version": version, "done": done}

    return advance


def _commit_pending(
    store_id: str, scope: str, commit: str, rows: list[VersionRow], last: str | None, ids: dict[str, str]
) -> Iterator[Pending]:
    """A commit's events; one with no version moves the cursor past it, keeping ``last`` (the
    newest version delivered before it) to find the cursor again after a rewrite."""
    if not rows:
        yield Pending(None, _setter(store_id, scope, commit, last, True), store_id)
        return
    for i, row in enumerate(rows):
        advance = _setter(store_id, scope, commit, row.id, i == len(rows) - 1)
        yield Pending(version_event(store_id, row, ids), advance, store_id)


def version_event(store_id: str, row: VersionRow, ids: dict[str, str]) -> dict[str, Any]:
    """The ``memory.version_created`` event of one version (a gitmem extension; the id is fixed
    by the store, scope and version, so a re-send carries the same ``webhook-id``)."""
    at = dt.datetime.fromtimestamp(row.created_at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    event_id = f"wevt_{derived_ulid(row.created_at * 1000, store_id, row.scope, row.id)}"
    data = {
        "id": row.id,
        "memory_store_id": store_id,
        "memory_id": row.memory_id,
        "memory_version_id": row.id,
        "scope": row.scope,
        "path": None if row.redaction_id is not None else row.path,
        "operation": row.operation,
        "session_id": row.session,
        "actor": row.actor,
        "commit": row.commit_id,
    }
    return envelope(event_id, VERSION_EVENT, at, data, ids)
