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
    scope: Annotated[str, typer.Option("--scope", "-s", help="Scope for --pattern.")] = "main",
    actor: common.ActorOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Erase a version's content (or every match of --pattern) from the history, for real.

    The content is replaced by "[redacted: <id>]" wherever it occurs in the scope's history; author,
    committer, times and messages are kept; the old objects are purged and the purge proved. Refused
    (exit 6) while the content is a live memory's current content: write a new version or delete first.
    """

    def fn(s: Store) -> Any:
        from gitmem.audit import redact as redact_mod

        if (version is None) == (pattern is None):
            raise InvalidInputError("give either a VERSION or --pattern REGEX")
        who = common.actor(actor)
        with common.busy("rewriting history and purging...", json):
            if pattern is not None:
                return redact_mod.redact_pattern(s.core, pattern, reason=reason, scope=scope, actor=who)
            assert version is not None
            return redact_mod.redact(s.core, version, reason=reason, actor=who)

    def render(r: Any) -> None:
        typer.echo(
            f"{r.id}: redacted {len(r.versions)} version(s) in scope {r.scope!r}, "
            f"rewrote {r.rewritten_commits} commit(s), purge verified"
        )
        for vid in r.versions:
            typer.echo(f"  {vid}")

    common.run(json, common.with_store(store, home, fn), render)


def audit(
    store: StoreArg,
    since: Annotated[
        str | None, typer.Option("--since", help="From this ISO date/time (UTC if no zone).")
    ] = None,
    until: Annotated[str | None, typer.Option("--until", help="Up to this ISO date/time.")] = None,
    actor: Annotated[str | None, typer.Option("--actor", help="Only events by this actor.")] = None,
    session: Annotated[
        str | None, typer.Option("--session", help="Only versions written in this session.")
    ] = None,
    type: Annotated[
        str | None,
        typer.Option(
            "--type",
            help="created, modified, deleted, store_created, settings_changed, archived, "
            "redaction, compaction, push, push_rejected or revert_session.",
        ),
    ] = None,
    scope: Annotated[str | None, typer.Option("--scope", "-s", help="Only this scope.")] = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """One timeline, oldest first, of versions and audit-ledger events: time, type, actor, scope, subject."""

    def fn(s: Store) -> Any:
        from gitmem.audit.timeline import audit as audit_fn

        return audit_fn(
            s.core,
            since=parse_time(since, "--since"),
            until=parse_time(until, "--until"),
            actor=actor,
            session=session,
            type=type,
            scope=scope,
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
                    e.detail.get("text") or e.detail.get("path") or e.detail.get("reason") or "",
                ]
                for e in events
            ],
        )

    common.run(json, common.with_store(store, home, fn), render)


def verify(store: StoreArg, home: common.HomeOpt = None, json: common.JsonOpt = False) -> None:
    """Check the store: git fsck, the ledger chain, every redaction purged, trailers, the index.

    Exits 7 naming each failed check. An interrupted redaction or compaction is finished (or rolled
    back) first."""

    def fn(s: Store) -> Any:
        from gitmem.audit.verify import verify as verify_fn

        return verify_fn(s.core)

    def render(report: Any) -> None:
        if report.recovered:
            typer.echo(f"interrupted rewrite: {report.recovered}")
        for c in report.checks:
            typer.echo(f"ok\t{c.name}" if c.ok else f"FAILED\t{c.name}: {c.detail}")

    common.run(json, common.with_store(store, home, fn), render)


def prune(
    store: StoreArg, actor: common.ActorOpt = None, home: common.HomeOpt = None, json: common.JsonOpt = False
) -> None:
    """Compact versions older than retention.max_days (keeping each live memory's keep_recent newest
    versions, and anything younger than retention.min_days), with the redaction guarantees."""

    def fn(s: Store) -> Any:
        from gitmem.audit.retention import prune as prune_fn

        with common.busy("compacting...", json):
            return prune_fn(s.core, actor=common.actor(actor))

    def render(result: Any) -> None:
        for c in result.compactions:
            typer.echo(
                f"{c.id}: scope {c.scope!r}: dropped {len(c.dropped)} version(s), "
                f"rewrote {c.rewritten_commits} commit(s)"
            )
        for scope, why in result.skipped.items():
            typer.echo(f"scope {scope!r}: nothing compacted ({why})")

    common.run(json, common.with_store(store, home, fn), render)
