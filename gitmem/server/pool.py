"""Open stores for the server's threads: each checked-out ``Store`` is used by one thread at a time.

The pool lends Store objects, like a connection pool: ``with pool.store(name) as s`` takes an idle
one (or opens one) and gives it back afterwards. Stores open lazily, on a store's first request;
idle ones are closed after ``idle_seconds``, and at most ``max_idle`` stay open while idle (the
least recently used are closed first), so a server over thousands of stores holds only those in
use (``bench/serve_bench.py`` measures its memory).
Memory writes from several threads to one scope are group-committed by the library, across these
handles (docs/durability.md, "Group commit"). ``pool.write_lock`` serializes only the
read-then-write operations that must see no other write in between: redaction, the Databricks
entry PATCH and the console's restore and redact forms.

Deleting a store (``with pool.retiring(name)``) first waits for every lent Store of it to come
back and lends no new one, so that no request is half-way through a store whose files vanish
(that would fail with libgit2 errors, or recreate parts of the deleted directory).
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
from gitmem.errors import ConfigError, NotFoundError
from gitmem.model.paths import is_store_handle
from gitmem.store import Store, StoreRef, all_refs, handle_path, open_store, resolve_store

MAX_IDLE = 32  # idle Stores kept open across all stores (each holds a repository and an index)


class StorePool:
    def __init__(
        self,
        home: str | os.PathLike[str] | None,
        *,
        idle_seconds: float = 60.0,
        max_idle: int = MAX_IDLE,
    ) -> None:
        self.home: Path = config.workspace_home(home)
        self.idle_seconds = idle_seconds
        self.max_idle = max(0, max_idle)
        self._lock = threading.Lock()
        self._idle: dict[str, list[tuple[float, Store]]] = {}
        self._ids: dict[str, str] = {}  # memstore_ id -> store handle (the pool's key, docs/stores.md)
        # One listing of the workspace at a time (reading every store's settings: seconds with
        # 10,000 stores): lookups that miss while one runs wait for it and look again.
        self._scan_lock = threading.Lock()
        self._scan_started = float("-inf")  # when the last finished listing began (time.monotonic)
        self._write_locks: dict[tuple[str, str], threading.Lock] = {}
        self._lent: dict[str, int] = {}  # store name -> Stores of it lent right now
        self._retiring: set[str] = set()  # stores being deleted: lent to nobody
        self._returned = threading.Condition(self._lock)
        self.opened = 0  # Store objects opened so far (for /metrics)

    # ------------------------------------------------------------------ lending
    @contextlib.contextmanager
    def store(self, name: str) -> Iterator[Store]:
        """A Store for this thread's exclusive use during the ``with`` block. ``name`` is a store's
        handle (its directory stem: ``name_of`` gives it), else any text the resolver takes."""
        name = self.key(name)
        store = self._take(name)
        try:
            yield store
        except BaseException:
            store.close()  # a failed operation may leave caches in any state: do not lend it again
            self._returned_one(name)
            raise
        self._give_back(name, store)
        self._returned_one(name)

    @contextlib.contextmanager
    def idle_by_id(self, store_id: str) -> Iterator[tuple[str, Store] | None]:
        """The name and an already open, idle Store of the store whose id the pool last saw as
        ``store_id``, for the ``with`` block; None when there is none (then nothing is opened,
        nothing scanned: the caller takes the ordinary path). The caller checks the Store's
        ``settings.id``: the name may have been deleted and made again since."""
        store = None
        with self._lock:
            name = self._ids.get(store_id) or (store_id if store_id in self._idle else None)
            if name is not None and name not in self._retiring:
                idle = self._idle.get(name)
                if idle:
                    store = idle.pop()[1]
                    self._lent[name] = self._lent.get(name, 0) + 1
        if store is None or name is None:
            yield None
            return
        try:
            yield name, store
        except BaseException:
            store.close()
            self._returned_one(name)
            raise
        self._give_back(name, store)
        self._returned_one(name)

    def key(self, name: str) -> str:
        """The pool's key of the store ``name`` names: its handle (gitmem.engine.resolve)."""
        with self._lock:
            if name in self._idle or name in self._lent or name in self._retiring:
                return name
        if is_store_handle(name) and handle_path(name, self.home).is_dir():
            return name
        return resolve_store(name, self.home).handle

    def _take(self, name: str) -> Store:
        with self._lock:
            if name in self._retiring:
                raise NotFoundError(f"memory store {name!r} is being deleted")
            self._lent[name] = self._lent.get(name, 0) + 1
            idle = self._idle.get(name)
            if idle:
                return idle.pop()[1]
        try:
            path = handle_path(name, self.home)  # exactly that directory: never a name's other store
            if not path.is_dir():
                raise NotFoundError(f"memory store {name} does not exist")
            store = open_store(path)
        except BaseException:
            self._returned_one(name)
            raise
        with self._lock:
            self.opened += 1
        return store

    def _returned_one(self, name: str) -> None:
        with self._lock:
            self._lent[name] -= 1
            if not self._lent[name]:
                del self._lent[name]
                self._returned.notify_all()

    @contextlib.contextmanager
    def retiring(self, name: str) -> Iterator[None]:
        """For the ``with`` block (deleting the store), no Store of ``name`` is lent or open."""
        name = self.key(name)
        with self._lock:
            if name in self._retiring:
                raise NotFoundError(f"memory store {name!r} is being deleted")
            self._retiring.add(name)
            self._returned.wait_for(lambda: name not in self._lent)
        try:
            self.forget(name)
            yield
        finally:
            with self._lock:
                self._retiring.discard(name)

    def _give_back(self, name: str, store: Store) -> None:
        store.hand_over()  # the next thread to take it uses its connections: one set per Store
        now = time.monotonic()
        stale: list[Store] = []
        with self._lock:
            self._idle.setdefault(name, []).append((now, store))
            for key in list(self._idle):
                idle = self._idle[key]
                while idle and now - idle[0][0] > self.idle_seconds:
                    stale.append(idle.pop(0)[1])
                if not idle:
                    del self._idle[key]
            count = sum(len(idle) for idle in self._idle.values())
            while count > self.max_idle:  # each list is oldest first: close the least recently used
                key = min(self._idle, key=lambda k: self._idle[k][0][0])
                stale.append(self._idle[key].pop(0)[1])
                if not self._idle[key]:
                    del self._idle[key]
                count -= 1
        for s in stale:
            s.close()

    def idle_count(self) -> int:
        """How many Stores are open and idle now (for /metrics and tests)."""
        with self._lock:
            return sum(len(idle) for idle in self._idle.values())

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
        """The handle (directory stem, the key of this pool) of the store whose id is ``store_id``
        (NotFoundError when there is none). A store of this release has its id as handle; one of
        the old layout its first name (gitmem.engine.resolve). An id not found that way is looked
        for in a listing of the workspace; concurrent misses share one listing (a listing that
        began after this lookup did has seen every store there was then), so a flood of unknown
        ids costs one listing at a time, not one each."""
        asked = time.monotonic()
        with self._lock:
            name = self._ids.get(store_id)
        if name is None and is_store_handle(store_id) and handle_path(store_id, self.home).is_dir():
            name = store_id  # the layout of this release: no listing needed
        if name is not None and self._is(name, store_id):
            return name
        with self._scan_lock:
            with self._lock:
                name = self._ids.get(store_id)
                fresh = self._scan_started >= asked
            if name is not None and self._is(name, store_id):
                return name
            if not fresh:
                for ref in self._refs_locked():
                    if ref.id == store_id:
                        return ref.handle
        raise NotFoundError(f"memory store {store_id} does not exist")

    def _is(self, name: str, store_id: str) -> bool:
        try:
            with self.store(name) as s:
                return s.settings.id == store_id
        except (NotFoundError, ConfigError):  # deleted (or being deleted) since it was cached
            return False

    def _refs(self) -> list[StoreRef]:
        with self._scan_lock:
            return self._refs_locked()

    def _refs_locked(self) -> list[StoreRef]:
        started = time.monotonic()
        found = all_refs(self.home)
        with self._lock:
            self._ids = {r.id: r.handle for r in found}
            self._scan_started = started
        return found

    def all_settings(self) -> list[StoreSettings]:
        return [r.settings for r in self._refs()]

    def handles(self) -> dict[str, str]:
        """Every store's id -> handle (the listing refreshes the cache ``name_of`` uses)."""
        return {r.id: r.handle for r in self._refs()}
