"""``gitmem read STORE PATH`` without typer or rich: a process that starts about as fast as
``python -c "import pygit2"`` (docs/architecture.md#performance-targets). Anything beyond the plain form (``--json``,
``--help``, unknown options) returns None and the full CLI handles it."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gitmem.store import Store

_VALUE_OPTS = {"--scope": "scope", "-s": "scope", "--version": "version", "--home": "home"}


def try_fast_read(args: list[str]) -> int | None:
    opts: dict[str, str] = {}
    positional: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _VALUE_OPTS and i + 1 < len(args):
            opts[_VALUE_OPTS[arg]] = args[i + 1]
            i += 2
            continue
        if arg.startswith("-"):
            return None
        positional.append(arg)
        i += 1
    if len(positional) != 2:
        return None
    from gitmem.errors import GitmemError
    from gitmem.store import open_store

    try:
        store = open_store(positional[0], opts.get("home"))
        data = content_bytes(store, positional[1], opts.get("scope", "main"), opts.get("version"))
    except GitmemError as exc:
        sys.stderr.write(f"Error: {exc.message}\n")
        return exc.exit_code
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return 0


def content_bytes(store: Store, path: str, scope: str, version: str | None) -> bytes:
    """A memory's exact bytes: at the head straight from the tree (no index, no settings file),
    or at ``version``. The typer ``read`` command prints the same."""
    if version is not None:
        return (store.read(path, scope=scope, version=version).content or "").encode("utf-8")
    from gitmem.model.paths import validate_path, validate_scope

    validate_path(path)
    validate_scope(scope)
    return store.head_bytes(path, scope=scope)
