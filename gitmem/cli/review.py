"""``gitmem review list|show|diff|accept|reject|erase``: the reviewer's side of review-gated writes
(docs/review.md)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gitmem.cli import common
from gitmem.cli.memories import StoreArg
from gitmem.errors import InvalidInputError
from gitmem.store import Store

review_app = typer.Typer(
    help="Review proposals: writes by actors in review mode, waiting to be accepted or rejected.",
    no_args_is_help=True,
)

IdArg = Annotated[str, typer.Argument(help="Proposal id (prop_...).")]
PathsOpt = Annotated[
    list[str] | None,
    typer.Option("--path", "-p", help="Only this path (repeatable); default: all undecided."),
]


def register(app: typer.Typer) -> None:
    app.add_typer(review_app, name="review")


@review_app.command("list")
def list_(
    store: StoreArg,
    status: Annotated[str | None, typer.Option("--status", help="open, accepted or rejected.")] = None,
    scope: Annotated[str | None, typer.Option("--scope", "-s", help="Only this scope.")] = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Proposals, oldest first: id, scope, proposer, status, paths, conflicts."""

    def fn(s: Store) -> Any:
        return [s.proposal_summary(p) for p in s.proposals(status=status, scope=scope)]

    def render(rows: Any) -> None:
        common.print_table(
            ["ID", "SCOPE", "PROPOSER", "STATUS", "VERSIONS", "PENDING", "CONFLICTS"],
            [
                [
                    r.id,
                    r.scope,
                    r.owner,
                    r.status,
                    str(r.versions),
                    ", ".join(r.pending),
                    ", ".join(r.conflicts),
                ]
                for r in rows
            ],
        )

    common.run(json, common.with_store(store, home, fn), render)


@review_app.command("show")
def show(store: StoreArg, proposal: IdArg, home: common.HomeOpt = None, json: common.JsonOpt = False) -> None:
    """The proposed versions, oldest first, and the decisions so far."""

    def fn(s: Store) -> Any:
        p = s.proposal(proposal)
        return {"proposal": s.proposal_summary(p), "versions": s.proposal_versions(p.id)}

    def render(out: Any) -> None:
        p = out["proposal"]
        typer.echo(f"{p.id}: scope {p.scope!r}, proposed by {p.owner} ({p.actor}), {p.status}")
        common.print_table(
            ["VERSION", "TIME", "OPERATION", "PATH", "ACTOR", "SESSION"],
            [
                [v.id, common.to_jsonable(v.created_at), v.operation, v.path, v.actor, v.session or "-"]
                for v in out["versions"]
            ],
        )
        for d in p.decisions:
            why = f": {d.reason}" if d.reason else ""
            typer.echo(f"{d.action} by {d.reviewer} at {d.at}: {', '.join(d.paths)}{why}")

    common.run(json, common.with_store(store, home, fn), render)


@review_app.command("diff")
def diff(
    store: StoreArg,
    proposal: IdArg,
    paths: PathsOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """The proposal against the scope's current content; a conflict also shows a three-way diff."""

    def fn(s: Store) -> Any:
        return s.proposal_diff(proposal, paths)

    def render(diffs: Any) -> None:
        for d in diffs:
            mark = " (decided)" if d.decided else ""
            typer.echo(f"=== {d.path}: {d.status}{mark}")
            typer.echo(d.diff, nl=False)
            if d.three_way:
                typer.echo("--- three-way (scope | base | proposal):")
                typer.echo(d.three_way, nl=False)

    common.run(json, common.with_store(store, home, fn), render)


@review_app.command("accept")
def accept(
    store: StoreArg,
    proposal: IdArg,
    paths: PathsOpt = None,
    reason: Annotated[str, typer.Option("--reason", help="A note kept in the ledger.")] = "",
    actor: common.ActorOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Publish the proposal (or --path ones) onto its scope; authors kept, you recorded as reviewer.

    Refused (exit 4, nothing written) when a chosen path changed on the scope since."""

    def fn(s: Store) -> Any:
        return s.accept(proposal, reviewer=_reviewer(actor), paths=paths, reason=reason)

    def render(r: Any) -> None:
        typer.echo(
            f"{r.proposal.id}: accepted {len(r.paths)} path(s) as {len(r.versions)} version(s); {r.proposal.status}"
        )
        for v in r.versions:
            typer.echo(f"  {v.id}\t{v.operation}\t{v.path}\t{v.actor}")

    common.run(json, common.with_store(store, home, fn), render)


@review_app.command("reject")
def reject(
    store: StoreArg,
    proposal: IdArg,
    paths: PathsOpt = None,
    reason: Annotated[str, typer.Option("--reason", help="Why (kept in the ledger).")] = "",
    actor: common.ActorOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Record that the proposal (or --path ones) is not published; kept for retention.min_days."""

    def fn(s: Store) -> Any:
        return s.reject(proposal, reviewer=_reviewer(actor), reason=reason, paths=paths)

    def render(p: Any) -> None:
        typer.echo(f"{p.id}: {p.status}")

    common.run(json, common.with_store(store, home, fn), render)


@review_app.command("erase")
def erase(
    store: StoreArg,
    proposal: IdArg,
    reason: Annotated[str, typer.Option("--reason", help="Why (kept in the ledger); required.")] = "",
    actor: common.ActorOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Reject the proposal and erase its chain now: what only it holds is purged and proved gone
    (a secret or poisoned text; a rejected chain is otherwise kept for retention.min_days)."""

    def fn(s: Store) -> Any:
        return s.erase_proposal(proposal, reviewer=_reviewer(actor), reason=reason)

    def render(e: Any) -> None:
        typer.echo(
            f"{e.proposal.id}: erased as {e.id}; {len(e.versions)} versions, {e.purged} objects purged"
        )

    common.run(json, common.with_store(store, home, fn), render)


def _reviewer(value: str | None) -> str:
    who = common.actor(value)
    if who is None:
        raise InvalidInputError("a review decision needs a reviewer: give --actor or set GITMEM_ACTOR")
    return who
