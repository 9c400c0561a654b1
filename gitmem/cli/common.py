"""Shared pieces of the CLI: option types, the per-invocation context, error handling, rendering.

Each command: parse, call one library function inside :func:`run`, render the value it returns
(rich on a terminal, JSON with ``--json``). Library errors become one ``Error: ...`` line on stderr
(or ``{"error": {...}}`` with ``--json``) and the error's exit code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import enum
import json
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from gitmem import config
from gitmem.errors import GitmemError

T = TypeVar("T")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
HomeOpt = Annotated[
    Path | None,
    typer.Option("--home", help="Workspace directory (default: $GITMEM_HOME or ~/.local/share/gitmem)."),
]
ScopeOpt = Annotated[str, typer.Option("--scope", "-s", help="Scope (branch) to work in.")]
ActorOpt = Annotated[
    str | None,
    typer.Option("--actor", help="Who writes: user:<id>, api:<key>, service:<id> ($GITMEM_ACTOR)."),
]
SessionOpt = Annotated[
    str | None, typer.Option("--session", help="Session id to tag writes with ($GITMEM_SESSION).")
]
IfShaOpt = Annotated[
    str | None,
    typer.Option("--if-sha256", help="Only if the memory's current SHA-256 is this (else exit 4)."),
]


@dataclasses.dataclass
class Globals:
    """Options given before the command name (``gitmem --home X --json ls ...``)."""

    home: Path | None = None
    actor: str | None = None
    session: str | None = None
    json: bool = False
    debug: bool = False


GLOBALS = Globals()


def home(value: Path | None) -> Path | None:
    return value if value is not None else GLOBALS.home


def actor(value: str | None) -> str | None:
    return value or GLOBALS.actor or config.env("GITMEM_ACTOR")


def session(value: str | None) -> str | None:
    return value or GLOBALS.session or config.env("GITMEM_SESSION")


def want_json(value: bool) -> bool:
    return value or GLOBALS.json


def to_jsonable(value: Any) -> Any:
    """Dataclasses, datetimes, paths and enums as plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
        kind = type(value).__name__.lower()
        return {"type": kind, **out} if kind in ("memory", "prefix", "version") else out
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [to_jsonable(v) for v in value]
    return value


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(value), ensure_ascii=False, indent=2) + "\n")


def fail(exc: GitmemError, as_json: bool) -> typer.Exit:
    """Report a library error; returns the Exit to raise."""
    if as_json:
        payload = {"error": {"type": exc.type_name, "message": exc.message}}
        extra = getattr(exc, "conflicting_path", None)
        if extra is not None:
            payload["error"]["conflicting_path"] = extra
        sys.stderr.write(json.dumps(payload, ensure_ascii=False) + "\n")
    else:
        sys.stderr.write(f"Error: {exc.message}\n")
    return typer.Exit(exc.exit_code)


def run(as_json: bool, call: Callable[[], T], render: Callable[[T], None] | None = None) -> T:
    """Call the library, map errors to exit codes, then render (JSON or ``render``)."""
    as_json = want_json(as_json)
    try:
        value = call()
    except GitmemError as exc:
        raise fail(exc, as_json) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except (typer.Exit, typer.Abort, SystemExit):
        raise
    except Exception as exc:  # unexpected: one line, the traceback only with --debug
        if GLOBALS.debug:
            traceback.print_exc()
        sys.stderr.write(f"Error: unexpected {type(exc).__name__}: {exc}\n")
        raise typer.Exit(1) from None
    if as_json:
        print_json(value)
    elif render is not None:
        render(value)
    return value


def console() -> Any:
    from rich.console import Console

    return Console()


def err_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def with_store(name: str, home_opt: Path | None, fn: Callable[[Any], T]) -> Callable[[], T]:
    """A call for :func:`run` that opens STORE (name or path), applies ``fn`` to it, and closes it."""

    def call() -> T:
        from gitmem.store import open_store

        with open_store(name, home(home_opt)) as store:
            return fn(store)

    return call


def is_tty() -> bool:
    return sys.stdout.isatty()


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """A rich table on a terminal; tab-separated lines (no header) otherwise, for scripts."""
    if not is_tty():
        for row in rows:
            sys.stdout.write("\t".join(row) + "\n")
        return
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    # The first column (a path or an id) stays whole so that it can be copied; the others wrap.
    first = max([len(headers[0])] + [len(row[0]) for row in rows])
    table.add_column(headers[0], no_wrap=True, min_width=first)
    for header in headers[1:]:
        table.add_column(header, overflow="fold")
    for row in rows:
        table.add_row(*row)
    console().print(table)


def busy(label: str, as_json: bool = False) -> contextlib.AbstractContextManager[Any]:
    """A spinner on stderr for a long operation, on a terminal only (quiet in pipes and with --json)."""
    if not is_tty() or want_json(as_json):
        return contextlib.nullcontext()
    return err_console().status(label)  # type: ignore[no-any-return]
