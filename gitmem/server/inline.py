"""Reads answered on the event loop, without the worker thread every other library call runs in.

A retrieve is an index row and a blob: tens of microseconds. Handing it to a worker thread and
back costs more than that, so :func:`retrieve_memory` answers it inline when nothing in it can
take long: an idle Store of the store is already open (no open, no scan of the stores), its index
was already brought up to the scope's current tip by an earlier retrieve (no catch-up on the
loop: :class:`Freshness`), and the token is not a review token (no proposal to overlay). Otherwise
it returns None and the ordinary handler runs in a thread. Both check the same things in the same
order: the scope, the view, the memory id, the store's id and the token's access.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Protocol

from gitmem.errors import ConfigError, NotFoundError
from gitmem.server import ops, wire
from gitmem.server.anthropic_call import Call
from gitmem.server.metrics import Metrics
from gitmem.server.pool import StorePool
from gitmem.store import Store

Json = dict[str, Any]


class Freshness:
    """Per Store (weakly: a closed, dropped Store is forgotten), per scope: the branch tip its
    index was last brought up to by a retrieve in a worker thread. Read before the index caught
    up, so the index is at least there; a write through the Store moves the tip past it (the next
    retrieve takes the thread again and marks anew)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tips: weakref.WeakKeyDictionary[Store, dict[str, str]] = weakref.WeakKeyDictionary()

    def mark(self, store: Store, scope: str, tip: str | None) -> None:
        if tip is not None:
            with self._lock:
                self._tips.setdefault(store, {})[scope] = str(tip)

    def fresh(self, store: Store, scope: str, tip: str | None) -> bool:
        with self._lock:
            return tip is not None and self._tips.get(store, {}).get(scope) == str(tip)


class InlineApi(Protocol):
    """What an inline read uses of the API (gitmem.server.anthropic_api.AnthropicApi, which
    answers through this module): its pool, metrics and freshness marks, and its checks."""

    @property
    def pool(self) -> StorePool: ...

    @property
    def metrics(self) -> Metrics: ...

    @property
    def fresh(self) -> Freshness: ...

    def _memory_id(self, call: Call) -> str: ...

    def _check(self, call: Call, store_id: str, *, write: bool = False, scope: str | None = None) -> None: ...


class _Fallback(Exception):
    """The inline path cannot answer: the request takes the ordinary path (a worker thread)."""


def retrieve_memory(api: InlineApi, call: Call) -> Json | None:
    """``api.retrieve_memory`` answered here, or None (then it runs in a thread)."""
    if call.token.review:
        return None
    scope = call.scope()
    chosen = wire.view(call.query, "full")
    mid = api._memory_id(call)
    store_id = call.params["memory_store_id"]
    try:
        with api.pool.idle_by_id(store_id) as lent:
            if lent is None:
                return None
            name, store = lent
            try:
                settings = store.settings
            except (NotFoundError, ConfigError) as exc:  # deleted under us: this Store is closed
                raise _Fallback from exc
            if settings.id != store_id:  # the name was deleted and made again
                return None
            api._check(call, store_id, scope=scope)
            if not api.fresh.fresh(store, scope, store.tip(scope)):
                return None
            m = store.memory_by_id(mid, scope=scope, with_content=chosen == "full", caller=call.caller)
            api.metrics.inline_reads.inc()
            return wire.memory_json(ops.record(m, with_content=chosen == "full"), settings.id)
    except _Fallback:
        return None
