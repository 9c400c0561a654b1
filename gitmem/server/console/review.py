"""Pages to review proposals (docs/review.md): a store's proposals, one proposal with its versions
and its per-path diff against the scope (a conflict with its three-way view), and the decisions:
accept and reject (all or chosen paths), erase (with a confirmation).

Who may decide is the server's one rule (``review_api.reviewer_refusal``: write access, not a
review token); the library adds its own when deciding (never the proposer, never an actor in review
mode). Everything a proposal holds was written by the proposer: it is rendered as text only.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gitmem.errors import ForbiddenError, InvalidInputError, NotFoundError
from gitmem.ids import is_id
from gitmem.server.console import diff
from gitmem.server.console.browse import memory_url, store_url
from gitmem.server.console.web import Ctx, Page, Redirect
from gitmem.server.review_api import reviewer_refusal
from gitmem.store import PROPOSAL_STATUSES, Store

if TYPE_CHECKING:
    from gitmem.store import Decision, PathDiff, Proposal

FILTERS: dict[str, tuple[str, ...]] = {
    "open": ("open",),
    "decided": ("accepted", "rejected"),
    "all": PROPOSAL_STATUSES,
}
LIST_PATHS = 10  # paths shown per row of the list; the proposal page shows them all


def proposal_url(name: str, proposal_id: str, tail: str = "", **query: str | None) -> str:
    return store_url(name, f"/proposals/{proposal_id}{tail}", **query)


def ago(value: object, now: dt.datetime | None = None) -> str:
    """How long ago, for people: ``40 s``, ``12 min``, ``5 h``, ``3 d``."""
    if isinstance(value, str):
        raw = value
        try:
            value = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            return raw
    if not isinstance(value, dt.datetime):
        return ""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    seconds = max(0, int(((now or dt.datetime.now(dt.UTC)) - value).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def _proposal(ctx: Ctx, name: str, store: Store) -> Proposal:
    """The proposal of the URL as the engine lets the token read it (its proposer and reviewers:
    ``gitmem.engine.access.may_see_proposal``); any other gets a missing proposal's 404."""
    return store.proposal(ctx.params["proposal"], caller=ctx.caller)


def _may_decide(ctx: Ctx, name: str, p: Proposal) -> bool:
    return reviewer_refusal(ctx.token, name, p.scope) is None


def _need_reviewer(ctx: Ctx, name: str, p: Proposal) -> None:
    refusal = reviewer_refusal(ctx.token, name, p.scope)
    if refusal is not None:
        raise ForbiddenError(refusal)


# ---------------------------------------------------------------------- the list
def proposals_page(ctx: Ctx) -> Page:
    name = ctx.readable(ctx.params["store"])
    status = ctx.query.get("status") or "open"
    if status not in FILTERS:
        raise InvalidInputError(f"status: use one of {', '.join(FILTERS)}, not {status!r}")
    scope = ctx.query.get("scope") or None
    with ctx.pool.store(name) as store:
        scopes = ctx.scopes(name, store)
        if scope is not None and not ctx.token.may_read(name, scope):
            raise NotFoundError(f"scope {scope!r} does not exist in store {name!r}")
        found = [p for p in store.proposals(scope=scope, caller=ctx.caller) if p.status in FILTERS[status]]
        rows = [(store.proposal_summary(p), p.erased) for p in reversed(found)]  # newest first
    values: dict[str, Any] = {
        "title": f"Proposals: {name}",
        "name": name,
        "rows": rows,
        "status": status,
        "filters": list(FILTERS),
        "scopes": scopes,
        "scope": scope or "",
        "list_paths": LIST_PATHS,
        "store_url": store_url,
        "proposal_url": proposal_url,
    }
    return Page("proposals.html", values)


# ---------------------------------------------------------------------- one proposal
@dataclass(frozen=True)
class ThreeWayLine:
    kind: str  # ctx | marker | scope | base | proposal
    text: str


def three_way(text: str) -> list[ThreeWayLine]:
    """``git merge-file --diff3`` output as rows. A marker counts only where the merge can put it
    (``<<<<<<< scope``, then ``||||||| base``, ``=======``, ``>>>>>>> proposal``, in that order), so
    a marker-like line in content outside that order stays content."""
    steps = {
        "ctx": ("<<<<<<< scope", "scope"),
        "scope": ("||||||| base", "base"),
        "base": ("=======", "proposal"),
        "proposal": (">>>>>>> proposal", "ctx"),
    }
    out: list[ThreeWayLine] = []
    state = "ctx"
    lines = text.split("\n")  # lines end at "\n" only, as in every console diff
    if lines and lines[-1] == "":
        lines.pop()
    for line in lines:
        marker, following = steps[state]
        if line == marker:
            out.append(ThreeWayLine("marker", line))
            state = following
        else:
            out.append(ThreeWayLine(state, line))
    return out


@dataclass(frozen=True)
class PathView:
    d: PathDiff
    lines: list[diff.Line]
    three: list[ThreeWayLine]
    decision: Decision | None


def _views(store: Store, p: Proposal) -> list[PathView]:
    by_path = {path: d for d in p.decisions for path in d.paths}
    return [
        PathView(d, diff.unified(d.diff), three_way(d.three_way) if d.three_way else [], by_path.get(d.path))
        for d in store.proposal_diff(p.id)
    ]


def proposal_page(ctx: Ctx) -> Page:
    name = ctx.readable(ctx.params["store"])
    with ctx.pool.store(name) as store:
        p = _proposal(ctx, name, store)
        views = _views(store, p)
        versions = store.proposal_versions(p.id)
        heads = {v.path: v for v in versions}  # the last proposed version of each path
        reviewer = _may_decide(ctx, name, p)
        values: dict[str, Any] = {
            "title": f"Proposal {p.id}",
            "name": name,
            "p": p,
            "views": views,
            "versions": versions,
            "heads": heads,
            "pending": [v.d.path for v in views if not v.d.decided],
            "acceptable": [v.d.path for v in views if not v.d.decided and v.d.status != "conflict"],
            "conflicts": [v.d.path for v in views if v.d.status == "conflict" and not v.d.decided],
            "may_decide": reviewer and p.status == "open" and store.settings.archived_at is None,
            "may_erase": reviewer and p.erased is None and store.proposal_has_chain(p),
            "reviewer": reviewer,
            "done": _notice(ctx.query.get("done") or ""),
            "store_url": store_url,
            "memory_url": memory_url,
            "proposal_url": proposal_url,
            "mode": "unified",
        }
    return Page("proposal.html", values)


def _notice(done: str) -> tuple[str, list[str]] | None:
    """What the decision just made (``?done=`` of the redirect), only in the shapes made here."""
    what, _, rest = done.partition(":")
    parts = rest.split(":")
    ok = {
        "accepted": len(parts) == 2 and all(x.isdigit() for x in parts),
        "rejected": len(parts) == 1 and parts[0].isdigit(),
        "erased": len(parts) == 2 and is_id(parts[0], "redact") and parts[1].isdigit(),
    }
    return (what, parts) if ok.get(what) else None


# ---------------------------------------------------------------------- decisions
def _paths(ctx: Ctx) -> list[str]:
    paths = ctx.form_list("path")
    if not paths:
        raise InvalidInputError("tick at least one path to decide")
    return paths


def accept_do(ctx: Ctx) -> Redirect:
    name = ctx.readable(ctx.params["store"])
    paths = _paths(ctx)
    reason = (ctx.form.get("reason") or "").strip()
    with ctx.pool.store(name) as store:
        p = _proposal(ctx, name, store)
        _need_reviewer(ctx, name, p)
        with ctx.pool.write_lock(name, p.scope):
            done = store.accept(
                p.id,
                reviewer=ctx.token.actor,
                session=ctx.token.session,
                paths=paths,
                reason=reason,
            )
    return Redirect(proposal_url(name, p.id, done=f"accepted:{len(done.paths)}:{len(done.versions)}"))


def reject_do(ctx: Ctx) -> Redirect:
    name = ctx.readable(ctx.params["store"])
    paths = _paths(ctx)
    reason = (ctx.form.get("reason") or "").strip()
    if not reason:
        raise InvalidInputError("a rejection needs a reason (it is kept in the proposal and the ledger)")
    with ctx.pool.store(name) as store:
        p = _proposal(ctx, name, store)
        _need_reviewer(ctx, name, p)
        store.reject(p.id, reviewer=ctx.token.actor, session=ctx.token.session, reason=reason, paths=paths)
    return Redirect(proposal_url(name, p.id, done=f"rejected:{len(paths)}"))


def erase_confirm(ctx: Ctx) -> Page:
    name = ctx.readable(ctx.params["store"])
    with ctx.pool.store(name) as store:
        p = _proposal(ctx, name, store)
        _need_reviewer(ctx, name, p)
        if p.erased is not None:
            raise InvalidInputError(f"proposal {p.id} was already erased ({p.erased})")
        values: dict[str, Any] = {
            "title": f"Erase {p.id}",
            "name": name,
            "p": p,
            "versions": store.proposal_versions(p.id),
            "paths": store.proposal_paths(p),
            "reason": (ctx.form.get("reason") or "").strip(),
            "store_url": store_url,
            "proposal_url": proposal_url,
        }
    return Page("erase.html", values)


def erase_do(ctx: Ctx) -> Page | Redirect:
    name = ctx.readable(ctx.params["store"])
    if not ctx.confirmed():
        return erase_confirm(ctx)
    reason = (ctx.form.get("reason") or "").strip()
    with ctx.pool.store(name) as store:
        p = _proposal(ctx, name, store)
        _need_reviewer(ctx, name, p)
        done = store.erase_proposal(p.id, reviewer=ctx.token.actor, session=ctx.token.session, reason=reason)
    return Redirect(proposal_url(name, p.id, done=f"erased:{done.id}:{done.purged}"))
