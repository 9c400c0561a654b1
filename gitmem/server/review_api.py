"""The reviewer's endpoints of ``gitmem serve`` (docs/review.md), beside the Anthropic API:

    GET  /v1/gitmem/stores/{name}/proposals[?status=open&scope=main]
    GET  /v1/gitmem/stores/{name}/proposals/{proposal_id}
    GET  /v1/gitmem/stores/{name}/proposals/{proposal_id}/diff
    POST /v1/gitmem/stores/{name}/proposals/{proposal_id}/accept   {"paths": [...], "reason": "..."}
    POST /v1/gitmem/stores/{name}/proposals/{proposal_id}/reject   {"paths": [...], "reason": "..."}
    POST /v1/gitmem/stores/{name}/proposals/{proposal_id}/erase    {"reason": "..."}

Same tokens, errors and threading as the Anthropic API (its ``endpoint`` plumbing). Listing and
reading give a proposal only to its proposer and to reviewers (the engine's one rule,
``gitmem.engine.access.may_see_proposal``, asked through the token's caller: any other proposal is
left out of the list and answers as an unknown id, 404); deciding needs write access from a token
that is not itself in review mode, and the decision is recorded under the token's actor.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from starlette.routing import Route

from gitmem.errors import ForbiddenError, InvalidInputError, NotFoundError
from gitmem.server import wire
from gitmem.server.anthropic_api import AnthropicApi, Call, Json
from gitmem.server.tokens import Token
from gitmem.store import Store, resolve_store

if TYPE_CHECKING:
    from gitmem.store import Proposal

BASE = "/v1/gitmem/stores/{name}/proposals"


def _json(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    if hasattr(value, "isoformat"):
        return wire.rfc3339(value)
    return value


def reviewer_refusal(token: Token, name: str, scope: str | None = None) -> str | None:
    """Why ``token`` may not decide the proposals of store ``name`` (in ``scope``), or None when
    it may: the server's one rule for reviewers (these endpoints and the console's review pages).
    The library adds its own at the decision: never the proposer, never an actor in review mode."""
    if token.review:
        return f"token {token.id} is in review mode: it cannot decide proposals"
    if not token.may_write(name, scope):
        return f"token {token.id} may not review store {name!r}"
    return None


class ReviewApi:
    def __init__(self, api: AnthropicApi) -> None:
        self.api = api

    def routes(self) -> list[Route]:
        e = self.api.endpoint
        one = BASE + "/{proposal_id}"
        return [
            Route(BASE, e(self.list_proposals), methods=["GET"]),
            Route(one, e(self.show), methods=["GET"]),
            Route(one + "/diff", e(self.diff), methods=["GET"]),
            Route(one + "/accept", e(self.accept, with_body=True), methods=["POST"]),
            Route(one + "/reject", e(self.reject, with_body=True), methods=["POST"]),
            Route(one + "/erase", e(self.erase, with_body=True), methods=["POST"]),
        ]

    def _name(self, call: Call, *, decide: bool = False) -> str:
        """The handle (pool key) of the store in the URL: an id, or a name one store carries. A
        store the token may not read answers as one that does not exist, naming only what the URL
        said (the door's rule: no existence oracle, docs/access.md)."""
        shown = call.params["name"]
        try:
            name = resolve_store(shown, self.api.pool.home).handle
        except NotFoundError:
            name = None
        if name is None or not call.token.may_read(name):
            raise NotFoundError(f"memory store {shown!r} does not exist")
        if decide:
            refusal = reviewer_refusal(call.token, name)
            if refusal is not None:
                raise ForbiddenError(refusal)
        return name

    def _proposal(self, call: Call, store: Store, name: str, *, decide: bool = False) -> Proposal:
        """The proposal of the URL as the engine lets the token's caller read it (else a missing
        one's 404), and for a decision, one the token may decide (its scope included)."""
        p = store.proposal(call.params["proposal_id"], caller=call.caller)
        refusal = reviewer_refusal(call.token, name, p.scope) if decide else None
        if refusal is not None:
            raise ForbiddenError(refusal)
        return p

    def list_proposals(self, call: Call) -> Json:
        name = self._name(call)
        with self.api.pool.store(name) as store:
            found = store.proposals(
                status=call.query.get("status"), scope=call.query.get("scope"), caller=call.caller
            )
            return {"data": [_json(store.proposal_summary(p, caller=call.caller)) for p in found]}

    def show(self, call: Call) -> Json:
        name = self._name(call)
        with self.api.pool.store(name) as store:
            p = self._proposal(call, store, name)
            return {
                "proposal": _json(store.proposal_summary(p, caller=call.caller)),
                "versions": _json(store.proposal_versions(p.id, caller=call.caller)),
            }

    def diff(self, call: Call) -> Json:
        name = self._name(call)
        with self.api.pool.store(name) as store:
            pid = self._proposal(call, store, name).id
            return {"data": _json(store.proposal_diff(pid, caller=call.caller))}

    def _decision(self, call: Call) -> tuple[list[str] | None, str]:
        data = wire.body(call.raw or b"{}", ("paths", "reason"))
        paths = data.get("paths")
        if paths is not None and (not isinstance(paths, list) or not all(isinstance(p, str) for p in paths)):
            raise InvalidInputError("paths must be a list of memory paths")
        reason = wire.string(data, "reason", nullable=True) or ""
        return paths, reason

    def accept(self, call: Call) -> Json:
        name = self._name(call, decide=True)
        paths, reason = self._decision(call)
        with self.api.pool.store(name) as store:
            done = store.accept(
                self._proposal(call, store, name, decide=True).id,
                reviewer=call.token.actor,
                session=call.token.session,
                caller=call.caller,
                paths=paths,
                reason=reason,
            )
            return {
                "proposal": _json(store.proposal_summary(done.proposal)),
                "versions": _json(done.versions),
            }

    def reject(self, call: Call) -> Json:
        name = self._name(call, decide=True)
        paths, reason = self._decision(call)
        with self.api.pool.store(name) as store:
            p = store.reject(
                self._proposal(call, store, name, decide=True).id,
                reviewer=call.token.actor,
                session=call.token.session,
                caller=call.caller,
                reason=reason,
                paths=paths,
            )
            return {"proposal": _json(store.proposal_summary(p))}

    def erase(self, call: Call) -> Json:
        name = self._name(call, decide=True)
        data = wire.body(call.raw or b"{}", ("reason",), required=("reason",))
        reason = wire.string(data, "reason") or ""
        with self.api.pool.store(name) as store:
            done = store.erase_proposal(
                self._proposal(call, store, name, decide=True).id,
                reviewer=call.token.actor,
                session=call.token.session,
                caller=call.caller,
                reason=reason,
            )
            return {
                "proposal": _json(store.proposal_summary(done.proposal)),
                "erasure": done.id,
                "versions": done.versions,
                "purged": done.purged,
            }
