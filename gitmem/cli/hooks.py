"""``gitmem hooks install STORE|--all``, ``gitmem clone STORE DEST`` and ``gitmem fetch CLONE``."""

from __future__ import annotations

from typing import Annotated

import typer

from gitmem.cli import common

hooks_app = typer.Typer(help="Server-side hooks that guard pushes into stores.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(hooks_app, name="hooks")
    app.command("clone")(clone)
    app.command("fetch")(fetch)


@hooks_app.command("install")
def install(
    store: Annotated[str | None, typer.Argument(help="Store name or path (omit with --all).")] = None,
    all_stores: Annotated[
        bool, typer.Option("--all", help="Install into every store of the workspace.")
    ] = False,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Install the pre-receive/post-receive hooks (idempotent; a foreign hook is kept as <name>.legacy)."""
    from gitmem.push import hookinstall
    from gitmem.push.hookinstall import InstalledHook

    def render(hooks: list[InstalledHook]) -> None:
        for h in hooks:
            extra = f" (runs {h.legacy.name} too)" if h.legacy is not None else ""
            typer.echo(f"{h.store}\t{h.hook.name}\t{h.action}{extra}")

    common.run(
        json, lambda: hookinstall.install(store, all_stores=all_stores, home=common.home(home)), render
    )


def clone(
    store: Annotated[str, typer.Argument(help="Store name or path.")],
    dest: Annotated[str, typer.Argument(help="Directory to clone into (new or empty).")],
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Clone a store for offline inspection (git history, ledger refs, read-only settings); push to write."""
    from gitmem.push.clone import CloneResult
    from gitmem.push.clone import clone as do_clone

    def render(r: CloneResult) -> None:
        typer.echo(f"cloned {r.source} to {r.path} (scopes: {', '.join(r.scopes) or 'none'})")
        typer.echo(f"read it with: gitmem ls {r.path}; write with git commit + git push")

    def call() -> CloneResult:
        with common.busy("cloning...", json):
            return do_clone(store, dest, home=common.home(home))

    common.run(json, call, render)


def fetch(
    clone_path: Annotated[str, typer.Argument(help="Path of a clone made with gitmem clone.")],
    purge: Annotated[
        bool,
        typer.Option(
            "--purge", help="Resync rewritten scopes and remove the old (redacted) history from the clone."
        ),
    ] = False,
    json: common.JsonOpt = False,
) -> None:
    """Update a clone from its store; says which scopes were rewritten (redaction) and how to resync.

    With --purge, local branches at the old history are reset onto the new one and the old history's
    objects are removed from the clone, then proved gone. A rewritten audit ledger is never taken:
    it is reported (exit 7)."""
    from gitmem.push.clone import FetchResult
    from gitmem.push.clone import fetch as do_fetch

    def render(r: FetchResult) -> None:
        if not r.updated:
            typer.echo("up to date")
        for scope in r.updated:
            if not any(w.scope == scope for w in r.rewritten):
                typer.echo(f"{scope}: updated")
        for w in r.rewritten:
            typer.echo(
                f"{w.scope}: history was rewritten on the store (a redaction or compaction; "
                f"see: gitmem audit {r.path})"
            )
            if purge:
                continue
            for branch in w.local_branches:
                typer.echo(
                    f"  local branch {branch} is built on the old history; resync it with "
                    f"'git reset --hard origin/{w.scope}' (no local work) or "
                    f"'git rebase --onto origin/{w.scope} {w.old[:12]} {branch}' (keeps your commits)"
                )

        if purge:
            for branch in r.resynced:
                typer.echo(f"  local branch {branch} reset onto the rewritten history")
            typer.echo(f"purged {r.purged} object(s) of the old history from the clone (verified)")

    common.run(json, lambda: do_fetch(clone_path, purge=purge), render)
