"""The CLI reference (docs/cli.md), generated from the commands' own ``--help``, so it cannot drift.

``python -m gitmem.cli.reference > docs/cli.md`` writes it; ``tests/project/test_docs.py`` renders it
again and fails when the file differs (the way sqlite-utils keeps its CLI reference with cog).
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import Any

WIDTH = 100  # the help's width, whatever terminal renders the page


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name in sorted(getattr(cmd, "commands", {}) or {}):
        sub = cmd.commands[name]
        if getattr(sub, "hidden", False):
            continue
        yield from _commands(sub, (*path, name))


def _help(root: Any, path: tuple[str, ...]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        root.main([*path, "--help"], prog_name="gitmem", standalone_mode=False, terminal_width=WIDTH)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()).strip("\n")


def render() -> str:
    """The whole reference as Markdown: one section per command, its ``--help`` verbatim."""
    import typer

    from gitmem.cli.app import app

    root = typer.main.get_command(app)
    parts = [
        "# CLI reference",
        "",
        "Generated from each command's `--help` by `python -m gitmem.cli.reference > docs/cli.md`;",
        "`tests/project/test_docs.py` fails when this page and the commands differ.",
    ]
    for path in _commands(root):
        title = " ".join(("gitmem", *path))
        parts += ["", f"## {title}", "", "```text", _help(root, path), "```"]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":  # pragma: no cover - the generator's entry point
    import sys

    sys.stdout.write(render())
