"""History commands: ``log``, ``show``, ``diff``, ``restore``, ``reindex``."""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any

import typer

from gitmem.cli import common
from gitmem.cli.memories import StoreArg, render_version
from gitmem.errors import InvalidInputError
from gitmem.model.versions import Version
from gitmem.store import Store

VersionArg = Annotated[str, typer.Argument(help="Version id (memver_...).")]


def register(app: typer.Typer) -> None:
    for name, fn in (
        ("log", log),
        ("show", show),
        ("diff", diff),
        ("restore", restore),
        ("reindex", reindex),
        ("maintain", maintain),
    ):
        app.command(name)(fn)


_UNITS = {
    "second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 7 * 86400,
    "month": 30 * 86400, "year": 365 * 86400,
}  # fmt: skip
_RELATIVE = re.compile(r"^(\d+)[ .]*([a-z]+?)s?[ .]+ago$")


def parse_time(value: str | None, option: str, now: dt.datetime | None = None) -> dt.datetime | None:
    """An ISO 8601 date or time (``2026-01-31``, ``2026-01-31T12:00:00Z``; naive means UTC), or a
    relative one as git takes it: ``now``, ``today``, ``yesterday``, ``3 days ago``, ``2.weeks.ago``."""
    if value is None:
        return None
    now = now or dt.datetime.now(dt.UTC)
    text = value.strip().lower()
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if text == "now":
        return now
    if text == "today":
        return midnight
    if text == "yesterday":
        return midnight - dt.timedelta(days=1)
    m = _RELATIVE.match(text)
    if m and m.group(2) in _UNITS:
        return now - dt.timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2)])
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise InvalidInputError(
            f"{option} {value!r} is not a date: use ISO 8601 (2026-01-31, 2026-01-31T12:00:00Z), "
            "today, yesterday or 'N days/weeks/months ago'"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


def _log_row(v: Version) -> list[str]:
    when = common.to_jsonable(v.created_at)
    path = f"{v.previous_path} -> {v.path}" if v.previous_path and v.previous_path != v.path else v.path
    return [v.id, when, v.scope, v.operation, path, v.actor, v.session or "-"]


def log(
    store: StoreArg,
    path: Annotated[str | None, typer.Argument(help="Only this memory's history (across renames).")] = None,
    scope: Annotated[
        str | None, typer.Option("--scope", "-s", help="Only this scope (default: all).")
    ] = None,
    session: Annotated[
        str | None, typer.Option("--session", help="Only versions written in this session.")
    ] = None,
    actor: Annotated[str | None, typer.Option("--actor", help="Only versions by this actor.")] = None,
    op: Annotated[str | None, typer.Option("--op", help="Only created, modified or deleted.")] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="From this date: ISO (UTC if no zone), yesterday, '2 weeks ago'."),
    ] = None,
    until: Annotated[str | None, typer.Option("--until", help="Up to this date (same forms).")] = None,
    memory: Annotated[str | None, typer.Option("--memory", help="Only this memory id (mem_...).")] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", "-n", min=1, help="At most this many versions.")
    ] = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
    nl: common.NlOpt = False,
) -> None:
    """List versions, newest first: id, time, scope, operation, path, actor, session."""

    def fn(s: Store) -> list[Version]:
        common.check_scope(s, scope)
        return s.versions(
            path,
            scope=scope,
            session=session,
            actor=actor,
            operation=op,
            memory_id=memory,
            since=parse_time(since, "--since"),
            until=parse_time(until, "--until"),
            limit=limit,
        )

    def render(versions: list[Version]) -> None:
        common.print_table(
            ["VERSION", "TIME", "SCOPE", "OPERATION", "PATH", "ACTOR", "SESSION"],
            [_log_row(v) for v in versions],
        )

    common.run(json, common.with_store(store, home, fn), render, nl=nl)


def _show(s: Store, version_id: str) -> dict[str, Any]:
    version = s.version(version_id)
    content: str | None = None
    if version.operation != "deleted" and version.redaction is None:
        content = s.read(version.path, scope=version.scope, version=version_id).content
    return {**common.to_jsonable(version), "content": content}


def show(
    store: StoreArg, version: VersionArg, home: common.HomeOpt = None, json: common.JsonOpt = False
) -> None:
    """Show one version: its metadata, then its content."""

    def render(info: dict[str, Any]) -> None:
        keys = (
            "id",
            "memory_id",
            "scope",
            "path",
            "previous_path",
            "operation",
            "actor",
            "session",
            "created_at",
            "commit",
            "content_sha256",
            "size",
        )
        lines = [f"{k + ':':16}{info[k]}" for k in keys if info.get(k) is not None]
        if info.get("redaction"):
            r = info["redaction"]
            lines.append(f"{'redacted:':16}{r['id']} by {r['actor']} at {r['redacted_at']}: {r['reason']}")
        typer.echo("\n".join(lines))
        if info["content"] is not None:
            typer.echo("")
            typer.echo(info["content"], nl=not info["content"].endswith("\n"))

    common.run(json, common.with_store(store, home, lambda s: _show(s, version)), render)


def diff(
    store: StoreArg,
    version: Annotated[
        str | None, typer.Argument(help="Version id (memver_...); omit it with --from/--to.")
    ] = None,
    other: Annotated[
        str | None, typer.Argument(help="Second version: diff VERSION..OTHER (default: previous..VERSION).")
    ] = None,
    start: Annotated[
        str | None,
        typer.Option("--from", help="Whole-scope diff from this moment (time, version or commit; see --at)."),
    ] = None,
    end: Annotated[
        str | None, typer.Option("--to", help="... to this moment (default: now, the scope's head).")
    ] = None,
    scope: common.ScopeOpt = "main",
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Unified diff of a version against the one before it, or between two versions; with --from
    (and --to), the whole scope between two moments, as `git diff` of the two trees prints it."""

    def fn(s: Store) -> dict[str, str]:
        if start is not None or end is not None:
            if version is not None or other is not None:
                raise InvalidInputError("give versions, or --from/--to, not both")
            if start is None:
                raise InvalidInputError("--to needs --from")
            common.check_scope(s, scope)
            tip = s.tip(scope)
            return {"diff": s.diff_at(start, end if end is not None else str(tip), scope=scope)}
        if version is None:
            raise InvalidInputError("give a version (memver_...), or --from/--to for the whole scope")
        return {"diff": s.diff(version, other)}

    common.run(
        json, common.with_store(store, home, fn), lambda d: typer.echo(common.color_diff(d["diff"]), nl=False)
    )


def restore(
    store: StoreArg,
    version: VersionArg,
    actor: common.ActorOpt = None,
    session: common.SessionOpt = None,
    scope: Annotated[
        str | None,
        typer.Option("--scope", "-s", help="Restore in this scope (a version forked scopes share)."),
    ] = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Write an old version's content back as a new version (history is never rewritten)."""

    unchanged = False

    def fn(s: Store) -> Version:
        nonlocal unchanged
        restored = s.restore(version, actor=common.actor(actor), session=common.session(session), scope=scope)
        if restored is not None:
            return restored
        unchanged = True  # already the content: the version the memory is at (same JSON shape)
        old = s.version(version, scope=scope)
        from gitmem.cli.memories import current_version

        return current_version(s, old.path, old.scope)

    def render(v: Version) -> None:
        from gitmem.cli.memories import render_unchanged

        render_unchanged(v) if unchanged else render_version(v)

    common.run(json, common.with_store(store, home, fn), render)


def reindex(store: StoreArg, home: common.HomeOpt = None, json: common.JsonOpt = False) -> None:
    """Rebuild the derived index (versions, heads, search) from git."""

    def fn(s: Store) -> dict[str, int]:
        with common.busy("reindexing...", json):
            return {"versions": s.reindex()}

    common.run(
        json, common.with_store(store, home, fn), lambda d: typer.echo(f"indexed {d['versions']} versions")
    )


def maintain(store: StoreArg, home: common.HomeOpt = None, json: common.JsonOpt = False) -> None:
    """Pack loose objects and keep packs geometric (writes do this by themselves when needed)."""

    def fn(s: Store) -> dict[str, bool]:
        with common.busy("repacking...", json):
            return {"repacked": s.repack()}

    common.run(json, common.with_store(store, home, fn), lambda d: typer.echo("repacked"))
