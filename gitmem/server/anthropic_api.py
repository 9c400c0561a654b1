"""The Anthropic memory stores API (all 14 endpoints) over gitmem stores.

Each handler authenticates, reads and checks the request, then runs one library call in a worker
thread on a Store lent by the pool, and renders the result. A request works in the token's scope
(else ``main``); ``?scope=`` picks another scope the token allows. The actor of every version is the
token's (and its session), never something the request says.
"""

# The wire format (wire.py), the memory record (ops.py) and the version endpoints
# (anthropic_versions.py) are apart.
from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gitmem import config
from gitmem.errors import (
    ConflictError,
    ForbiddenError,
    GitmemError,
    InvalidInputError,
    NotFoundError,
)
from gitmem.model.paths import validate_display_name, validate_prefix
from gitmem.server import door, errors, inline, ops, wire
from gitmem.server.anthropic_call import Call as Call
from gitmem.server.anthropic_versions import VersionEndpoints
from gitmem.server.intake import BodyTimeout, check_beta, read_body
from gitmem.server.metrics import Metrics
from gitmem.server.pool import StorePool
from gitmem.server.tokens import TokenStore, parse_time
from gitmem.store import Memory, Store, create_store, delete_store

log = logging.getLogger("gitmem.server")
Json = dict[str, Any]
STORE_FIELDS = ("name", "description", "metadata")


class AnthropicApi(VersionEndpoints):
    def __init__(
        self, pool: StorePool, tokens: TokenStore, metrics: Metrics, max_body: int, body_timeout: float
    ) -> None:
        self.pool = pool
        self.tokens = tokens
        self.metrics = metrics
        self.max_body = max_body
        self.body_timeout = body_timeout
        self._creating = threading.Lock()  # the library's create_store is not safe from threads
        self.fresh = inline.Freshness()

    # ------------------------------------------------------------------ plumbing
    def endpoint(
        self,
        fn: Callable[[Call], Json],
        *,
        with_body: bool = False,
        inline: Callable[[Call], Json | None] | None = None,
    ) -> Callable[[Request], Awaitable[Response]]:
        """The route handler of ``fn``. ``inline``: a version of ``fn`` that answers on the event
        loop when it can do so without blocking it (an open Store, nothing to catch up), else
        returns None and ``fn`` runs in a worker thread as usual; both check the same things."""

        async def handler(request: Request) -> Response:
            rid: str = request.state.request_id
            try:
                token = door.authenticate(self.tokens, request.headers)
                request.state.token_id = token.id
                check_beta(request)
                raw = await read_body(request, self.max_body, self.body_timeout) if with_body else b""
                call = Call(token, dict(request.path_params), dict(request.query_params), raw, rid)
                data = inline(call) if inline is not None else None
                if data is None:
                    # Not cancellable: a client that disconnects leaves no version or one complete version.
                    data = await anyio.to_thread.run_sync(fn, call)
            except GitmemError as exc:
                if errors.status_of(exc)[0] >= 500:
                    log.error("request %s failed: %s", rid, exc.message)
                return self.error(errors.from_exception(exc, rid, str(self.pool.home)))
            except BodyTimeout:
                message = f"the request body did not arrive within {self.body_timeout:g} seconds"
                return self.error(errors.reply(408, "timeout_error", message, rid))
            except ClientDisconnect:  # gone before its body arrived: nothing was done, nobody to tell
                log.info("request %s: the client disconnected", rid)
                return Response(status_code=400)
            except Exception:
                log.exception("request %s failed", rid)
                return self.error(errors.reply(500, "api_error", "internal server error", rid))
            return JSONResponse(data)

        return handler

    def error(self, reply: errors.ErrorReply) -> Response:
        self.metrics.rejections.labels(str(reply.status)).inc()
        if reply.status == 409:
            self.metrics.conflicts.labels(reply.error_type).inc()
        return JSONResponse(reply.body, status_code=reply.status, headers=reply.headers)

    def routes(self) -> list[Route]:
        e = self.endpoint
        base = "/v1/memory_stores"
        mem = base + "/{memory_store_id}/memories"
        ver = base + "/{memory_store_id}/memory_versions"
        # The memory routes first: Starlette tries routes in order and these answer most requests
        # (no two of these patterns match one path, so the order changes nothing else).
        return [
            Route(
                mem + "/{memory_id}",
                e(self.retrieve_memory, inline=lambda call: inline.retrieve_memory(self, call)),
                methods=["GET"],
            ),
            Route(mem + "/{memory_id}", e(self.update_memory, with_body=True), methods=["POST"]),
            Route(mem + "/{memory_id}", e(self.delete_memory), methods=["DELETE"]),
            Route(mem, e(self.create_memory, with_body=True), methods=["POST"]),
            Route(mem, e(self.list_memories), methods=["GET"]),
            Route(base, e(self.create_store, with_body=True), methods=["POST"]),
            Route(base, e(self.list_stores), methods=["GET"]),
            Route(base + "/{memory_store_id}", e(self.retrieve_store), methods=["GET"]),
            Route(base + "/{memory_store_id}", e(self.update_store, with_body=True), methods=["POST"]),
            Route(base + "/{memory_store_id}", e(self.delete_store), methods=["DELETE"]),
            Route(
                base + "/{memory_store_id}/archive", e(self.archive_store, with_body=True), methods=["POST"]
            ),
            Route(ver, e(self.list_versions), methods=["GET"]),
            Route(ver + "/{memory_version_id}", e(self.retrieve_version), methods=["GET"]),
            Route(
                ver + "/{memory_version_id}/redact", e(self.redact_version, with_body=True), methods=["POST"]
            ),
        ]

    # ------------------------------------------------------------------ access
    def _admin(self, call: Call) -> None:
        if not call.token.admin:
            raise ForbiddenError(f"token {call.token.id} is not an admin token: managing stores needs one")

    def _name(self, call: Call, *, write: bool = False, scope: str | None = None) -> str:
        store_id = call.params["memory_store_id"]  # the pool's key (handle) comes back
        handle = self.pool.name_of(store_id)  # 404 first, as for any store that does not exist
        self._check(call, store_id, write=write, scope=scope)
        return handle

    @staticmethod
    def _check(call: Call, store_id: str, *, write: bool = False, scope: str | None = None) -> None:
        if not call.token.may_read(store_id):  # no grant: exactly as a store that does not exist
            raise NotFoundError(f"memory store {call.params['memory_store_id']} does not exist")
        allowed = call.token.may_write(store_id, scope) if write else call.token.may_read(store_id, scope)
        if not allowed:
            what = "write" if write else "read"  # the id, not its name: the token may not see that
            raise ForbiddenError(f"token {call.token.id} may not {what} memory store {store_id}")

    @staticmethod
    def _writable(store: Store) -> None:
        archived = store.settings.archived_at
        if archived is not None:
            raise ConflictError(
                f"memory store {store.settings.id} was archived at {archived} and is read-only"
            )

    def _memory_id(self, call: Call) -> str:
        value = wire.id_param(call.params["memory_id"], "mem", "memory_id")
        assert value is not None
        return value

    def _version_id(self, call: Call) -> str:
        value = wire.id_param(call.params["memory_version_id"], "memver", "memory_version_id")
        assert value is not None
        return value

    # ------------------------------------------------------------------ stores
    def create_store(self, call: Call) -> Json:
        self._admin(call)
        data = wire.body(call.raw, STORE_FIELDS, required=("name",))
        name = wire.string(data, "name")
        assert name is not None
        description = wire.string(data, "description", nullable=True) or ""
        metadata = wire.metadata_patch(data.get("metadata"), patch=False)
        try:
            with self._creating:
                store = create_store(name, description=description, metadata=metadata, home=self.pool.home)  # type: ignore[arg-type]
        except InvalidInputError as exc:
            raise InvalidInputError(f"invalid store: {exc.message}") from None
        with store:
            return wire.store_json(store.settings)

    def list_stores(self, call: Call) -> Json:
        q = call.query
        include_archived = wire.boolean(q, "include_archived")
        since, until = wire.time_param(q, "created_at[gte]"), wire.time_param(q, "created_at[lte]")
        limit = wire.limit(q)
        what = ("stores", include_archived, q.get("created_at[gte]"), q.get("created_at[lte]"))
        after = wire.decode_cursor(q.get("page"), what)
        if after is not None and not (
            isinstance(after, list) and len(after) == 2 and all(isinstance(k, str) for k in after)
        ):
            raise InvalidInputError("page: not a cursor of this listing")
        found = []
        for s in self.pool.all_settings():
            if not call.token.may_read(s.id) or (s.archived_at is not None and not include_archived):
                continue
            created = parse_time(s.created_at) if s.created_at else None
            if created is not None and ((since and created < since) or (until and created > until)):
                continue
            found.append(s)
        found.sort(key=lambda s: (s.created_at, s.id), reverse=True)  # newest first
        if after is not None:
            found = [s for s in found if [s.created_at, s.id] < after]
        chosen = found[:limit]
        more = len(found) > limit
        cursor = wire.encode_cursor([chosen[-1].created_at, chosen[-1].id], what) if more else None
        return wire.page([wire.store_json(s) for s in chosen], cursor)

    def retrieve_store(self, call: Call) -> Json:
        with self.pool.store(self._name(call)) as store:
            return wire.store_json(store.settings)

    def update_store(self, call: Call) -> Json:
        self._admin(call)
        name = self._name(call, write=True)
        data = wire.body(call.raw, STORE_FIELDS)
        new_name = wire.string(data, "name", nullable=True)
        description = wire.string(data, "description", nullable=True)
        patch = wire.metadata_patch(data.get("metadata"), patch=True)
        with self.pool.store(name) as store:
            self._writable(store)
            changes: dict[str, Any] = {}
            if new_name is not None and new_name != store.settings.name:  # ids stay (docs/stores.md)
                changes["name"] = validate_display_name(new_name)
            if description is not None and config.validate_description(description) != store.settings.description:  # fmt: skip
                changes["description"] = description
            if patch:
                merged = dict(store.settings.metadata)
                for key, value in patch.items():
                    if value is None:
                        merged.pop(key, None)
                    else:
                        merged[key] = value
                if config.validate_metadata(merged) != store.settings.metadata:
                    changes["metadata"] = merged
            if not changes:  # nothing changes: no ledger entry, updated_at stays (docs/stores.md)
                return wire.store_json(store.settings)
            return wire.store_json(store.update_settings(actor=call.token.actor, **changes))

    def archive_store(self, call: Call) -> Json:
        self._admin(call)
        wire.body(call.raw, ())
        with self.pool.store(self._name(call, write=True)) as store:
            if store.settings.archived_at is None:
                store.update_settings(actor=call.token.actor, archived_at=config.now_rfc3339())
            return wire.store_json(store.settings)

    def delete_store(self, call: Call) -> Json:
        self._admin(call)
        name = self._name(call, write=True)
        store_id = call.params["memory_store_id"]
        with self.pool.retiring(name):  # waits for the requests working in it, then lends it no more
            delete_store(name, self.pool.home)
        return {"id": store_id, "type": "memory_store_deleted"}

    # ------------------------------------------------------------------ memories
    def create_memory(self, call: Call) -> Json:
        scope = call.scope()
        name = self._name(call, write=True, scope=scope)
        chosen = wire.view(call.query, "basic")
        data = wire.body(call.raw, ("path", "content"), required=("path", "content"))
        path = ops.check_path(data["path"])
        content = wire.string(data, "content")
        assert content is not None
        with self.pool.store(name) as store:  # writes to one scope are group-committed
            self._writable(store)
            version = store.create(path, content, scope=scope, caller=call.caller)
            self.metrics.writes.labels("created").inc()
            rec = ops.created(version, content, with_content=chosen == "full")
            return wire.memory_json(rec, store.settings.id)

    def list_memories(self, call: Call) -> Json:
        scope = call.scope()
        q = call.query
        chosen = wire.view(q, "basic")
        limit = wire.limit(q, chosen)
        depth = wire.integer(q, "depth", 0, 0, 1)
        prefix = q.get("path_prefix") or "/"
        try:
            validate_prefix(prefix)
        except InvalidInputError as exc:
            raise InvalidInputError(f"path_prefix: {exc.message}") from None
        what = ("memories", call.params["memory_store_id"], scope, prefix, depth)
        after = wire.decode_cursor(q.get("page"), what)
        if after is not None and not isinstance(after, str):
            raise InvalidInputError("page: not a cursor of this listing")
        with self.pool.store(self._name(call, scope=scope)) as store:
            store_id = store.settings.id
            page = store.list_page(
                prefix,
                scope=scope,
                depth=depth,
                after=after,
                limit=limit,
                with_content=chosen == "full",
                at=q.get("at"),
                caller=call.caller,
            )  # ?at=, or a review token's own proposal on top
            out: list[Json] = [
                wire.memory_json(ops.record(item, with_content=chosen == "full"), store_id)
                if isinstance(item, Memory)
                else wire.prefix_json(item.path)
                for item in page.items
            ]
            cursor = wire.encode_cursor(page.last, what) if page.more and page.last is not None else None
            return wire.page(out, cursor)

    def retrieve_memory(self, call: Call) -> Json:
        scope = call.scope()
        chosen = wire.view(call.query, "full")
        mid = self._memory_id(call)
        with self.pool.store(self._name(call, scope=scope)) as store:
            tip = store.tip(scope)  # read before the index catches up: at most what it reaches
            m = store.memory_by_id(
                mid, scope=scope, with_content=chosen == "full", at=call.query.get("at"), caller=call.caller
            )  # ?at=, or a review token's own proposal on top
            self.fresh.mark(store, scope, tip)
            return wire.memory_json(ops.record(m, with_content=chosen == "full"), store.settings.id)

    def update_memory(self, call: Call) -> Json:
        scope = call.scope()
        name = self._name(call, write=True, scope=scope)
        chosen = wire.view(call.query, "basic")
        mid = self._memory_id(call)
        data = wire.body(call.raw, ("content", "path", "precondition"))
        content = wire.string(data, "content", nullable=True)
        path = ops.check_path(data["path"]) if data.get("path") is not None else None
        sha = wire.precondition(data.get("precondition"))
        with self.pool.store(name) as store:  # writes to one scope are group-committed
            self._writable(store)
            before = store.settings.id
            m = store.update_by_id(
                mid,
                scope=scope,
                content=content,
                path=path,
                if_sha256=sha,
                actor=call.token.actor,
                session=call.token.session,
                with_content=chosen == "full",
                caller=call.caller,
            )
            self.metrics.writes.labels("modified").inc()
            return wire.memory_json(ops.record(m, with_content=chosen == "full"), before)

    def delete_memory(self, call: Call) -> Json:
        scope = call.scope()
        name = self._name(call, write=True, scope=scope)
        mid = self._memory_id(call)
        expected = call.query.get("expected_content_sha256")
        sha = wire.sha256_field(expected, "expected_content_sha256") if expected is not None else None
        with self.pool.store(name) as store:  # writes to one scope are group-committed
            # no _writable: deleting (like redacting) works in an archived store, as in Anthropic's API
            store.delete_by_id(
                mid,
                scope=scope,
                if_sha256=sha,
                actor=call.token.actor,
                session=call.token.session,
                caller=call.caller,
            )
            self.metrics.writes.labels("deleted").inc()
        return {"id": mid, "type": "memory_deleted"}
