"""The memory tool's search extension (docs/search.md#faces): ``memory_search``, a client tool that
sits beside Claude's memory tool (``memory_20250818`` has no search command) and searches the same
store and scope in any mode: ``lexical``, ``semantic``, ``hybrid`` or ``auto`` (the default: hybrid
when the extra ``semantic`` is installed and the scope's vectors are ready).

``GitmemMemoryTool(store).search_tool()`` is an SDK ``BetaFunctionTool``: pass both in
``tools=[memory, memory.search_tool()]`` of ``client.beta.messages.tool_runner``. The answer is
JSON: ``{"mode": <the mode that answered>, "hits": [{"path": "/memories/...", "description",
"snippet", "score"}]}``; paths are the memory tool's, so the model can ``view`` a hit next.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from anthropic import beta_async_tool, beta_tool
from anthropic.lib.tools import BetaAsyncFunctionTool, BetaFunctionTool
from anthropic.tools import ToolError
from anyio.to_thread import run_sync

from gitmem.errors import GitmemError
from gitmem.integrations.memory_paths import ROOT

if TYPE_CHECKING:
    from gitmem.model.caller import Caller
    from gitmem.store import Store

T = TypeVar("T")


class SearchBackend(Protocol):
    """What a search uses of the memory tool's backend (gitmem.integrations.anthropic_tool.MemoryBackend,
    which offers this module's tools): its store, scope and caller, and its lock."""

    @property
    def store(self) -> Store: ...

    @property
    def scope(self) -> str: ...

    @property
    def caller(self) -> Caller | None: ...

    def locked(self, fn: Callable[[], T]) -> T: ...


NAME = "memory_search"
MODES = ("lexical", "semantic", "hybrid", "auto")
MAX_LIMIT = 50
DESCRIPTION = (
    "Search the memories in /memories by words or by meaning. Returns JSON with the mode that "
    "answered and the best hits first (path under /memories, description, snippet, score); view a "
    "hit's path with the memory tool to read it whole."
)


def schema(default_mode: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": 'Words, a question, or "a phrase".'},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 10},
            "mode": {
                "type": "string",
                "enum": list(MODES),
                "default": default_mode,
                "description": "lexical: words; semantic: meaning; hybrid: both; auto: hybrid when ready.",
            },
        },
        "required": ["query"],
    }


def search(backend: SearchBackend, query: str, limit: int = 10, mode: str = "auto") -> str:
    """One search on the backend's store and scope (the tool's answer, or ToolError)."""
    if not isinstance(query, str) or not query.strip():
        raise ToolError("Error: give a query")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise ToolError(f"Error: limit must be 1 to {MAX_LIMIT}")
    try:
        found = backend.store.search(
            query, scope=backend.scope, limit=limit, mode=mode, caller=backend.caller
        )
    except GitmemError as exc:
        raise ToolError(f"Error: {exc.message}") from None
    hits = [
        {
            "path": ROOT + h.path,
            "description": h.description,
            "snippet": h.snippet,
            "score": round(h.score, 4),
        }
        for h in found
    ]
    return json.dumps({"mode": found.mode, "hits": hits}, ensure_ascii=False)


def search_tool(backend: SearchBackend, mode: str = "auto") -> BetaFunctionTool[Any]:
    """The ``memory_search`` tool for a sync tool runner (``mode``: the default when the model gives none)."""
    if mode not in MODES:
        raise ValueError(f"invalid search mode {mode!r}: use one of {', '.join(MODES)}")

    def memory_search(query: str, limit: int = 10, mode: str = mode) -> str:
        return backend.locked(lambda: search(backend, query, limit, mode))

    return beta_tool(memory_search, name=NAME, description=DESCRIPTION, input_schema=schema(mode))


def async_search_tool(backend: SearchBackend, mode: str = "auto") -> BetaAsyncFunctionTool[Any]:
    """The same for an async tool runner (the search runs in a worker thread)."""
    if mode not in MODES:
        raise ValueError(f"invalid search mode {mode!r}: use one of {', '.join(MODES)}")

    async def memory_search(query: str, limit: int = 10, mode: str = mode) -> str:
        return await run_sync(backend.locked, lambda: search(backend, query, limit, mode))

    return beta_async_tool(memory_search, name=NAME, description=DESCRIPTION, input_schema=schema(mode))
