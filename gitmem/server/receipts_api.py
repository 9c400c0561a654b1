"""The redaction receipt endpoint of ``gitmem serve`` (docs/transparency.md#receipts):

    GET /v1/memory_stores/{memory_store_id}/memory_versions/{memory_version_id}/receipt

The tlog-proof receipt of a redacted version (``pending`` until the workspace's witness quorum
cosigned); read access to the store is enough, for a redaction that rewrote only scopes the token
may read (the library decides with the token's caller: a scope-confined token asking for one that
also rewrote another scope is refused, 403, docs/redaction.md). Same tokens, errors and threading as the
Anthropic API (its ``endpoint`` plumbing).
"""

from __future__ import annotations

from starlette.routing import Route

from gitmem.errors import NotFoundError
from gitmem.server.anthropic_api import AnthropicApi, Call, Json


class ReceiptsApi:
    def __init__(self, api: AnthropicApi) -> None:
        self.api = api

    def routes(self) -> list[Route]:
        path = "/v1/memory_stores/{memory_store_id}/memory_versions/{memory_version_id}/receipt"
        return [Route(path, self.api.endpoint(self.version_receipt), methods=["GET"])]

    def version_receipt(self, call: Call) -> Json:
        api = self.api
        scope = call.scope()
        with api.pool.store(api._name(call, scope=scope)) as store:
            v = api._version(store, call, scope)
            if v.redaction is None:
                raise NotFoundError(f"version {v.id} is not redacted: it has no receipt")
            return store.redaction_receipt(v.redaction.id, caller=call.caller)
