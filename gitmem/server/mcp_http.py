"""Remote MCP at ``/mcp``: the MCP server of ``gitmem mcp`` over the streamable HTTP transport.

Every request carries a token (``Authorization: Bearer``, HTTP Basic with the token as password,
or ``x-api-key``); the token decides what is served: the stores it has a grant for (``*`` and
admin tokens: every store), each read-write or read-only as granted (a server whose stores are all
read-only has no write tools; a write tool refuses a read-only store), in the token's scope (else
``main``, or ``/mcp?scope=S`` when the token allows S).

Writes are versions by the token's actor, tagged with a session (``gitmem.server.door.mcp_session``):
the token's own session when it has one (naming another is 403), else ``sesn_mcp_<token ulid>``,
or a sub-session of it the client names (``/mcp?session=ID`` or an ``x-gitmem-session`` header
become ``sesn_mcp_<token ulid>.ID``): one token never writes in another's session. (MCP's own
session id is not a good tag: the 2026 protocol revision has none, and the older one changes at
every reconnect.) Each token holds at most ``max_per_token`` servers, and its servers at most
``max_stores_per_token`` open stores together, so that one token cannot fill the server's
``max_servers`` or its open files for everyone else (503 for that token only). ``/mcp?store=NAME``
(repeatable: a name or an id) serves only those of the token's stores.

One ``build_server`` and one session manager of the ``mcp`` package serve each (token, scope,
session, stores) and are reused by its requests; they are dropped after ``idle_seconds`` without a
request in flight. An MCP session id (older protocol revisions) is bound to the token that opened
it: another token presenting it gets 404, as for an unknown session.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskGroup, TaskStatus
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import Message, Receive, Scope, Send

from gitmem.errors import AuthenticationError, ForbiddenError, GitmemError, InvalidInputError
from gitmem.integrations.mcp_server import ServedStore, build_server, labels
from gitmem.model.paths import validate_scope
from gitmem.server import door
from gitmem.server.intake import buffered
from gitmem.server.pool import StorePool
from gitmem.server.tokens import Token, TokenStore
from gitmem.store import all_refs, handle_path, open_store

log = logging.getLogger("gitmem.server.mcp")
SESSION_HEADER = "mcp-session-id"
MAX_BODY = door.BODIES["mcp"].max_bytes or 1 << 20
MAX_PER_TOKEN = 8  # MCP servers one token may hold open at once (scopes x sub-sessions)
# Stores one token's MCP servers may hold open at once (each is a repository and an index): an
# admin or ``*`` token over thousands of stores narrows what it serves with ``?store=``.
MAX_STORES_PER_TOKEN = 64


@dataclass
class _Session:
    token_id: str
    manager: StreamableHTTPSessionManager
    gitmem_session: str
    stores: list[ServedStore]
    cancel: anyio.CancelScope | None = None
    key: tuple[object, ...] = ()
    in_flight: int = 0
    last_used: float = field(default_factory=time.monotonic)


class McpHttp:
    """The ASGI app at ``/mcp``; ``run()`` must be entered for the app's lifetime (its lifespan)."""

    def __init__(
        self,
        pool: StorePool,
        tokens: TokenStore,
        *,
        idle_seconds: float = 1800.0,
        max_servers: int = 256,
        max_per_token: int = MAX_PER_TOKEN,
        max_stores_per_token: int | None = None,
        body_timeout: float | None = None,
    ) -> None:
        self.pool = pool
        self.body_timeout = body_timeout if body_timeout is not None else door.BODIES["mcp"].deadline
        self.tokens = tokens
        self.idle_seconds = idle_seconds
        self.max_servers = max_servers
        self.max_per_token = max_per_token
        self.max_stores_per_token = max_stores_per_token or MAX_STORES_PER_TOKEN
        self._servers: dict[tuple[object, ...], _Session] = {}
        self._by_sid: dict[str, _Session] = {}  # MCP session id (older revisions) -> its server
        self._open_lock = anyio.Lock()
        self._tg: TaskGroup | None = None

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tg:
            self._tg = tg
            tg.start_soon(self._reap)
            try:
                yield
            finally:
                self._tg = None
                tg.cancel_scope.cancel()
                self._servers.clear()
                self._by_sid.clear()

    # ------------------------------------------------------------------ requests
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        try:
            token = door.authenticate(self.tokens, headers)
        except AuthenticationError as exc:
            await _json(send, 401, "authentication_error", exc.message, [(b"www-authenticate", b"Bearer")])
            return
        except GitmemError as exc:
            await _json(send, 500, "api_error", f"internal error: {exc.message}")
            return
        scope.setdefault("state", {})["token_id"] = token.id
        if scope["method"] == "POST":  # the door's body policy: whole, within the deadline (408)
            replayed = await buffered(receive, MAX_BODY, self.body_timeout)
            if isinstance(replayed, int):
                if replayed == 408:
                    message = f"the request body did not arrive within {self.body_timeout:g} seconds"
                    await _json(send, 408, "timeout_error", message)
                elif replayed == 413:
                    await _json(send, 413, "request_too_large", f"the request body is over {MAX_BODY} bytes")
                return
            receive = replayed
        sid = headers.get(SESSION_HEADER)
        if sid is not None:
            entry = self._by_sid.get(sid)
            if entry is None or entry.token_id != token.id:
                await _json(send, 404, "not_found_error", "MCP session not found; initialize a new one")
                return
            await self._forward(entry, scope, receive, send)
            if scope["method"] == "DELETE":
                self._by_sid.pop(sid, None)
            return
        try:
            entry = await self._entry(token, scope.get("query_string", b""), headers)
        except GitmemError as exc:
            status = {"forbidden": 403, "invalid_input": 400}.get(exc.type_name, 503)
            kind = {403: "permission_error", 400: "invalid_request_error"}.get(status, "overloaded_error")
            await _json(send, status, kind, exc.message)
            return

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                for k, v in message.get("headers", []):
                    if k.lower() == SESSION_HEADER.encode():
                        self._by_sid[v.decode("latin-1")] = entry
            await send(message)

        await self._forward(entry, scope, receive, capture)

    async def _forward(self, entry: _Session, scope: Scope, receive: Receive, send: Send) -> None:
        entry.in_flight += 1
        try:
            await entry.manager.handle_request(scope, receive, send)
        finally:
            entry.in_flight -= 1
            entry.last_used = time.monotonic()

    # ------------------------------------------------------------------ servers
    async def _entry(self, token: Token, query: bytes, headers: dict[str, str]) -> _Session:
        scope, session = _scope_and_session(token, query, headers)
        names = await anyio.to_thread.run_sync(self._names, token, scope, _stores_asked(query))
        key = (token.id, scope, session, tuple(names))
        async with self._open_lock:
            entry = self._servers.get(key)
            if entry is not None:
                return entry
            mine = sum(1 for k in self._servers if k[0] == token.id)
            if mine >= self.max_per_token:
                raise GitmemError(
                    f"token {token.id} has {mine} MCP servers open (at most {self.max_per_token}); "
                    "reuse a session or wait until one is idle"
                )
            held = sum(len(e.stores) for k, e in self._servers.items() if k[0] == token.id)
            if held + len(names) > self.max_stores_per_token:
                raise GitmemError(
                    f"token {token.id} would hold {held + len(names)} open stores over MCP (at most "
                    f"{self.max_stores_per_token}); name the stores to serve with /mcp?store=NAME"
                )
            if len(self._servers) >= self.max_servers:
                raise GitmemError("too many MCP servers open; try again later")
            entry = await anyio.to_thread.run_sync(self._open, token, scope, session, names)
            assert self._tg is not None, "McpHttp.run() is not entered (the app's lifespan did not start)"
            await self._tg.start(self._run_manager, entry)
            entry.key = key
            self._servers[key] = entry
            return entry

    def _names(self, token: Token, scope: str, asked: set[str] | None = None) -> list[tuple[str, str]]:
        """(handle, label) of every store the token reads (of those ``asked``, by name or id, when
        given): labels are display names where one served store has it, else ids
        (gitmem.integrations.mcp_server.labels)."""
        found = [
            (r.handle, r.id, r.name)
            for r in all_refs(self.pool.home)
            if token.may_read(r.id, scope) and (asked is None or bool({r.id, r.name, r.handle} & asked))
        ]
        if not found:
            raise ForbiddenError(f"token {token.id} has no store to serve")
        chosen = labels([(sid, name) for _h, sid, name in found])
        return sorted(zip([h for h, _i, _n in found], chosen, strict=True), key=lambda p: p[1])

    def _open(self, token: Token, scope: str, session: str, names: list[tuple[str, str]]) -> _Session:
        stores = [
            ServedStore(label, open_store(handle_path(h, self.pool.home)), not token.may_write(h, scope))
            for h, label in names
        ]
        server = build_server(
            stores, scope=scope, session=session, actor=token.actor, caller=door.caller_for(token)
        )
        # The Starlette app it returns is not used: it creates the session manager, which is.
        server.streamable_http_app(
            session_idle_timeout=self.idle_seconds,
            max_request_body_size=MAX_BODY,
            # A token, not a cookie, authenticates: a rebinding page cannot send it. Behind a proxy
            # the Host header is the proxy's, so the loopback-only default would refuse clients.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        return _Session(token.id, server.session_manager, server.session, stores)

    async def _run_manager(self, entry: _Session, *, task_status: TaskStatus[None]) -> None:
        with anyio.CancelScope() as cancel:
            entry.cancel = cancel
            async with entry.manager.run():
                task_status.started()
                await anyio.sleep_forever()

    async def _reap(self) -> None:
        while True:
            await anyio.sleep(min(30.0, self.idle_seconds / 2))
            now = time.monotonic()
            for key, entry in list(self._servers.items()):
                if entry.in_flight == 0 and now - entry.last_used > self.idle_seconds:
                    log.info("MCP server for token %s idle: closed", entry.token_id)
                    self._servers.pop(key, None)
                    self._by_sid = {k: v for k, v in self._by_sid.items() if v is not entry}
                    if entry.cancel is not None:
                        entry.cancel.cancel()


def _stores_asked(query: bytes) -> set[str] | None:
    from urllib.parse import parse_qs

    asked = parse_qs(query.decode("latin-1")).get("store")
    return set(asked) if asked else None


def _scope_and_session(token: Token, query: bytes, headers: dict[str, str]) -> tuple[str, str]:
    """The scope and the session tag of a request (see the module's docstring)."""
    from urllib.parse import parse_qs

    params = parse_qs(query.decode("latin-1"))
    scope = params["scope"][-1] if params.get("scope") else token.default_scope()
    named = params["session"][-1] if params.get("session") else headers.get("x-gitmem-session")
    session = door.mcp_session(token, named)
    try:
        validate_scope(scope)
    except InvalidInputError as exc:
        raise InvalidInputError(f"scope: {exc.message}") from None
    if token.scope is not None and scope != token.scope:
        raise ForbiddenError(f"token {token.id} may only use scope {token.scope!r}, not {scope!r}")
    return scope, session


async def _json(
    send: Send, status: int, kind: str, message: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode("utf-8")
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
