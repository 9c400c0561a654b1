"""The console's plumbing: sign-in, CSRF, the security headers, and how a page function is served.

A page function gets a :class:`Ctx` (who is signed in, the path, query and form) in a worker thread
and returns a :class:`Page` (a template and its values) or a :class:`Redirect`. gitmem errors become
statuses through ``gitmem.server.errors.status_of``, the server's one mapping.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import anyio
import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gitmem.errors import (
    AmbiguousStoreError,
    AuthenticationError,
    ForbiddenError,
    GitmemError,
    InvalidInputError,
    NotFoundError,
)
from gitmem.model.caller import Caller
from gitmem.server import door, errors
from gitmem.server.console.auth import COOKIE, SignedIn, csrf_ok
from gitmem.server.pool import StorePool
from gitmem.store import Store, resolve_store

log = logging.getLogger("gitmem.server")
HERE = Path(__file__).parent
PREFIX = "/console"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
}
MAX_FORM_FIELDS = 500  # a proposal's decision form has one box per path; the body limit bounds it too


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every template, whatever its name: content is untrusted
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["q"] = lambda v: quote(str(v), safe="")
    return env


class SecurityHeaders:
    """Adds the CSP and its companions to every console response (pages, errors, static files)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)


@dataclass(frozen=True)
class Page:
    template: str
    values: dict[str, Any] = field(default_factory=dict)
    status: int = 200


@dataclass(frozen=True)
class Redirect:
    url: str


@dataclass
class Ctx:
    """One signed-in request, as a page function sees it."""

    signed: SignedIn
    pool: StorePool
    path: str
    params: Mapping[str, str]
    query: Mapping[str, str]
    form: Mapping[str, str] = field(default_factory=dict)
    pairs: list[tuple[str, str]] = field(default_factory=list)  # the form as posted, repeats kept

    def form_list(self, key: str) -> list[str]:
        """Every value posted for ``key`` (the ticked boxes of a group), in order."""
        return [v for k, v in self.pairs if k == key]

    @property
    def token(self) -> Any:
        return self.signed.token

    def readable(self, name: str) -> str:
        """The handle (the pool's key) of the store ``name`` names (an id, or a name one store
        carries; never a path: open_store would open any repository) if the token may read it;
        otherwise exactly what a missing store gets (404)."""
        try:
            ref = resolve_store(name, self.pool.home)
        except AmbiguousStoreError as exc:
            mine = [c for c in exc.candidates if self.token.may_read(c)]
            if not mine:
                raise NotFoundError(f"store {name!r} does not exist") from None
            raise AmbiguousStoreError(
                f"store name {name!r} is ambiguous: use its id ({', '.join(mine)})", mine
            ) from None
        except GitmemError:
            raise NotFoundError(f"store {name!r} does not exist") from None
        if not self.token.may_read(ref.id):
            raise NotFoundError(f"store {name!r} does not exist")
        return ref.handle

    def scope_of(self, name: str, store: Store, *, default: str | None = None) -> str:
        """The scope asked for (``?scope=``), else the token's default; 404 where it may not read."""
        scope = self.query.get("scope") or self.form.get("scope") or default or self.token.default_scope()
        if not self.token.may_read(name, scope):
            raise NotFoundError(f"scope {scope!r} does not exist in store {name!r}")
        return scope

    def scopes(self, name: str, store: Store) -> list[str]:
        return [s for s in store.scopes() if self.token.may_read(name, s)]

    def need_write(self, name: str, scope: str | None, store: Store) -> None:
        if not self.token.may_write(name, scope):
            raise ForbiddenError(f"token {self.token.id} may not write store {name!r}")
        store.check_writable()

    @property
    def caller(self) -> Caller:
        """Who asks, for the library (docs/access.md)."""
        return door.caller_for(self.token)

    def need_admin(self) -> None:
        """Redaction needs the ``redact`` right (an admin token holds every right)."""
        self.caller.require("redact", "redact history")

    def need_right(self, right: str, what: str) -> None:
        self.caller.require(right, what)

    def confirmed(self) -> bool:
        return self.form.get("confirm") == "yes"


PageFn = Callable[[Ctx], Page | Redirect]


def secure(request: Request) -> bool:
    return request.url.scheme == "https" or request.headers.get("x-forwarded-proto") == "https"


def same_origin(request: Request) -> bool:
    """A form post must come from this origin when the browser says where it came from."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


async def read_form(request: Request, limit: int) -> dict[str, str]:
    return dict(await read_pairs(request, limit))


async def read_pairs(request: Request, limit: int) -> list[tuple[str, str]]:
    kind = request.headers.get("content-type", "").split(";")[0].strip()
    if kind != "application/x-www-form-urlencoded":
        raise InvalidInputError("a console form is posted as application/x-www-form-urlencoded")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise InvalidInputError(f"the form is over {limit} bytes")
    try:
        pairs = parse_qsl(
            body.decode("utf-8"), keep_blank_values=True, strict_parsing=False, max_num_fields=MAX_FORM_FIELDS
        )
    except (UnicodeDecodeError, ValueError):
        raise InvalidInputError("the form is not valid UTF-8 form data") from None
    return pairs


class Renderer:
    def __init__(self, env: jinja2.Environment) -> None:
        self.env = env

    def html(self, template: str, values: Mapping[str, Any], status: int = 200) -> HTMLResponse:
        text = self.env.get_template(template).render(**values)
        return HTMLResponse(text, status_code=status, headers={"cache-control": "no-store"})

    def error(self, status: int, message: str, signed: SignedIn | None) -> HTMLResponse:
        return self.html("error.html", {"status": status, "message": message, "me": signed}, status)


def serve(
    fn: PageFn, renderer: Renderer, sessions: Any, pool: StorePool, *, post: bool, max_body: int
) -> Callable[[Request], Any]:
    async def handler(request: Request) -> Response:
        signed: SignedIn | None = None
        try:
            me: SignedIn = await anyio.to_thread.run_sync(sessions.lookup, request.cookies.get(COOKIE))
            signed = me
            request.state.token_id = me.token.id
            pairs: list[tuple[str, str]] = []
            if post:
                if not same_origin(request):
                    raise ForbiddenError("the form was posted from another site")
                pairs = await read_pairs(request, max_body)
                if not csrf_ok(me.csrf, dict(pairs).get("csrf")):
                    raise ForbiddenError("the form's CSRF token is missing or wrong: reload the page")
            ctx = Ctx(
                me,
                pool,
                request.url.path,
                dict(request.path_params),
                dict(request.query_params),
                dict(pairs),
                pairs,
            )
            result = await anyio.to_thread.run_sync(fn, ctx)
        except AuthenticationError as exc:
            if post:
                return renderer.error(403, exc.message, None)
            target = quote(request.url.path + (f"?{request.url.query}" if request.url.query else ""), safe="")
            return RedirectResponse(f"{PREFIX}/login?next={target}", status_code=303)
        except GitmemError as exc:
            status, _name = errors.status_of(exc)
            message = exc.message if status < 500 else "internal error: see the server log"
            if status >= 500:
                log.error("console %s failed: %s", request.url.path, exc.message)
            return renderer.error(status, message, signed)
        except Exception:
            log.exception("console %s failed", request.url.path)
            return renderer.error(500, "internal server error", signed)
        if isinstance(result, Redirect):
            return RedirectResponse(result.url, status_code=303)
        values = {"me": signed, **result.values}
        try:
            return renderer.html(result.template, values, result.status)
        except Exception:
            log.exception("console %s: rendering %s failed", request.url.path, result.template)
            return renderer.error(500, "internal server error", signed)

    return handler
