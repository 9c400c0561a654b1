"""``gitmem token ...``: create, list and revoke the API tokens of ``gitmem serve``."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gitmem.cli import common
from gitmem.server.tokens import Token, TokenStore, parse_store_grant

token_app = typer.Typer(help="Create, list and revoke API tokens for gitmem serve.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(token_app, name="token")


def _grants(values: list[str] | None) -> dict[str, str]:
    return dict(parse_store_grant(v) for v in values or [])


def _row(t: Token) -> list[str]:
    stores = "*(admin)" if t.admin else ",".join(f"{k}:{v}" for k, v in sorted(t.stores.items())) or "-"
    return [t.id, t.actor, stores, t.scope or "*", t.session or "-", t.expires_at or "never"]


@token_app.command("create")
def create(
    actor: Annotated[
        str | None,
        typer.Option(
            "--actor", help="Actor of its writes: user:<id>, service:<id> (default api:<token id>)."
        ),
    ] = None,
    store: Annotated[
        list[str] | None,
        typer.Option("--store", help="NAME, NAME:rw or NAME:ro ('*': every store). Repeatable."),
    ] = None,
    scope: Annotated[
        str | None, typer.Option("--scope", help="The only scope it may use (default: any).")
    ] = None,
    session: Annotated[
        str | None, typer.Option("--session", help="Tag every write with this session.")
    ] = None,
    admin: Annotated[bool, typer.Option("--admin", help="Every store, and store management.")] = False,
    review: Annotated[
        bool, typer.Option("--review", help="Its writes land as a proposal for a reviewer (docs/review.md).")
    ] = False,
    expires: Annotated[
        str | None, typer.Option("--expires", help="30d, 12h, 90m, 2w or an RFC 3339 time.")
    ] = None,
    right: Annotated[
        list[str] | None,
        typer.Option(
            "--right", help="A right beyond the defaults, e.g. redact (docs/access.md). Repeatable."
        ),
    ] = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Create a token and print its secret once (only a hash of it is kept)."""

    def call() -> dict[str, object]:
        token, secret = TokenStore(common.home(home)).create(
            actor=actor,
            stores=_grants(store),
            scope=scope,
            session=session,
            admin=admin,
            expires=expires,
            review=review,
            rights=_rights(right, store),
        )
        return {"token": token.to_dict(), "secret": secret}

    def render(value: dict[str, object]) -> None:
        token = value["token"]
        assert isinstance(token, dict)
        sys.stderr.write(f"created {token['id']} for {token['actor']}; the secret is shown only now:\n")
        sys.stdout.write(f"{value['secret']}\n")

    common.run(json, call, render)


def _rights(named: list[str] | None, grants: list[str] | None) -> tuple[str, ...]:
    """Explicit rights replace the defaults, so ``--right redact`` on a read-write token keeps
    ``write`` and ``review`` too (docs/access.md#rights-and-their-defaults)."""
    if not named:
        return ()
    rw = any(g.partition(":")[2] in ("", "rw") for g in grants or [])
    return tuple(sorted(set(named) | ({"write", "review"} if rw else set())))


@token_app.command("list")
def list_tokens(home: common.HomeOpt = None, json: common.JsonOpt = False) -> None:
    """List tokens (never their secrets)."""

    def render(tokens: list[Token]) -> None:
        common.print_table(
            ["ID", "ACTOR", "STORES", "SCOPE", "SESSION", "EXPIRES"], [_row(t) for t in tokens]
        )

    common.run(json, lambda: TokenStore(common.home(home)).list(), render)


@token_app.command("revoke")
def revoke(
    token_id: Annotated[str, typer.Argument(help="The token's id (apikey_...).")],
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Revoke a token: its secret stops working at once."""
    common.run(
        json, lambda: TokenStore(common.home(home)).revoke(token_id), lambda t: typer.echo(f"revoked {t.id}")
    )
