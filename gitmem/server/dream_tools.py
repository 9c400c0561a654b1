"""The tools a dream's model has (docs/dreams.md#the-dreamer): Claude's memory tool on the dream's
view of one scope (:class:`Backend`, on :class:`gitmem.integrations.anthropic_tool.MemoryBackend`
with the dream's caller), and ``search_memories``. Reserved paths are refused
(:func:`gitmem.server.dream_prompt.reserved`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from anthropic.tools import ToolError

from gitmem.errors import GitmemError
from gitmem.integrations.anthropic_tool import MemoryBackend
from gitmem.integrations.memory_paths import to_store_path
from gitmem.model.caller import Caller
from gitmem.server.dream_prompt import reserved
from gitmem.store import Store


class Backend(MemoryBackend):
    """The memory tool on the dream's view of the scope: in review mode, the scope with the
    dream's own proposal on top (what it wrote before is what it reads back). Short-term records
    and the SDK's marker are neither shown nor touched."""

    def __init__(self, store: Store, scope: str, caller: Caller) -> None:
        assert caller.session is not None
        super().__init__(store, scope, caller.session, caller.actor, caller=caller)

    def _shown(self, store_path: str) -> bool:
        return not reserved(store_path)


_TYPES: dict[str, type | tuple[type, ...]] = {
    "path": str,
    "old_path": str,
    "new_path": str,
    "file_text": str,
    "old_str": str,
    "new_str": str,
    "insert_text": str,
    "insert_line": int,
    "view_range": list,
}
_NAMES = {
    k: "a list" if k == "view_range" else "an integer" if k == "insert_line" else "a string" for k in _TYPES
}


def memory_command(b: Backend, data: dict[str, Any]) -> str:
    command = data.get("command")
    run: dict[str, Callable[[], str]] = {
        "view": lambda: b.view(data["path"], data.get("view_range")),
        "create": lambda: b.create(data["path"], data["file_text"]),
        "str_replace": lambda: b.str_replace(data["path"], data["old_str"], data.get("new_str")),
        "insert": lambda: b.insert(data["path"], int(data["insert_line"]), data["insert_text"]),
        "delete": lambda: b.delete(data["path"]),
        "rename": lambda: b.rename(data["old_path"], data["new_path"]),
    }
    if command not in run:
        raise ToolError(f"Error: unknown command {command!r}")
    for key, value in data.items():
        kind = _TYPES.get(key)
        if kind is not None and value is not None and not isinstance(value, kind):
            raise ToolError(f"Error: {key} must be {_NAMES[key]}")
    view_range = data.get("view_range")
    if view_range is not None and (
        len(view_range) != 2 or not all(isinstance(n, int) and not isinstance(n, bool) for n in view_range)
    ):
        raise ToolError("Error: view_range must be two line numbers")
    for key in ("path", "old_path", "new_path"):
        if isinstance(data.get(key), str) and reserved(to_store_path(data[key])):
            raise ToolError(
                f"Error: {data[key]} is reserved (short-term records, the SDK's marker): not a memory"
            )
    return b.locked(run[str(command)])


def search(backend: Backend, data: dict[str, Any]) -> str:
    """The ``search_memories`` tool: the store's full-text search (short-term records left out)."""
    query = str(data.get("query") or "")
    raw = data.get("limit")
    limit = raw if isinstance(raw, int) else 10
    try:
        found = backend.store.search(
            query, scope=backend.scope, limit=max(1, min(limit, 50)), caller=backend.caller
        )
    except GitmemError as exc:
        return f"Error: {exc.message}"
    hits = [h for h in found if not reserved(h.path)]
    return (
        json.dumps([{"path": f"/memories{h.path}", "snippet": getattr(h, "snippet", "")} for h in hits])
        if hits
        else "No memories match."
    )
