"""Transparency-log commands: ``receipt show|verify``, ``witness serve|init|add-log`` and
``tlog show|rotate-key|cosign`` (docs/transparency.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gitmem.cli import common
from gitmem.errors import NotFoundError
from gitmem.store import Store, load_tlog_policy, verify_receipt

receipt_app = typer.Typer(
    help="Redaction receipts (tlog-proof): show one, verify one offline.", no_args_is_help=True
)
witness_app = typer.Typer(
    help="A tlog-witness: cosigns checkpoints consistent with what it saw.", no_args_is_help=True
)
tlog_app = typer.Typer(
    help="The store's transparency log: checkpoint, key rotation, witnesses.", no_args_is_help=True
)

PolicyOpt = Annotated[Path | None, typer.Option("--policy", help="A tlog-policy file (witnesses, quorum).")]
DirOpt = Annotated[Path, typer.Option("--dir", help="The witness's state directory (key, logs, state).")]


def register(app: typer.Typer) -> None:
    app.add_typer(receipt_app, name="receipt")
    app.add_typer(witness_app, name="witness")
    app.add_typer(tlog_app, name="tlog")


def _policy(path: Path | None, store: Any = None) -> Any:
    if path is not None:
        return load_tlog_policy(path)
    return store.tlog_policy() if store is not None else None


@receipt_app.command("show")
def receipt_show(
    redaction: Annotated[str, typer.Argument(help="The redaction id (redact_...).")],
    store: Annotated[
        str | None, typer.Option("--store", help="Store name or path (default: search all).")
    ] = None,
    policy: PolicyOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Print a redaction's receipt: a tlog-proof, ``pending`` until the policy's quorum cosigned."""

    def call() -> dict[str, Any]:
        from gitmem.store import list_stores

        names = [store] if store else [s.name for s in list_stores(common.home(home))]
        for name in names:
            with common.open_named(name, home) as s:
                opened: Store = s
                try:
                    return opened.receipt(redaction, _policy(policy, opened))
                except NotFoundError:
                    if store:
                        raise
        raise NotFoundError(f"no store of the workspace holds redaction {redaction}")

    def render(r: dict[str, Any]) -> None:
        typer.echo(r["receipt"], nl=False)
        who = ", ".join(r["cosigned_by"]) or "no witness"
        typer.echo(
            f"# {r['status']}: entry #{r['index']} in a tree of {r['tree_size']}, cosigned by {who}", err=True
        )

    common.run(json, call, render)


@receipt_app.command("verify")
def receipt_verify(
    receipt: Annotated[Path, typer.Argument(help="The receipt file ('-' reads stdin).")],
    policy: Annotated[Path, typer.Option("--policy", help="The tlog-policy to verify against.")],
    json: common.JsonOpt = False,
) -> None:
    """Verify a receipt offline: log signature, witness quorum, inclusion proof (exit 7 if not)."""

    def call() -> dict[str, Any]:
        try:
            text = sys.stdin.buffer.read() if str(receipt) == "-" else receipt.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            raise NotFoundError(f"no receipt file {receipt}") from None
        v = verify_receipt(text, load_tlog_policy(policy))
        data = v.entry.get("data") or {}
        return {
            "ok": True,
            "origin": v.origin,
            "index": v.index,
            "tree_size": v.size,
            "witnesses": v.witnesses,
            "redaction": data.get("id"),
            "actor": v.entry.get("actor"),
            "at": v.entry.get("at"),
            "reason": data.get("reason"),
        }

    def render(r: dict[str, Any]) -> None:
        typer.echo(
            f"ok: {r['redaction']} by {r['actor']} at {r['at']} ({r['reason']}) is entry #{r['index']} of "
            f"{r['origin']} (tree size {r['tree_size']}), cosigned by {', '.join(r['witnesses']) or 'no witness'}"
        )

    common.run(json, call, render)


@witness_app.command("init")
def witness_init(
    directory: DirOpt,
    name: Annotated[str, typer.Option("--name", help="The witness's key name (e.g. witness.example/w1).")],
    json: common.JsonOpt = False,
) -> None:
    """Create a witness key (0600) and print its cosignature verifier key."""
    from gitmem.store import Witness

    common.run(json, lambda: Witness(directory, name).vkey, typer.echo)


@witness_app.command("add-log")
def witness_add_log(
    directory: DirOpt,
    vkey: Annotated[str, typer.Argument(help="The log's verifier key (gitmem tlog show STORE).")],
    json: common.JsonOpt = False,
) -> None:
    """Trust a log: its checkpoints are cosigned when consistent."""
    from gitmem.store import Witness

    def call() -> dict[str, str]:
        Witness(directory).add_log(vkey)
        return {"trusting": vkey}

    common.run(json, call, lambda _: typer.echo(f"trusting {vkey}"))


@witness_app.command("serve")
def witness_serve(
    directory: DirOpt,
    name: Annotated[
        str | None, typer.Option("--name", help="Key name, when the directory has no key yet.")
    ] = None,
    log: Annotated[list[str] | None, typer.Option("--log", help="Trust this log vkey (repeatable).")] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="TCP port (0: any free).")] = 8090,
    json: common.JsonOpt = False,
) -> None:
    """Serve tlog-witness's add-checkpoint (POST /add-checkpoint) until Ctrl-C."""
    from gitmem.server.witness_http import make_server
    from gitmem.store import Witness

    def call() -> None:
        w = Witness(directory, name)
        for k in log or []:
            w.add_log(k)
        server = make_server(w, host, port)
        bound_host, bound_port = server.server_address[:2]
        typer.echo(f"witness {w.vkey} listening on http://{bound_host!s}:{bound_port}")
        sys.stdout.flush()
        try:
            server.serve_forever()
        finally:
            server.server_close()

    common.run(json, call)


@tlog_app.command("show")
def tlog_show(
    store: Annotated[str, typer.Argument(help="Store name or path.")],
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Print the log's verifier key and its newest checkpoint (with cosignatures)."""

    def fn(s: Store) -> dict[str, Any]:
        n = s.tlog_newest()
        return {
            "vkey": s.tlog_vkey(),
            "origin": n.cp.origin,
            "size": n.cp.size,
            "checkpoint": n.text,
        }

    common.run(
        json,
        common.with_store(store, home, fn),
        lambda r: typer.echo(f"{r['vkey']}\n\n{r['checkpoint']}", nl=False),
    )


@tlog_app.command("rotate-key")
def tlog_rotate_key(
    store: Annotated[str, typer.Argument(help="Store name or path.")],
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Replace the log key; the newest checkpoint is signed by both keys (tell witnesses the new one)."""

    def fn(s: Store) -> str:
        return s.rotate_log_key()

    common.run(json, common.with_store(store, home, fn), lambda v: typer.echo(f"new log key: {v}"))


@tlog_app.command("cosign")
def tlog_cosign(
    store: Annotated[str, typer.Argument(help="Store name or path.")],
    policy: PolicyOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Ask the policy's witnesses (with URLs) now to cosign the newest checkpoint."""

    def fn(s: Store) -> dict[str, str]:
        p = _policy(policy, s)
        if p is None:
            raise NotFoundError("no witnesses policy: give --policy or write <home>/witnesses.policy")
        return s.cosign(p)

    def render(r: dict[str, str]) -> None:
        for k, v in r.items():
            typer.echo(f"{k}: {v}")

    common.run(json, common.with_store(store, home, fn), render)
