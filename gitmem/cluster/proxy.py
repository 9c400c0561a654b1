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
import json
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
from gitmem.ids import ULID_RE

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


_CONVERSATION = re.compile(r"^/v1/conversations/(?P<conversation>[^/]+)")
_DREAM = re.compile(rf"^/v1/dreams/(?P<dream>drm_{ULID_RE})(?:/|$)")
BODY_NAMED = frozenset({"/v1/conversations", "/v1/responses", "/v1/dreams"})  # POST: the store is in the body
BODY_STORE = "gitmem.body_store"  # the ASGI scope key: the store a body-named request names
MAX_ROUTED_BODY = 64 * 1024 * 1024  # a larger body-named request is answered where it arrives


def store_named(path: str, conversation_store: Callable[[str], str | None] | None = None) -> str | None:
    """The store a request path names (an id or a name), or None for a path of no one store. A
    conversation's id names its store: ``conversation_store(id)`` reads it (the node hands the
    proxy ``endpoints.conversation_store``; the proxy itself reads no id of the library's)."""
    for pattern in _PATTERNS:
        m = pattern.match(path)
        if m:
            return unquote(m.group("store"))
    m = _CONVERSATION.match(path)
    if m is None or conversation_store is None:
        return None
    return conversation_store(unquote(m.group("conversation")))


def store_in_body(
    path: str, body: bytes, conversation_store: Callable[[str], str | None] | None = None
) -> str | None:
    """The store a ``POST`` of :data:`BODY_NAMED` names in its JSON body: a new conversation's
    ``memory_store.name``, a response's ``conversation`` (its id names the store), a dream's
    ``memory_store`` input; None when it names none (the face answers such a request itself)."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    where = path.rstrip("/")
    if where == "/v1/conversations":
        ms = data.get("memory_store")
        name = ms.get("name") if isinstance(ms, dict) else None
        return name if isinstance(name, str) and name else None
    if where == "/v1/responses":
        ref = data.get("conversation")
        cid = ref.get("id") if isinstance(ref, dict) else ref
        return conversation_store(cid) if isinstance(cid, str) and conversation_store is not None else None
    if where == "/v1/dreams" and isinstance(data.get("inputs"), list):
        for item in data["inputs"]:
            if isinstance(item, dict) and item.get("type") == "memory_store":
                sid = item.get("memory_store_id")
                return sid if isinstance(sid, str) and sid else None
    return None


def body_store(scope: Scope) -> str | None:
    """The store a body-named request names, as :class:`ClusterProxy` read it (None: not one)."""
    found = scope.get(BODY_STORE)
    return found if isinstance(found, str) else None


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
        has_dream: Callable[[str], bool] | None = None,
        peers: Callable[[], list[tuple[str, str]]] | None = None,
        conversation_store: Callable[[str], str | None] | None = None,
    ) -> None:
        self.app, self.node, self.secret = app, node, secret
        self.home_of, self.client, self.on_forward = home_of, client, on_forward
        self.has_dream, self.peers = has_dream, peers
        self.conversation_store = conversation_store
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
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        store: str | None = None
        if scope["method"] == "POST" and scope["path"].rstrip("/") in BODY_NAMED:
            # read whole (bounded), routed by what it names, then handed on intact
            body, whole = await _read_body(receive, MAX_ROUTED_BODY)
            receive = _replay(body, whole, receive)
            store = store_in_body(scope["path"], body, self.conversation_store) if whole else None
            if store is not None:
                scope[BODY_STORE] = store  # the node's write counting reads it (endpoints.is_write)
        if self._forwarded_by_peer(scope):
            await self.app(scope, receive, send)
            return
        if scope["method"] == "GET" and scope["path"].rstrip("/") == "/v1/dreams" and self.peers is not None:
            await self._dreams(scope, receive, send)
            return
        dream = _DREAM.match(scope["path"])
        if dream is not None:
            await self._dream(scope, receive, send, dream.group("dream"))
            return
        store = store or store_named(scope["path"], self.conversation_store)
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

    async def _dreams(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``GET /v1/dreams``: every node's dreams, merged (:mod:`gitmem.cluster.dream_route`)."""
        from gitmem.cluster.dream_route import merged_listing

        try:
            peers = await _in_thread(lambda _x: self.peers(), "")  # type: ignore[misc]
        except GitmemError as exc:
            await _unavailable(send, str(exc))
            return
        query = scope.get("query_string", b"").decode("latin-1")

        def header(_name: str) -> tuple[bytes, bytes]:
            return FORWARDED, forward_mac(self.secret, self.node, "GET", scope["path"], query).encode()

        others = [(n, u) for n, u in peers if n != self.node]
        await merged_listing(
            self.app, scope, receive, send, peers=others, client=self.client, forward_header=header
        )

    async def _dream(self, scope: Scope, receive: Receive, send: Send, dream_id: str) -> None:
        """A dream's id names no store: it is answered by the node that holds its record (the home
        its store had when it ran), found by asking each other healthy node for it with the
        caller's own credentials (a 404 everywhere: answered here, as an unknown dream)."""
        if self.has_dream is None or self.peers is None or self.has_dream(dream_id):
            await self.app(scope, receive, send)
            return
        try:
            peers = await _in_thread(lambda _x: self.peers(), "")  # type: ignore[misc]
        except GitmemError as exc:
            await _unavailable(send, str(exc))
            return
        auth = [(k, v) for k, v in scope.get("headers", []) if k.lower() in (b"authorization", b"x-api-key")]
        path = f"/v1/dreams/{dream_id}"
        for name, base in peers:
            if name == self.node:
                continue
            mac = forward_mac(self.secret, self.node, "GET", path)
            try:
                probe = await self.client.get(
                    base.rstrip("/") + path, headers=[*auth, (FORWARDED, mac.encode())]
                )
            except Exception:  # noqa: BLE001 - a node that cannot be reached holds nothing we can serve
                continue
            if probe.status_code != 404:
                if self.on_forward is not None:
                    self.on_forward(name)
                await self._forward(scope, receive, send, base)
                return
        await self.app(scope, receive, send)

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


async def _read_body(receive: Receive, limit: int) -> tuple[bytes, bool]:
    """The request body read up to ``limit`` bytes; (what was read, whether that is all of it)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks), False
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), True
        if size > limit:
            return b"".join(chunks), False


def _replay(body: bytes, whole: bool, rest: Receive) -> Receive:
    """A receive that gives ``body`` again, then (when it was not all) the rest of the stream."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": not whole}
        return await rest()  # the rest of the body, or (once it was all read) the disconnect

    return receive


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
