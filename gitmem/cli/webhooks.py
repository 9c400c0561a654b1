"""``gitmem webhook ...``: the webhook endpoints ``gitmem serve`` delivers events to (docs/webhooks.md)."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from gitmem import webhooks
from gitmem.cli import common
from gitmem.config import workspace_home

webhook_app = typer.Typer(
    help="Add, list, remove and test the webhook endpoints of gitmem serve.", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    app.add_typer(webhook_app, name="webhook")


def _home(value: Any) -> Any:
    return workspace_home(common.home(value))


@webhook_app.command("add")
def add(
    url: Annotated[str, typer.Argument(help="Where to POST events: an http:// or https:// URL.")],
    event: Annotated[
        list[str] | None,
        typer.Option("--event", help="An event type to send (default: all). Repeatable."),
    ] = None,
    allow_private: Annotated[
        bool,
        typer.Option(
            "--allow-private",
            help="Allow a loopback, private or link-local address (refused by default: SSRF).",
        ),
    ] = False,
    description: Annotated[str, typer.Option("--description", help="A note for the list.")] = "",
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Add an endpoint and print its signing secret once (whsec_...; it is never shown again).
    Events from now on are delivered to it by gitmem serve."""

    def call() -> dict[str, Any]:
        h = _home(home)
        ep, secret = webhooks.add_endpoint(
            h, url, types=event, allow_private=allow_private, description=description
        )
        return {**webhooks.describe(h, ep), "secret": secret}

    def render(value: dict[str, Any]) -> None:
        sys.stderr.write(f"added {value['id']} -> {value['url']}; the signing secret is shown only now:\n")
        sys.stdout.write(f"{value['secret']}\n")

    common.run(json, call, render)


@webhook_app.command("list")
def list_endpoints(home: common.HomeOpt = None, json: common.JsonOpt = False) -> None:
    """List endpoints with their delivery state (active, retrying, stopped); never their secrets."""

    def call() -> list[dict[str, Any]]:
        h = _home(home)
        return [webhooks.describe(h, ep) for ep in webhooks.load_endpoints(h)]

    def render(rows: list[dict[str, Any]]) -> None:
        common.print_table(
            ["ID", "URL", "STATUS", "DELIVERED", "FAILURES", "LAST ERROR"],
            [
                [
                    r["id"],
                    r["url"],
                    r["status"],
                    str(r["delivered"]),
                    str(r["failures"]),
                    r["last_error"] or "-",
                ]
                for r in rows
            ],
        )

    common.run(json, call, render)


@webhook_app.command("remove")
def remove(
    endpoint_id: Annotated[str, typer.Argument(help="The endpoint's id (whep_...).")],
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Remove an endpoint: nothing more is sent to it."""

    def call() -> dict[str, str]:
        webhooks.remove_endpoint(_home(home), endpoint_id)
        return {"id": endpoint_id, "removed": "true"}

    common.run(json, call, lambda v: typer.echo(f"removed {v['id']}"))


@webhook_app.command("enable")
def enable(
    endpoint_id: Annotated[str, typer.Argument(help="The endpoint's id (whep_...).")],
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Resume a stopped endpoint at the event it stopped on (nothing was skipped)."""

    def call() -> dict[str, Any]:
        h = _home(home)
        return webhooks.describe(h, webhooks.resume_endpoint(h, endpoint_id))

    common.run(json, call, lambda v: typer.echo(f"enabled {v['id']}"))


@webhook_app.command("test")
def test(
    endpoint_id: Annotated[str, typer.Argument(help="The endpoint's id (whep_...).")],
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Send one signed gitmem.webhook_test event now; exits 1 when it is not delivered."""

    def call() -> dict[str, Any]:
        h = _home(home)
        ep = webhooks.get_endpoint(h, endpoint_id)
        event = webhooks.test_event(h)
        try:
            status = webhooks.post(ep, event)
        except webhooks.DeliveryError as exc:
            return {"id": event["id"], "delivered": False, "error": str(exc)}
        return {"id": event["id"], "delivered": True, "status": status}

    def render(value: dict[str, Any]) -> None:
        if value["delivered"]:
            typer.echo(f"delivered {value['id']}: HTTP {value['status']}")
        else:
            sys.stderr.write(f"not delivered: {value['error']}\n")

    value = common.run(json, call, render)
    if not value["delivered"]:
        raise typer.Exit(1)
