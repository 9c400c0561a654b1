"""Session records: ``<workspace>/sessions/<id>.json``, written atomically, and a per-session lock.

A record names the session's root, actor, status and mounts (store, scope, access, mount path,
instructions). What each mount was synced against lives in the mount's own marker (see ``mount``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from gitmem import config
from gitmem.errors import InvalidInputError, NotFoundError
from gitmem.model.paths import validate_scope
from gitmem.model.versions import validate_session

MAX_STORES = 8
ACCESS = ("rw", "ro", "review")  # review: writable, changes land as a proposal (docs/review.md)


@dataclass(frozen=True)
class Mount:
    """One store attached to a session, materialised as the directory ``path``."""

    store: str  # the store id (a record from before ids were handles: the store's name)
    store_path: str
    scope: str
    access: str  # rw | ro | review
    slug: str
    path: str
    description: str = ""
    instructions: str = ""
    name: str = ""  # the store's display name when attached (its slug followed it)
    at: str = ""  # a read-only mount of a past state: the moment asked for (docs/point-in-time.md)
    shows: str = ""  # ... and the version time of the state it shows


@dataclass(frozen=True)
class Session:
    """A session record (``gitmem session show``)."""

    id: str
    root: str
    status: str  # active | ended
    actor: str
    created_at: str
    ended_at: str | None = None
    mounts: tuple[Mount, ...] = ()

    def mount(self, slug_or_store: str) -> Mount:
        for m in self.mounts:
            if slug_or_store in (m.slug, m.store):
                return m
        raise NotFoundError(f"session {self.id} has no mount {slug_or_store!r}")


@dataclass(frozen=True)
class StoreSpec:
    """A parsed ``--store NAME[:ro|:rw][@SCOPE]``."""

    name: str
    access: str = "rw"
    scope: str = "main"


def parse_spec(text: str) -> StoreSpec:
    """``notes``, ``notes:ro``, ``notes@team``, ``notes:ro@team`` (also ``notes@team:ro``)."""
    head, at, scope = text.partition("@")
    access = "rw"
    if ":" in head:
        head, _, access = head.partition(":")
    elif at and scope.endswith((":ro", ":rw", ":review")):
        scope, _, access = scope.rpartition(":")
    if access not in ACCESS:
        raise InvalidInputError(
            f"invalid store spec {text!r}: access must be ro, rw or review, not {access!r}"
        )
    if at and not scope:
        raise InvalidInputError(f"invalid store spec {text!r}: empty scope after '@'")
    if not head:
        raise InvalidInputError(f"invalid store spec {text!r}: no store named (an id or a name)")
    return StoreSpec(head, access, validate_scope(scope) if at else "main")


def sessions_dir(home: str | os.PathLike[str] | None) -> Path:
    return config.workspace_home(home) / "sessions"


def record_path(session_id: str, home: str | os.PathLike[str] | None) -> Path:
    return sessions_dir(home) / f"{validate_session(session_id)}.json"


def to_dict(session: Session) -> dict[str, Any]:
    return asdict(session)


def from_dict(data: dict[str, Any]) -> Session:
    mounts = tuple(Mount(**m) for m in data.get("mounts", []))
    return replace(Session(**{k: v for k, v in data.items() if k != "mounts"}), mounts=mounts)


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON through a temp file, fsync and rename: readers see the old or the new file."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, ensure_ascii=False, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def save(session: Session, home: str | os.PathLike[str] | None) -> None:
    path = record_path(session.id, home)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, to_dict(session))


def load(session_id: str, home: str | os.PathLike[str] | None) -> Session:
    path = record_path(session_id, home)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NotFoundError(f"session {session_id} does not exist in {path.parent}") from None
    except (ValueError, UnicodeDecodeError):
        raise InvalidInputError(f"{path}: not a valid session record") from None
    return from_dict(data)


def all_sessions(home: str | os.PathLike[str] | None) -> list[Session]:
    base = sessions_dir(home)
    if not base.is_dir():
        return []
    out = []
    for entry in sorted(base.glob("*.json")):
        if not entry.name.startswith("."):
            out.append(load(entry.stem, home))
    return out


def resolve(session_id: str | None, home: str | os.PathLike[str] | None) -> Session:
    """The named session, else the only active one."""
    if session_id is not None:
        return load(session_id, home)
    active = [s for s in all_sessions(home) if s.status == "active"]
    if not active:
        raise NotFoundError("there is no active session: start one with `gitmem session start`")
    if len(active) > 1:
        names = ", ".join(s.id for s in active)
        raise InvalidInputError(f"{len(active)} sessions are active ({names}): name the one you mean")
    return active[0]


@contextlib.contextmanager
def locked(session_id: str, home: str | os.PathLike[str] | None) -> Iterator[None]:
    """Serialise syncs of one session (a watcher and a manual sync, say)."""
    base = sessions_dir(home)
    base.mkdir(parents=True, exist_ok=True)
    with open(base / f".{validate_session(session_id)}.lock", "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
