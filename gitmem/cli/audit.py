"""Audit commands: ``redact``, ``audit``, ``verify``, ``prune``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from gitmem.cli import common
from gitmem.cli.memories import StoreArg
from gitmem.cli.versions import parse_time
from gitmem.errors import InvalidInputError
from gitmem.store import Store


def register(app: typer.Typer) -> None:
    for name, fn in (("redact", redact), ("audit", audit), ("verify", verify), ("prune", prune)):
        app.command(name)(fn)


def redact(
    store: StoreArg,
    version: Annotated[str | None, typer.Argument(help="Version to redact (memver_...).")] = None,
    reason: Annotated[str, typer.Option("--reason", help="Why (kept in the audit ledger).")] = "",
    pattern: Annotated[
        str | None, typer.Option("--pattern", help="Redact every match of this regex in the history instead.")
    ] = None,
    scope: Annotated[
        str | None,
        typer.Option("--scope", "-s", help="Only this scope for --pattern (default: every scope)."),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="List what would change (scopes, versions, paths); write nothing."),
    ] = False,
    no_remember: Annotated[
        bool,
        typer.Option(
            "--no-remember", help="Do not keep --pattern as a deny-pattern (new writes may match it again)."
        ),
    ] = False,
    actor: common.ActorOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Erase a version's content (or every match of --pattern) from the history, for real.

    The content is replaced by "[redacted: <id>]" wherever it occurs, in every scope whose history
    holds it (one operation); author, committer, times and messages are kept; the old objects are
    purged and the purge proved. A --pattern is remembered as a deny-pattern: no write may store a
    match again (--no-remember: not). Refused (exit 6, every live match listed, nothing changed)
    while the content is a live memory's current content: write a new version or delete first.
    See docs/redaction.md for what erasure reaches.
    """

    def fn(s: Store) -> Any:
        if (version is None) == (pattern is None):
            raise InvalidInputError("give either a VERSION or --pattern REGEX")
        if scope is not None and pattern is None:
            raise InvalidInputError(
                "--scope narrows --pattern; a VERSION is redacted in every scope holding it"
            )
        who = common.actor(actor)
        with common.busy("rewriting history and purging...", json or dry_run):
            if pattern is not None:
                return s.redact_pattern(
                    pattern,
                    reason=reason,
                    scope=scope,
                    actor=who,
                    dry_run=dry_run,
                    remember=not no_remember,
                )
            assert version is not None
            return s.redact(version, reason=reason, actor=who, dry_run=dry_run)

    def fn_with_sessions(s: Store) -> Any:
        import dataclasses

        from gitmem.sessions.redaction import mounts_holding

        r = fn(s)
        holding = mounts_holding(s.path, r.blobs, pattern=pattern)
        return dataclasses.replace(r, sessions=holding)

    def render(r: Any) -> None:
        scopes = ", ".join(repr(x) for x in r.scopes)
        if r.dry_run:
            typer.echo(
                f"dry run: would redact {len(r.versions)} version(s) in scope(s) {scopes}; nothing was written"
            )
        else:
            typer.echo(
                f"{r.id}: redacted {len(r.versions)} version(s) in scope(s) {scopes}, "
                f"rewrote {r.rewritten_commits} commit(s), purge verified"
            )
        for t in r.touched:
            typer.echo(f"  {t.scope}\t{t.version}\t{t.path}")
        if r.remembered:
            typer.echo("  the pattern is remembered: writes matching it are refused from now on")
        if r.receipt:
            typer.echo(f"  receipt: {r.receipt['status']} (gitmem receipt show {r.id})")
        for m in r.sessions:
            verb = "hold" if r.dry_run else "held"
            typer.echo(f"  session mount {m} {verb} the content; its next sync replaces it")

    common.run(json, common.with_store(store, home, fn_with_sessions), render)


def audit(
    store: StoreArg,
    since: Annotated[
        str | None,
        typer.Option("--since", help="From this date: ISO (UTC if no zone), yesterday, '2 weeks ago'."),
    ] = None,
    until: Annotated[str | None, typer.Option("--until", help="Up to this date (same forms).")] = None,
    actor: Annotated[str | None, typer.Option("--actor", help="Only events by this actor.")] = None,
    session: Annotated[
        str | None, typer.Option("--session", help="Only versions written in this session.")
    ] = None,
    type: Annotated[
        str | None,
        typer.Option(
            "--type",
            help="created, modified, deleted, store_created, settings_changed, archived, "
            "redaction, compaction, push, push_rejected, revert_session, flag, proposal_accepted, "
            "proposal_rejected or proposal_erased.",
        ),
    ] = None,
    scope: Annotated[str | None, typer.Option("--scope", "-s", help="Only this scope.")] = None,
    flagged: Annotated[
        bool, typer.Option("--flagged", help="Only what the write-time guard flagged (docs/guard.md).")
    ] = False,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
    nl: common.NlOpt = False,
) -> None:
    """One timeline, oldest first, of versions and audit-ledger events: time, type, actor, scope, subject."""

    def fn(s: Store) -> Any:
        return s.audit(
            since=parse_time(since, "--since"),
            until=parse_time(until, "--until"),
            actor=actor,
            session=session,
            type=type,
            scope=scope,
            flagged=flagged,
        )

    def render(events: Any) -> None:
        common.print_table(
            ["TIME", "TYPE", "ACTOR", "SCOPE", "SUBJECT", "DETAIL"],
            [
                [
                    common.to_jsonable(e.at),
                    e.type,
                    e.actor,
                    e.scope or "-",
                    e.subject,
                    e.detail.get("text") or _detail(e),
                ]
                for e in events
            ],
        )

    common.run(json, common.with_store(store, home, fn), render, nl=nl)


def verify(store: StoreArg, home: common.HomeOpt = None, json: common.JsonOpt = False) -> None:
    """Check the store: git fsck, the ledger chain, every redaction purged, trailers, the index.

    Exits 7 naming each failed check. An interrupted redaction or compaction is finished (or rolled
    back) first."""

    def fn(s: Store) -> Any:
        return s.verify()

    def render(report: Any) -> None:
        if report.recovered:
            typer.echo(f"interrupted rewrite: {report.recovered}")
        for c in report.checks:
            ok, failed = common.green("ok"), common.red("FAILED")
            if c.skipped:
                typer.echo(f"skipped\t{c.name}: {c.detail.removeprefix('skipped: ')}")
            else:
                typer.echo(f"{ok}\t{c.name}" if c.ok else f"{failed}\t{c.name}: {c.detail}")

    common.run(json, common.with_store(store, home, fn), render)


def prune(
    store: StoreArg,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List the versions that would be dropped; write nothing.")
    ] = False,
    actor: common.ActorOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Compact versions older than retention.max_days (keeping each live memory's keep_recent newest
    versions, and anything younger than retention.min_days), with the redaction guarantees."""

    def fn(s: Store) -> Any:
        with common.busy("compacting...", json or dry_run):
            return s.prune(actor=common.actor(actor), dry_run=dry_run)

    def render(result: Any) -> None:
        for c in result.compactions:
            if not c.id:
                typer.echo(
                    f"dry run: scope {c.scope!r}: would drop {len(c.dropped)} version(s), "
                    f"rewrite {c.rewritten_commits} commit(s); nothing was written"
                )
                for vid in c.dropped:
                    typer.echo(f"  {vid}")
                continue
            typer.echo(
                f"{c.id}: scope {c.scope!r}: dropped {len(c.dropped)} version(s), "
                f"rewrote {c.rewritten_commits} commit(s)"
            )
        for scope, why in result.skipped.items():
            typer.echo(f"scope {scope!r}: nothing compacted ({why})")
        for pid in result.dropped_proposals:
            typer.echo(f"{pid}: decided proposal dropped (older than retention.min_days)")

    common.run(json, common.with_store(store, home, fn), render)


def _detail(e: Any) -> str:
    text = str(e.detail.get("path") or e.detail.get("reason") or "")
    findings = e.detail.get("findings")
    if isinstance(findings, list) and findings:
        text += " (" + ", ".join(f"{f.get('rule')} line {f.get('line')}" for f in findings[:5]) + ")"
    return text
