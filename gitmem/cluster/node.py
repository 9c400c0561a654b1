"""One node of a gitmem cluster: it joins, keeps its heartbeat and the leases of the stores it
homes, places the stores it creates, and serves every face with the proxy in front
(docs/cluster.md)."""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitmem.cluster.state import ClusterState
from gitmem.cluster.tokens import ClusterTokenStore
from gitmem.errors import ConflictError, ForbiddenError, GitmemError, NotFoundError
from gitmem.git.fence import write_fence

SIGNATURE = "x-gitmem-cluster-signature"
HOME_CACHE_SECONDS = 1.0  # a placement lookup is reused this long (a move is seen within it)
# A replication's body: a bundle of a whole store and its state. It streams to a spooled file,
# hashed as it comes, and is read into memory only once its signature holds.
MAX_REPLICATION_BYTES = 4 << 30
SPOOL_BYTES = 8 << 20


@dataclass
class ClusterNode:
    home: Path
    database: str
    name: str
    url: str
    replicas: int = 1
    heartbeat_seconds: float = 2.0
    lease_seconds: float = 10.0
    healthy_seconds: float | None = None  # default: 1.5 leases
    sync: bool = False  # acknowledge a write only once a replica holds it (docs/cluster.md)
    state: ClusterState = field(init=False)
    epochs: dict[str, int] = field(default_factory=dict, init=False)  # store id -> lease epoch held
    forwarded: int = field(default=0, init=False)
    failovers: list[tuple[str, int]] = field(default_factory=list, init=False)  # (store id, epoch) taken over
    replication_errors: list[str] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        if self.healthy_seconds is None:
            self.healthy_seconds = 1.5 * self.lease_seconds
        self.state = ClusterState(self.database, healthy_seconds=self.healthy_seconds)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cache: dict[str, tuple[float, tuple[str, str] | None]] = {}
        self._cache_lock = threading.Lock()
        self._sent: dict[tuple[str, str], str] = {}  # (store, replica) -> digest it was brought level to
        self._locks: dict[str, threading.Lock] = {}
        self._secret = b""
        self._local: dict[str, Path] = {}  # store id -> this node's repository of it (last listing)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self.state.check_schema()
        self._secret = self.state.secret()
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
                self.replicate(p.store_id, path, p.replicas)
        self.fail_over(local)

    def sync_placements(self) -> dict[str, Path]:
        """Place every store of this workspace that the cluster does not know yet, homed here;
        the local stores by id (their repositories)."""
        from gitmem.store import all_refs, handle_path

        placed = {p.store_id for p in self.state.placements()}
        local: dict[str, Path] = {}
        for ref in all_refs(self.home, strict=False):
            local[ref.id] = handle_path(ref.handle, self.home)
            if ref.id in placed:
                continue
            with contextlib.suppress(ConflictError):  # another node placed it meanwhile
                self.state.place(ref.id, home=self.name, replicas=self.replicas, name=ref.settings.name)
        with self._cache_lock:
            self._cache.clear()
            self._local = dict(local)
        return local

    # ------------------------------------------------------------------ replication and failover
    def replicate(self, store_id: str, path: Path, replicas: tuple[str, ...]) -> int:
        """Bring every healthy replica level with this home's copy; the number of replicas that
        are level now. One replication of a store at a time: each sends the state as it is when it
        starts, so a later one never carries older refs than an earlier one."""
        from gitmem.cluster import replication

        with self._store_lock(store_id):
            urls = {n.name: n.url for n in self.state.nodes() if n.healthy}
            refs = replication.refs_of(path)
            state = replication.state_of(path)
            digest = hashlib.sha256(replication.envelope(refs, state)).hexdigest()  # what, not when
            level = 0
            for replica in replicas:
                if self._sent.get((store_id, replica)) == digest:
                    level += 1
                    continue
                if replica not in urls:
                    continue
                try:
                    self._send(store_id, urls[replica], refs, state, path)
                except (GitmemError, OSError) as exc:
                    self.replication_errors.append(f"{store_id} -> {replica}: {exc}")
                    continue
                self._sent[(store_id, replica)] = digest
                level += 1
            return level

    def _store_lock(self, store_id: str) -> threading.Lock:
        with self._cache_lock:
            return self._locks.setdefault(store_id, threading.Lock())

    def replicate_now(self, store: str) -> bool:
        """After a write to ``store`` here (sync mode): True once at least one replica holds it,
        or when the store is not homed here (nothing of ours to replicate)."""
        try:
            placement = self.state.resolve(store)
        except NotFoundError:
            return True
        if placement.home != self.name:
            return True
        path = self._local.get(placement.store_id)  # from the last listing: no workspace scan per write
        if path is None or not path.is_dir():
            path = self.sync_placements().get(placement.store_id)
        if path is None:
            return False
        return not placement.replicas or self.replicate(placement.store_id, path, placement.replicas) > 0

    def _send(
        self, store_id: str, url: str, refs: dict[str, str], state: dict[str, str | None], path: Path
    ) -> None:
        import httpx2 as httpx

        from gitmem.cluster import replication
        from gitmem.errors import UnavailableError

        secret = self.state.secret()
        where = f"/cluster/v1/stores/{store_id}"
        have_path = where + "/refs"
        with httpx.Client(timeout=httpx.Timeout(120.0, connect=5.0)) as client:
            try:
                got = client.get(url + have_path, headers={SIGNATURE: replication.sign(
                    secret, self.name, "GET", have_path, hashlib.sha256(b"").hexdigest())})  # fmt: skip
                got.raise_for_status()
                have = got.json()["refs"]
                bundle = replication.make_bundle(path, have) or b""
                env = replication.envelope(refs, state, self.state.next_seq())
                body = replication.frame(env, bundle)
                put_path = where + "/replicate"
                sent = client.post(url + put_path, content=body, headers={SIGNATURE: replication.sign(
                    secret, self.name, "POST", put_path, hashlib.sha256(body).hexdigest())})  # fmt: skip
                sent.raise_for_status()
            except httpx.HTTPError as exc:
                raise UnavailableError(f"replica {url}: {exc}") from None

    def fail_over(self, local: dict[str, Path]) -> None:
        """Take over the stores whose home is down, where this node holds the freshest copy: move
        the placement here and take the lease (possible only once the old home's ran out)."""
        healthy = {n.name for n in self.state.nodes() if n.healthy}
        for p in self.state.placements():
            if p.home in healthy or p.home == self.name or self.name not in p.replicas:
                continue
            if p.store_id not in local:
                continue
            live = [r for r in p.replicas if r in healthy]
            if self.state.freshest_replica(p.store_id, live) != self.name:
                continue
            started = time.monotonic()
            try:
                lease = self.state.acquire(p.store_id, self.name, self.lease_seconds)
            except ConflictError:  # the old home's lease has not run out yet
                continue
            self.state.move(p.store_id, self.name)
            self.epochs[p.store_id] = lease.epoch
            self.failovers.append((p.store_id, lease.epoch))
            write_fence(local[p.store_id], node=self.name, epoch=lease.epoch, renewed_at=started,
                        lease_seconds=self.lease_seconds)  # fmt: skip

    def replica_app(self) -> Any:
        """The endpoints other nodes replicate into (signed with the cluster's secret)."""
        from starlette.applications import Starlette
        from starlette.requests import Request
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        from gitmem.cluster import replication
        from gitmem.store import all_refs, handle_path

        def where(store_id: str, writer: str | None = None) -> Path:
            placement = self.state.placement(store_id)
            if self.name not in placement.replicas:
                raise ForbiddenError(f"this node is not a replica of {store_id}")
            if writer is not None and writer != placement.home:
                # only the store's home writes its replicas: a deposed or hung home that resumes
                # must not roll a copy back to what it had
                raise ForbiddenError(f"{writer} is not the home of {store_id}: replication refused")
            for ref in all_refs(self.home, strict=False):  # a copy it had as a home (any layout)
                if ref.id == store_id:
                    return handle_path(ref.handle, self.home)
            return handle_path(store_id, self.home)  # a new copy is named by the store's id

        async def refs(request: Request) -> Any:
            import anyio.to_thread

            try:
                replication.verify_signature(
                    self._secret, request.headers.get(SIGNATURE), "GET", request.url.path, b""
                )
                path = await anyio.to_thread.run_sync(where, request.path_params["store_id"])
                have = await anyio.to_thread.run_sync(replication.refs_of, path)
            except GitmemError as exc:
                return JSONResponse(
                    {"error": str(exc)}, status_code=403 if isinstance(exc, ForbiddenError) else 404
                )
            return JSONResponse({"refs": have})

        async def replicate(request: Request) -> Any:
            import anyio.to_thread

            header = request.headers.get(SIGNATURE)
            if not header or header.count(":") < 2:  # not even shaped like a node's signature
                return JSONResponse(
                    {"error": "a replication request must be signed by a cluster node"}, status_code=403
                )
            spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 - closed below
            digest, size = hashlib.sha256(), 0
            try:
                async for chunk in request.stream():  # never more than the cap, never all in memory
                    size += len(chunk)
                    if size > MAX_REPLICATION_BYTES:
                        return JSONResponse(
                            {"error": f"a replication request is at most {MAX_REPLICATION_BYTES} bytes"},
                            status_code=413,
                        )
                    digest.update(chunk)
                    spool.write(chunk)
                try:
                    signer = replication.verify_signature(
                        self._secret, header, "POST", request.url.path, b"", body_sha256=digest.hexdigest()
                    )
                except ForbiddenError as exc:
                    return JSONResponse({"error": str(exc)}, status_code=403)
                spool.seek(0)
                body = spool.read()  # signed by a node of the cluster: now it may be read whole
            finally:
                spool.close()
            store_id = request.path_params["store_id"]
            try:
                path = await anyio.to_thread.run_sync(where, store_id, signer)
                env, bundle = replication.unframe(body)
                refs_sent, state, seq = replication.parse_envelope(env)
                await anyio.to_thread.run_sync(self._apply, store_id, path, bundle, refs_sent, state, seq)
            except GitmemError as exc:
                return JSONResponse(
                    {"error": str(exc)}, status_code=403 if isinstance(exc, ForbiddenError) else 400
                )
            return JSONResponse({"ok": True})

        return Starlette(routes=[
            Route("/cluster/v1/stores/{store_id}/refs", refs, methods=["GET"]),
            Route("/cluster/v1/stores/{store_id}/replicate", replicate, methods=["POST"]),
        ])  # fmt: skip

    def _apply(
        self,
        store_id: str,
        path: Path,
        bundle: bytes,
        refs: dict[str, str],
        state: dict[str, str | None],
        seq: int,
    ) -> None:
        from gitmem.cluster import replication

        with self._store_lock(store_id):
            new = not path.exists()
            if not new:  # an older (replayed, or overtaken) replication never rolls the copy back
                replication.check_and_record_seq(path, seq)
            replication.apply(path, bundle, refs, state)
            write_fence(
                path, node=self.name, epoch=0, renewed_at=0.0, lease_seconds=0
            )  # a replica never writes
            if new:
                replication.check_and_record_seq(path, seq)
                from gitmem.push.hookinstall import install_hooks

                install_hooks(path, label=store_id)
            self.state.record_position(store_id, self.name, f"#{seq}")

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

        served: Any = _Placing(inner, self)
        if self.sync:
            served = _SyncAck(served, self)
        proxy = ClusterProxy(
            served, node=self.name, secret=self.state.secret(), home_of=self.home_of,
            client=client, on_forward=counted,
        )  # fmt: skip
        replica = self.replica_app()

        async def app(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["path"].startswith("/cluster/v1/"):
                await replica(scope, receive, send)
            else:
                await proxy(scope, receive, send)

        return app


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


def serve_node(
    home: Path,
    *,
    database: str,
    name: str,
    url: str,
    host: str,
    port: int,
    log_level: str,
    sync: bool,
    replicas: int = 1,
    lease_seconds: float = 10.0,
) -> None:
    """``gitmem serve --cluster-node NAME``: join, serve every face behind the proxy, leave the
    heartbeat (and so the leases) when stopped."""
    import uvicorn

    from gitmem.server.app import uvicorn_options

    node = ClusterNode(
        Path(home), database, name, url, sync=sync, replicas=replicas, lease_seconds=lease_seconds,
        heartbeat_seconds=min(2.0, lease_seconds / 4),
    )  # fmt: skip
    node.start()
    try:
        uvicorn.run(node.app(), **uvicorn_options(host=host, port=port, log_level=log_level))
    finally:
        node.stop()


class _SyncAck:
    """``replication: sync``: a write to a store homed here is answered only once a replica holds
    it. The answer is held back (API and push answers are small) while the home brings a replica
    level; when none confirms, the client gets 503: the write is durable at the home, but not
    acknowledged as replicated."""

    WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})

    def __init__(self, app: Any, node: ClusterNode) -> None:
        self.app, self.node = app, node

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from gitmem.cluster.proxy import store_named

        store = store_named(scope["path"]) if scope["type"] == "http" else None
        if store is None or scope["method"] not in self.WRITES:
            await self.app(scope, receive, send)
            return
        held: list[Any] = []

        async def hold(message: Any) -> None:
            held.append(message)

        await self.app(scope, receive, hold)
        status = next((m["status"] for m in held if m["type"] == "http.response.start"), 500)
        if 200 <= status < 300:
            import anyio.to_thread

            if not await anyio.to_thread.run_sync(self.node.replicate_now, store):
                from gitmem.cluster.proxy import _unavailable

                await _unavailable(
                    send,
                    "the write is durable at the store's home, but no replica confirmed it (replication: sync)",
                )
                return
        for message in held:
            await send(message)
