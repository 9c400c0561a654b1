"""``gitmem export`` and ``gitmem import``: JSONL, git bundles, directory trees."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from gitmem.cli import common
from gitmem.cli.memories import StoreArg
from gitmem.errors import GitmemError, InvalidInputError, NotFoundError
from gitmem.store import ExportResult, ImportResult, Store


class Format(StrEnum):
    jsonl = "jsonl"
    bundle = "bundle"


def register(app: typer.Typer) -> None:
    app.command("export")(export)
    app.command("import")(import_)


@contextlib.contextmanager
def progress_bar(label: str, quiet: bool) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar on stderr when it is a terminal (and not ``quiet``); else no callback."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import Progress

    with Progress(console=common.err_console(), transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def export(
    store: StoreArg,
    format: Annotated[
        Format, typer.Option("--format", help="jsonl (memories) or bundle (git, all refs).")
    ] = (Format.jsonl),
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here (jsonl default: standard output).")
    ] = None,
    scope: Annotated[
        list[str] | None, typer.Option("--scope", "-s", help="Only this scope (repeatable).")
    ] = None,
    at: common.AtOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Export memories as JSONL (one object per memory) or the whole store as a git bundle."""
    as_json = common.want_json(json)

    def fn(s: Store) -> ExportResult:
        if format is Format.bundle:
            if output is None:
                raise InvalidInputError("--format bundle needs --output FILE")
            if scope:
                raise InvalidInputError("a bundle holds every scope: --scope applies to jsonl only")
            if at is not None:
                raise InvalidInputError("a bundle holds all of history: --at applies to jsonl only")
            return s.export_bundle(output)
        with progress_bar("exporting", quiet=False) as progress:  # on stderr: stdout may be the data
            if output is None:
                return s.export_jsonl(sys.stdout.buffer, scope, progress=progress, at=at)
            with open(output, "wb") as fh:
                return s.export_jsonl(fh, scope, progress=progress, at=at)

    def render(result: ExportResult) -> None:
        if output is not None:
            typer.echo(f"exported {result.memories} memories to {output}", err=True)

    call = common.with_store(store, home, fn)
    if output is not None or format is Format.bundle:
        common.run(json, call, render)
        return
    # JSONL on stdout is itself the machine output: no summary after it, even with --json.
    try:
        call()
    except GitmemError as exc:
        raise common.fail(exc, as_json) from None


def _summary(result: ImportResult) -> dict[str, Any]:
    return {
        "imported": len(result.versions),
        "unchanged": result.unchanged,
        "refused": [common.to_jsonable(r) for r in result.refused],
        "versions": [common.to_jsonable(v) for v in result.versions],
    }


def import_(
    store: StoreArg,
    src: Annotated[
        str, typer.Argument(help="A JSONL file (as export writes it), '-' for stdin, or a directory.")
    ],
    scope: Annotated[
        str | None,
        typer.Option("--scope", "-s", help="Import into this scope (JSONL default: each record's)."),
    ] = None,
    prefix: Annotated[str, typer.Option("--prefix", help="Put the memories under this prefix.")] = "/",
    exclude: Annotated[
        list[str] | None,
        typer.Option(
            "--exclude", "-x", help="Directory import: skip paths matching this gitignore-style pattern."
        ),
    ] = None,
    include_hidden: Annotated[
        bool, typer.Option("--include-hidden", help="Directory import: also import dotfiles (.env, ...).")
    ] = False,
    actor: common.ActorOpt = None,
    session: common.SessionOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Import memories from JSONL or a directory of text files, one batch per scope.

    Refused files are listed on stderr; the others are imported, and the exit code is that of the
    first refusal.
    """

    def fn(s: Store) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "prefix": prefix,
            "actor": common.actor(actor),
            "session": common.session(session),
        }
        with progress_bar("importing", quiet=False) as progress:
            if src == "-":
                return _summary(s.import_jsonl(sys.stdin.buffer, scope, progress=progress, **kw))
            path = Path(src)
            if path.is_dir():
                return _summary(
                    s.import_tree(
                        path,
                        scope or "main",
                        progress=progress,
                        exclude=exclude or (),
                        include_hidden=include_hidden,
                        **kw,
                    )
                )
            if not path.is_file():
                raise NotFoundError(f"{src} is not a file or directory")
            with open(path, "rb") as fh:
                return _summary(s.import_jsonl(fh, scope, progress=progress, **kw))

    def render(summary: dict[str, Any]) -> None:
        typer.echo(f"imported {summary['imported']} memories, {summary['unchanged']} unchanged")

    summary = common.run(json, common.with_store(store, home, fn), render)
    refused = summary["refused"]
    if not common.want_json(json):  # with --json the refusals are in the output
        for r in refused:
            sys.stderr.write(f"Error: refused {r['path']} in scope {r['scope']!r}: {r['reason']}\n")
    if refused:
        raise typer.Exit(refused[0]["exit_code"])
