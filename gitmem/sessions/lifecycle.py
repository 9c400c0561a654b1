"""Start, sync, end, list and show sessions (docs/architecture.md#sessions)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from gitmem import config
from gitmem.errors import (
    ConflictError,
    ForbiddenError,
    GitmemError,
    InvalidInputError,
    LimitExceededError,
    NotFoundError,
)
from gitmem.ids import new_id
from gitmem.model.paths import mount_slug
from gitmem.model.versions import Version, resolve_actor, validate_session
from gitmem.sessions import state
from gitmem.sessions.mount import check_root, materialise, remove_tree
from gitmem.sessions.prompt import PROMPT_FILE, system_prompt
from gitmem.sessions.state import MAX_STORES, Mount, Session
from gitmem.sessions.sync import MountSync, SyncReport, sync_mount
from gitmem.store import open_store

Home = str | os.PathLike[str] | None


@dataclass(frozen=True)
class SessionDetail:
    """A session with the versions it wrote, per mount slug (newest first)."""

    session: Session
    versions: dict[str, list[Version]] = field(default_factory=dict)


@dataclass(frozen=True)
class EndResult:
    session: Session
    sync: SyncReport


def start_session(
    stores: Sequence[str],
    *,
    root: str | os.PathLike[str] | None = None,
    instructions: Mapping[str, str] | None = None,
    home: Home = None,
    actor: str | None = None,
    session_id: str | None = None,
    at: str | None = None,
) -> Session:
    """Create a session, attach ``stores`` (``NAME[:ro|:rw][@SCOPE]``, at most 8) and mount them.
    With ``at`` (a time, version or commit: docs/point-in-time.md) every mount shows its store as it
    was then, read-only (``:rw`` or ``:review`` is refused), and stays at that state when synced.

    Everything is checked before anything is created. The system-prompt block is written to
    ``<root>/SYSTEM_PROMPT.md`` (and is :func:`gitmem.sessions.system_prompt` of the result).
    """
    specs = [state.parse_spec(s) for s in stores]
    if at is not None:
        if not at.strip():
            raise InvalidInputError("--at needs a time, a version id or a commit id")
        writable = [  # asked for explicitly: NAME:rw, NAME:review, NAME@SCOPE:rw ...
            s
            for s in stores
            if state.parse_spec(s).access != "ro"
            and s.endswith((":rw", ":review"))
            or s.partition("@")[0].endswith((":rw", ":review"))
        ]
        if writable:
            raise InvalidInputError(
                f"a mount of a past state is read-only: {', '.join(writable)} asks for write access"
            )
        specs = [replace(s, access="ro") for s in specs]
    if not specs:
        raise InvalidInputError("a session needs at least one store: --store NAME[:ro|:rw][@SCOPE]")
    if len(specs) > MAX_STORES:
        raise LimitExceededError(f"a session can attach at most {MAX_STORES} stores, not {len(specs)}")
    sid = new_id("sesn") if session_id is None else validate_session(session_id) or session_id
    if state.record_path(sid, home).exists():
        raise ConflictError(f"session {sid} already exists")
    who = resolve_actor(actor, sid)
    base = Path(root).expanduser().resolve() if root else config.workspace_home(home) / "mounts" / sid
    notes = dict(instructions or {})
    mounts = _plan_mounts(specs, base, notes, home, at)
    used = {m.store for m in mounts} | {m.slug for m in mounts} | {s.name for s in specs}
    unknown = sorted(set(notes) - used)
    if unknown:
        raise InvalidInputError(f"--instructions names {', '.join(unknown)}, which is not an attached store")
    session = Session(sid, str(base), "active", who, config.now_rfc3339(), None, tuple(mounts))
    base.mkdir(parents=True, exist_ok=True)
    state.save(session, home)
    made: list[Path] = []
    try:
        for m in mounts:
            with open_store(m.store_path) as store:
                made.append(Path(m.path))
                materialise(store, m, sid)
        (base / PROMPT_FILE).write_text(system_prompt(session), encoding="utf-8")
    except BaseException:
        for path in made:
            remove_tree(path)
        state.record_path(sid, home).unlink(missing_ok=True)
        raise
    return session


def _plan_mounts(
    specs: list[state.StoreSpec], base: Path, notes: dict[str, str], home: Home, at: str | None = None
) -> list[Mount]:
    """One mount per spec. A mount's directory is the slug of the store's display name now
    (``mount_slug``); stores whose names give one slug get ``<slug>-<last 6 of the id>`` each, and a
    store attached in several scopes ``<slug>@<scope>`` (docs/stores.md): distinct, and the same
    for the same stores whatever their order."""
    opened: list[
        tuple[state.StoreSpec, str, str, str, str, str]
    ] = []  # spec, id, slug, path, description, name
    shows: dict[tuple[str, str], str] = {}
    seen: set[tuple[str, str]] = set()
    for spec in specs:
        with open_store(spec.name, home) as store:
            if (store.id, spec.scope) in seen:
                raise InvalidInputError(f"store {spec.name!r} scope {spec.scope!r} is attached twice")
            seen.add((store.id, spec.scope))
            if store.settings.archived_at is not None:
                raise ForbiddenError(
                    f"store {spec.name!r} was archived at {store.settings.archived_at} and cannot be attached"
                )
            if spec.access != "ro":
                store.check_writable()
            if at is not None:  # refused now (a bad time, before a horizon), before anything is made
                shows[(store.id, spec.scope)] = store.state_at(at, scope=spec.scope)[1] or ""
            base_slug = mount_slug(store.settings.name)
            opened.append(
                (spec, store.id, base_slug, str(store.path), store.settings.description, store.settings.name)
            )
    ids_of: dict[str, set[str]] = {}
    for _spec, sid, base_slug, _p, _d, _n in opened:
        ids_of.setdefault(base_slug, set()).add(sid)
    scopes_of: dict[str, int] = {}
    for _spec, sid, _s, _p, _d, _n in opened:
        scopes_of[sid] = scopes_of.get(sid, 0) + 1
    mounts: list[Mount] = []
    for spec, sid, base_slug, path, description, display in opened:
        slug = base_slug if len(ids_of[base_slug]) == 1 else f"{base_slug}-{sid[-6:].lower()}"
        if scopes_of[sid] > 1:
            slug = f"{slug}@{spec.scope}"
        target = base / slug
        if target.exists():
            raise ConflictError(f"{target} already exists: choose another --root")
        text = notes.get(slug, notes.get(spec.name, ""))
        past = {"at": at, "shows": shows[(sid, spec.scope)]} if at is not None else {}
        mounts.append(
            Mount(sid, path, spec.scope, spec.access, slug, str(target), description, text, display, **past)
        )
    return mounts


def sync_session(
    session_id: str | None = None,
    *,
    home: Home = None,
    actor: str | None = None,
    allow_mass_delete: bool = False,
) -> SyncReport:
    """Sync every mount of a session (the only active one when ``session_id`` is None).

    A mount whose sync would delete most of its files is not synced (its ``error`` says so)
    unless ``allow_mass_delete``."""
    session = state.resolve(session_id, home)
    if session.status != "active":
        raise InvalidInputError(f"session {session.id} has ended; there is nothing to sync")
    with state.locked(session.id, home):
        return SyncReport(
            session.id, [_sync_one(m, session, actor, allow_mass_delete) for m in session.mounts]
        )


def _sync_one(mount: Mount, session: Session, actor: str | None, allow_mass_delete: bool) -> MountSync:
    """One mount; a mount that cannot be synced (store gone, marker lost) does not stop the others."""
    try:
        with open_store(mount.store_path) as store:
            return sync_mount(
                store, mount, session.id, actor or session.actor, allow_mass_delete=allow_mass_delete
            )
    except GitmemError as exc:
        return MountSync(mount.store, mount.scope, mount.slug, mount.access, None, None, error=exc.message)


def end_session(
    session_id: str | None = None,
    *,
    home: Home = None,
    actor: str | None = None,
    force: bool = False,
    allow_mass_delete: bool = False,
) -> EndResult:
    """Final sync, then remove the mounts. Refuses (keeping the mounts) while a read-write mount
    holds changes that could not be saved, unless ``force``."""
    report = sync_session(session_id, home=home, actor=actor, allow_mass_delete=allow_mass_delete)
    session = state.load(report.session, home)
    unsaved = [f"{m.slug}{i.path}" for m in report.mounts if m.access != "ro" for i in m.refused]
    unsaved += [f"{m.slug} ({m.error})" for m in report.mounts if m.error is not None and m.access != "ro"]
    if unsaved and not force:
        raise ConflictError(
            f"session {session.id} was not ended: {len(unsaved)} changed file(s) could not be saved "
            f"({', '.join(unsaved[:5])}); fix them and sync, or end with --force to drop them"
        )
    # A conflict copy holds the agent's side of a conflict, in the mount only: removing the mount
    # would lose it (issue 26). Kept until merged (and the copy deleted), or ended with --force.
    copies = [f"{m.slug}{p}" for m in session.mounts for p in conflict_copies(m, session.id)]
    if copies and not force:
        raise ConflictError(
            f"session {session.id} was not ended: {len(copies)} conflict copy(ies) hold your side of a "
            f"conflict ({', '.join(copies[:5])}); merge each into its file and delete the copy, then "
            "end again (or end with --force to drop them)"
        )
    for m in session.mounts:
        if Path(m.path).is_symlink():
            Path(m.path).unlink()  # never followed: only the link goes
            continue
        try:
            check_root(m)
        except GitmemError:
            continue  # the session root is a link: nothing under it is the session's
        remove_tree(Path(m.path))
    root = Path(session.root)
    (root / PROMPT_FILE).unlink(missing_ok=True)
    with contextlib.suppress(OSError):  # the root may hold other things: leave it then
        root.rmdir()
    ended = replace(session, status="ended", ended_at=config.now_rfc3339())
    state.save(ended, home)
    return EndResult(ended, report)


def conflict_copies(mount: Mount, session_id: str) -> list[str]:
    """The paths of this session's conflict copies still in ``mount`` (none through a link)."""
    from gitmem.sessions.sync import is_conflict_copy

    root = Path(mount.path)
    try:
        check_root(mount)
    except GitmemError:
        return []
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".gitmem"]
        for f in filenames:
            rel = "/" + os.path.relpath(os.path.join(dirpath, f), root)
            if is_conflict_copy(rel, session_id):
                out.append(rel)
    return sorted(out)


def session_versions(session: Session) -> dict[str, list[Version]]:
    out: dict[str, list[Version]] = {}
    for m in session.mounts:
        try:
            with open_store(m.store_path) as store:
                out[m.slug] = store.versions(session=session.id, scope=m.scope)
        except GitmemError:
            out[m.slug] = []  # the store is gone
    return out


def show_session(session_id: str | None = None, *, home: Home = None) -> SessionDetail:
    """A session record with the versions it wrote."""
    session = state.resolve(session_id, home)
    return SessionDetail(session, session_versions(session))


def list_sessions(*, home: Home = None, status: str | None = None) -> list[SessionDetail]:
    """Every session in the workspace (optionally only ``active`` or ``ended`` ones)."""
    if status not in (None, "active", "ended"):
        raise InvalidInputError(f"invalid status {status!r}: use active or ended")
    return [
        SessionDetail(s, session_versions(s))
        for s in state.all_sessions(home)
        if status is None or s.status == status
    ]


def prompt_for(session_id: str | None = None, *, home: Home = None) -> str:
    """The system-prompt block of a session."""
    session = state.resolve(session_id, home)
    if session.status != "active":
        raise NotFoundError(f"session {session.id} has ended: its stores are no longer mounted")
    return system_prompt(session)
