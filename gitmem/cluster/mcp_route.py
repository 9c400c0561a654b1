"""MCP through any node: a tool call or resource read naming a store homed on another node is
made at that home (docs/cluster.md#mcp-through-any-node).

An MCP session spans every store its token may use, so ``/mcp`` cannot be routed by its path as the
other faces are (:mod:`gitmem.cluster.proxy`). :class:`McpRouter` sits in front of a node's app and
reads each ``POST /mcp`` whole (at most the MCP face's body limit): a single JSON-RPC ``tools/call``
whose ``store`` argument, or ``resources/read`` whose ``gitmem://<store>/<path>`` URI, names a
store whose home is another node is made there, by an MCP client of the ``mcp`` package talking to
the home's own ``/mcp`` with the caller's credentials, its ``scope`` and ``session`` and
``?store=<the store's id>``; the home's answer is returned as this request's JSON-RPC answer. The
home authenticates the token and checks its grant and scope for that store, as for any MCP request
it serves; this node routes only credentials that authenticate and grant the store (``may_use``):
any other call is answered here, as a store that does not exist is (routing is no oracle of which
stores exist), and the write lands there, once, under the home's fence, and reaches the replicas
by the home's replication. Everything else (initialize, listings, a call naming a store homed here
or not placed) is served here. A tool call served at its store's home, made straight to it or
routed to it, is marked as a write of that store (:func:`mcp_write`: a handoff waits for it, a
sync home holds its answer until a replica has it). A request this router sent carries
``x-gitmem-mcp-routed`` and is never routed again (no ping-pong between nodes whose routes
disagree for a second after a move); a client that sets it only gets this node's own answer, where
the fence refuses any write to a copy without the lease. A home that cannot be reached answers 503
with ``retry-after``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode

from starlette.types import ASGIApp, Receive, Scope, Send

from gitmem.cluster.proxy import _unavailable
from gitmem.errors import GitmemError

ROUTED = b"x-gitmem-mcp-routed"
CREDENTIALS = (b"authorization", b"x-api-key", b"x-gitmem-session")
MAX_BODY = 1 << 20  # the MCP face's own body limit (gitmem.server.door.BODIES["mcp"])
BODY_SECONDS = 30.0
URI_PREFIX = "gitmem://"  # the MCP face's resource URIs (gitmem.integrations.mcp_server.URI_PREFIX)
WRITES_STORE = "gitmem.mcp_writes"  # the ASGI scope key the router sets (mcp_write)


def mcp_write(scope: Scope) -> str | None:
    """The store a ``POST /mcp`` that :class:`McpRouter` let through is a write of (a handoff waits
    for it; ``replication: sync`` holds its answer until a replica has it): a ``tools/call``
    naming a store homed here, made straight to this node or routed here; None for any other."""
    return scope.get(WRITES_STORE)


def routed_store(scope: Scope) -> str | None:
    """The store a ``POST /mcp`` routed here by another node's router is for (its ``?store=``)."""
    asked = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("store", [])
    return asked[0] if len(asked) == 1 else None


def granted(tokens: Any) -> Callable[[dict[str, str], str], bool]:
    """``may_use`` for :class:`McpRouter`: whether a request's credentials authenticate with
    ``tokens`` (a token store) and may read the store of that id."""
    from gitmem.server.door import authenticate

    def may_use(headers: dict[str, str], store_id: str) -> bool:
        try:
            token = authenticate(tokens, headers)
        except GitmemError:
            return False
        return not token.expired() and bool(token.may_read(store_id))

    return may_use


class McpRouter:
    """Route a ``tools/call`` naming a store homed elsewhere to its home (module docstring).

    ``home_of(store) -> (node, url) | None`` as for :class:`gitmem.cluster.proxy.ClusterProxy`."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        node: str,
        home_of: Callable[[str], tuple[str, str] | None],
        store_id_of: Callable[[str], str],
        may_use: Callable[[dict[str, str], str], bool],
        on_forward: Callable[[str], None] | None = None,
        max_body: int = MAX_BODY,
    ) -> None:
        self.app, self.node, self.home_of, self.on_forward = app, node, home_of, on_forward
        self.store_id_of, self.may_use, self.max_body = store_id_of, may_use, max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers", [])) if scope["type"] == "http" else {}
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or scope["path"].rstrip("/") != "/mcp"
            or not any(k in headers for k in CREDENTIALS[:2])
        ):
            await self.app(scope, receive, send)
            return
        from gitmem.server.intake import buffered

        replayed = await buffered(receive, self.max_body, BODY_SECONDS)
        if isinstance(replayed, int):  # too large, too slow, or gone: answered as the MCP face does
            if replayed in (408, 413):
                kind = "timeout_error" if replayed == 408 else "request_too_large"
                await _answer(
                    send,
                    {
                        "type": "error",
                        "error": {
                            "type": kind,
                            "message": "the request body "
                            + ("did not arrive in time" if replayed == 408 else "is too large"),
                        },
                    },
                    replayed,
                )
            return
        first = await replayed()
        call = store_call(first.get("body", b""))
        if ROUTED in headers:  # routed here by another node (or a client says so): served here,
            # a tool call counted as a write of the store its ?store= names
            if call is not None and call.method == "tools/call":
                scope = {**scope, WRITES_STORE: routed_store(scope) or call.store}
            await self.app(scope, _once(first, replayed), send)
            return
        target = None
        if call is not None:
            import anyio.to_thread

            try:
                target = await anyio.to_thread.run_sync(self.home_of, call.store)
            except GitmemError as exc:  # the shared state cannot be read: no route, retry
                await _unavailable(send, str(exc))
                return
        if call is not None and target is not None and target[0] != self.node:
            # Only a caller who may use the store is routed: any other (a bad token, no grant) gets
            # this node's own answer, the one a store that does not exist gets (no oracle).
            try:
                placed = await anyio.to_thread.run_sync(self.store_id_of, call.store)
                given = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers.items()}
                if not await anyio.to_thread.run_sync(self.may_use, given, placed):
                    target = None
            except GitmemError:
                target = None
        if call is None or target is None or target[0] == self.node:
            if call is not None and target is not None and call.method == "tools/call":
                scope = {**scope, WRITES_STORE: call.store}  # a tool call at the store's home
            await self.app(scope, _once(first, replayed), send)
            return
        if self.on_forward is not None:
            self.on_forward(target[0])
        await self._at_home(scope, headers, call, target[1], send)

    async def _at_home(
        self, scope: Scope, headers: dict[bytes, bytes], call: StoreCall, base: str, send: Send
    ) -> None:
        import httpx2 as httpx
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared.exceptions import MCPError

        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        asked = {k: v[-1] for k, v in query.items() if k in ("scope", "session") and v}
        import anyio.to_thread

        try:
            placed = await anyio.to_thread.run_sync(self.store_id_of, call.store)
        except GitmemError as exc:
            await _unavailable(send, str(exc))
            return
        url = base.rstrip("/") + "/mcp?" + urlencode({**asked, "store": placed})
        out = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers.items() if k in CREDENTIALS}
        out[ROUTED.decode()] = self.node
        try:
            async with (
                httpx.AsyncClient(headers=out, timeout=httpx.Timeout(60.0, connect=5.0)) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
            ):
                if call.method == "tools/call":
                    result: Any = await client.call_tool(call.name, call.arguments)
                else:  # resources/read: the home serves the store under its name, or its id
                    result = await client.read_resource(call.name)
        except MCPError as exc:
            await _answer(
                send, {"jsonrpc": "2.0", "id": call.rid, "error": {"code": exc.code, "message": exc.message}}
            )
            return
        except (httpx.HTTPError, OSError) as exc:
            await _unavailable(send, f"the store's home node cannot be reached: {type(exc).__name__}")
            return
        except Exception as exc:  # noqa: BLE001 - the home refused the session (its token check)
            # or the transport failed: the caller gets a JSON-RPC error, never a dropped request
            reason = _reason(exc)
            await _answer(
                send, {"jsonrpc": "2.0", "id": call.rid, "error": {"code": -32603, "message": reason}}
            )
            return
        answer = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        await _answer(send, {"jsonrpc": "2.0", "id": call.rid, "result": answer})


@dataclass(frozen=True)
class StoreCall:
    """One JSON-RPC request naming a store: a ``tools/call`` (``name`` the tool, ``arguments`` its
    arguments, ``store`` their ``store``) or a ``resources/read`` (``name`` the resource's URI,
    ``store`` the store it names: ``gitmem://<store>/<path>``)."""

    rid: Any
    method: str
    name: str
    arguments: dict[str, Any]
    store: str


def store_call(body: bytes) -> StoreCall | None:
    """The store a single JSON-RPC ``tools/call`` (its ``store`` argument) or ``resources/read``
    (its ``gitmem://`` URI) names, else None: what the router routes, and what a home counts as
    a write of that store (a tool call only). One parse for both."""
    try:
        message = json.loads(body)
    except ValueError:
        return None
    if not isinstance(message, dict) or "id" not in message:
        return None
    params = message.get("params")
    if not isinstance(params, dict):
        return None
    if message.get("method") == "tools/call":
        arguments = params.get("arguments")
        if not isinstance(params.get("name"), str) or not isinstance(arguments, dict):
            return None
        if not isinstance(arguments.get("store"), str) or not arguments["store"]:
            return None
        return StoreCall(message["id"], "tools/call", params["name"], arguments, arguments["store"])
    uri = params.get("uri")
    if (
        message.get("method") != "resources/read"
        or not isinstance(uri, str)
        or not uri.startswith(URI_PREFIX)
    ):
        return None
    store, slash, path = uri[len(URI_PREFIX) :].partition("/")
    if not store or not slash or not path:
        return None
    return StoreCall(message["id"], "resources/read", uri, {}, store)


def _reason(exc: BaseException) -> str:
    """The innermost message of an exception (an exception group's first)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"the store's home refused the call: {type(exc).__name__}: {exc}"[:1000]


async def _answer(send: Send, message: dict[str, Any], status: int = 200) -> None:
    body = json.dumps(message).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _once(first: Any, rest: Receive) -> Receive:
    given = [False]

    async def receive() -> Any:
        if not given[0]:
            given[0] = True
            return first
        return await rest()

    return receive
