"""What a request brings before any handler looks at it: its token, its beta headers, its body.

The body is read whole, at most ``max_bytes`` (413) and within ``timeout`` seconds (408: a client
that sends its body slowly, or not at all, cannot hold a connection and a buffer for ever).
"""

from __future__ import annotations

import anyio
from starlette.requests import Request
from starlette.types import Message, Receive

from gitmem.errors import InvalidInputError, LimitExceededError

BETAS = ("agent-memory-2026-07-22", "managed-agents-2026-04-01")


class BodyTooLarge(LimitExceededError):
    """The request body is over the server's limit (413 before parsing)."""


class BodyTimeout(Exception):
    """The client did not send its whole body in time (408)."""


async def read_body(request: Request, max_bytes: int, timeout: float | None = None) -> bytes:
    """The whole body, at most ``max_bytes``, within ``timeout`` seconds (a slow client is cut off;
    None: no deadline)."""
    chunks: list[bytes] = []
    size = 0
    with anyio.move_on_after(timeout) as deadline:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_bytes:
                raise BodyTooLarge(f"the request body is over {max_bytes} bytes")
            chunks.append(chunk)
    if deadline.cancelled_caught:
        raise BodyTimeout
    return b"".join(chunks)


async def buffered(receive: Receive, max_bytes: int, timeout: float | None) -> Receive | int:
    """Read an ASGI request body whole, at most ``max_bytes`` within ``timeout`` seconds, for a
    handler that reads it without a deadline of its own (MCP's session manager, the console's
    forms): a ``receive`` replaying it, or the status to answer instead (408: too slow, 413: too
    large, 499: the client went away)."""
    chunks: list[bytes] = []
    size, more = 0, True
    with anyio.move_on_after(timeout):
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return 499
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > max_bytes:
                return 413
            chunks.append(chunk)
            more = bool(message.get("more_body", False))
    if more:
        return 408
    body, given = b"".join(chunks), [False]

    async def replay() -> Message:
        if not given[0]:
            given[0] = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay


def secret(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth is not None:
        scheme, _, value = auth.partition(" ")
        return value.strip() if scheme.lower() == "bearer" else None
    return request.headers.get("x-api-key")


def check_beta(request: Request) -> None:
    sent = {b.strip() for b in request.headers.get("anthropic-beta", "").split(",")}
    if all(b in sent for b in BETAS):
        raise InvalidInputError(f"anthropic-beta: send one of {BETAS[0]} or {BETAS[1]}, not both")
