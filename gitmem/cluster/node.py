"""One node of a gitmem cluster: it joins, keeps its heartbeat and the leases of the stores it
homes, places the stores it creates, and serves every face with the proxy in front
(docs/cluster.md)."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitmem.cluster.state import ClusterState
from gitmem.cluster.tokens import ClusterTokenStore
from gitmem.errors import ConflictError, GitmemError, NotFoundError
from gitmem.git.fence import write_fence

HOME_CACHE_SECONDS = 1.0  # a placement lookup is reused this long (a move is seen within it)


@dataclass
class ClusterNode:
    home: Path
    database: str
    name: str
    url: str
    replicas: int = 1
    heartbeat_seconds: float = 2.0
    lease_seconds: float = 10.0
    state: ClusterState = field(init=False)
    epochs: dict[str, int] = field(default_factory=dict, init=False)  # store id -> lease epoch held
    forwarded: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.state = ClusterState(self.database)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cache: dict[str, tuple[float, tuple[str, str] | None]] = {}
        self._cache_lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self.state.check_schema()
        self.state.join(self.name, self.url)
        self.tick()
        self._thread = threading.Thread(target=self._loop, name=f"gitmem-cluster-{self.name}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.state.close()

    def _loop(self) -> None:
        while not self._stop.wait(self.heartbeat_seconds):
            try:
                self.tick()
            except GitmemError:  # the database is down: try again at the next beat
                continue

    def tick(self) -> None:
        """One heartbeat: say we are alive, place new local stores, take or renew the leases of the
        stores homed here and fence each local copy: open while the lease holds, shut otherwise."""
        self.state.heartbeat(self.name)
        local = self.sync_placements()
        for p in self.state.placements():
            path = local.get(p.store_id)
            if p.home != self.name:
                self.epochs.pop(p.store_id, None)
                if path is not None:  # a copy here that is not the home never takes a write
                    write_fence(path, node=self.name, epoch=0, renewed_at=0.0, lease_seconds=0)
                continue
            started = time.monotonic()  # before the renewal reaches the database
            held = self.epochs.get(p.store_id)
            if held is None or not self.state.renew(p.store_id, self.name, held, self.lease_seconds):
                try:
                    held = self.state.acquire(p.store_id, self.name, self.lease_seconds).epoch
                except ConflictError:  # the old home's lease has not run out yet
                    held = None
            if held is None:
                self.epochs.pop(p.store_id, None)
                if path is not None:
                    write_fence(path, node=self.name, epoch=0, renewed_at=0.0, lease_seconds=0)
                continue
            self.epochs[p.store_id] = held
            if path is not None:
                write_fence(
                    path, node=self.name, epoch=held, renewed_at=started, lease_seconds=self.lease_seconds
                )

    def sync_placements(self) -> dict[str, Path]:
        """Place every store of this workspace that the cluster does not know yet, homed here;
        the local stores by id (their repositories)."""
        from gitmem.store import list_stores, store_path

        placed = {p.store_id for p in self.state.placements()}
        local: dict[str, Path] = {}
        for settings in list_stores(self.home):
            local[settings.id] = store_path(settings.name, self.home)
            if settings.id in placed:
                continue
            with contextlib.suppress(ConflictError):  # another node placed it meanwhile
                self.state.place(settings.id, home=self.name, replicas=self.replicas, name=settings.name)
        with self._cache_lock:
            self._cache.clear()
        return local

    # ------------------------------------------------------------------ routing
    def home_of(self, store: str) -> tuple[str, str] | None:
        """(node, url) of the store's home, or None when it is not placed (served here)."""
        now = time.monotonic()
        with self._cache_lock:
            hit = self._cache.get(store)
            if hit is not None and now - hit[0] < HOME_CACHE_SECONDS:
                return hit[1]
        try:
            found: tuple[str, str] | None = self.state.home_url(store)
        except NotFoundError:
            found = None
        with self._cache_lock:
            self._cache[store] = (now, found)
        return found

    def app(self) -> Any:
        """This node's ASGI app: the server's app on the cluster's tokens, behind the proxy."""
        import httpx2 as httpx

        from gitmem.cluster.proxy import ClusterProxy
        from gitmem.server.app import create_app

        inner = create_app(self.home, tokens=ClusterTokenStore(self.state))
        client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=5.0))

        def counted(_node: str) -> None:
            self.forwarded += 1

        return ClusterProxy(
            _Placing(inner, self), node=self.name, secret=self.state.secret(), home_of=self.home_of,
            client=client, on_forward=counted,
        )  # fmt: skip


class _Placing:
    """After a request that may have created a store here, place it at once (not at the next beat),
    so that the next request through another node already finds its home."""

    def __init__(self, app: Any, node: ClusterNode) -> None:
        self.app, self.node = app, node

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        creates = (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"].rstrip("/")
            in (
                "/v1/memory_stores",
                "/api/2.1/unity-catalog/memory-stores",
            )
        )
        if not creates:
            await self.app(scope, receive, send)
            return
        ok = False

        async def placing_send(message: Any) -> None:
            nonlocal ok
            if message["type"] == "http.response.start":
                ok = 200 <= message["status"] < 300
            elif message["type"] == "http.response.body" and not message.get("more_body") and ok:
                import anyio.to_thread

                await anyio.to_thread.run_sync(self.node.tick)  # placed and fenced before the client hears
            await send(message)

        await self.app(scope, receive, placing_send)
