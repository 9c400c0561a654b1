"""The ``gitmem`` typer application: global options, and the command groups registered on it."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Annotated

import typer

from gitmem.cli import common

app = typer.Typer(
    name="gitmem",
    help="Memory stores for AI agents, on plain git: versioned, attributed, redactable.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)

# Each module defines ``register(app)``; one line per command group.
COMMAND_MODULES = (
    "stores",
    "memories",
    "versions",
    "transfer",
    "search",
    "hooks",
    "mcp",
    "sessions",
    "audit",
    "serve",
    "tokens",
)


@app.callback()
def _globals(
    home: Annotated[Path | None, typer.Option("--home", help="Workspace directory.")] = None,
    actor: Annotated[str | None, typer.Option("--actor", help="Actor for writes ($GITMEM_ACTOR).")] = None,
    session: Annotated[str | None, typer.Option("--session", help="Session id ($GITMEM_SESSION).")] = None,
    json: Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of unexpected errors.")] = False,
) -> None:
    """Memory stores for AI agents, on plain git: versioned, attributed, redactable."""
    common.GLOBALS = common.Globals(home=home, actor=actor, session=session, json=json, debug=debug)


for _name in COMMAND_MODULES:
    importlib.import_module(f"gitmem.cli.{_name}").register(app)
