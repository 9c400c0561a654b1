"""Open stores for the server's threads: each checked-out ``Store`` is used by one thread at a time.

A ``Store`` holds a libgit2 repository and an SQLite connection that must not be used by two threads
at once (that crashes the process). The pool therefore lends Store objects, like a connection pool:
``with pool.store(name) as s`` takes an idle one (or opens one) and gives it back afterwards; idle
ones are closed after ``idle_seconds``. Writes to one scope are also serialized in this process
(``pool.write_lock``), so that the threads of one server do not spin on the branch's
compare-and-swap; other processes still race through the library's CAS path.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from gitmem import config
from gitmem.config import StoreSettings
from gitmem.errors import NotFoundError
from gitmem.store import Store, list_stores, open_store


class StorePool:
    def __init__(self, home: str | os.PathLike[str] | None, *, idle_seconds: float = 60.0) -> None:
        self.home: Path = config.workspace_home(home)
        self.idle_seconds = idle_seconds
        self._lock = threading.Lock()
        self._idle: dict[str, list[tuple[float, Store]]] = {}
        self._ids: dict[str, str] = {}  # memstore_ id -> store name
        self._write_locks: dict[tuple[str, str], threading.Lock] = {}
        self.opened = 0  # Store objects opened so far (for /metrics)

    # ------------------------------------------------------------------ lending
    @contextlib.contextmanager
    def store(self, name: str) -> Iterator[Store]:
        """A Store for this thread's exclusive use during the ``with`` block."""
        store = self._take(name)
        try:
            yield store
        except BaseException:
            store.close()  # a failed operation may leave caches in any state: do not lend it again
            raise
        self._give_back(name, store)

    def _take(self, name: str) -> Store:
        with self._lock:
            idle = self._idle.get(name)
            if idle:
                return idle.pop()[1]
        store = open_store(name, self.home)
        with self._lock:
            self.opened += 1
        return store

    def _give_back(self, name: str, store: Store) -> None:
        now = time.monotonic()
        stale: list[Store] = []
        with self._lock:
            self._idle.setdefault(name, []).append((now, store))
            for idle in self._idle.values():
                while idle and now - idle[0][0] > self.idle_seconds:
                    stale.append(idle.pop(0)[1])
        for s in stale:
            s.close()

    def forget(self, name: str) -> None:
        """Close the idle Stores of ``name`` (it was deleted or archived)."""
        with self._lock:
            idle = self._idle.pop(name, [])
            self._ids = {k: v for k, v in self._ids.items() if v != name}
        for _t, s in idle:
            s.close()

    def close(self) -> None:
        with self._lock:
            idle = [s for lst in self._idle.values() for _t, s in lst]
            self._idle.clear()
        for s in idle:
            s.close()

    def write_lock(self, name: str, scope: str) -> threading.Lock:
        with self._lock:
            return self._write_locks.setdefault((name, scope), threading.Lock())

    # ------------------------------------------------------------------ ids
    def name_of(self, store_id: str) -> str:
        """The name of the store whose id is ``store_id`` (NotFoundError when there is none)."""
        with self._lock:
            name = self._ids.get(store_id)
        if name is not None:
            try:
                with self.store(name) as s:
                    if s.settings.id == store_id:
                        return name
            except NotFoundError:
                pass
        for settings in self.all_settings():
            if settings.id == store_id:
                return settings.name
        raise NotFoundError(f"memory store {store_id} does not exist")

    def all_settings(self) -> list[StoreSettings]:
        found = list_stores(self.home)
        with self._lock:
            self._ids = {s.id: s.name for s in found}
        return found
