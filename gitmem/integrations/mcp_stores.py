"""The stores a ``gitmem mcp`` server exposes: the ``NAME[@SCOPE][:ro|:rw]`` spec, the names clients
use for them, and the instructions the client shows the model."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gitmem.errors import InvalidInputError
from gitmem.model.paths import validate_scope
from gitmem.store import Store


@dataclass(frozen=True)
class ServedStore:
    """A store the server exposes: in ``scope`` (None: the server's), and whether it may be written."""

    name: str
    store: Store
    read_only: bool = False
    scope: str | None = None
    instructions: str | None = None  # shown to the model beside the store's description


@dataclass(frozen=True)
class ServeSummary:
    """What a finished ``gitmem mcp`` run served (printed with ``--json`` when the client hangs up)."""

    session: str
    scope: str
    stores: list[str]


def parse_store_spec(spec: str) -> tuple[str, str | None, bool]:
    """``NAME``, ``NAME@SCOPE``, each with ``:rw`` or ``:ro`` (``notes:ro@team`` or ``notes@team:ro``),
    as in ``gitmem session start`` -> (name, scope or None, read_only)."""
    head, at, scope = spec.partition("@")
    mode = "rw"
    if ":" in head:
        head, _, mode = head.partition(":")
    elif at and scope.endswith((":ro", ":rw")):
        scope, mode = scope[:-3], scope[-2:]
    if mode not in ("ro", "rw"):
        raise InvalidInputError(f"invalid store {spec!r}: use NAME[@SCOPE], with :rw or :ro")
    if at and not scope:
        raise InvalidInputError(f"invalid store {spec!r}: empty scope after '@'")
    if not head:
        raise InvalidInputError(f"invalid store {spec!r}: no store named (an id or a name)")
    return head, (validate_scope(scope) if at else None), mode == "ro"


def labels(stores: Sequence[tuple[str, str]]) -> list[str]:
    """The name a client uses for each served store, from its (id, display name): the display
    name where no other served store has it, else the id (a tool accepts the id of any)."""
    names = [name for _id, name in stores]
    return [name if names.count(name) == 1 else store_id for store_id, name in stores]


def instructions(stores: Sequence[ServedStore], scope: str, session: str) -> str:
    """What the client shows the model: each store with its access, scope and description."""
    lines = [
        f"gitmem memory stores (session {session}). Every change is a version: memory_history shows them. "
        "list_memories pages through a store; search_memories ranks memories for a question."
    ]
    for s in stores:
        access = "read-only" if s.read_only else "read-write"
        line = f"- {s.name} ({access}, scope {s.scope or scope})"
        description = s.store.settings.description
        if description:
            line += f": {description}"
        if s.instructions:
            line += f" Instructions: {s.instructions}"
        lines.append(line)
    return "\n".join(lines)
