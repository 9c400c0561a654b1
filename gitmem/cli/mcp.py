"""``gitmem mcp``: serve stores to an MCP client (Claude Code, Claude Desktop, ...) over stdio."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from gitmem.cli import common

if TYPE_CHECKING:
    from gitmem.integrations.mcp_server import ServeSummary

StoresOpt = Annotated[
    list[str],
    typer.Option(
        "--store",
        help="A store to serve: NAME or NAME@SCOPE, with :rw or :ro (read-only: no write tools). Repeatable.",
    ),
]


def _pairs(pairs: list[str]) -> dict[str, str]:
    from gitmem.errors import InvalidInputError

    out = {}
    for pair in pairs:
        name, sep, text = pair.partition("=")
        if not sep or not name:
            raise InvalidInputError(f"invalid --instructions {pair!r}: expected NAME=TEXT")
        out[name] = text
    return out


def register(app: typer.Typer) -> None:
    app.command("mcp")(mcp)


def _render(summary: ServeSummary) -> None:
    sys.stderr.write(f"gitmem mcp: session {summary.session} ended\n")


def mcp(
    store: StoresOpt,
    scope: common.ScopeOpt = "main",
    session: common.SessionOpt = None,
    actor: common.ActorOpt = None,
    review: Annotated[
        bool, typer.Option("--review", help="Writes land as the session's proposal for a reviewer.")
    ] = False,
    reviewer: Annotated[
        bool, typer.Option("--reviewer", help="Add the tools that review proposals (accept, reject).")
    ] = False,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
    instructions: Annotated[
        list[str] | None, typer.Option("--instructions", help="NAME=TEXT: instructions shown for a store.")
    ] = None,
) -> None:
    """Serve stores over stdio as an MCP server (needs the 'mcp' extra).

    Tools: list/read/history/search for every store; write/create/edit/delete/rename for read-write
    stores. Resources: gitmem://STORE/PATH. Every write is tagged with the session (--session, else a
    new sesn_ id). Stdout carries the protocol; messages go to stderr.
    """

    def call() -> ServeSummary:
        try:
            from gitmem.integrations.mcp_server import serve
        except ImportError as exc:  # the optional extra is missing
            from gitmem.errors import GitmemError

            raise GitmemError(
                f"gitmem mcp needs the 'mcp' package: pip install 'gitmem-store[mcp]' ({exc})"
            ) from None
        return serve(
            store,
            home=common.home(home),
            scope=scope,
            session=common.session(session),
            actor=common.actor(actor),
            instructions=_pairs(instructions or []),
            review=review,
            reviewer=reviewer,
        )

    common.run(json, call, _render)
