"""Pages of a store's dreams (docs/dreams.md): the list, and one dream with its status, usage,
each change with the model's reasoning, the changes as a diff, and accept/reject of its proposal
(the forms post to the review pages' own decisions, under the same rule for who may decide).

Everything a dream holds was written by a model: it is rendered as text only. A dream's changes
that wait for review are shown only to who may read its proposal (``dream_runs.seen``, the
library's rule), as the proposal itself is.
"""

from __future__ import annotations

from typing import Any

from gitmem.errors import ForbiddenError, NotFoundError
from gitmem.server import dream_runs
from gitmem.server.console import diff
from gitmem.server.console.browse import store_url
from gitmem.server.console.review import _views, proposal_url
from gitmem.server.console.web import Ctx, Page, Redirect
from gitmem.server.dream_jobs import Dream, DreamJobs
from gitmem.server.review_api import reviewer_refusal


def dream_url(name: str, dream_id: str = "") -> str:
    return store_url(name, f"/dreams/{dream_id}" if dream_id else "/dreams")


def _jobs(ctx: Ctx) -> DreamJobs:
    return DreamJobs(ctx.pool.home)


def dreams_page(ctx: Ctx) -> Page:
    name = ctx.readable(ctx.params["store"])
    rows = [
        dream_runs.seen(d, ctx.caller, ctx.pool)  # its changes in review: to its proposal's readers
        for d in _jobs(ctx).all()
        if d.store == name and ctx.token.may_read(name, d.scope)
    ]
    pipeline = _jobs(ctx).pipeline(name)
    values: dict[str, Any] = {
        "title": f"Dreams: {name}",
        "name": name,
        "rows": rows,
        "pipeline": pipeline,
        "may_run": pipeline is not None and _run_refusal(ctx, name, pipeline) is None,
        "nothing": ctx.query.get("nothing") == "1",
        "dream_url": dream_url,
        "store_url": store_url,
    }
    return Page("dreams.html", values)


def _dream(ctx: Ctx, name: str) -> Dream:
    d = _jobs(ctx).get(ctx.params["dream"])
    if d.store != name or not ctx.token.may_read(name, d.scope):
        raise NotFoundError(f"dream {d.id} does not exist in store {name!r}")
    return dream_runs.seen(d, ctx.caller, ctx.pool)  # its changes in review: to its proposal's readers


def dream_page(ctx: Ctx) -> Page:
    name = ctx.readable(ctx.params["store"])
    d = _dream(ctx, name)
    views: list[Any] = []
    landed: list[tuple[dict[str, Any], list[diff.Line]]] = []
    p = None
    may_decide = False
    if d.proposal_id:
        with ctx.pool.store(name) as store:
            try:  # the dream's proposal, to its proposer and reviewers only (docs/access.md)
                p = store.proposal(d.proposal_id, caller=ctx.caller)
            except NotFoundError:
                p = None
            if p is not None:
                views = _views(store, p)
                may_decide = (
                    reviewer_refusal(ctx.token, name, p.scope) is None
                    and p.status == "open"
                    and store.settings.archived_at is None
                )
    elif d.output and ctx.token.may_read(d.output, d.scope):
        with ctx.pool.store(d.output) as out:
            for c in d.changes:
                try:
                    text = out.diff(c["version_id"])
                except NotFoundError:
                    text = ""
                landed.append((c, diff.unified(text)))
    reasons: dict[str, list[str]] = {}
    for c in d.changes:
        reasons.setdefault(c["path"], []).append(c["reasoning"])
        if c.get("previous_path"):
            reasons.setdefault(c["previous_path"], []).append(c["reasoning"])
    pending = [v.d.path for v in views if not v.d.decided]
    values: dict[str, Any] = {
        "title": f"Dream {d.id}",
        "name": name,
        "d": d,
        "p": p,
        "views": views,
        "landed": landed,
        "reasons": reasons,
        "pending": pending,
        "acceptable": [v.d.path for v in views if not v.d.decided and v.d.status != "conflict"],
        "may_decide": may_decide and bool(pending),
        "dream_url": dream_url,
        "proposal_url": proposal_url,
        "store_url": store_url,
    }
    return Page("dream.html", values)


def _run_refusal(ctx: Ctx, name: str, p: Any) -> str | None:
    t = ctx.token
    if not t.may_write(name, p.scope):
        return f"token {t.id} may not write store {name!r}"
    return dream_runs.may_run(name, t.review, t.admin, p)


def run_do(ctx: Ctx) -> Redirect:
    """Run the store's pipeline now (the sessions since its last run); the server's runner runs it."""
    from gitmem.server.dreamer import runner_for

    name = ctx.readable(ctx.params["store"])
    jobs = _jobs(ctx)
    p = jobs.pipeline(name)
    if p is None:
        raise NotFoundError(f"store {name!r} has no memory pipeline: set one with gitmem dream schedule")
    refusal = _run_refusal(ctx, name, p)
    if refusal is not None:
        raise ForbiddenError(refusal)
    d = dream_runs.trigger(jobs, ctx.pool.home, name, trigger="console", requested_by=ctx.token.actor)
    if d is None:
        return Redirect(store_url(name, "/dreams", nothing="1"))
    runner = runner_for(ctx.pool.home)
    if runner is not None:
        runner.submit(d.id)
    return Redirect(dream_url(name, d.id))
