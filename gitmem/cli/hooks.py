"""``gitmem hooks install STORE|--all``, ``gitmem clone STORE DEST``, ``gitmem fetch CLONE`` and
``gitmem replica init|add|push|list``."""

from __future__ import annotations

from typing import Annotated

import typer

from gitmem.cli import common

hooks_app = typer.Typer(help="Server-side hooks that guard pushes into stores.", no_args_is_help=True)
replica_app = typer.Typer(
    help="Read replicas: bare mirrors kept current by mirror pushes, purged after redactions.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(hooks_app, name="hooks")
    app.add_typer(replica_app, name="replica")
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
    from gitmem.store import InstalledHook, install_hooks

    def render(hooks: list[InstalledHook]) -> None:
        for h in hooks:
            extra = f" (runs {h.legacy.name} too)" if h.legacy is not None else ""
            typer.echo(f"{h.store}\t{h.hook.name}\t{h.action}{extra}")

    common.run(json, lambda: install_hooks(store, all_stores=all_stores, home=common.home(home)), render)


@hooks_app.command("print")
def print_hook(
    name: Annotated[str, typer.Argument(help="pre-receive or post-receive.")],
    json: common.JsonOpt = False,
) -> None:
    """Print a hook shim with this Python recorded, for a git server's hook directory.

    For servers that own hooks/pre-receive themselves (Gitea/Forgejo pre-receive.d/, GitLab
    custom_hooks/pre-receive.d/): gitmem hooks print pre-receive > .../pre-receive.d/gitmem."""
    import sys

    from gitmem.store import render_hook

    common.run(
        json,
        lambda: {"hook": name, "python": sys.executable, "text": render_hook(name, sys.executable)},
        lambda shim: typer.echo(shim["text"], nl=False),
    )


def clone(
    store: Annotated[str, typer.Argument(help="Store name or path.")],
    dest: Annotated[str, typer.Argument(help="Directory to clone into (new or empty).")],
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Clone a store for offline inspection (git history, ledger refs, read-only settings); push to write."""
    from gitmem.store import CloneResult, clone_store

    def render(r: CloneResult) -> None:
        typer.echo(f"cloned {r.source} to {r.path} (scopes: {', '.join(r.scopes) or 'none'})")
        typer.echo(f"read it with: gitmem ls {r.path}; write with git commit + git push")

    def call() -> CloneResult:
        with common.busy("cloning...", json):
            return clone_store(store, dest, home=common.home(home))

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
    from gitmem.store import FetchResult, fetch_clone

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
                    f"  local branch {branch} is built on the old history, which still holds the "
                    f"redacted content: run 'gitmem fetch --purge {r.path}' (resets it when it has no "
                    f"local work, and removes the old history from the clone); with local commits, "
                    f"first 'git rebase --onto origin/{w.scope} {w.old[:12]} {branch}'"
                )

        if purge:
            for branch in r.resynced:
                typer.echo(f"  local branch {branch} reset onto the rewritten history")
            typer.echo(f"purged {r.purged} object(s) of the old history from the clone (verified)")

    common.run(json, lambda: fetch_clone(clone_path, purge=purge), render)


@replica_app.command("init")
def replica_init(
    path: Annotated[str, typer.Argument(help="Path of the replica (a new or bare repository).")],
    json: common.JsonOpt = False,
) -> None:
    """Make PATH a replica: a bare repository whose post-receive purges rewritten history (sh + git only)."""
    from pathlib import Path

    from gitmem.store import init_replica

    def render(p: Path) -> None:
        typer.echo(f"replica ready at {p}; on the primary: gitmem replica add STORE {p}")

    common.run(json, lambda: init_replica(path), render)


@replica_app.command("add")
def replica_add(
    store: Annotated[str, typer.Argument(help="Store name or path (the primary).")],
    url: Annotated[str, typer.Argument(help="URL or path of the replica (git push --mirror target).")],
    name: Annotated[str, typer.Option("--name", help="Remote name of the replica.")] = "replica",
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Name URL as a replica of STORE: every push, redaction and `replica push` mirrors to it."""
    from gitmem.store import Replica

    def render(r: Replica) -> None:
        typer.echo(f"replica {r.name} -> {r.url}; send what is there now with: gitmem replica push {store}")

    common.run(json, common.with_store(store, home, lambda s: s.add_replica(url, name)), render)


@replica_app.command("push")
def replica_push(
    store: Annotated[str, typer.Argument(help="Store name or path (the primary).")],
    name: Annotated[list[str] | None, typer.Option("--name", help="Only this replica (repeatable).")] = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Mirror-push STORE to its replicas now (writes that did not come by push; a replica that was down).

    Exits 1 when a replica could not be updated."""
    from gitmem.store import ReplicaPush

    def render(results: list[ReplicaPush]) -> None:
        if not results:
            typer.echo(f"{store} has no replicas (add one with: gitmem replica add {store} URL)")
        for r in results:
            if not r.ok:
                typer.echo(f"{r.name}\t{r.url}\tnot updated: {r.message}", err=True)
            elif r.purged is not None:
                typer.echo(f"{r.name}\t{r.url}\tupdated; purged {r.purged} object(s) of rewritten history")
            else:
                typer.echo(f"{r.name}\t{r.url}\tupdated")

    results = common.run(json, common.with_store(store, home, lambda s: s.push_replicas(name)), render)
    if any(not r.ok for r in results):
        raise typer.Exit(1)


@replica_app.command("list")
def replica_list(
    store: Annotated[str, typer.Argument(help="Store name or path (the primary).")],
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """The replicas of STORE and the last mirror push to each."""
    from gitmem.store import Store

    def listing(s: Store) -> list[dict[str, object]]:
        last = s.last_replica_pushes()
        out: list[dict[str, object]] = []
        for r in s.replicas():
            p = last.get(r.name)
            out.append({"name": r.name, "url": r.url, "last_push": None if p is None else p})
        return out

    def render(rows: list[dict[str, object]]) -> None:
        for row in rows:
            p = row["last_push"]
            if p is None:
                state = "not pushed by gitmem yet"
            else:
                state = (
                    "last push ok"
                    if getattr(p, "ok", False)
                    else f"last push failed: {getattr(p, 'message', '')}"
                )
            if getattr(p, "purge_pending", False):
                state += "; a rewrite is not purged there yet (gitmem replica push)"
            typer.echo(f"{row['name']}\t{row['url']}\t{state}")

    common.run(json, common.with_store(store, home, listing), render)
