"""``gitmem session start|sync|end|list|show|prompt`` and ``gitmem revert-session``."""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gitmem.cli import common
from gitmem.errors import ConflictError, ForbiddenError, InvalidInputError
from gitmem.store import open_store

if TYPE_CHECKING:
    from gitmem import sessions
else:

    class _Lazy(ModuleType):
        """``gitmem.sessions``, imported on first use: other commands (``gitmem read``) start faster."""

        def __getattr__(self, name: str) -> Any:
            return getattr(importlib.import_module("gitmem.sessions"), name)

    sessions = _Lazy("gitmem.sessions")

session_app = typer.Typer(
    help="Mount stores as directories for an agent, and sync its changes back as versions.",
    no_args_is_help=True,
)

SessionArg = Annotated[
    str | None,
    typer.Argument(help="Session id (default: --session, $GITMEM_SESSION, or the only active one)."),
]


def register(app: typer.Typer) -> None:
    app.add_typer(session_app, name="session")
    app.command("revert-session")(revert_session)


def _instructions(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, eq, text = pair.partition("=")
        if not eq or not name:
            raise InvalidInputError(f"invalid --instructions {pair!r}: expected NAME=TEXT")
        out[name] = text
    return out


# Exit codes of ``session sync`` and ``session end`` when the sync did not save everything
# (checked in this order): a mount that could not be synced at all, refused changes, conflicts.
EXIT_UNSYNCED = 1
EXIT_REFUSED = ForbiddenError.exit_code  # 6
EXIT_CONFLICT = ConflictError.exit_code  # 4

MassDeleteOpt = Annotated[
    bool,
    typer.Option("--allow-mass-delete", help="Sync even when it deletes most of a mount's memories."),
]


def sync_exit_code(report: sessions.SyncReport) -> int:
    """0 when every change was saved; else 1 (a mount not synced), 6 (refused), 4 (conflicts)."""
    if any(m.error is not None for m in report.mounts):
        return EXIT_UNSYNCED
    if any(m.refused for m in report.mounts):
        return EXIT_REFUSED
    if any(m.conflicts for m in report.mounts):
        return EXIT_CONFLICT
    return 0


def session_record(session: sessions.Session, versions: dict[str, list[Any]] | None = None) -> dict[str, Any]:
    """The one JSON shape of a session (start, list, show, end): the record, each mount with the
    number of versions the session wrote through it."""
    record = common.to_jsonable(session)
    for mount in record["mounts"]:
        mount["versions"] = len((versions or {}).get(mount["slug"], []))
    return {"type": "session", **record}


def _render_sync(report: sessions.SyncReport) -> None:
    for m in report.mounts:
        if m.error is not None:
            typer.echo(f"{m.slug} ({m.access}): not synced: {m.error}")
            continue
        bits = [f"{len(m.versions)} version(s)"]
        if m.conflicts:
            bits.append(f"{len(m.conflicts)} conflict(s)")
        if m.refused:
            bits.append(f"{len(m.refused)} refused")
        if m.refreshed:
            bits.append(f"{len(m.refreshed)} updated from the store")
        typer.echo(f"{m.slug} ({m.access}): " + ", ".join(bits))
        for v in m.versions:
            what = f"renamed {v.previous_path} -> {v.path}" if v.previous_path else f"{v.operation} {v.path}"
            typer.echo(f"  {what}  {v.id}")
        for c in m.conflicts:
            typer.echo(f"  conflict {c.path}: {c.reason}")
        for r in m.refused:
            typer.echo(f"  refused {r.path}: {r.reason}")


@session_app.command("start")
def start(
    store: Annotated[
        list[str], typer.Option("--store", help="NAME[:ro|:rw][@SCOPE]; repeat for up to 8 stores.")
    ],
    root: Annotated[Path | None, typer.Option("--root", help="Directory for the mounts.")] = None,
    instructions: Annotated[
        list[str] | None, typer.Option("--instructions", help="NAME=TEXT: instructions shown for a store.")
    ] = None,
    actor: common.ActorOpt = None,
    session: Annotated[
        str | None, typer.Option("--session", help="Use this id instead of a new sesn_ id.")
    ] = None,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            help="Mount each store as it was at TIME|VERSION|COMMIT, read-only (docs/point-in-time.md).",
        ),
    ] = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Start a session: mount the stores under ROOT and print the system-prompt block."""

    def call() -> sessions.Session:
        return sessions.start_session(
            store,
            root=root,
            instructions=_instructions(instructions or []),
            home=common.home(home),
            actor=common.actor(actor),
            session_id=session,
            at=at,
        )

    def render(record: dict[str, Any]) -> None:
        typer.echo(
            sessions.system_prompt(sessions.show_session(record["id"], home=common.home(home)).session),
            nl=False,
        )

    common.run(json, lambda: session_record(call()), render)


@session_app.command("sync")
def sync(
    session_id: SessionArg = None,
    watch: Annotated[bool, typer.Option("--watch", help="Keep syncing when files change.")] = False,
    debounce: Annotated[
        float, typer.Option("--debounce", help="--watch: quiet seconds before a sync.")
    ] = 1.0,
    poll: Annotated[float, typer.Option("--poll", help="--watch: seconds between looks.")] = 0.25,
    max_seconds: Annotated[
        float | None, typer.Option("--max-seconds", help="--watch: stop after this many seconds.")
    ] = None,
    allow_mass_delete: MassDeleteOpt = False,
    actor: common.ActorOpt = None,
    session: common.SessionOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Save every change in the session's read-write mounts as versions; refresh the mounts.

    Exits 0 when every change was saved, 1 when a mount could not be synced (nothing written for
    it: a lost marker, a mass delete without --allow-mass-delete), 6 when changes were refused
    (read-only mount, rules), 4 when there were conflicts (kept as .conflict- copies); the report
    (--json) says which."""
    sid = session_id or common.session(session)
    if not watch:
        report = common.run(
            json,
            lambda: sessions.sync_session(
                sid, home=common.home(home), actor=common.actor(actor), allow_mass_delete=allow_mass_delete
            ),
            _render_sync,
        )
        raise typer.Exit(sync_exit_code(report))

    syncs = 0

    def on_sync(report: sessions.SyncReport) -> None:
        nonlocal syncs
        syncs += 1
        if common.want_json(json):
            import json as json_mod

            typer.echo(json_mod.dumps(common.to_jsonable(report), ensure_ascii=False))
        elif any(m.versions or m.conflicts or m.refused or m.refreshed for m in report.mounts):
            _render_sync(report)

    def call() -> dict[str, int]:
        # Ctrl-C is the usual way to stop watching; a sync it cuts short is finished by the next one.
        with contextlib.suppress(KeyboardInterrupt):
            sessions.watch_session(
                sid,
                home=common.home(home),
                actor=common.actor(actor),
                debounce=debounce,
                poll=poll,
                max_seconds=max_seconds,
                on_sync=on_sync,
            )
        return {"syncs": syncs}

    common.run(json, call)


@session_app.command("end")
def end(
    session_id: SessionArg = None,
    force: Annotated[
        bool, typer.Option("--force", help="End even if some changes could not be saved.")
    ] = False,
    allow_mass_delete: MassDeleteOpt = False,
    actor: common.ActorOpt = None,
    session: common.SessionOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Sync one last time, then remove the session's mount directories.

    Refuses (exit 4, mounts kept) while changes could not be saved, unless --force; ended with
    --force after refused changes or conflicts, it exits with the codes of session sync."""

    def render(result: sessions.EndResult) -> None:
        _render_sync(result.sync)
        typer.echo(f"session {result.session.id} ended")

    result = common.run(
        json,
        lambda: sessions.end_session(
            session_id or common.session(session),
            home=common.home(home),
            actor=common.actor(actor),
            force=force,
            allow_mass_delete=allow_mass_delete,
        ),
        render,
    )
    raise typer.Exit(sync_exit_code(result.sync))


def _render_detail(d: sessions.SessionDetail) -> None:
    s = d.session
    typer.echo(f"{s.id}\t{s.status}\t{s.created_at}\t{s.root}")
    for m in s.mounts:
        n = len(d.versions.get(m.slug, []))
        scope = f"@{m.scope}" if m.scope != "main" else ""
        typer.echo(f"  {m.store}{scope}\t{m.access}\t{n} version(s)\t{m.path}")


@session_app.command("list")
def list_(
    status: Annotated[str | None, typer.Option("--status", help="Only active or ended sessions.")] = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
    nl: common.NlOpt = False,
) -> None:
    """List sessions with their stores, access, root, status and how many versions they wrote."""

    def render(items: list[dict[str, Any]]) -> None:
        for d in details:
            _render_detail(d)

    details: list[sessions.SessionDetail] = []

    def call() -> list[dict[str, Any]]:
        details.extend(sessions.list_sessions(home=common.home(home), status=status))
        return [session_record(d.session, d.versions) for d in details]

    common.run(json, call, render, nl=nl)


@session_app.command("show")
def show(
    session_id: SessionArg = None,
    session: common.SessionOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Show a session and the versions it wrote."""

    def render(record: dict[str, Any]) -> None:
        _render_detail(detail[0])
        for slug, versions in detail[0].versions.items():
            for v in versions:
                when = common.to_jsonable(v.created_at)
                typer.echo(f"    {slug}\t{when}\t{v.operation}\t{v.path}\t{v.id}")

    detail: list[sessions.SessionDetail] = []

    def call() -> dict[str, Any]:
        d = sessions.show_session(session_id or common.session(session), home=common.home(home))
        detail.append(d)
        return {**session_record(d.session, d.versions), "history": common.to_jsonable(d.versions)}

    common.run(json, call, render)


@session_app.command("prompt")
def prompt(
    session_id: SessionArg = None,
    session: common.SessionOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Print the system-prompt block of a session (what the agent needs to know)."""

    def call() -> dict[str, Any]:
        sid = session_id or common.session(session)
        return {"prompt": sessions.prompt_for(sid, home=common.home(home))}

    common.run(json, call, lambda out: typer.echo(out["prompt"], nl=False))


def revert_session(
    store: Annotated[str, typer.Argument(help="Store name or path.")],
    session_id: Annotated[str, typer.Argument(metavar="SESSION", help="The session whose writes to undo.")],
    scope: Annotated[
        str | None, typer.Option("--scope", "-s", help="Only this scope (default: all).")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would change; write nothing.")
    ] = False,
    actor: common.ActorOpt = None,
    session: common.SessionOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Undo everything SESSION wrote in STORE, as new versions (history is kept)."""

    def call() -> sessions.RevertResult:
        with open_store(store, common.home(home)) as s:
            return sessions.revert_session(
                s,
                session_id,
                scope=scope,
                dry_run=dry_run,
                actor=common.actor(actor),
                session=common.session(session),
            )

    def render(result: sessions.RevertResult) -> None:
        for item in result.items:
            where = (
                item.path if item.target_path in (None, item.path) else f"{item.path} -> {item.target_path}"
            )
            note = f" (also undoes {item.later_versions} later version(s))" if item.later_versions else ""
            source = f" to {item.restores_version}" if item.restores_version else ""
            typer.echo(f"{item.action} {where}{source}{note}")
        for r in result.refused:
            typer.echo(f"refused {r.path}: {r.reason}")
        if result.dry_run:
            typer.echo(f"dry run: {len(result.items)} memory(ies) would change")
        else:
            typer.echo(f"{len(result.versions)} version(s) written")

    common.run(json, call, render)
