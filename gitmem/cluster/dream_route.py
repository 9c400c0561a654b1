"""``GET /v1/dreams`` through any node (docs/cluster.md#conversations-responses-and-dreams): a
dream's record is kept by the node that ran it (its store's home then), so a listing names no one
store. The node answering merges its own page with every other healthy node's (each asked with the
caller's credentials, the same query, and the forwarding header, so it answers from its own
records): newest first by ``(created_at, id)``, the listing's order, cut at ``limit``, with a
``next_page`` cursor at the last dream served. Every node applies a cursor the same way (it is
the last key served, not a position), so the next page is merged the same way. A node that
cannot be asked makes the listing 503 (retry): a listing with a node's dreams left out would look
complete.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gitmem.errors import GitmemError


def _query(raw: str) -> dict[str, str]:
    """The query as the dreams API reads it (``statuses[]`` repeated: one comma-joined value)."""
    q: dict[str, str] = {}
    statuses: list[str] = []
    for k, v in parse_qsl(raw, keep_blank_values=True):
        if k in ("statuses[]", "statuses"):
            statuses.append(v)
        else:
            q[k] = v
    if statuses:
        q["statuses[]"] = ",".join(statuses)
    return q


def _key(d: dict[str, Any]) -> tuple[float, str]:
    at = dt.datetime.fromisoformat(str(d["created_at"]).replace("Z", "+00:00"))
    return at.timestamp(), str(d["id"])


async def merged_listing(
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    peers: list[tuple[str, str]],
    client: Any,
    forward_header: Callable[[str], tuple[bytes, bytes]],
) -> None:
    """Answer ``GET /v1/dreams`` with every node's dreams (module docstring)."""
    from gitmem.server import wire
    from gitmem.server.dreams_api import listing_what

    held: list[Message] = []

    async def hold(message: Message) -> None:
        held.append(message)

    await app(scope, receive, hold)
    status = next((m["status"] for m in held if m["type"] == "http.response.start"), 500)
    if status != 200 or not peers:
        for m in held:
            await send(m)
        return
    pages = [json.loads(b"".join(m.get("body", b"") for m in held if m["type"] == "http.response.body"))]
    raw = scope.get("query_string", b"").decode("latin-1")
    auth = [(k, v) for k, v in scope.get("headers", []) if k.lower() in (b"authorization", b"x-api-key")]
    for name, base in peers:
        url = base.rstrip("/") + scope["path"] + (f"?{raw}" if raw else "")
        try:
            answer = await client.get(url, headers=[*auth, forward_header(name)])
        except Exception as exc:  # noqa: BLE001 - a node that cannot be asked: no complete listing
            await _unavailable(send, f"node {name} cannot be asked for its dreams: {type(exc).__name__}")
            return
        if answer.status_code != 200:
            await _unavailable(send, f"node {name} answered the dreams listing with {answer.status_code}")
            return
        pages.append(answer.json())
    q = _query(raw)
    try:
        limit = wire.limit(q)
        what = listing_what(q)
    except GitmemError:  # the local answer was 200: the query was good
        limit, what = 20, ("dreams",)
    unique: dict[str, dict[str, Any]] = {}  # a dream listed by two nodes (its store's old home,
    for d in (d for p in pages for d in p.get("data", [])):  # until it is brought level) once:
        unique.setdefault(str(d["id"]), d)  # this node's own first, then the peers' in turn
    found = sorted(unique.values(), key=_key, reverse=True)
    chosen = found[:limit]
    more = len(found) > limit or any(p.get("next_page") for p in pages)
    next_page = wire.encode_cursor(list(_key(chosen[-1])), what) if more and chosen else None
    body = json.dumps(wire.page(chosen, next_page)).encode()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": body})


async def _unavailable(send: Send, message: str) -> None:
    body = json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"retry-after", b"1")]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})
