"""The Databricks-shaped memory entries API: ``/api/2.1/unity-catalog/memory-stores...``.

The shapes are those of Databricks managed memory (docs/databricks.md), so that its curl calls work
against gitmem with only the host and token changed. A store is addressed by ``catalog.schema.name``
and that full name is the gitmem store's name (so the same token grants and ``gitmem`` commands
apply); entries are memories of one scope (``?scope=``, required on every entry call). Every write is
a gitmem version by the token's actor (and session), so this surface gains history, redaction and
audit. Errors are Databricks': ``{"error_code": ..., "message": ...}`` with the matching status.

An entry's ``contents`` is the memory's text and its ``description`` the front-matter description
gitmem keeps in the file: a file whose front matter holds only the description shows the text
after it as ``contents``; any other front matter stays part of ``contents``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gitmem.config import validate_description
from gitmem.errors import (
    ConflictError,
    ForbiddenError,
    GitmemError,
    InvalidInputError,
    NotFoundError,
)
from gitmem.ids import is_id
from gitmem.model.caller import Caller
from gitmem.model.paths import validate_prefix
from gitmem.server import door, wire
from gitmem.server.databricks_wire import (
    _EDITS,
    BASE,
    MAX_PAGE,
    MAX_TOP_K,
    DatabricksError,
    Json,
    entry_json,
    entry_path,
    error_of,
    error_response,
    full_name,
    int_field,
    json_body,
    split_contents,
    split_full_name,
    store_json,
    text_field,
)
from gitmem.server.intake import BodyTimeout, BodyTooLarge, read_body
from gitmem.server.metrics import Metrics
from gitmem.server.pool import StorePool
from gitmem.server.tokens import Token, TokenStore
from gitmem.store import Memory, Store, StoreRef, all_refs, create_store, delete_store, resolve_store

log = logging.getLogger("gitmem.server.databricks")


def _full(store: Store, handle: str) -> str:
    """The store's ``catalog.schema.name``: recorded, else an old-layout store's directory name."""
    return store.settings.full_name or handle


@dataclass(frozen=True)
class Call:
    token: Token
    params: Mapping[str, str]
    query: Mapping[str, str]
    body: Json

    @property
    def caller(self) -> Caller:
        return door.caller_for(self.token)

    def scope(self) -> str:
        """The entry call's scope: ``?scope=`` (or ``scope`` in the body); required."""
        in_query, in_body = self.query.get("scope"), self.body.get("scope")
        if in_body is not None and not isinstance(in_body, str):
            raise InvalidInputError("scope must be a string")
        if in_query and in_body and in_query != in_body:
            raise InvalidInputError(f"scope is {in_query!r} in the query but {in_body!r} in the body")
        scope = in_query or in_body
        if not scope:
            raise InvalidInputError("scope is required on every entry request (?scope=...)")
        return door.token_scope(self.token, scope)


class DatabricksApi:
    def __init__(
        self,
        pool: StorePool,
        tokens: TokenStore,
        metrics: Metrics,
        max_body: int,
        body_timeout: float | None = None,
    ) -> None:
        self.pool = pool
        self.tokens = tokens
        self.metrics = metrics
        self.max_body = max_body
        self.body_timeout = body_timeout if body_timeout is not None else door.BODIES["databricks"].deadline

    def routes(self) -> list[Route]:
        e = self.endpoint
        one = BASE + "/{full_name}"
        return [
            Route(BASE, e(self.create_store), methods=["POST"]),
            Route(BASE, e(self.list_stores), methods=["GET"]),
            Route(one, e(self.get_store), methods=["GET"]),
            Route(one, e(self.update_store), methods=["PATCH"]),
            Route(one, e(self.delete_store), methods=["DELETE"]),
            Route(one + "/entries", e(self.create_entry), methods=["POST"]),
            Route(one + "/entries", e(self.list_entries), methods=["GET"]),
            Route(one + "/entries", e(self.update_entry), methods=["PATCH"]),
            Route(one + "/entries", e(self.delete_entry), methods=["DELETE"]),
            Route(one + "/entries:get", e(self.get_entry), methods=["GET"]),
            Route(one + "/entries:search", e(self.search_entries), methods=["POST"]),
        ]

    def endpoint(self, fn: Callable[[Call], Json]) -> Callable[[Request], Awaitable[Response]]:
        async def handler(request: Request) -> Response:
            try:
                token = door.authenticate(self.tokens, request.headers)
                request.state.token_id = token.id
                wanted = request.method in ("POST", "PATCH")
                raw = await read_body(request, self.max_body, self.body_timeout) if wanted else b""
                call = Call(token, dict(request.path_params), dict(request.query_params), json_body(raw))
                data = await anyio.to_thread.run_sync(fn, call)
            except BodyTooLarge as exc:
                return self.error(413, "INVALID_PARAMETER_VALUE", exc.message)
            except BodyTimeout:
                message = f"the request body did not arrive within {self.body_timeout:g} seconds"
                return self.error(408, "REQUEST_TIMEOUT", message)
            except GitmemError as exc:
                return self.error(*error_of(exc))
            except Exception:
                log.exception("request %s failed", request.state.request_id)
                return self.error(500, "INTERNAL_ERROR", "internal server error")
            return JSONResponse(data)

        return handler

    def error(self, status: int, code: str, message: str) -> Response:
        self.metrics.rejections.labels(str(status)).inc()
        return error_response(status, code, message)

    # ------------------------------------------------------------------ access
    def _ref(self, call: Call) -> StoreRef | None:
        """The store of the URL: its ``catalog.schema.name`` (the unique full name recorded for
        it, docs/stores.md), or its store id."""
        text = call.params["full_name"]
        if is_id(text, "memstore"):
            try:
                return resolve_store(text, self.pool.home)
            except NotFoundError:
                return None
        full = ".".join(split_full_name(text))
        return next((r for r in all_refs(self.pool.home) if r.full_name == full), None)

    def _store_name(self, call: Call, *, write: bool = False, scope: str | None = None) -> str:
        """The handle (pool key) of the URL's store, once the token may use its id (the door's rule:
        no grant and no store are the same 404)."""
        ref = self._ref(call)
        shown = call.params["full_name"]
        door.store_access(
            call.token,
            ref.id if ref is not None else shown,
            ref is not None,
            write=write,
            scope=scope,
            shown=shown,
        )
        assert ref is not None
        return ref.handle

    def _admin(self, call: Call) -> None:
        if not call.token.admin:
            raise ForbiddenError(f"token {call.token.id} is not an admin token: managing stores needs one")

    @staticmethod
    def _writable(store: Store) -> None:
        if store.settings.archived_at is not None:
            raise ForbiddenError(f"memory store {store.name} was archived at {store.settings.archived_at}")

    # ------------------------------------------------------------------ stores
    def create_store(self, call: Call) -> Json:
        self._admin(call)
        data = call.body
        name = full_name(data.get("catalog_name"), data.get("schema_name"), data.get("name"))
        description = text_field(data, "description") or text_field(data, "comment") or ""
        try:
            store = create_store(
                name,
                description=validate_description(description),
                metadata={"owner": call.token.actor},
                home=self.pool.home,
                full_name=name,
            )
        except ConflictError:
            raise DatabricksError(409, "ALREADY_EXISTS", f"memory store {name} already exists") from None
        with store:
            return store_json(store.settings, name)

    def list_stores(self, call: Call) -> Json:
        q = call.query
        catalog, schema = q.get("catalog_name"), q.get("schema_name")
        size = int_field(q.get("page_size") or q.get("max_results"), "page_size", 100, 1, MAX_PAGE)
        what = ("dbx-stores", catalog, schema)
        after = _cursor(q.get("page_token"), what)
        found: list[tuple[str, StoreRef]] = []
        for r in all_refs(self.pool.home):
            full = r.full_name
            if full is None or not call.token.may_read(r.id):
                continue
            parts = full.split(".")
            if (catalog and parts[0] != catalog.lower()) or (schema and parts[1] != schema.lower()):
                continue
            if after is not None and full <= after:
                continue
            found.append((full, r))
        found.sort(key=lambda p: p[0])
        out: Json = {"memory_stores": [store_json(r.settings, full) for full, r in found[:size]]}
        if len(found) > size:
            out["next_page_token"] = wire.encode_cursor(found[size - 1][0], what)
        return out

    def get_store(self, call: Call) -> Json:
        name = self._store_name(call)
        with self.pool.store(name) as store:
            return store_json(store.settings, _full(store, name))

    def update_store(self, call: Call) -> Json:
        """``new_name`` renames the store's full name within its catalog and schema (kept unique);
        a display name that was the old full name follows it, any other stays."""
        self._admin(call)
        name = self._store_name(call, write=True)
        data = call.body
        new_name = text_field(data, "new_name")
        description = text_field(data, "description")
        if description is None:
            description = text_field(data, "comment")
        with self.pool.store(name) as store:
            self._writable(store)
            old_full = _full(store, name)
            changes: dict[str, Any] = {}
            if description is not None and description != store.settings.description:
                changes["description"] = validate_description(description)
            new_full = old_full
            if new_name is not None:
                catalog, schema, _old = old_full.split(".")
                new_full = full_name(catalog, schema, new_name)
                if new_full != old_full and store.settings.name == old_full:
                    changes["name"] = new_full
            try:
                if new_full != old_full or store.settings.full_name is None and new_name is not None:
                    store.update_settings(actor=call.token.actor, full_name=new_full, **changes)
                elif changes:
                    store.update_settings(actor=call.token.actor, **changes)
            except ConflictError:
                raise DatabricksError(
                    409, "ALREADY_EXISTS", f"memory store {new_full} already exists"
                ) from None
            return store_json(store.settings, new_full)

    def delete_store(self, call: Call) -> Json:
        self._admin(call)
        name = self._store_name(call, write=True)
        self.pool.forget(name)
        delete_store(name, self.pool.home)
        self.pool.forget(name)
        return {}

    # ------------------------------------------------------------------ entries
    def create_entry(self, call: Call) -> Json:
        scope = call.scope()
        data = call.body
        if isinstance(data.get("memory_entry"), dict):  # the June 2026 shape: {scope, memory_entry: {...}}
            data = data["memory_entry"]
        path = entry_path(data.get("path"))
        contents = text_field(data, "contents", required=True)
        assert contents is not None
        description = text_field(data, "description")
        for extra in ("creation_reason", "creation_source"):
            text_field(data, extra)  # accepted (and checked) for compatibility; not stored
        name = self._store_name(call, write=True, scope=scope)
        with self.pool.store(name) as store, self.pool.write_lock(name, scope):
            self._writable(store)
            store.create(
                path,
                contents,
                scope=scope,
                description=description or None,
                caller=call.caller,
            )
            self.metrics.writes.labels("created").inc()
            return entry_json(store.read(path, scope=scope, caller=call.caller))

    def get_entry(self, call: Call) -> Json:
        scope = call.scope()
        path = entry_path(call.query.get("path"))
        with self.pool.store(self._store_name(call, scope=scope)) as store:
            return entry_json(_read(store, path, scope, call.caller))

    def list_entries(self, call: Call) -> Json:
        scope = call.scope()
        q = call.query
        prefix = q.get("path_prefix") or "/"
        prefix_dir = prefix if prefix.endswith("/") else prefix.rsplit("/", 1)[0] + "/"
        try:
            validate_prefix(prefix_dir)
        except InvalidInputError as exc:
            raise InvalidInputError(f"path_prefix: {exc.message}") from None
        size = int_field(q.get("page_size"), "page_size", 100, 1, MAX_PAGE)
        what = ("dbx-entries", scope, prefix)
        after = _cursor(q.get("page_token"), what)
        with self.pool.store(self._store_name(call, scope=scope)) as store:
            items = [
                m
                for m in store.list(prefix_dir, scope=scope)
                if isinstance(m, Memory) and m.path.startswith(prefix) and (after is None or m.path > after)
            ]
        chosen = items[:size]
        out: Json = {
            "entries": [{"path": m.path, "description": m.description, "has_contents": True} for m in chosen]
        }
        if len(items) > size:
            out["next_page_token"] = wire.encode_cursor(chosen[-1].path, what)
        return out

    def update_entry(self, call: Call) -> Json:
        scope = call.scope()
        data = call.body
        path = entry_path(data.get("path") if data.get("path") is not None else call.query.get("path"))
        edits = [k for k in _EDITS if data.get(k) is not None]
        description = text_field(data, "description")
        if len(edits) > 1:
            raise InvalidInputError(
                f"give at most one of str_replace, insert, replace_all (got {', '.join(edits)})"
            )
        if not edits and description is None:
            raise InvalidInputError(
                "nothing to update: give one of str_replace, insert, replace_all, or description"
            )
        name = self._store_name(call, write=True, scope=scope)
        with self.pool.store(name) as store, self.pool.write_lock(name, scope):
            self._writable(store)
            current = _read(store, path, scope, call.caller)
            old_description, contents = split_contents(current.content or "")
            if edits:
                contents = _edit(edits[0], data[edits[0]], contents)
            store.write(
                path,
                contents,
                scope=scope,
                description=description if description is not None else old_description,
                if_sha256=current.content_sha256,  # a concurrent write in between: 409 ABORTED
                caller=call.caller,
            )
            self.metrics.writes.labels("modified").inc()
            return entry_json(store.read(path, scope=scope, caller=call.caller))

    def delete_entry(self, call: Call) -> Json:
        scope = call.scope()
        path = entry_path(call.query.get("path") or call.body.get("path"))
        name = self._store_name(call, write=True, scope=scope)
        with self.pool.store(name) as store, self.pool.write_lock(name, scope):
            self._writable(store)
            _read(store, path, scope, call.caller)
            store.delete(path, scope=scope, caller=call.caller)
            self.metrics.writes.labels("deleted").inc()
        return {}

    def search_entries(self, call: Call) -> Json:
        scope = call.scope()
        data = call.body
        query = text_field(data, "query", required=True)
        assert query is not None
        if not query.strip():
            raise InvalidInputError("query must not be empty")
        top_k = int_field(data.get("top_k"), "top_k", 10, 1, MAX_TOP_K)
        prefix = text_field(data, "path_prefix")
        if prefix is not None:
            try:
                validate_prefix(prefix)
            except InvalidInputError as exc:
                raise InvalidInputError(f"path_prefix: {exc.message}") from None
        mode = text_field(data, "mode") or "lexical"  # a gitmem extension (docs/search.md)
        with self.pool.store(self._store_name(call, scope=scope)) as store:
            hits = store.search(query, scope=scope, limit=top_k, path_prefix=prefix, mode=mode)
            results = []
            for hit in hits:
                try:
                    memory = store.read(hit.path, scope=scope)
                except NotFoundError:  # deleted since the index answered
                    continue
                description, contents = split_contents(memory.content or "")
                results.append(
                    {
                        "memory_entry": {"path": hit.path, "description": description, "contents": contents},
                        "score": hit.score,
                    }
                )
        return {"results": results, "mode": hits.mode}


def _read(store: Store, path: str, scope: str, caller: Caller | None = None) -> Memory:
    try:
        return store.read(path, scope=scope, caller=caller)
    except NotFoundError:
        raise NotFoundError(f"no entry at {path} in scope {scope!r}") from None


def _edit(kind: str, spec: Any, contents: str) -> str:
    """The new contents after one Databricks edit of ``contents``."""
    if not isinstance(spec, dict):
        raise InvalidInputError(f"{kind} must be an object")
    if kind == "replace_all":
        new = text_field(spec, "contents", required=True)
        assert new is not None
        return new
    if kind == "str_replace":
        old = text_field(spec, "old_str", required=True)
        new = text_field(spec, "new_str") or ""
        assert old is not None
        if not old:
            raise InvalidInputError("str_replace.old_str must not be empty")
        count = contents.count(old)
        if count != 1:
            raise InvalidInputError(
                f"str_replace.old_str must match exactly once; it matches {count} time(s)"
            )
        return contents.replace(old, new, 1)
    text = text_field(spec, "insert_text", required=True)
    assert text is not None
    lines = contents.splitlines(keepends=True)
    line = int_field(spec.get("insert_line"), "insert.insert_line", len(lines), 0, len(lines))
    if text and not text.endswith("\n"):
        text += "\n"
    if line > 0 and not lines[line - 1].endswith("\n"):
        lines[line - 1] += "\n"
    return "".join(lines[:line]) + text + "".join(lines[line:])


def _cursor(text: str | None, what: tuple[Any, ...]) -> str | None:
    try:
        key = wire.decode_cursor(text, what)
    except InvalidInputError:
        raise InvalidInputError(
            "page_token: not a token of this listing (pass next_page_token back as is)"
        ) from None
    if key is not None and not isinstance(key, str):
        raise InvalidInputError("page_token: not a token of this listing")
    return key
