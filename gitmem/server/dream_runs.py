"""Asking for a dream: the checks every face shares (the Dreams API, ``gitmem dream``, memory
pipelines), the pipelines' "sessions since the last run", and what of a dream a caller may see
(:func:`seen`, every face's way to a record: docs/dreams.md).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING

from gitmem import config
from gitmem.errors import GitmemError, InvalidInputError, NotFoundError
from gitmem.model.caller import Caller
from gitmem.model.paths import validate_scope
from gitmem.model.versions import validate_session
from gitmem.server.dream_jobs import ACTOR, Dream, DreamJobs, Pipeline
from gitmem.store import dream_review, dream_seen_by, open_store, resolve_store

if TYPE_CHECKING:
    from gitmem.server.pool import StorePool

MAX_INSTRUCTIONS = 4096
MAX_SESSIONS = 100
BEHAVIORS = ("create_new", "update_existing")


def seen(d: Dream, caller: Caller | None, pool: StorePool | None = None) -> Dream:
    """The dream as ``caller`` may see it (the library's ``dream_seen_by``: its changes waiting
    for review only to who may read its proposal). The store it wrote is lent by ``pool``, where
    its proposal is; one that cannot be opened is not at hand (then only its reviewers see them).
    The local caller (None, the CLI) sees it all."""
    if caller is None or pool is None:
        return Dream.from_dict(dream_seen_by(d.to_dict(), caller))
    try:
        with pool.store(d.output or d.store) as s:
            return Dream.from_dict(dream_seen_by(d.to_dict(), caller, s))
    except GitmemError:  # gone (a deleted output store), or unreadable: nothing of its proposal
        return Dream.from_dict(dream_seen_by(d.to_dict(), caller))


def check_instructions(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_INSTRUCTIONS:
        raise InvalidInputError(f"instructions: from 1 to {MAX_INSTRUCTIONS} characters")
    bad = next((c for c in value if (ord(c) < 32 and c not in "\t\n\r") or 0x7F <= ord(c) < 0xA0), None)
    if bad is not None:
        raise InvalidInputError(f"instructions: no control characters ({ord(bad):#04x})")
    return value


def check_sessions(value: object) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise InvalidInputError("session_ids: a list of session ids")
    if not 1 <= len(value) <= MAX_SESSIONS:
        raise InvalidInputError(f"session_ids: from 1 to {MAX_SESSIONS} ids")
    if len(set(value)) != len(value):
        raise InvalidInputError("session_ids: no duplicates")
    for s in value:
        try:
            validate_session(s)
        except InvalidInputError as exc:
            raise InvalidInputError(f"session_ids: {exc.message}") from None
    return sorted(value)


def new_dream(
    jobs: DreamJobs,
    home: Path,
    store: str,
    *,
    sessions: list[str],
    model: str,
    speed: str | None = None,
    instructions: str | None = None,
    behavior: str = "create_new",
    review: bool = True,
    scope: str = "main",
    requested_by: str = "user:local",
    trigger: str = "api",
) -> Dream:
    """Record a pending dream over ``store`` (its id, its handle, or a name one store carries;
    the dream records the store's handle) after checking what it asks for."""
    if behavior not in BEHAVIORS:
        raise InvalidInputError(f"output_behavior: one of {', '.join(BEHAVIORS)}")
    if not isinstance(model, str) or not 1 <= len(model) <= 256:
        raise InvalidInputError("model: a model id of 1 to 256 characters")
    check_instructions(instructions)
    validate_scope(scope)
    sessions = check_sessions(sessions) if sessions else []
    store = handle_of(store, home)
    with open_store(store, home) as s:
        if s.settings.archived_at is not None:
            raise InvalidInputError(f"memory store {s.settings.id} is archived: a dream cannot read it")
        for sid in sessions:
            if not s.versions(scope=scope, session=sid, limit=1):
                raise NotFoundError(
                    f"session {sid} wrote no version in scope {scope!r} of memory store {s.settings.id}"
                )
        store_id = s.settings.id
        # The requester's own rules follow its dream (the engine's one check, docs/dreams.md "Who
        # may ask"): an actor the store's acl.review names gets a reviewed dream, and one its
        # acl.write shuts out of the scope cannot have the dreamer publish for it (403).
        if behavior == "update_existing":
            review = dream_review(s.settings.acl, scope, requested_by, review)
    dream = Dream(
        id="",
        store=store,
        store_id=store_id,
        sessions=sessions,
        model=model,
        speed=speed,
        instructions=instructions,
        behavior=behavior,
        scope=scope,
        review=review if behavior == "update_existing" else False,
        output=store if behavior == "update_existing" else None,
        output_id=store_id if behavior == "update_existing" else None,
        actor=ACTOR,
        requested_by=requested_by,
        trigger=trigger,
    )
    return jobs.create(dream)


def handle_of(store: str, home: Path) -> str:
    """The handle (directory stem; the id in this release's layout) of the store ``store`` names:
    an id, a handle, or a name exactly one store carries (gitmem.engine.resolve)."""
    return resolve_store(store, home).handle


def sessions_since(
    home: Path, store: str, scope: str, since: str | None, edge: list[str] | None = None
) -> tuple[list[str], str | None, list[str]]:
    """The sessions that wrote versions in ``scope`` after ``since`` (not the dreamer's own),
    oldest first, at most :data:`MAX_SESSIONS`; the time of the newest version counted, and the
    versions counted at that time. Version times are whole seconds: a version at ``since`` itself
    counts unless ``edge`` (the last run's versions at that time) holds it."""
    after = dt.datetime.fromisoformat(since.replace("Z", "+00:00")) if since else None
    covered = set(edge or [])
    with open_store(store, home) as s:
        found = s.versions(scope=scope, since=after)
    found = [
        v
        for v in found
        if v.session
        and v.actor != ACTOR
        and (after is None or v.created_at > after or (v.created_at == after and v.id not in covered))
    ]
    found.sort(key=lambda v: (v.created_at, v.id))
    out: list[str] = []
    counted = []
    for v in found:
        if v.session not in out:
            if len(out) == MAX_SESSIONS:
                break
            assert v.session is not None
            out.append(v.session)
        counted.append(v)
    if not counted:
        return out, None, []
    newest = counted[-1].created_at
    stamp = newest.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    return out, stamp, [v.id for v in counted if v.created_at == newest]


def may_run(store: str, token_review: bool, token_admin: bool, p: Pipeline | None) -> str | None:
    """Why a caller may not run ``p`` (None: it may): a review token never starts writes that
    skip review, and only an admin starts a dream that creates a store."""
    if p is None:
        return None
    if token_review and p.behavior == "update_existing" and not p.review:
        return f"the pipeline of store {store!r} publishes without review: a review token cannot run it"
    if p.behavior == "create_new" and not token_admin:
        return f"the pipeline of store {store!r} creates a store (create_new): only an admin token runs it"
    return None


def trigger(
    jobs: DreamJobs, home: Path, store: str, *, trigger: str = "cli", requested_by: str | None = None
) -> Dream | None:
    """Run a store's pipeline now: a dream over the sessions since its last run (None: no session
    wrote anything since), asked by ``requested_by`` (None: a scheduled run, asked in the name of
    whoever set the pipeline). The pipeline's ``last_run_at`` moves to the newest version covered."""
    store = handle_of(store, home)
    with jobs.pipeline_run():
        p = jobs.pipeline(store)
        if p is None:
            raise NotFoundError(
                f"store {store!r} has no memory pipeline: create one with gitmem dream schedule"
            )
        sessions, newest, edge = sessions_since(home, store, p.scope, p.last_run_at, p.edge)
        if not sessions:
            return None
        d = new_dream(
            jobs,
            home,
            store,
            sessions=sessions,
            model=p.model,
            instructions=p.instructions,
            behavior=p.behavior,
            review=p.review,
            scope=p.scope,
            requested_by=requested_by or p.set_by or "user:local",
            trigger=trigger,
        )
        p.last_run_at = newest or config.now_rfc3339()
        p.edge = edge
        p.last_dream = d.id
        jobs.save_pipeline(p)
        return d


def set_pipeline(jobs: DreamJobs, home: Path, p: Pipeline, *, requested_by: str | None = None) -> Pipeline:
    """Set a store's memory pipeline, asked by ``requested_by`` (None: the local caller, as
    ``user:local``): the same check as each of its dreams (:func:`new_dream`), so that a pipeline
    that publishes without review is set only by an actor the store lets write its scope; its
    scheduled runs are asked in that actor's name (``Pipeline.set_by``)."""
    if p.behavior not in BEHAVIORS:
        raise InvalidInputError(f"output_behavior: one of {', '.join(BEHAVIORS)}")
    check_instructions(p.instructions)
    validate_scope(p.scope)
    if p.every_seconds < 0:
        raise InvalidInputError("every: a number of seconds, 0 for manual runs only")
    p.store = handle_of(p.store, home)  # the store exists; pipelines are keyed by its handle
    p.set_by = requested_by or "user:local"
    if p.behavior == "update_existing":
        with open_store(p.store, home) as s:
            p.review = dream_review(s.settings.acl, p.scope, p.set_by, p.review)
    old = jobs.pipeline(p.store)
    if old is not None and p.last_run_at is None:
        p.last_run_at, p.last_dream, p.edge = old.last_run_at, old.last_dream, old.edge
    jobs.save_pipeline(p)
    return p
