"""``gitmem hooks install STORE|--all`` and ``gitmem clone STORE DEST``."""

from __future__ import annotations

from typing import Annotated

import typer

from gitmem.cli import common

hooks_app = typer.Typer(help="Server-side hooks that guard pushes into stores.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(hooks_app, name="hooks")
    app.command("clone")(clone)


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
    from gitmem import hookinstall
    from gitmem.hookinstall import InstalledHook

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
    from gitmem.clone import CloneResult
    from gitmem.clone import clone as do_clone

    def render(r: CloneResult) -> None:
        typer.echo(f"cloned {r.source} to {r.path} (scopes: {', '.join(r.scopes) or 'none'})")
        typer.echo(f"read it with: gitmem ls {r.path}; write with git commit + git push")

    common.run(json, lambda: do_clone(store, dest, home=common.home(home)), render)
