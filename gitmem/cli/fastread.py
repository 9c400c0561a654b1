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

    (store_arg, path), scope, version = positional, opts.get("scope", "main"), opts.get("version")
    try:
        data = _light_read(store_arg, path, scope, opts.get("home")) if version is None else None
        if data is None:
            from gitmem.store import open_store

            store = open_store(store_arg, opts.get("home"))
            data = content_bytes(store, path, scope, version)
    except GitmemError as exc:
        sys.stderr.write(f"Error: {exc.message}\n")
        return exc.exit_code
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
    return 0


def _light_read(store: str, path: str, scope: str, home: str | None) -> bytes | None:
    """The head's bytes without the facade's imports and open (gitmem.facade.headread); None:
    the store needs its full open first."""
    from gitmem.facade.headread import read_head

    return read_head(store, path, scope=scope, home=home)


def content_bytes(store: Store, path: str, scope: str, version: str | None) -> bytes:
    """A memory's exact bytes: at the head straight from the tree (no index, no settings file),
    or at ``version``. The typer ``read`` command prints the same."""
    if version is not None:
        return (store.read(path, scope=scope, version=version).content or "").encode("utf-8")
    from gitmem.model.paths import validate_path, validate_scope

    validate_path(path)
    validate_scope(scope)
    return store.head_bytes(path, scope=scope)
