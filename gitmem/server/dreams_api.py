"""Anthropic's Dreams API (``client.beta.dreams``) on ``gitmem serve`` (docs/dreams.md):

    POST /v1/dreams                      {inputs, model, instructions?, output_behavior?, gitmem?}
    GET  /v1/dreams                      ?created_at[gt]=&created_at[lt]=&include_archived=&limit=&page=&statuses[]=
    GET  /v1/dreams/{dream_id}
    POST /v1/dreams/{dream_id}/cancel
    POST /v1/dreams/{dream_id}/archive

and gitmem's memory pipelines of a store:

    GET  /v1/gitmem/stores/{name}/dream_pipeline
    POST /v1/gitmem/stores/{name}/dream_pipeline        {model, instructions?, output_behavior?, review?, scope?, every_seconds?}
    POST /v1/gitmem/stores/{name}/dream_pipeline/run    (a dream over the sessions since the last run)

Same tokens, errors and threading as the memory stores API (its ``endpoint`` plumbing). A dream is
visible to a token that may read its input store; its changes that wait for review only to a token
that may read its proposal (its proposer, the store's reviewers: ``dream_runs.seen``, the library's
rule). ``update_existing`` needs write access to the input store (403), ``create_new`` an admin
token (it creates a store). Each dream is run by the server's
:class:`gitmem.server.dreamer.DreamRunner`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from gitmem.errors import ForbiddenError, InvalidInputError, NotFoundError
from gitmem.server import dream_runs, wire
from gitmem.server.anthropic_api import AnthropicApi, Call, Json
from gitmem.server.dream_jobs import STATUSES, Dream, Pipeline
from gitmem.server.dreamer import DreamRunner
from gitmem.server.tokens import parse_time

CREATE_FIELDS = ("inputs", "model", "instructions", "output_behavior", "gitmem")
PIPELINE_FIELDS = ("model", "instructions", "output_behavior", "review", "scope", "every_seconds")


def dream_json(d: Dream) -> Json:
    inputs: list[Json] = [{"type": "memory_store", "memory_store_id": d.store_id}]
    if d.sessions:
        inputs.append({"type": "sessions", "session_ids": sorted(d.sessions)})
    behavior: Json = (
        {"type": "create_new"}
        if d.behavior == "create_new"
        else {"type": "update_existing", "memory_store_id": d.store_id}
    )
    outputs = (
        [{"type": "memory_store", "memory_store_id": d.output_id}]
        if d.output_id and d.status != "pending"
        else []
    )
    return {
        "type": "dream",
        "id": d.id,
        "status": d.status,
        "created_at": d.created_at,
        "ended_at": d.ended_at,
        "archived_at": d.archived_at,
        "error": d.error,
        "inputs": inputs,
        "instructions": d.instructions,
        "model": {"id": d.model, "speed": d.speed or "standard"},
        "output_behavior": behavior,
        "outputs": outputs,
        "session_id": d.session_id,
        "usage": dict(d.usage),
        "gitmem": {  # gitmem's extension: where the changes are and why each was made
            "store": d.store,
            "scope": d.scope,
            "review": d.review,
            "proposal_id": d.proposal_id,
            "output_store": d.output,
            "actor": d.actor,
            "trigger": d.trigger,
            "changes": d.changes,
            "refused": d.refused,
        },
    }


def listing_what(q: Any) -> tuple[Any, ...]:
    """What a dreams listing's page cursor is bound to (its filters; a cluster node merging the
    listings of every node makes the merged page's cursor with it, docs/cluster.md)."""
    wanted = [s for s in (q.get("statuses[]") or "").split(",") if s]
    include_archived = wire.boolean(q, "include_archived")
    return ("dreams", include_archived, q.get("created_at[gt]"), q.get("created_at[lt]"), sorted(wanted))


def _multi(inner: Any) -> Any:
    """``statuses[]=a&statuses[]=b`` (the SDK's array format) reaches the handler as one
    comma-joined value: the plumbing's query is a plain mapping."""

    async def handler(request: Request) -> Response:
        q = request.query_params
        items = [(k, v) for k, v in q.multi_items() if k not in ("statuses[]", "statuses")]
        statuses = q.getlist("statuses[]") + q.getlist("statuses")
        if statuses:
            items.append(("statuses[]", ",".join(statuses)))
        scope = dict(request.scope)
        scope["query_string"] = urlencode(items).encode("ascii")
        response: Response = await inner(Request(scope, request.receive))
        return response

    return handler


class DreamsApi:
    def __init__(self, api: AnthropicApi, runner: DreamRunner) -> None:
        self.api = api
        self.runner = runner
        self.jobs = runner.jobs

    def routes(self) -> list[Route]:
        e = self.api.endpoint
        one = "/v1/dreams/{dream_id}"
        pipe = "/v1/gitmem/stores/{name}/dream_pipeline"
        return [
            Route("/v1/dreams", e(self.create, with_body=True), methods=["POST"]),
            Route("/v1/dreams", _multi(e(self.list_dreams)), methods=["GET"]),
            Route(one, e(self.retrieve), methods=["GET"]),
            Route(one + "/cancel", e(self.cancel, with_body=True), methods=["POST"]),
            Route(one + "/archive", e(self.archive, with_body=True), methods=["POST"]),
            Route(pipe, e(self.get_pipeline), methods=["GET"]),
            Route(pipe, e(self.set_pipeline, with_body=True), methods=["POST"]),
            Route(pipe + "/run", e(self.run_pipeline, with_body=True), methods=["POST"]),
        ]

    # ------------------------------------------------------------------ access
    def _dream(self, call: Call, *, write: bool = False) -> Dream:
        d = self.jobs.get(wire.id_param(call.params["dream_id"], "drm", "dream_id") or "")
        if not call.token.may_read(d.store, d.scope):
            raise NotFoundError(f"dream {d.id} does not exist")  # not even that it exists
        if write and not (call.token.admin or call.token.may_write(d.store, d.scope)):
            raise ForbiddenError(f"token {call.token.id} may not change dream {d.id}")
        return d

    def _json(self, call: Call, d: Dream) -> Json:
        """The dream as the caller may see it (its changes waiting for review: only to who may read
        its proposal, decided by the library: dream_runs.seen), on the wire."""
        return dream_json(dream_runs.seen(d, call.caller, self.api.pool))

    # ------------------------------------------------------------------ the Dreams API
    def create(self, call: Call) -> Json:
        data = wire.body(call.raw, CREATE_FIELDS, required=("inputs", "model"))
        store_id, sessions = _inputs(data.get("inputs"))
        model, speed = _model(data.get("model"))
        instructions = dream_runs.check_instructions(data.get("instructions"))
        behavior = _behavior(data.get("output_behavior"), store_id)
        ext = data.get("gitmem") or {}
        if not isinstance(ext, dict) or set(ext) - {"review", "scope"}:
            raise InvalidInputError("gitmem: an object with review and scope only")
        review = ext.get("review", True)
        if not isinstance(review, bool):
            raise InvalidInputError("gitmem.review: true or false")
        if call.token.review:
            review = True  # a review token's writes are proposals, its dreams' too
        scope = ext.get("scope") or call.scope()
        if not isinstance(scope, str) or (call.token.scope is not None and scope != call.token.scope):
            raise ForbiddenError(f"token {call.token.id} may not use scope {scope!r}")
        name = self.api.pool.name_of(store_id)
        if not call.token.may_read(name, scope):
            raise NotFoundError(f"memory store {store_id} does not exist")  # as an unknown id: no oracle
        if behavior == "update_existing" and not call.token.may_write(name, scope):
            raise ForbiddenError(
                f"token {call.token.id} may not write memory store {store_id}: update_existing needs it"
            )
        if behavior == "create_new" and not call.token.admin:
            raise ForbiddenError(
                f"token {call.token.id} is not an admin token: create_new creates a memory store"
            )
        d = dream_runs.new_dream(
            self.jobs,
            self.api.pool.home,
            name,
            sessions=sessions,
            model=model,
            speed=speed,
            instructions=instructions,
            behavior=behavior,
            review=review,
            scope=scope,
            requested_by=call.token.actor,
        )
        self.runner.submit(d.id)
        return self._json(call, d)

    def list_dreams(self, call: Call) -> Json:
        q = call.query
        include_archived = wire.boolean(q, "include_archived")
        after, before = wire.time_param(q, "created_at[gt]"), wire.time_param(q, "created_at[lt]")
        limit = wire.limit(q)
        wanted = [s for s in (q.get("statuses[]") or "").split(",") if s]
        for s in wanted:
            if s not in STATUSES:
                raise InvalidInputError(f"statuses: {s!r} is not one of {', '.join(STATUSES)}")
        what = listing_what(q)
        cursor = wire.decode_cursor(q.get("page"), what)
        if cursor is not None and not (
            isinstance(cursor, list) and len(cursor) == 2 and isinstance(cursor[1], str)
        ):
            raise InvalidInputError("page: not a cursor of this listing")
        found = []
        for d in self.jobs.all():  # newest first
            if not call.token.may_read(d.store, d.scope):
                continue
            if d.archived_at is not None and not include_archived:
                continue
            if wanted and d.status not in wanted:
                continue
            created = parse_time(d.created_at)
            if (after and created <= after) or (before and created >= before):
                continue
            if cursor is not None and [d.created_ts, d.id] >= cursor:
                continue
            found.append(d)
        chosen = found[:limit]
        more = len(found) > limit
        next_page = wire.encode_cursor([chosen[-1].created_ts, chosen[-1].id], what) if more else None
        return wire.page([self._json(call, d) for d in chosen], next_page)

    def retrieve(self, call: Call) -> Json:
        return self._json(call, self._dream(call))

    def cancel(self, call: Call) -> Json:
        wire.body(call.raw, ())
        d = self._dream(call, write=True)
        return self._json(call, self.jobs.cancel(d.id))

    def archive(self, call: Call) -> Json:
        wire.body(call.raw, ())
        d = self._dream(call, write=True)
        return self._json(call, self.jobs.archive(d.id))

    # ------------------------------------------------------------------ memory pipelines
    def _store(self, call: Call, *, write: bool = False) -> str:
        """The handle (pool key) of the store in the URL: an id, or a name one store carries; a
        store the token may not read answers as one that does not exist, naming only what the URL
        said (no existence oracle, docs/access.md); a read-only grant's write is refused."""
        shown = call.params["name"]
        try:
            name = dream_runs.handle_of(shown, self.api.pool.home)
        except NotFoundError:
            name = None
        if name is None or not call.token.may_read(name):
            raise NotFoundError(f"memory store {shown!r} does not exist")
        if write and not call.token.may_write(name):
            raise ForbiddenError(f"token {call.token.id} may not write store {shown!r}")
        return name

    def get_pipeline(self, call: Call) -> Json:
        name = self._store(call)
        p = self.jobs.pipeline(name)
        if p is None:
            raise NotFoundError(f"store {name!r} has no memory pipeline")
        return p.to_dict()

    def set_pipeline(self, call: Call) -> Json:
        name = self._store(call, write=True)
        data = wire.body(call.raw, PIPELINE_FIELDS, required=("model",))
        model, _speed = _model(data.get("model"))
        behavior = data.get("output_behavior", "update_existing")
        review = data.get("review", True)
        every = data.get("every_seconds", 0)
        scope = data.get("scope") or call.token.default_scope()
        if not isinstance(review, bool) or not isinstance(every, int) or not isinstance(scope, str):
            raise InvalidInputError("review: a boolean, every_seconds: an integer, scope: a string")
        if behavior == "create_new" and not call.token.admin:
            raise ForbiddenError(
                f"token {call.token.id} is not an admin token: create_new creates a memory store"
            )
        if call.token.review:
            review = True
        if call.token.scope is not None and scope != call.token.scope:
            raise ForbiddenError(f"token {call.token.id} may not use scope {scope!r}")
        p = Pipeline(
            store=name,
            model=model,
            instructions=data.get("instructions"),
            behavior=str(behavior),
            review=review,
            scope=scope,
            every_seconds=every,
        )
        return dream_runs.set_pipeline(
            self.jobs, self.api.pool.home, p, requested_by=call.token.actor
        ).to_dict()

    def run_pipeline(self, call: Call) -> Json:
        name = self._store(call, write=True)
        p = self.jobs.pipeline(name)
        if p is not None and call.token.scope is not None and p.scope != call.token.scope:
            raise ForbiddenError(f"token {call.token.id} may not use scope {p.scope!r}")
        refusal = dream_runs.may_run(name, call.token.review, call.token.admin, p)
        if refusal is not None:
            raise ForbiddenError(refusal)
        d = dream_runs.trigger(
            self.jobs, self.api.pool.home, name, trigger="api", requested_by=call.token.actor
        )
        if d is None:
            return {
                "type": "dream_pipeline_run",
                "dream": None,
                "message": "no session wrote anything since the last run",
            }
        self.runner.submit(d.id)
        return {"type": "dream_pipeline_run", "dream": self._json(call, d)}


def _inputs(value: Any) -> tuple[str, list[str]]:
    if not isinstance(value, list):
        raise InvalidInputError("inputs: a list of one memory_store entry and one sessions entry")
    stores = [i for i in value if isinstance(i, dict) and i.get("type") == "memory_store"]
    sessions = [i for i in value if isinstance(i, dict) and i.get("type") == "sessions"]
    if len(stores) != 1 or len(sessions) != 1 or len(value) != 2:
        raise InvalidInputError("inputs: exactly one memory_store entry and one sessions entry")
    store = stores[0]
    if set(store) != {"type", "memory_store_id"} or set(sessions[0]) != {"type", "session_ids"}:
        raise InvalidInputError("inputs: memory_store takes memory_store_id, sessions takes session_ids")
    store_id = wire.id_param(store["memory_store_id"], "memstore", "memory_store_id")
    assert store_id is not None
    return store_id, dream_runs.check_sessions(sessions[0]["session_ids"])


def _model(value: Any) -> tuple[str, str | None]:
    if isinstance(value, str):
        model, speed = value, None
    elif isinstance(value, dict) and set(value) <= {"id", "speed"} and isinstance(value.get("id"), str):
        model, speed = value["id"], value.get("speed")
        if speed not in (None, "standard"):
            raise InvalidInputError("model.speed: only standard")
    else:
        raise InvalidInputError("model: a model id, or {id, speed}")
    if not 1 <= len(model) <= 256:
        raise InvalidInputError("model: a model id of 1 to 256 characters")
    return model, speed


def _behavior(value: Any, store_id: str) -> str:
    if value is None:
        return "create_new"
    if not isinstance(value, dict) or value.get("type") not in dream_runs.BEHAVIORS:
        raise InvalidInputError(
            "output_behavior: {type: create_new} or {type: update_existing, memory_store_id}"
        )
    if value["type"] == "create_new":
        if set(value) != {"type"}:
            raise InvalidInputError("output_behavior: create_new takes no other field")
        return "create_new"
    if set(value) != {"type", "memory_store_id"} or value["memory_store_id"] != store_id:
        raise InvalidInputError(
            "output_behavior.memory_store_id: update_existing writes the input memory store: give its id"
        )
    return "update_existing"
