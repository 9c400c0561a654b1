"""``gitmem serve``: the Anthropic-compatible memory stores API over HTTP (extra ``server``)."""

from __future__ import annotations

from typing import Annotated

import typer

from gitmem.cli import common
from gitmem.errors import GitmemError


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


def serve(
    home: common.HomeOpt = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on (TLS: see docs/server.md).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="TCP port.")] = 8080,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Worker processes.")] = 1,
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning or error.")] = "info",
    json: common.JsonOpt = False,
) -> None:
    """Serve the workspace's stores as Anthropic's memory stores API (base_url for the SDK).

    Every request needs an API token (gitmem token create). Stops cleanly on Ctrl-C or SIGTERM:
    requests in flight finish first.
    """

    def call() -> None:
        try:
            from gitmem.server.app import serve as run
        except ImportError as exc:  # the optional extra is missing
            raise GitmemError(
                f"gitmem serve needs the 'server' extra: pip install 'gitmem-store[server]' ({exc})"
            ) from None
        run(common.home(home), host=host, port=port, workers=workers, log_level=log_level)

    common.run(json, call)
