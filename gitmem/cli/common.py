"""Shared pieces of the CLI: option types, the per-invocation context, error handling, rendering.

Each command: parse, call one library function inside :func:`run`, render the value it returns
(rich on a terminal, JSON with ``--json``). Library errors become one ``Error: ...`` line on stderr
(or ``{"error": {...}}`` with ``--json``) and the error's exit code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import difflib
import enum
import json
import logging
import sqlite3
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from gitmem import config
from gitmem.errors import GitmemError, NotFoundError, from_os_error

T = TypeVar("T")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]
NlOpt = Annotated[bool, typer.Option("--nl", help="Print one JSON object per line (newline-delimited).")]
HomeOpt = Annotated[
    Path | None,
    typer.Option("--home", help="Workspace directory (default: $GITMEM_HOME or ~/.local/share/gitmem)."),
]
ScopeOpt = Annotated[str, typer.Option("--scope", "-s", help="Scope (branch) to work in.")]
AtOpt = Annotated[
    str | None,
    typer.Option(
        "--at",
        help="As the scope was then: a version time as `gitmem log` shows it (ISO 8601, or @EPOCH), "
        "a version id or a commit id (docs/point-in-time.md).",
    ),
]
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
    nl: bool = False


GLOBALS = Globals()

LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def setup_logging(verbose: int) -> None:
    """``-v`` (info), ``-vv`` or ``GITMEM_LOG=debug`` (debug): the library's log lines on stderr.

    Silent by default: without either, the ``gitmem`` logger gets no handler that prints."""
    logger = logging.getLogger("gitmem")
    for handler in list(logger.handlers):
        if getattr(handler, "_gitmem_cli", False):
            logger.removeHandler(handler)
    wanted = (config.env("GITMEM_LOG") or "").strip().lower()
    level = LOG_LEVELS.get(wanted)
    if verbose:
        level = min(level or logging.INFO, logging.INFO if verbose == 1 else logging.DEBUG)
    if level is None:
        return  # nothing of ours: only warnings reach stderr (logging's last resort), as always
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("gitmem: %(name)s: %(message)s"))
    handler._gitmem_cli = True  # type: ignore[attr-defined]
    logger.addHandler(handler)
    logger.setLevel(level)


# ---------------------------------------------------------------------- colour
def use_color(err: bool = False) -> bool:
    """Colour only on a terminal, and never with ``NO_COLOR`` set (https://no-color.org) or TERM=dumb."""
    if config.env("NO_COLOR") is not None or config.env("TERM") == "dumb":
        return False
    stream = sys.stderr if err else sys.stdout
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def paint(text: str, color: str, *, err: bool = False, bold: bool = False) -> str:
    return typer.style(text, fg=color, bold=bold) if use_color(err) else text


def red(text: str, *, err: bool = False) -> str:
    return paint(text, "red", err=err, bold=True)


def green(text: str, *, err: bool = False) -> str:
    return paint(text, "green", err=err)


def color_diff(text: str) -> str:
    """A unified diff with git's colours on a terminal."""
    if not use_color():
        return text
    out = []
    for line in text.splitlines(keepends=True):
        if line.startswith(("+++", "---")):
            out.append(typer.style(line, bold=True))
        elif line.startswith("+"):
            out.append(typer.style(line, fg="green"))
        elif line.startswith("-"):
            out.append(typer.style(line, fg="red"))
        elif line.startswith("@@"):
            out.append(typer.style(line, fg="cyan"))
        else:
            out.append(line)
    return "".join(out)


# ---------------------------------------------------------------------- not found, did you mean
def unknown(kind: str, name: str, known: list[str], where: str = "") -> NotFoundError:
    """A NotFoundError for ``name`` that suggests the closest known names."""
    message = f"{kind} {name!r} does not exist{where}"
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    if close:
        message += "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    elif known:
        message += f" ({kind}s: {', '.join(sorted(known)[:10])})"
    return NotFoundError(message)


def check_scope(store: Any, scope: str | None) -> None:
    """For reading commands: an unknown scope is exit 3 (a fresh store's ``main`` is just empty)."""
    if scope is None:
        return
    scopes = store.scopes()
    if scope in scopes or (scope == "main" and not scopes):
        return
    raise unknown("scope", scope, scopes, f" in store {store.name!r}")


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


def want_nl(value: bool = False) -> bool:
    return value or GLOBALS.nl


def print_json(value: Any, nl: bool = False) -> None:
    if want_nl(nl) and isinstance(value, list):
        for item in value:
            sys.stdout.write(json.dumps(to_jsonable(item), ensure_ascii=False) + "\n")
        return
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
        sys.stderr.write(f"{red('Error:', err=True)} {exc.message}\n")
    return typer.Exit(exc.exit_code)


def run(
    as_json: bool, call: Callable[[], T], render: Callable[[T], None] | None = None, *, nl: bool = False
) -> T:
    """Call the library, map errors to exit codes, then render (JSON, JSON lines or ``render``)."""
    nl = want_nl(nl)
    as_json = want_json(as_json) or nl
    try:
        value = call()
    except GitmemError as exc:
        raise fail(exc, as_json) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except (typer.Exit, typer.Abort, SystemExit):
        raise
    except (OSError, sqlite3.OperationalError) as exc:
        mapped = from_os_error(exc)
        if mapped is None:
            if GLOBALS.debug:
                traceback.print_exc()
            sys.stderr.write(f"{red('Error:', err=True)} unexpected {type(exc).__name__}: {exc}\n")
            raise typer.Exit(1) from None
        raise fail(mapped, as_json) from None
    except Exception as exc:  # unexpected: one line, the traceback only with --debug
        if GLOBALS.debug:
            traceback.print_exc()
        sys.stderr.write(f"{red('Error:', err=True)} unexpected {type(exc).__name__}: {exc}\n")
        raise typer.Exit(1) from None
    if as_json:
        print_json(value, nl)
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
        with open_named(name, home_opt) as store:
            return fn(store)

    return call


def open_named(name: str, home_opt: Path | None) -> Any:
    """``open_store``; an unknown store name is exit 3 naming the closest stores of the workspace."""
    from gitmem.store import list_stores, open_store

    try:
        return open_store(name, home(home_opt))
    except NotFoundError as exc:
        if "/" in name or name.startswith("."):
            raise
        try:
            known = [s.name for s in list_stores(home(home_opt))]
        except GitmemError:
            known = []
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        if name in known or not close:
            raise
        hint = " or ".join(repr(c) for c in close)
        raise NotFoundError(f"{exc.message.rstrip('.')}; did you mean {hint}?") from None


def is_tty() -> bool:
    return sys.stdout.isatty()


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    """A rich table on a terminal; otherwise TSV: a header row, then one tab-separated line per row
    (tabs and newlines inside a value are written as spaces)."""
    if not is_tty():
        for row in [headers, *rows]:
            row = [" ".join(cell.split("\t")).replace("\n", " ") for cell in row]
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
