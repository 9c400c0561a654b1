"""The ``gitmem`` command. ``main`` keeps ``gitmem read`` fast by not importing typer for it."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["read"]:
        from gitmem.cli.fastread import try_fast_read

        code = try_fast_read(args[1:])
        if code is not None:
            sys.exit(code)
    from gitmem.cli.app import app

    try:
        app(args=args, prog_name="gitmem")
    except KeyboardInterrupt:
        sys.exit(130)
