"""The version endpoints of the Anthropic memory stores API: list, retrieve and redact versions
(mixed into :class:`gitmem.server.anthropic_api.AnthropicApi`, whose plumbing they use)."""

from __future__ import annotations

from typing import Any

from gitmem.errors import AccessError, ConflictError, ForbiddenError, InvalidInputError, NotFoundError
from gitmem.model.versions import Version
from gitmem.server import wire
from gitmem.server.anthropic_call import Call
from gitmem.server.metrics import Metrics
from gitmem.server.pool import StorePool
from gitmem.store import Store

Json = dict[str, Any]


class VersionEndpoints:
    """``/v1/memory_stores/{id}/memory_versions[...]``."""

    pool: StorePool
    metrics: Metrics

    def _name(self, call: Call, *, write: bool = False, scope: str | None = None) -> str:
        raise NotImplementedError  # AnthropicApi's

    def _version_id(self, call: Call) -> str:
        raise NotImplementedError  # AnthropicApi's

    def _content(self, store: Store, v: Version) -> str | None:
        if v.redaction is not None or v.operation == "deleted":
            return None
        try:
            return store.read(v.path, scope=v.scope, version=v.id).content
        except NotFoundError:
            return None

    def list_versions(self, call: Call) -> Json:
        scope = call.scope()
        q = call.query
        chosen = wire.view(q, "basic")
        limit = wire.limit(q, chosen)
        memory_id = wire.id_param(q.get("memory_id"), "mem", "memory_id")
        api_key = q.get("api_key_id")
        if api_key is not None and not api_key.startswith("apikey_"):
            raise InvalidInputError(f"api_key_id: expected an apikey_ id, got {api_key!r}")
        filters: dict[str, Any] = {
            "memory_id": memory_id,
            "session": q.get("session_id"),
            "actor": f"api:{api_key}" if api_key else None,
            "operation": q.get("operation"),
            "since": wire.time_param(q, "created_at[gte]"),
            "until": wire.time_param(q, "created_at[lte]"),
        }
        what = ("versions", call.params["memory_store_id"], scope, *(str(v) for v in filters.values()))
        after = wire.decode_cursor(q.get("page"), what)
        with self.pool.store(self._name(call, scope=scope)) as store:
            store_id = store.settings.id
            try:
                found = store.versions(scope=scope, **filters)
            except InvalidInputError as exc:
                raise InvalidInputError(f"operation: {exc.message}") from None
            if after is not None:
                found = wire.versions_after(found, after)
            chosen_rows = found[:limit]
            out = [
                wire.version_json(v, store_id, self._content(store, v) if chosen == "full" else None)
                for v in chosen_rows
            ]
            more = len(found) > limit
            last = chosen_rows[-1] if chosen_rows else None
            cursor = (
                wire.encode_cursor([last.id, int(last.created_at.timestamp())], what)
                if more and last
                else None
            )
            return wire.page(out, cursor)

    def _version(self, store: Store, call: Call, scope: str) -> Version:
        vid = self._version_id(call)
        try:
            return store.version(vid, scope=scope)  # a fork's shared version answers for the fork
        except NotFoundError:
            raise NotFoundError(f"version {vid} does not exist in scope {scope!r}") from None

    def retrieve_version(self, call: Call) -> Json:
        scope = call.scope()
        chosen = wire.view(call.query, "full")
        with self.pool.store(self._name(call, scope=scope)) as store:
            v = self._version(store, call, scope)
            return wire.version_json(
                v, store.settings.id, self._content(store, v) if chosen == "full" else None
            )

    def redact_version(self, call: Call) -> Json:
        scope = call.scope()
        name = self._name(call, write=True, scope=scope)
        wire.body(call.raw, ())
        with self.pool.store(name) as store, self.pool.write_lock(name, scope):
            v = self._version(store, call, scope)
            if v.redaction is None:
                try:
                    store.redact(
                        v.id,
                        reason=f"redacted through the API with token {call.token.id}",
                        caller=call.caller,
                    )
                except AccessError:  # no redact right, review mode, another scope: 403
                    raise
                except ForbiddenError as exc:  # the head of a live memory, or an archived store
                    raise ConflictError(exc.message) from None
                self.metrics.writes.labels("redacted").inc()
                v = store.version(v.id, scope=scope)
            return wire.version_json(v, store.settings.id, None)
