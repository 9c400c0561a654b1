"""Any node answers any request: a store homed elsewhere is proxied to its home (docs/cluster.md).

:class:`ClusterProxy` is ASGI middleware in front of a node's own app. It finds the store a request
names (the Anthropic API's ``/v1/memory_stores/{id}``, git's ``/git/{store}.git``, the Databricks
API's ``memory-stores/{name}``, the console's ``/console/stores/{name}``), looks up its home in the
shared state, and when that is another node streams the request there and the answer back,
unchanged. A forwarded request carries ``x-gitmem-forwarded``: the sending node's name and an
HMAC-SHA256 of it with the method, path, query, time and a one-time nonce under the cluster's
secret (believed once, within a minute), so the home serves it itself; a client cannot forge it
to make a replica serve a store it does not home, nor replay a captured one. The body is not
signed (it streams): a party that can rewrite traffic between nodes in flight can change it, so
run the nodes' links over TLS or a private network (docs/cluster.md).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gitmem.errors import GitmemError

FORWARDED = b"x-gitmem-forwarded"
HOP_BY_HOP = {
    b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailers",
    b"transfer-encoding", b"upgrade", b"host", FORWARDED,
}  # fmt: skip
_PATTERNS = (
    re.compile(r"^/v1/memory_stores/(?P<store>[^/]+)"),
    re.compile(r"^/v1/gitmem/stores/(?P<store>[^/]+)"),
    re.compile(r"^/git/(?P<store>[^/]+?)(?:\.git)?(?:/|$)"),
    re.compile(r"^/api/2\.1/unity-catalog/memory-stores/(?P<store>[^/:]+)"),
    re.compile(r"^/console/stores/(?P<store>[^/]+)"),
)


def store_named(path: str) -> str | None:
    """The store a request path names (an id or a name), or None for a path of no one store."""
    for pattern in _PATTERNS:
        m = pattern.match(path)
        if m:
            return unquote(m.group("store"))
    return None


FORWARD_SKEW_SECONDS = 60  # a forwarding header older (or newer) than this is not believed


def forward_mac(
    secret: bytes,
    node: str,
    method: str,
    path: str,
    query: str = "",
    at: int | None = None,
    nonce: str | None = None,
) -> str:
    """``node:time:nonce:mac`` over the node, method, path, query, time and a fresh nonce: a
    captured header serves no other request, is believed once only (the receiver remembers the
    nonces of the last minute), and not at all a minute later."""
    at = int(time.time()) if at is None else at
    nonce = secrets.token_hex(16) if nonce is None else nonce
    message = "\n".join((node, method, path, query, str(at), nonce)).encode("utf-8")
    return f"{node}:{at}:{nonce}:{hmac.new(secret, message, hashlib.sha256).hexdigest()}"


class ClusterProxy:
    """Route each request to the node that homes its store (see the module docstring).

    ``home_of(store) -> (node, url) | None`` answers from the shared state (None: not placed, or
    homed here); ``client`` is an ``httpx.AsyncClient``.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        node: str,
        secret: bytes,
        home_of: Callable[[str], tuple[str, str] | None],
        client: Any,
        on_forward: Callable[[str], None] | None = None,
    ) -> None:
        self.app, self.node, self.secret = app, node, secret
        self.home_of, self.client, self.on_forward = home_of, client, on_forward
        self._nonce_lock = threading.Lock()
        self._nonces: deque[tuple[float, str]] = deque()  # (seen at, nonce), oldest first
        self._seen: set[str] = set()

    def _forwarded_by_peer(self, scope: Scope) -> bool:
        for key, value in scope.get("headers", []):
            if key == FORWARDED:
                text = value.decode("latin-1")
                parts = text.split(":")
                if len(parts) != 4 or not parts[1].isdigit() or len(parts[2]) != 32:
                    return False
                sender, at, nonce = parts[0], int(parts[1]), parts[2]
                query = scope.get("query_string", b"").decode("latin-1")
                expected = forward_mac(self.secret, sender, scope["method"], scope["path"], query, at, nonce)
                now = time.time()
                if not hmac.compare_digest(text, expected) or abs(now - at) > FORWARD_SKEW_SECONDS:
                    return False
                return self._first_use(nonce, now)
        return False

    def _first_use(self, nonce: str, now: float) -> bool:
        """True the first time a (signed, fresh) nonce is seen: a replayed header is refused."""
        with self._nonce_lock:
            while self._nonces and self._nonces[0][0] < now - 2 * FORWARD_SKEW_SECONDS:
                self._seen.discard(self._nonces.popleft()[1])
            if nonce in self._seen:
                return False
            self._seen.add(nonce)
            self._nonces.append((now, nonce))
            return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._forwarded_by_peer(scope):
            await self.app(scope, receive, send)
            return
        store = store_named(scope["path"])
        try:
            target = await _in_thread(self.home_of, store) if store else None
        except GitmemError as exc:  # the shared state cannot be read: no route, retry
            await _unavailable(send, str(exc))
            return
        if target is None or target[0] == self.node:
            await self.app(scope, receive, send)
            return
        if self.on_forward is not None:
            self.on_forward(target[0])
        await self._forward(scope, receive, send, target[1])

    async def _forward(self, scope: Scope, receive: Receive, send: Send, base: str) -> None:
        import httpx2 as httpx

        async def body() -> Any:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunk = message.get("body", b"")
                if chunk:
                    yield chunk
                if not message.get("more_body", False):
                    return

        headers = [(k, v) for k, v in scope.get("headers", []) if k.lower() not in HOP_BY_HOP]
        query = scope.get("query_string", b"").decode("latin-1")
        mac = forward_mac(self.secret, self.node, scope["method"], scope["path"], query)
        headers.append((FORWARDED, mac.encode()))
        url = base.rstrip("/") + scope["path"] + (f"?{query}" if query else "")
        request = self.client.build_request(scope["method"], url, headers=headers, content=body())
        try:
            upstream = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            await _unavailable(send, f"the store's home node cannot be reached: {type(exc).__name__}")
            return
        try:
            out = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in upstream.headers.multi_items()
                   if k.lower().encode() not in HOP_BY_HOP and k.lower() != "content-length"]  # fmt: skip
            await send({"type": "http.response.start", "status": upstream.status_code, "headers": out})
            async for chunk in upstream.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            await upstream.aclose()


async def _in_thread(fn: Callable[[str], Any], arg: str) -> Any:
    import anyio.to_thread

    return await anyio.to_thread.run_sync(fn, arg)


async def _unavailable(send: Send, message: str) -> None:
    import json

    body = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": message}}).encode()
    start: Message = {
        "type": "http.response.start",
        "status": 503,
        "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1")],
    }
    await send(start)
    await send({"type": "http.response.body", "body": body})
