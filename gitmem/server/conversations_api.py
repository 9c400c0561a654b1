"""OpenAI-compatible conversations on ``gitmem serve`` (``/v1/conversations``, docs/conversations.md).

The shapes and errors are those the official ``openai`` client expects, so that
``OpenAI(base_url=<gitmem>/v1, api_key=<gitmem token>)`` works unchanged. A conversation is bound at
creation to a store and a scope (the Databricks document's ``memory_store`` and ``scope`` in the
body); its records live in that scope under ``/conversations/`` (the ``Store`` conversation methods,
:mod:`gitmem.facade.conversation_ops`).
Every change is one batch of versions by the token's actor and session; a review token's changes
land on its proposal; the guard and the limits refuse a change whole, with an error.

Authentication is the Anthropic face's (``Authorization: Bearer <token>``). A token that may not read
the store (or the conversation's scope) gets 404, as if it did not exist; a token that may read but
not write gets 403 on every change. ``/v1/responses`` is :mod:`gitmem.server.responses_proxy`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gitmem.errors import ForbiddenError, GitmemError, InvalidInputError, NotFoundError
from gitmem.model.caller import Caller
from gitmem.model.paths import validate_scope
from gitmem.server import errors
from gitmem.server.door import caller_for
from gitmem.server.intake import BodyTimeout, BodyTooLarge, read_body, secret
from gitmem.server.metrics import Metrics
from gitmem.server.pool import StorePool
from gitmem.server.tokens import Token, TokenStore
from gitmem.store import (
    Conversation,
    check_conversation_metadata,
    normalize_conversation_items,
    parse_conversation_id,
    resolve_store,
)

log = logging.getLogger("gitmem.server.conversations")
Json = dict[str, Any]
INCLUDABLE = frozenset(
    {
        "file_search_call.results",
        "web_search_call.results",
        "web_search_call.action.sources",
        "message.input_image.image_url",
        "computer_call_output.output.image_url",
        "code_interpreter_call.outputs",
        "reasoning.encrypted_content",
        "message.output_text.logprobs",
    }
)
# The error ``type`` an OpenAI client sees for each status (the message says what happened).
OPENAI_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
}


@dataclass(frozen=True)
class Call:
    token: Token
    params: Mapping[str, str]
    query: Any  # starlette's QueryParams (a multi-dict: include may repeat)
    body: Json

    @property
    def caller(self) -> Caller:
        """Who asks: the token's caller; the engine decides with it (a review token's changes
        land on its proposal, its reads show that proposal on top: docs/access.md)."""
        return caller_for(self.token)


@dataclass(frozen=True)
class Bound:
    """A conversation id resolved: its store, scope and record directory."""

    name: str
    scope: str
    ulid: str
    id: str


def openai_error(status: int, message: str, *, param: str | None = None, code: str | None = None) -> Response:
    kind = OPENAI_TYPES.get(status, "invalid_request_error" if status < 500 else "server_error")
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    headers = {"x-should-retry": "false"} if status == 409 else {}
    return JSONResponse(body, status_code=status, headers=headers)


def json_object(raw: bytes) -> Json:
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise InvalidInputError("the request body is not valid JSON") from None
    if not isinstance(data, dict):
        raise InvalidInputError("the request body must be a JSON object")
    return data


class ConversationsApi:
    def __init__(
        self, pool: StorePool, tokens: TokenStore, metrics: Metrics, max_body: int, body_timeout: float
    ) -> None:
        self.pool = pool
        self.tokens = tokens
        self.metrics = metrics
        self.max_body = max_body
        self.body_timeout = body_timeout

    def routes(self) -> list[Route]:
        e = self.endpoint
        base = "/v1/conversations"
        one = base + "/{conversation_id}"
        return [
            Route(base, e(self.create), methods=["POST"]),
            Route(one, e(self.retrieve), methods=["GET"]),
            Route(one, e(self.update), methods=["POST"]),
            Route(one, e(self.delete), methods=["DELETE"]),
            Route(one + "/items", e(self.create_items), methods=["POST"]),
            Route(one + "/items", e(self.list_items), methods=["GET"]),
            Route(one + "/items/{item_id}", e(self.retrieve_item), methods=["GET"]),
            Route(one + "/items/{item_id}", e(self.delete_item), methods=["DELETE"]),
        ]

    # ------------------------------------------------------------------ plumbing
    async def authenticate(self, request: Request) -> tuple[Token, Json]:
        token = self.tokens.authenticate(secret(request))
        request.state.token_id = token.id
        raw = await read_body(request, self.max_body, self.body_timeout) if request.method == "POST" else b""
        return token, json_object(raw)

    def endpoint(self, fn: Callable[[Call], Json]) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            try:
                token, body = await self.authenticate(request)
                call = Call(token, dict(request.path_params), request.query_params, body)
                data = await anyio.to_thread.run_sync(fn, call)
            except Exception as exc:  # noqa: BLE001 - every failure becomes an OpenAI error body
                return self.failure(request, exc)
            return JSONResponse(data)

        return handler

    def failure(self, request: Request, exc: BaseException) -> Response:
        rid = request.state.request_id
        if isinstance(exc, BodyTooLarge):
            status, message = 413, exc.message
        elif isinstance(exc, BodyTimeout):
            status, message = 408, f"the request body did not arrive within {self.body_timeout:g} seconds"
        elif isinstance(exc, ClientDisconnect):
            return Response(status_code=400)
        elif isinstance(exc, GitmemError):
            reply = errors.from_exception(exc, rid, str(self.pool.home))
            status, message = reply.status, str(reply.body["error"]["message"])  # type: ignore[index]
            if status >= 500:
                log.error("request %s failed: %s", rid, exc.message)
        else:
            log.exception("request %s failed", rid, exc_info=exc)
            status, message = 500, "internal server error"
        self.metrics.rejections.labels(str(status)).inc()
        code = getattr(exc, "type_name", None) if isinstance(exc, GitmemError) else None
        return openai_error(status, message, code=code)

    # ------------------------------------------------------------------ access
    def bind(self, token: Token, conversation_id: str, *, write: bool = False) -> Bound:
        """The store and scope of ``conversation_id``, checked against ``token``."""
        ulid, store_id, scope = parse_conversation_id(conversation_id)
        try:
            name = self.pool.name_of(store_id)
        except NotFoundError:
            raise NotFoundError(f"conversation {conversation_id} does not exist") from None
        if not token.may_read(name, scope):
            raise NotFoundError(f"conversation {conversation_id} does not exist")
        if write and not token.may_write(name, scope):
            raise ForbiddenError(
                f"token {token.id} may read conversation {conversation_id} but not change it"
            )
        return Bound(name, scope, ulid, conversation_id)

    def conversation(self, bound: Bound, caller: Caller) -> Conversation:
        with self.pool.store(bound.name) as store:
            return store.conversation(bound.ulid, scope=bound.scope, caller=caller)

    def _store_and_scope(self, token: Token, body: Json) -> tuple[str, str, str]:
        ms = body.get("memory_store")
        name = ms.get("name") if isinstance(ms, dict) else ms
        if not isinstance(name, str) or not name:
            raise InvalidInputError('memory_store: required, {"name": <store name or memstore_ id>}')
        try:  # an id, or a name one store carries (docs/stores.md); the pool's key is its handle
            ref = resolve_store(name, self.pool.home)
        except (NotFoundError, InvalidInputError):
            raise NotFoundError(f"memory store {name!r} does not exist") from None
        if not token.may_read(ref.id):  # no grant: exactly as a store that does not exist
            raise NotFoundError(f"memory store {name!r} does not exist")
        name = ref.handle
        raw = body.get("scope")
        kind, value = "scope", None
        if isinstance(raw, dict):
            kind, value = raw.get("kind", "scope"), raw.get("value")
            if not isinstance(kind, str) or not kind:
                raise InvalidInputError("scope.kind: expected a string")
        elif raw is not None:
            value = raw
        scope = token.default_scope() if value is None else value
        try:
            validate_scope(scope)
        except InvalidInputError as exc:
            raise InvalidInputError(f"scope.value: {exc.message}") from None
        if not token.may_write(name, scope):
            if token.scope is not None and scope != token.scope:
                raise ForbiddenError(f"token {token.id} may only use scope {token.scope!r}, not {scope!r}")
            raise ForbiddenError(f"token {token.id} may not write memory store {name!r}")
        return name, scope, kind

    # ------------------------------------------------------------------ conversations
    def create(self, call: Call) -> Json:
        b = call.body
        unknown = set(b) - {"items", "metadata", "memory_store", "scope"}
        if unknown:
            raise InvalidInputError(f"unknown field(s): {', '.join(sorted(unknown))}")
        name, scope, kind = self._store_and_scope(call.token, b)
        metadata = check_conversation_metadata(b.get("metadata"))
        seed = normalize_conversation_items(b.get("items"))
        t = call.token
        with self.pool.store(name) as store, self.pool.write_lock(name, scope):
            made = store.create_conversation(
                scope=scope,
                scope_kind=kind,
                metadata=metadata,
                items=seed,
                actor=t.actor,
                session=t.session,
                caller=call.caller,
            )
        self.metrics.writes.labels("created").inc()
        return made.to_json()

    def retrieve(self, call: Call) -> Json:
        return self.conversation(self.bind(call.token, call.params["conversation_id"]), call.caller).to_json()

    def update(self, call: Call) -> Json:
        bound = self.bind(call.token, call.params["conversation_id"], write=True)
        if set(call.body) - {"metadata"} or "metadata" not in call.body:
            raise InvalidInputError("an update takes exactly one field: metadata")
        metadata = check_conversation_metadata(call.body["metadata"])
        t = call.token
        with self.pool.store(bound.name) as store, self.pool.write_lock(bound.name, bound.scope):
            new = store.update_conversation(
                bound.ulid, metadata, scope=bound.scope, actor=t.actor, session=t.session, caller=call.caller
            )
        return new.to_json()

    def delete(self, call: Call) -> Json:
        bound = self.bind(call.token, call.params["conversation_id"], write=True)
        t = call.token
        with self.pool.store(bound.name) as store, self.pool.write_lock(bound.name, bound.scope):
            store.delete_conversation(
                bound.ulid, scope=bound.scope, actor=t.actor, session=t.session, caller=call.caller
            )
        return {"id": bound.id, "object": "conversation.deleted", "deleted": True}

    # ------------------------------------------------------------------ items
    @staticmethod
    def _include(query: Any) -> list[str]:
        values = [*query.getlist("include"), *query.getlist("include[]")]
        for v in values:
            if v not in INCLUDABLE:
                raise InvalidInputError(f"include: unknown value {v!r}")
        return values

    @staticmethod
    def _page(items: list[Json], has_more: bool) -> Json:
        return {
            "object": "list",
            "data": items,
            "first_id": items[0]["id"] if items else "",
            "last_id": items[-1]["id"] if items else "",
            "has_more": has_more,
        }

    def create_items(self, call: Call) -> Json:
        self._include(call.query)
        bound = self.bind(call.token, call.params["conversation_id"], write=True)
        if set(call.body) - {"items"} or not isinstance(call.body.get("items"), list):
            raise InvalidInputError("items: required, a list of items")
        new = normalize_conversation_items(call.body["items"])
        t = call.token
        with self.pool.store(bound.name) as store, self.pool.write_lock(bound.name, bound.scope):
            added = store.add_conversation_items(
                bound.ulid, new, scope=bound.scope, actor=t.actor, session=t.session, caller=call.caller
            )
        self.metrics.writes.labels("created").inc()
        return self._page(added, False)

    def list_items(self, call: Call) -> Json:
        q = call.query
        self._include(q)
        order = q.get("order", "desc")
        if order not in ("asc", "desc"):
            raise InvalidInputError("order: asc or desc")
        try:
            limit = int(q.get("limit", "20"))
        except ValueError:
            raise InvalidInputError("limit: an integer from 1 to 100") from None
        if not 1 <= limit <= 100:
            raise InvalidInputError("limit: an integer from 1 to 100")
        bound = self.bind(call.token, call.params["conversation_id"])
        with self.pool.store(bound.name) as store:
            store.conversation(bound.ulid, scope=bound.scope, caller=call.caller)
            found = store.conversation_items(bound.ulid, scope=bound.scope, caller=call.caller)
        if order == "desc":
            found.reverse()
        after = q.get("after")
        if after:
            ids = [i["id"] for i in found]
            if after not in ids:
                raise InvalidInputError(f"after: item {after} is not in this conversation")
            found = found[ids.index(after) + 1 :]
        return self._page(found[:limit], len(found) > limit)

    def retrieve_item(self, call: Call) -> Json:
        self._include(call.query)
        bound = self.bind(call.token, call.params["conversation_id"])
        with self.pool.store(bound.name) as store:
            return store.conversation_item(
                bound.ulid, call.params["item_id"], scope=bound.scope, caller=call.caller
            )

    def delete_item(self, call: Call) -> Json:
        bound = self.bind(call.token, call.params["conversation_id"], write=True)
        t = call.token
        with self.pool.store(bound.name) as store, self.pool.write_lock(bound.name, bound.scope):
            found = store.delete_conversation_item(
                bound.ulid,
                call.params["item_id"],
                scope=bound.scope,
                actor=t.actor,
                session=t.session,
                caller=call.caller,
            )
        self.metrics.writes.labels("deleted").inc()
        return found.to_json()
