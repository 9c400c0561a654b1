"""``gitmem store ...``: create, list, show, update, archive, delete."""

from __future__ import annotations

from typing import Annotated

import typer

from gitmem import store as store_mod
from gitmem.cli import common
from gitmem.config import StoreSettings

store_app = typer.Typer(help="Create, list, show, update, archive and delete stores.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(store_app, name="store")


def _render_settings(s: StoreSettings) -> None:
    typer.echo(f"{s.name}\t{s.id}\t{s.description}")


@store_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="Store name: a-z, 0-9 and ._- (a directory name).")],
    description: Annotated[str, typer.Option("--description", "-d", help="Shown to agents.")] = "",
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Create a store (a bare git repository with its settings and hooks)."""

    def call() -> StoreSettings:
        with store_mod.create_store(name, description=description, home=common.home(home)) as s:
            return s.settings

    common.run(json, call, _render_settings)
