"""Remote MCP at ``/mcp``: the MCP server of ``gitmem mcp`` over the streamable HTTP transport.

Every request carries a token (``Authorization: Bearer``, HTTP Basic with the token as password,
or ``x-api-key``); the token decides what an MCP session serves: the stores it has a grant for
(``*`` and admin tokens: every store), each read-write or read-only as granted (a read-only store
gets no write tools), in the token's scope (else ``main``, or ``/mcp?scope=S`` when the token
allows S). Writes are versions by the token's actor, tagged with the token's session, else with a
new ``sesn_`` id for the MCP session (one MCP session, one gitmem session, as over stdio).

Each MCP session gets its own server (``build_server``) and its own session manager of the
``mcp`` package, so that sessions of different tokens never share a tool list. A session is bound
to the token that opened it: another token presenting its ``mcp-session-id`` gets 404, as for an
unknown session. Sessions end when the client deletes them or after ``idle_seconds`` without a
request in flight.
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
from gitmem.integrations.mcp_server import ServedStore, build_server
from gitmem.model.paths import validate_scope
from gitmem.server.git_http import secret_from_headers
from gitmem.server.pool import StorePool
from gitmem.server.tokens import Token, TokenStore
from gitmem.store import open_store

log = logging.getLogger("gitmem.server.mcp")
SESSION_HEADER = "mcp-session-id"
MAX_BODY = 1 << 20


@dataclass
class _Session:
    token_id: str
    manager: StreamableHTTPSessionManager
    gitmem_session: str
    stores: list[ServedStore]
    cancel: anyio.CancelScope | None = None
    in_flight: int = 0
    last_used: float = field(default_factory=time.monotonic)


class McpHttp:
    """The ASGI app at ``/mcp``; ``run()`` must be entered for the app's lifetime (its lifespan)."""

    def __init__(
        self, pool: StorePool, tokens: TokenStore, *, idle_seconds: float = 1800.0, max_sessions: int = 256
    ) -> None:
        self.pool = pool
        self.tokens = tokens
        self.idle_seconds = idle_seconds
        self.max_sessions = max_sessions
        self._sessions: dict[str, _Session] = {}
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
                self._sessions.clear()

    # ------------------------------------------------------------------ requests
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        secret = secret_from_headers(headers) or headers.get("x-api-key")
        try:
            token = self.tokens.authenticate(secret)
        except AuthenticationError as exc:
            await _json(send, 401, "authentication_error", exc.message, [(b"www-authenticate", b"Bearer")])
            return
        except GitmemError as exc:
            await _json(send, 500, "api_error", f"internal error: {exc.message}")
            return
        scope.setdefault("state", {})["token_id"] = token.id
        sid = headers.get(SESSION_HEADER)
        if sid is not None:
            entry = self._sessions.get(sid)
            if entry is None or entry.token_id != token.id:
                await _json(send, 404, "not_found_error", "MCP session not found; initialize a new one")
                return
            await self._forward(entry, scope, receive, send)
            if scope["method"] == "DELETE":
                self._end(sid)
            return
        if scope["method"] != "POST":
            await _json(send, 400, "invalid_request_error", f"{SESSION_HEADER} header is required")
            return
        if len(self._sessions) >= self.max_sessions:
            await _json(send, 503, "overloaded_error", "too many open MCP sessions; try again later")
            return
        try:
            entry = await anyio.to_thread.run_sync(self._open, token, scope.get("query_string", b""))
        except GitmemError as exc:
            status = 403 if exc.type_name == "forbidden" else 400 if exc.type_name == "invalid_input" else 404
            await _json(
                send, status, "permission_error" if status == 403 else "invalid_request_error", exc.message
            )
            return
        assert self._tg is not None, "McpHttp.run() is not entered (the app's lifespan did not start)"
        await self._tg.start(self._run_manager, entry)
        found: list[str] = []

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                for k, v in message.get("headers", []):
                    if k.lower() == SESSION_HEADER.encode():
                        found.append(v.decode("latin-1"))
                        self._sessions[found[0]] = entry
            await send(message)

        await self._forward(entry, scope, receive, capture)
        if not found and entry.cancel is not None:  # not an initialize, or it failed: nothing to keep
            entry.cancel.cancel()

    async def _forward(self, entry: _Session, scope: Scope, receive: Receive, send: Send) -> None:
        entry.in_flight += 1
        try:
            await entry.manager.handle_request(scope, receive, send)
        finally:
            entry.in_flight -= 1
            entry.last_used = time.monotonic()

    # ------------------------------------------------------------------ sessions
    def _open(self, token: Token, query: bytes) -> _Session:
        scope = _scope(token, query)
        if token.admin or "*" in token.stores:
            names = [s.name for s in self.pool.all_settings()]
        else:
            names = [n for n in token.stores if (self.pool.home / "stores" / f"{n}.git").is_dir()]
        names = [n for n in sorted(names) if token.may_read(n, scope)]
        if not names:
            raise ForbiddenError(f"token {token.id} has no store to serve")
        stores = [ServedStore(n, open_store(n, self.pool.home), not token.may_write(n, scope)) for n in names]
        server = build_server(stores, scope=scope, session=token.session, actor=token.actor)
        # The Starlette app it returns is not used: it creates the session manager, which is.
        server.streamable_http_app(
            session_idle_timeout=self.idle_seconds,
            max_request_body_size=MAX_BODY,
            max_sessions=1,
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

    def _end(self, sid: str) -> None:
        entry = self._sessions.pop(sid, None)
        if entry is not None and entry.cancel is not None:
            entry.cancel.cancel()

    async def _reap(self) -> None:
        while True:
            await anyio.sleep(min(30.0, self.idle_seconds / 2))
            now = time.monotonic()
            for sid, entry in list(self._sessions.items()):
                if entry.in_flight == 0 and now - entry.last_used > self.idle_seconds:
                    log.info("MCP session %s idle: ended", sid[:16])
                    self._end(sid)


def _scope(token: Token, query: bytes) -> str:
    from urllib.parse import parse_qs

    values = parse_qs(query.decode("latin-1")).get("scope")
    scope = values[-1] if values else token.default_scope()
    try:
        validate_scope(scope)
    except InvalidInputError as exc:
        raise InvalidInputError(f"scope: {exc.message}") from None
    if token.scope is not None and scope != token.scope:
        raise ForbiddenError(f"token {token.id} may only use scope {token.scope!r}, not {scope!r}")
    return scope


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
