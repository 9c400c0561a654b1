"""Pages to audit: the timeline, sessions and revert-session, redaction, integrity."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from gitmem.errors import InvalidInputError, NotFoundError, RateLimitedError
from gitmem.model.versions import OPERATIONS
from gitmem.server.console import chart, internals
from gitmem.server.console.browse import memory_url, store_url
from gitmem.server.console.web import Ctx, Page, Redirect
from gitmem.sessions import revert_session
from gitmem.sessions import state as session_state
from gitmem.store import AUDIT_TYPES, AuditEvent, SessionWrites

MAX_EVENTS = 500


def _day(ctx: Ctx, key: str, *, end: bool) -> dt.datetime | None:
    raw = ctx.query.get(key) or ""
    if not raw:
        return None
    try:
        day = dt.date.fromisoformat(raw)
    except ValueError:
        raise InvalidInputError(f"{key}: expected a date YYYY-MM-DD, got {raw!r}") from None
    start = dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC)
    return start + dt.timedelta(days=1, seconds=-1) if end else start


# ---------------------------------------------------------------------- timeline
def audit_page(ctx: Ctx) -> Page:
    name = ctx.readable(ctx.params["store"])
    group = ctx.query.get("group") or "actor"
    if group not in ("actor", "session"):
        raise InvalidInputError(f"group: use actor or session, not {group!r}")
    kind = ctx.query.get("type") or None
    filters = {
        "since": _day(ctx, "since", end=False),
        "until": _day(ctx, "until", end=True),
        "actor": ctx.query.get("actor") or None,
        "session": ctx.query.get("session") or None,
        "type": kind,
    }
    with ctx.pool.store(name) as store:
        scopes = ctx.scopes(name, store)
        scope = ctx.query.get("scope") or None
        if scope is not None and scope not in scopes:
            raise NotFoundError(f"scope {scope!r} does not exist in store {name!r}")
        events = [
            e
            for e in store.audit(scope=scope, **filters)  # type: ignore[arg-type]
            if e.scope is None or set(e.scope.split(",")) <= set(scopes)  # a push: "main,team"
        ]
        actors = sorted({e.actor for e in events})
    versions = [e for e in events if e.type in OPERATIONS]

    def key(e: AuditEvent) -> str:
        return e.actor if group == "actor" else (e.session or "(no session)")

    values: dict[str, Any] = {
        "title": f"Audit: {name}",
        "name": name,
        "scopes": scopes,
        "scope": scope or "",
        "group": group,
        "chart": chart.build(((e.at, key(e)) for e in versions), group),
        "events": list(reversed(events))[:MAX_EVENTS],
        "total": len(events),
        "versions": len(versions),
        "types": AUDIT_TYPES,
        "actors": actors,
        "f": {k: ctx.query.get(k, "") for k in ("type", "actor", "session", "since", "until")},
        "operations": OPERATIONS,
        "store_url": store_url,
        "memory_url": memory_url,
    }
    return Page("audit.html", values)


# ---------------------------------------------------------------------- sessions
@dataclass
class SessionView:
    id: str
    status: str  # active | ended | api (only known from the versions it wrote)
    actor: str
    created_at: str
    mounts: list[session_state.Mount] = field(default_factory=list)
    writes: list[tuple[str, SessionWrites, bool]] = field(default_factory=list)  # store, w, writable


def sessions_page(ctx: Ctx) -> Page:
    found: dict[str, SessionView] = {}
    for s in session_state.all_sessions(ctx.pool.home):
        mounts = [m for m in s.mounts if ctx.token.may_read(m.store, m.scope)]
        if mounts:
            found[s.id] = SessionView(s.id, s.status, s.actor, s.created_at, mounts)
    handles = ctx.pool.handles()
    labels: dict[str, str] = {}
    for settings in ctx.pool.all_settings():
        name = handles.get(settings.id, "")
        labels[name] = settings.name
        if not name or not ctx.token.may_read(settings.id):
            continue
        with ctx.pool.store(name) as store:
            writes = internals.session_writes(store, ctx.scopes(name, store), ctx.caller)
        writable = settings.archived_at is None
        for w in writes:
            view = found.setdefault(w.session, SessionView(w.session, "api", ", ".join(w.actors), ""))
            view.writes.append((name, w, writable and ctx.token.may_write(name, w.scope)))
    views = sorted(
        found.values(), key=lambda v: max((w.last_at for _n, w, _x in v.writes), default=0), reverse=True
    )
    return Page(
        "sessions.html", {"title": "Sessions", "sessions": views, "store_url": store_url, "labels": labels}
    )


def _revert_target(ctx: Ctx) -> tuple[str, str, str | None]:
    name = ctx.readable(ctx.params["store"])
    sid = ctx.form.get("session") or ctx.query.get("session") or ""
    scope = ctx.token.scope  # a scope-bound token reverts only there
    return name, sid, scope


def revert_preview(ctx: Ctx) -> Page:
    name, sid, scope = _revert_target(ctx)
    with ctx.pool.store(name) as store:
        ctx.need_write(name, scope, store)
        plan = revert_session(store, sid, scope=scope, dry_run=True)
    values = {"title": f"Revert {sid}", "name": name, "plan": plan, "result": None, "store_url": store_url}
    return Page("revert.html", values)


def revert_do(ctx: Ctx) -> Page:
    name, sid, scope = _revert_target(ctx)
    if not ctx.confirmed():
        return revert_preview(ctx)
    with ctx.pool.store(name) as store:
        ctx.need_write(name, scope, store)
        result = revert_session(
            store, sid, scope=scope, actor=ctx.token.actor, session=ctx.token.session, caller=ctx.caller
        )
    values = {
        "title": f"Reverted {sid}",
        "name": name,
        "plan": result,
        "result": result,
        "store_url": store_url,
    }
    return Page("revert.html", values)


# ---------------------------------------------------------------------- redaction
def _redact_form(ctx: Ctx) -> dict[str, str]:
    src = ctx.form if ctx.form else ctx.query
    return {k: (src.get(k) or "").strip() for k in ("version", "pattern", "scope", "reason")}


def redact_page(ctx: Ctx) -> Page:
    name = ctx.readable(ctx.params["store"])
    ctx.need_admin()
    f = _redact_form(ctx)
    with ctx.pool.store(name) as store:
        if store.is_clone:  # an archived store is read-only, but erasure still works there
            store.check_writable()
        scopes = ctx.scopes(name, store)
        preview = None
        if f["version"]:
            preview = internals.preview_version(store, f["version"], ctx.caller)
        elif f["pattern"]:
            preview = internals.preview_pattern(store, f["pattern"], f["scope"] or "main", ctx.caller)
    values = {
        "title": f"Redact in {name}",
        "name": name,
        "f": f,
        "scopes": scopes,
        "preview": preview,
        "error": None,
        "store_url": store_url,
        "memory_url": memory_url,
    }
    return Page("redact.html", values)


def redact_do(ctx: Ctx) -> Page:
    name = ctx.readable(ctx.params["store"])
    ctx.need_admin()
    f = _redact_form(ctx)
    if not ctx.confirmed():
        return redact_page(ctx)
    with ctx.pool.store(name) as store:
        if f["version"]:
            scope = store.version(f["version"]).scope
            with ctx.pool.write_lock(name, scope):
                done = store.redact(f["version"], reason=f["reason"], caller=ctx.caller)
        elif f["pattern"]:
            scope = f["scope"] or "main"
            internals.preview_pattern(store, f["pattern"], scope, ctx.caller)  # 400 if it backtracks too long
            with ctx.pool.write_lock(name, scope):
                done = store.redact_pattern(f["pattern"], reason=f["reason"], scope=scope, caller=ctx.caller)
        else:
            raise InvalidInputError("choose a version or a pattern to redact")
        proof = store.verify(raise_on_failure=False)
    values = {
        "title": f"Redacted {done.id}",
        "name": name,
        "done": done,
        "proof": proof,
        "store_url": store_url,
    }
    return Page("redacted.html", values)


# ---------------------------------------------------------------------- integrity
CHECKS = (
    ("fsck", "git fsck: every object and ref is sound"),
    ("ledger", "the audit ledger's hash chain is unbroken and matches its anchor"),
    ("redactions purged", "every redaction and compaction really removed its objects"),
    ("trailers", "every version commit carries well-formed gitmem trailers"),
    ("index", "the derived index agrees with git"),
)


def integrity_page(ctx: Ctx) -> Page:
    name = ctx.readable(ctx.params["store"])
    with ctx.pool.store(name) as store:
        last = store.last_verify()
    values = {
        "title": f"Integrity: {name}",
        "name": name,
        "last": last,
        "checks": CHECKS,
        "store_url": store_url,
    }
    return Page("integrity.html", values)


VERIFY_EVERY = 60.0  # seconds between two full verifications of one store from the console
_last_verify: dict[str, float] = {}


def integrity_run(ctx: Ctx) -> Redirect:
    """Run a full verify (``git fsck --full`` and more): admin tokens only, and at most once per
    :data:`VERIFY_EVERY` seconds per store (a full check reads every object: not for any reader)."""
    import time

    name = ctx.readable(ctx.params["store"])
    ctx.need_right("admin", "run a full verification")
    now = time.monotonic()
    last = _last_verify.get(name)
    if last is not None and now - last < VERIFY_EVERY:
        raise RateLimitedError(
            f"store {name!r} was verified {now - last:.0f} s ago; a full verification runs at most "
            f"once every {VERIFY_EVERY:g} s (the last report is on this page)"
        )
    _last_verify[name] = now
    with ctx.pool.store(name) as store:
        store.verify(raise_on_failure=False)
    return Redirect(store_url(name, "/integrity"))
