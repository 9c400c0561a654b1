"""A node's HTTP pieces besides the proxy (docs/cluster.md): the signed endpoints other nodes call
(replication into this node's copies, and "beat now" after a handoff), and the middleware in front
of the server's own app: placing a store it creates at once, counting the writes it is answering
(a handoff waits for them), and holding a write's answer under ``replication: sync`` until a
replica holds it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem import config
from gitmem.cluster import dream_copies, handoff, purges, replication
from gitmem.cluster.mcp_route import mcp_write
from gitmem.cluster.proxy import _unavailable, body_store, store_named
from gitmem.errors import ForbiddenError, GitmemError, IntegrityError
from gitmem.store import fence_epoch, write_fence

if TYPE_CHECKING:
    from gitmem.cluster.nodeview import NodeView

SIGNATURE = "x-gitmem-cluster-signature"
# A replication's body: a bundle of a whole store and its state. It streams to a spooled file,
# hashed as it comes, and is read into memory only once its signature holds.
MAX_REPLICATION_BYTES = 4 << 30
SPOOL_BYTES = 8 << 20
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


async def held_response(app: Any, scope: Any, receive: Any) -> list[Any]:
    """Run ``app`` and keep what it sends (a middleware that answers only once it saw the status)."""
    held: list[Any] = []

    async def hold(message: Any) -> None:
        held.append(message)

    await app(scope, receive, hold)
    return held


def is_write(scope: Any) -> str | None:
    """The store a request writes (an id or a name), or None (a read, or no one store's)."""
    if scope["type"] != "http" or scope["method"] not in WRITES:
        return None
    if scope["path"].endswith("/git-upload-pack"):  # a fetch is a POST too
        return None
    if scope["path"].rstrip("/") == "/mcp":  # a tool call naming a store homed here (McpRouter)
        return mcp_write(scope)
    return body_store(scope) or store_named(
        scope["path"], conversation_store
    )  # a new conversation, a response, a dream


def conversation_store(conversation_id: str) -> str | None:
    """The store a conversation's id names (None: not a conversation id): what the proxy routes
    ``/v1/conversations/{id}`` and a response's ``conversation`` by."""
    from gitmem.store import parse_conversation_id

    try:
        return parse_conversation_id(conversation_id)[1]
    except GitmemError:
        return None


def replica_app(self: NodeView) -> Any:
    """The endpoints other nodes replicate into (signed with the cluster's secret)."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

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

    def refused(exc: GitmemError, other: int) -> Any:
        return JSONResponse(
            {"error": str(exc)}, status_code=403 if isinstance(exc, ForbiddenError) else other
        )

    async def refs(request: Request) -> Any:
        import anyio.to_thread

        try:
            replication.verify_signature(
                self._secret, request.headers.get(SIGNATURE), "GET", request.url.path, b""
            )
            path = await anyio.to_thread.run_sync(where, request.path_params["store_id"])
            have = await anyio.to_thread.run_sync(replication.refs_of, path)
        except GitmemError as exc:
            return refused(exc, 404)
        return JSONResponse({"refs": have})

    async def beat(request: Request) -> Any:
        """Another node handed this one a store: take its lease and open its fence now."""
        import anyio.to_thread

        try:
            replication.verify_signature(
                self._secret, request.headers.get(SIGNATURE), "POST", request.url.path, await request.body()
            )
            await anyio.to_thread.run_sync(self.tick)
        except GitmemError as exc:
            return refused(exc, 503)
        return JSONResponse({"ok": True})

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
            await anyio.to_thread.run_sync(
                apply_replication, self, store_id, path, bundle, refs_sent, state, seq
            )
        except GitmemError as exc:
            return refused(exc, 400)
        return JSONResponse({"ok": True})

    return Starlette(routes=[
        Route("/cluster/v1/stores/{store_id}/refs", refs, methods=["GET"]),
        Route("/cluster/v1/stores/{store_id}/replicate", replicate, methods=["POST"]),
        Route("/cluster/v1/beat", beat, methods=["POST"]),
    ])  # fmt: skip


def apply_replication(
    self: NodeView,
    store_id: str,
    path: Path,
    bundle: bytes,
    refs: dict[str, str],
    state: dict[str, str | None],
    seq: int,
) -> None:
    """Bring this node's copy level with the home's replication number ``seq``. A copy that was
    this node's own as a home (its fence names this node at an epoch) may hold writes the new home
    lacks (the async tail): they are kept in a bundle and reported before the refs move."""
    with self._store_lock(store_id):
        new = not path.exists()
        if not new:  # an older (replayed, or overtaken) replication never rolls the copy back
            replication.check_and_record_seq(path, seq)
        was_home = fence_epoch(path, self.name)

        def keep_tail(before: dict[str, str]) -> None:
            if was_home:
                report_tail(self, store_id, path, was_home, before, refs, seq)

        replication.apply(path, bundle, refs, state, before_refs=keep_tail)
        with contextlib.suppress(OSError, GitmemError):  # retried at every replication
            dream_copies.release(self.home, store_id, path)  # an old home's records: the new home's now
        write_fence(path, node=self.name, epoch=0, renewed_at=0.0, lease_seconds=0)  # a replica never writes
        if new:
            replication.check_and_record_seq(path, seq)
            from gitmem.store import install_hooks_at

            install_hooks_at(path, label=store_id)
        self.state.record_position(store_id, self.name, f"#{seq}", seq)
        digest, problem = purges.purge_copy(path)  # a redaction's retired objects leave this copy too
        dropped, kept = purges.purge_lost(path)  # and the lost tails' bundles beside it
        if dropped:
            purges.record_dropped(self.state, store_id, self.name, dropped)
        problem = problem or kept
        if digest:
            purges.record(self.state, store_id, self.name, digest, problem)
        if problem:
            raise IntegrityError(f"the purge of {store_id} on {self.name} is not proved: {problem}")


def _git(path: Path, *args: str, stdin: str = "") -> str:
    proc = subprocess.run(
        ["git", f"--git-dir={path}", *args],
        input=stdin.encode(), capture_output=True, env=config.plain_git_env(), check=False, timeout=600,
    )  # fmt: skip
    if proc.returncode != 0:
        raise GitmemError(f"git {args[0]} in {path}: {proc.stderr.decode(errors='replace')[-300:]}")
    return proc.stdout.decode(errors="replace")


def report_tail(
    self: NodeView,
    store_id: str,
    path: Path,
    epoch: int,
    before: dict[str, str],
    refs: dict[str, str],
    seq: int,
) -> None:
    """The commits this old home holds that the new home's refs do not reach: bundled in
    ``gitmem/lost/`` and recorded in the shared state (``lost_writes``)."""
    ours = {name: oid for name, oid in before.items() if not name.startswith("refs/gitmem-incoming/")}
    theirs = "".join(f"^{oid}\n" for oid in sorted(set(refs.values())))
    lost: list[handoff.LostWrite] = []
    seen: set[str] = set()
    kept = Path("gitmem") / "lost" / f"epoch-{epoch}-seq-{seq}.bundle"
    for name, oid in sorted(ours.items()):
        if refs.get(name) == oid:
            continue
        out = _git(path, "log", "--format=%H%x00%s", "--stdin", stdin=f"{oid}\n{theirs}")
        for line in out.splitlines():
            commit, _, summary = line.partition("\0")
            if commit and commit not in seen:
                seen.add(commit)
                lost.append(handoff.LostWrite(store_id, self.name, epoch, name, commit, summary, str(kept)))
    if not lost:
        return
    (path / kept).parent.mkdir(parents=True, exist_ok=True)
    tips = "".join(f"{name}\n" for name in sorted({w.ref for w in lost}))
    _git(path, "bundle", "create", str(path / kept), "--stdin", stdin=tips + theirs)
    # every object the bundle holds, listed beside it, so that a later redaction can tell whether
    # this bundle keeps a redacted object (purges.purge_lost) without the commits it builds on
    listed = _git(path, "rev-list", "--objects", "--no-object-names", "--stdin", stdin=tips + theirs)
    purges.write_atomic(path / kept.with_suffix(".objects"), listed)
    new = handoff.record_lost(self.state, lost)
    recorded = {w.bundle for w in handoff.lost_writes(self.state, store_id) if w.node == self.name}
    if not new and str(kept) not in recorded:  # all recorded by an earlier attempt, with the
        for spare in (path / kept, path / kept.with_suffix(".objects")):  # bundle it made: spare
            spare.unlink(missing_ok=True)
    self.lost.extend(new)


class Placing:
    """After a request that may have created a store here, place it at once (not at the next beat),
    so that the next request through another node already finds its home; under ``replication:
    sync`` the answer waits until a replica holds the new store (503 when none does)."""

    CREATES = ("/v1/memory_stores", "/api/2.1/unity-catalog/memory-stores")

    def __init__(self, app: Any, node: NodeView) -> None:
        self.app, self.node = app, node

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        import anyio.to_thread

        creates = (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and scope["path"].rstrip("/") in self.CREATES
        )
        if not creates:
            await self.app(scope, receive, send)
            return
        held = await held_response(self.app, scope, receive)
        status = next((m["status"] for m in held if m["type"] == "http.response.start"), 500)
        if 200 <= status < 300:
            await anyio.to_thread.run_sync(self.node.tick)  # placed and fenced before the client hears
            if self.node.sync:
                body = b"".join(m.get("body", b"") for m in held if m["type"] == "http.response.body")
                try:
                    made = json.loads(body)
                    store = str(made.get("id") or made.get("name") or "")
                except (ValueError, AttributeError):
                    store = ""
                if not store or not await anyio.to_thread.run_sync(self.node.replicate_now, store):
                    await _unavailable(
                        send,
                        "the store is created at its home, but no replica confirmed it (replication: sync)",
                    )
                    return
        for message in held:
            await send(message)


class Inflight:
    """Count the writes this node is answering, per store named; a store being handed over takes
    no new write (503, retried by clients) and the handoff waits for the ones in flight."""

    def __init__(self, app: Any, node: NodeView) -> None:
        self.app, self.node = app, node

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        store = is_write(scope)
        if store is None:
            await self.app(scope, receive, send)
            return
        if not self.node.begin_write(store):
            import anyio.to_thread

            if not await anyio.to_thread.run_sync(self.node.begin_write_after_beat, store):
                await _unavailable(send, "the store's lease is not held here (being handed over?): retry")
                return
        try:
            await self.app(scope, receive, send)
        finally:
            self.node.end_write(store)


class SyncAck:
    """``replication: sync``: a write to a store homed here is answered only once a replica holds
    it. The answer is held back (API and push answers are small) while the home brings a replica
    level; when none confirms, the client gets 503: the write is durable at the home, but not
    acknowledged as replicated."""

    def __init__(self, app: Any, node: NodeView) -> None:
        self.app, self.node = app, node

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        store = is_write(scope)
        if store is None:
            await self.app(scope, receive, send)
            return
        held = await held_response(self.app, scope, receive)
        status = next((m["status"] for m in held if m["type"] == "http.response.start"), 500)
        if 200 <= status < 300:
            import anyio.to_thread

            if not await anyio.to_thread.run_sync(self.node.replicate_now, store):
                await _unavailable(
                    send,
                    "the write is durable at the store's home, but no replica confirmed it (replication: sync)",
                )
                return
        for message in held:
            await send(message)


class Figures:
    """``/healthz`` and ``/metrics`` with the node's cluster figures added (:meth:`ClusterNode.figures`):
    ``/healthz`` gains a ``cluster`` object (``status`` says ``degraded`` while the database is down),
    ``/metrics`` the ``gitmem_cluster_*`` gauges."""

    HELP = {
        "leases_held": "Stores whose write lease this node holds",
        "replicas_behind": "Replicas of the stores homed here not level after their last replication",
        "forwarded": "Requests this node proxied to a store's home",
        "refs_listed": "Replication checks that listed a store's refs with git",
        "refs_skipped": "Beats that reused a store's last ref listing (its ref generation unchanged)",
        "failovers": "Stores this node took over from a lost home",
        "moves": "Stores this node handed to another node",
        "replication_errors": "Recent replication, move and beat errors (the last 200 at most)",
        "lost_writes_found_here": "Commits of an async tail found on this node's old copies",
        "nodes": "Nodes that joined the cluster",
        "nodes_healthy": "Nodes seen within the health window",
        "stores_placed_here": "Stores placed with this node as their home",
        "moves_pending": "Requested moves not yet handed over (cluster-wide)",
        "lost_writes": "Commits lost by async failovers, reported (cluster-wide)",
        "purges_unproved": "Replica copies whose purge proof failed (cluster-wide)",
        "database_up": "1 while the cluster's PostgreSQL answers",
    }

    def __init__(self, app: Any, node: NodeView) -> None:
        self.app, self.node = app, node

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        import anyio.to_thread

        path = scope["path"] if scope["type"] == "http" and scope["method"] == "GET" else ""
        if path not in ("/healthz", "/metrics"):
            await self.app(scope, receive, send)
            return
        held = await held_response(self.app, scope, receive)
        start = next(m for m in held if m["type"] == "http.response.start")
        body = b"".join(m.get("body", b"") for m in held if m["type"] == "http.response.body")
        figures = await anyio.to_thread.run_sync(self.node.figures)
        if start["status"] == 200 and path == "/healthz":
            data = json.loads(body)
            data["cluster"] = figures
            if figures["database"] != "up":
                data["status"] = "degraded"
            body = json.dumps(data).encode()
        elif start["status"] == 200:
            body += self.render(figures).encode()
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def render(self, figures: dict[str, Any]) -> str:
        values = {k: v for k, v in figures.items() if isinstance(v, int)}
        values["database_up"] = int(figures["database"] == "up")
        lines = []
        for key, value in values.items():
            name = f"gitmem_cluster_{key}"
            lines += [f"# HELP {name} {self.HELP.get(key, key)}", f"# TYPE {name} gauge", f"{name} {value}"]
        return "\n".join(lines) + "\n"
