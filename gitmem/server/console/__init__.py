"""The web console of ``gitmem serve`` (``/console/``): look at stores, history, sessions, redactions.

Plain server-rendered HTML (Jinja2, autoescaped), one stylesheet, a few lines of script, a strict
CSP. Sign-in is with a gitmem token (``auth``); pages show only what the token may read and offer
writes only where it may write. ``browse`` and ``audit`` hold the pages, ``web`` the plumbing,
``internals`` the summary reads (counts, marked search, redaction dry-runs). See docs/console.md.
"""

from __future__ import annotations

import posixpath
from typing import Any
from urllib.parse import unquote

import anyio
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from gitmem.errors import AuthenticationError, InvalidInputError
from gitmem.server.console import audit, browse, dreams, review
from gitmem.server.console.auth import COOKIE, PRE_COOKIE, SESSION_SECONDS, Sessions, csrf_ok
from gitmem.server.console.web import (
    HERE,
    PREFIX,
    PageFn,
    Renderer,
    SecurityHeaders,
    environment,
    read_form,
    same_origin,
    secure,
    serve,
)
from gitmem.server.pool import StorePool
from gitmem.server.tokens import TokenStore

__all__ = ["Console"]


def _next(value: str | None) -> str:
    """Only a path inside the console: never an open redirect to another site."""
    target = unquote(value or "")
    path = target.split("?", 1)[0].split("#", 1)[0]
    inside = posixpath.normpath(path) + ("/" if path.endswith("/") else "")
    if not target.startswith(PREFIX + "/") or "\\" in target or not inside.startswith(PREFIX + "/"):
        return f"{PREFIX}/stores"
    if any(seg in (".", "..", "") for seg in path.split("/")[1:-1]):  # /console/../, /console//x
        return f"{PREFIX}/stores"
    return target


class Console:
    def __init__(self, pool: StorePool, tokens: TokenStore, *, max_body: int) -> None:
        self.pool = pool
        self.sessions = Sessions(pool.home, tokens)
        self.env = environment()
        self.env.filters["when"] = browse.when
        self.env.filters["ago"] = review.ago
        self.env.globals.update(store_url=browse.store_url, memory_url=browse.memory_url)
        self.renderer = Renderer(self.env)
        self.max_body = max_body

    def _page(self, fn: PageFn, *, post: bool = False) -> Any:
        return serve(fn, self.renderer, self.sessions, self.pool, post=post, max_body=self.max_body)

    def _cookie(self, response: Response, request: Request, name: str, value: str, max_age: int) -> None:
        response.set_cookie(
            name,
            value,
            max_age=max_age,
            path=PREFIX + "/",
            httponly=True,
            samesite="strict",
            secure=secure(request),
        )

    # ------------------------------------------------------------------ sign-in
    async def login_form(self, request: Request, message: str = "", status: int = 200) -> Response:
        import secrets

        pre = secrets.token_urlsafe(32)
        values = {
            "me": None,
            "csrf": pre,
            "message": message,
            "next": _next(request.query_params.get("next")),
            "title": "Sign in",
        }
        response = self.renderer.html("login.html", values, status)
        self._cookie(response, request, PRE_COOKIE, pre, 3600)
        return response

    async def login(self, request: Request) -> Response:
        try:
            if not same_origin(request):
                return self.renderer.error(403, "the form was posted from another site", None)
            form = await read_form(request, self.max_body)
        except InvalidInputError as exc:
            return self.renderer.error(400, exc.message, None)
        if not csrf_ok(request.cookies.get(PRE_COOKIE, ""), form.get("csrf")):
            return self.renderer.error(
                403, "the sign-in form expired or was not posted from here: reload it", None
            )
        try:
            sid, signed = await anyio.to_thread.run_sync(self.sessions.sign_in, form.get("token", ""))
        except AuthenticationError as exc:
            return await self.login_form(request, exc.message, 401)
        request.state.token_id = signed.token.id
        # The session this browser had (another token's, perhaps) ends: one browser, one session.
        await anyio.to_thread.run_sync(self.sessions.sign_out, request.cookies.get(COOKIE))
        response = RedirectResponse(_next(form.get("next")), status_code=303)
        self._cookie(response, request, COOKIE, sid, SESSION_SECONDS)
        response.delete_cookie(PRE_COOKIE, path=PREFIX + "/")
        return response

    async def logout(self, request: Request) -> Response:
        sid = request.cookies.get(COOKIE)
        try:
            signed = await anyio.to_thread.run_sync(self.sessions.lookup, sid)
            form = await read_form(request, self.max_body)
        except (AuthenticationError, InvalidInputError):
            return RedirectResponse(f"{PREFIX}/login", status_code=303)
        if not same_origin(request) or not csrf_ok(signed.csrf, form.get("csrf")):
            return self.renderer.error(403, "the sign-out form's CSRF token is missing or wrong", signed)
        await anyio.to_thread.run_sync(self.sessions.sign_out, sid)
        response = RedirectResponse(f"{PREFIX}/login", status_code=303)
        response.delete_cookie(COOKIE, path=PREFIX + "/")
        return response

    async def home(self, request: Request) -> Response:
        return RedirectResponse(f"{PREFIX}/stores", status_code=303)

    # ------------------------------------------------------------------ routes
    def routes(self) -> list[BaseRoute]:
        p = self._page
        s = "/stores/{store}"
        inner: list[BaseRoute] = [
            Route("/", self.home, methods=["GET"]),
            Route("/login", self.login_form, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST"]),
            Route("/stores", p(browse.stores), methods=["GET"]),
            Route("/sessions", p(audit.sessions_page), methods=["GET"]),
            Route(s, p(browse.store_page), methods=["GET"]),
            Route(s + "/memory", p(browse.memory_page), methods=["GET"]),
            Route(s + "/versions/{version}", p(browse.version_redirect), methods=["GET"]),
            Route(s + "/restore", p(browse.restore_confirm), methods=["GET"]),
            Route(s + "/restore", p(browse.restore_do, post=True), methods=["POST"]),
            Route(s + "/audit", p(audit.audit_page), methods=["GET"]),
            Route(s + "/revert", p(audit.revert_preview), methods=["GET"]),
            Route(s + "/revert", p(audit.revert_do, post=True), methods=["POST"]),
            Route(s + "/redact", p(audit.redact_page), methods=["GET"]),
            Route(s + "/redact", p(audit.redact_do, post=True), methods=["POST"]),
            Route(s + "/integrity", p(audit.integrity_page), methods=["GET"]),
            Route(s + "/integrity", p(audit.integrity_run, post=True), methods=["POST"]),
            Route(s + "/proposals", p(review.proposals_page), methods=["GET"]),
            Route(s + "/proposals/{proposal}", p(review.proposal_page), methods=["GET"]),
            Route(s + "/proposals/{proposal}/accept", p(review.accept_do, post=True), methods=["POST"]),
            Route(s + "/proposals/{proposal}/reject", p(review.reject_do, post=True), methods=["POST"]),
            Route(s + "/proposals/{proposal}/erase", p(review.erase_confirm), methods=["GET"]),
            Route(s + "/proposals/{proposal}/erase", p(review.erase_do, post=True), methods=["POST"]),
            Route(s + "/dreams", p(dreams.dreams_page), methods=["GET"]),
            Route(s + "/dreams/run", p(dreams.run_do, post=True), methods=["POST"]),
            Route(s + "/dreams/{dream}", p(dreams.dream_page), methods=["GET"]),
            Mount("/static", app=StaticFiles(directory=HERE / "static"), name="console-static"),
        ]
        return [Mount(PREFIX, app=SecurityHeaders(_Inner(inner, self.renderer)))]


class _Inner:
    """The console's routes as one ASGI app (so that the security headers wrap all of them).

    A path without a route (404) or a method a route does not take (405) gets the console's own
    error page here: left to the app's handler, it would be sent past the security headers."""

    def __init__(self, routes: list[BaseRoute], renderer: Renderer) -> None:
        from starlette.routing import Router

        self.router = Router(routes=routes)
        self.renderer = renderer

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from starlette.exceptions import HTTPException

        try:
            await self.router(scope, receive, send)
        except HTTPException as exc:
            path = scope.get("path", "")  # the whole path: a Mount keeps it, and sets root_path
            what = "no such page" if exc.status_code == 404 else f"{scope.get('method')} is not allowed here"
            response = self.renderer.error(exc.status_code, f"{what}: {path}", None)
            response.headers.update(exc.headers or {})
            await response(scope, receive, send)
