"""The server's ASGI app: the Anthropic memory stores API, git smart HTTP (``/git/``), remote MCP
(``/mcp``), the web console (``/console/``), the Databricks-shaped entries API (``/api/2.1/unity-catalog/``),
OpenAI-compatible conversations (``/v1/conversations``, ``/v1/responses``), ``/healthz`` and
``/metrics``.

``create_app(home)`` builds it; :func:`serve` runs it on uvicorn. In front of every route: a request
id (``request-id`` header, ``req_...``), a structured access log line (logger ``gitmem.access``,
one JSON object per request), Prometheus counters, the body limit (413 from the
``content-length`` header, before anything is read or parsed; git pushes under ``/git/`` have
their own, larger limit, counted as the body streams), and the headers that keep browsers and
caches from doing anything with an answer but hand it to the client (``nosniff``, ``no-store``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gitmem import config
from gitmem.ids import new_id
from gitmem.server import errors
from gitmem.server.anthropic_api import AnthropicApi
from gitmem.server.console import Console
from gitmem.server.console.web import PREFIX as CONSOLE_PREFIX
from gitmem.server.conversations_api import ConversationsApi
from gitmem.server.databricks_api import DatabricksApi
from gitmem.server.databricks_wire import BASE as DATABRICKS_BASE
from gitmem.server.dreamer import DreamRunner
from gitmem.server.dreams_api import DreamsApi
from gitmem.server.git_http import GitHttp
from gitmem.server.intake import buffered
from gitmem.server.metrics import CONTENT_TYPE, Metrics
from gitmem.server.pool import StorePool
from gitmem.server.receipts_api import ReceiptsApi
from gitmem.server.responses_proxy import ResponsesProxy
from gitmem.server.review_api import ReviewApi
from gitmem.server.tokens import TokenStore
from gitmem.server.webhooks import Deliveries, WebhooksApi

MAX_BODY_BYTES = 1 << 20  # a memory is at most 100 kB; JSON escaping can at most ~6x that
BODY_TIMEOUT_SECONDS = 30.0  # a client has this long to send its whole body (slowloris: 408)
# Unless a face set its own (the console, git's smart HTTP).
SECURITY_HEADERS = [(b"x-content-type-options", b"nosniff"), (b"cache-control", b"no-store")]
# Metric labels: any other method (a client may send any token) counts as "other", so that
# made-up methods cannot grow the metrics without bound.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
access_log = logging.getLogger("gitmem.access")


class _Front:
    """Request id, access log, metrics and the early body-size check, as plain ASGI middleware."""

    def __init__(
        self, app: ASGIApp, metrics: Metrics, max_body: int, body_timeout: float | None = None
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.max_body = max_body
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = new_id("req")
        scope.setdefault("state", {})["request_id"] = rid
        started = time.perf_counter()
        status = [500]

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message.setdefault("headers", [])
                headers = [*message["headers"], (b"request-id", rid.encode("ascii"))]
                present = {k.lower() for k, _v in headers}
                message["headers"] = headers + [h for h in SECURITY_HEADERS if h[0] not in present]
            await send(message)

        self.metrics.in_flight.inc()
        try:
            length = _content_length(scope)
            if length is not None and length > self.max_body and not scope["path"].startswith("/git/"):
                message = f"the request body is over {self.max_body} bytes"
                reply = errors.reply(413, "request_too_large", message, rid)
                self.metrics.rejections.labels("413").inc()
                body = reply.body
                if scope["path"].startswith(DATABRICKS_BASE):
                    body = {"error_code": "INVALID_PARAMETER_VALUE", "message": message}
                await JSONResponse(body, 413)(scope, receive, send_with_id)
            elif scope["method"] == "POST" and scope["path"].startswith(CONSOLE_PREFIX):
                # The console's forms are read without a deadline of their own: the door's body
                # policy (whole, within the deadline: 408) is applied here, before sign-in too.
                replayed = await buffered(receive, self.max_body, self.body_timeout)
                if isinstance(replayed, int):
                    if replayed != 499:
                        what = "did not arrive in time" if replayed == 408 else "is too large"
                        await Response(f"the request body {what}\n", replayed)(scope, receive, send_with_id)
                    return
                await self.app(scope, replayed, send_with_id)
            else:
                await self.app(scope, receive, send_with_id)
        finally:
            self.metrics.in_flight.dec()
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            label = getattr(route, "path", "unmatched")
            method = scope["method"] if scope["method"] in METHODS else "other"
            self.metrics.requests.labels(method, label, str(status[0])).inc()
            self.metrics.latency.labels(method, label).observe(elapsed)
            state: dict[str, Any] = scope.get("state", {})
            if access_log.isEnabledFor(logging.INFO):  # no line to build when nobody keeps it
                access_log.info(
                    json.dumps(
                        {
                            "request_id": rid,
                            "method": scope["method"],
                            "path": scope["path"],
                            "route": label,
                            "status": status[0],
                            "ms": round(elapsed * 1000, 2),
                            "token": state.get("token_id"),
                            "client": (scope.get("client") or ("", 0))[0],
                        }
                    )
                )


def _content_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers", []):
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


def create_app(
    home: str | os.PathLike[str] | None = None,
    *,
    max_body: int = MAX_BODY_BYTES,
    body_timeout: float = BODY_TIMEOUT_SECONDS,
    idle_seconds: float = 60.0,
    responses_upstream: str | None = None,
    tokens: TokenStore | None = None,
    webhook_cursors: Any = None,
) -> Any:
    """The ASGI app serving the stores of workspace ``home`` (default: the configured workspace).
    ``responses_upstream``: the model server ``/v1/responses`` forwards to (default:
    ``$GITMEM_RESPONSES_UPSTREAM``; docs/conversations.md). ``tokens``: where tokens live (default
    the workspace's ``tokens.json``; a cluster node passes the cluster's, docs/cluster.md).
    ``webhook_cursors``: a cluster node's shared webhook cursors (``gitmem.webhooks.SharedCursors``)."""
    pool = StorePool(home, idle_seconds=idle_seconds)
    tokens = tokens if tokens is not None else TokenStore(pool.home)
    metrics = Metrics()
    api = AnthropicApi(pool, tokens, metrics, max_body, body_timeout)
    console = Console(pool, tokens, max_body=max_body)
    databricks = DatabricksApi(pool, tokens, metrics, max_body, body_timeout)
    git_http = GitHttp(pool.home, tokens)
    conversations = ConversationsApi(pool, tokens, metrics, max_body, body_timeout)
    responses = ResponsesProxy(
        conversations,
        responses_upstream or config.env("GITMEM_RESPONSES_UPSTREAM"),
        config.env("GITMEM_RESPONSES_UPSTREAM_KEY"),
    )
    dreams = DreamRunner(pool.home)  # Anthropic's dreams and memory pipelines (docs/dreams.md)
    deliveries = Deliveries(
        pool.home, shared=webhook_cursors
    )  # webhooks, read from history in the background (docs/webhooks.md)
    try:
        from gitmem.server.mcp_http import McpHttp  # needs the 'mcp' extra
    except ImportError:  # pragma: no cover - served without /mcp then
        mcp_http = None
    else:
        mcp_http = McpHttp(pool, tokens, body_timeout=body_timeout)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "stores": len(pool.all_settings())})

    async def prometheus(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        kind = "not_found_error" if status == 404 else "invalid_request_error"
        reply = errors.reply(
            status, kind, f"no route for {request.method} {request.url.path}", request.state.request_id
        )
        return JSONResponse(reply.body, status_code=status)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        from gitmem.store import start_witness_worker

        witnesses = start_witness_worker(pool.home)  # cosignatures in the background (docs/transparency.md)
        dreams.start()
        deliveries.start()
        try:
            async with mcp_http.run() if mcp_http is not None else contextlib.nullcontext():
                yield
        finally:
            dreams.close()  # a running dream stops at its next step and ends failed
            deliveries.close()  # a delivery in flight finishes and its cursor is saved
            if witnesses is not None:
                witnesses.stop()
        pool.close()  # uvicorn waited for in-flight requests before this runs

    app = Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", prometheus, methods=["GET"]),
            *api.routes(),
            *ReviewApi(api).routes(),
            *ReceiptsApi(api).routes(),
            *DreamsApi(api, dreams).routes(),
            *WebhooksApi(api, deliveries).routes(),
            *console.routes(),
            *databricks.routes(),
            *conversations.routes(),
            *responses.routes(),
            Route("/git/{rest:path}", git_http, methods=["GET", "HEAD", "POST"]),
            *([Route("/mcp", mcp_http, methods=["GET", "POST", "DELETE"])] if mcp_http else []),
        ],
        exception_handlers={404: not_found, 405: not_found},
        lifespan=lifespan,
    )
    # No redirect from /x/ to /x: Starlette builds its Location from the Host header, which any
    # client sets (an open redirect); an API client gets a 404 instead.
    app.router.redirect_slashes = False
    app.state.pool = pool
    app.state.tokens = tokens
    app.state.metrics = metrics
    app.state.dreams = dreams
    app.state.deliveries = deliveries
    return _Front(app, metrics, max_body, body_timeout)


def app_from_environment() -> Any:
    """The factory uvicorn's worker processes call (``--workers N``): the workspace from config."""
    return create_app(config.workspace_home(None))


def uvicorn_options(*, host: str, port: int, log_level: str = "info") -> dict[str, Any]:
    """How :func:`serve` runs uvicorn (also the benchmark's no-op floor, so that both pay the same
    logging): sets up the log handler and returns ``uvicorn.run``'s keyword arguments."""
    logging.basicConfig(level=log_level.upper(), format="%(message)s")
    return {
        "host": host,
        "port": port,
        "log_level": log_level,
        "timeout_keep_alive": 5,
        "timeout_graceful_shutdown": 30,
        "access_log": False,  # gitmem.access writes one structured line per request instead
        "server_header": False,
    }


def serve(
    home: str | os.PathLike[str] | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    workers: int = 1,
    log_level: str = "info",
) -> None:
    """Run the server until SIGINT/SIGTERM; in-flight requests finish first (graceful shutdown)."""
    import uvicorn

    common = uvicorn_options(host=host, port=port, log_level=log_level)
    if workers > 1:
        config.export_home(config.workspace_home(home))
        uvicorn.run("gitmem.server.app:app_from_environment", factory=True, workers=workers, **common)
    else:
        uvicorn.run(create_app(home), **common)
