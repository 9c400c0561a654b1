"""``POST /v1/responses`` with ``conversation=``: a proxy to an OpenAI-compatible upstream model.

gitmem loads the conversation's items, forwards the request to the configured upstream
(``GITMEM_RESPONSES_UPSTREAM``, e.g. ``http://127.0.0.1:8000/v1`` for vLLM; an optional
``GITMEM_RESPONSES_UPSTREAM_KEY`` is sent as its bearer token) with the whole conversation followed
by the new input as ``input``, and hands the answer back unchanged: the upstream's status, headers
that matter and body, or its server-sent events byte for byte when ``stream`` is true. Once the
upstream has finished with a completed (or incomplete) response, the new input items and the
response's output items are appended to the conversation as one batch; an upstream error, a
failed response or a stream that ends without one appends nothing. When the append itself is
refused (the guard, a limit), a plain call answers with that error instead of the response; a
stream, whose events have gone out already, ends with an ``error`` event saying so.

A request without ``conversation`` is forwarded as it is and stores nothing. The caller needs a
token that may write the conversation's store and scope; the upstream never sees gitmem's token.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2 as httpx
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from gitmem.errors import InvalidInputError
from gitmem.server.conversations_api import Bound, ConversationsApi, openai_error
from gitmem.server.door import caller_for
from gitmem.server.tokens import Token
from gitmem.store import normalize_conversation_item

log = logging.getLogger("gitmem.server.responses")
Json = dict[str, Any]
UPSTREAM_TIMEOUT = httpx.Timeout(600.0, connect=10.0)
PASSED_HEADERS = ("content-type", "openai-processing-ms", "x-request-id")
STORED_STATUSES = ("completed", "incomplete")


def _as_input(item: Json) -> Json:
    """A stored item as the Responses API takes it back as input (input messages carry no id)."""
    if item.get("type") == "message" and item.get("role") != "assistant":
        return {k: v for k, v in item.items() if k != "id"}
    return item


def new_input(value: Any) -> list[Json]:
    """The request's ``input`` as normalized items (a string is one user message)."""
    if isinstance(value, str):
        value = [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise InvalidInputError("input: a string or a non-empty list of items")
    return [normalize_conversation_item(v, f"input[{n}]") for n, v in enumerate(value)]


class SseWatch:
    """Follows a server-sent event stream as it passes, keeping the final response event."""

    def __init__(self) -> None:
        self._buffer = b""
        self.final: Json | None = None
        self.last_sequence = -1

    def feed(self, chunk: bytes) -> None:
        self._buffer += chunk
        while True:
            cut = min(
                (i for i in (self._buffer.find(b"\n\n"), self._buffer.find(b"\r\n\r\n")) if i >= 0),
                default=-1,
            )
            if cut < 0:
                return
            event, self._buffer = self._buffer[:cut], self._buffer[cut:].lstrip(b"\r\n")
            data = b"\n".join(
                line[5:].strip()
                for line in event.replace(b"\r\n", b"\n").split(b"\n")
                if line.startswith(b"data:")
            )
            try:
                parsed = json.loads(data) if data else None
            except ValueError:
                continue
            if isinstance(parsed, dict) and isinstance(parsed.get("sequence_number"), int):
                self.last_sequence = parsed["sequence_number"]
            if isinstance(parsed, dict) and parsed.get("type") in (
                "response.completed",
                "response.incomplete",
            ):
                response = parsed.get("response")
                self.final = response if isinstance(response, dict) else None
            elif isinstance(parsed, dict) and parsed.get("type") in ("response.failed", "error"):
                self.final = None


class ResponsesProxy:
    def __init__(self, api: ConversationsApi, upstream: str | None, key: str | None = None) -> None:
        self.api = api
        self.upstream = upstream.rstrip("/") if upstream else None
        self.key = key

    def routes(self) -> list[Route]:
        return [Route("/v1/responses", self.handle, methods=["POST"])]

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self.key:
            headers["authorization"] = f"Bearer {self.key}"
        return headers

    def _prepare(self, token: Token, body: Json) -> tuple[Json, Bound | None, list[Json]]:
        """The upstream's request body, the conversation (if any) and the new items to append."""
        ref = body.pop("conversation", None)
        if ref is None:
            return body, None, []
        cid = ref.get("id") if isinstance(ref, dict) else ref
        if not isinstance(cid, str):
            raise InvalidInputError('conversation: a conversation id or {"id": ...}')
        if body.get("previous_response_id") is not None:
            raise InvalidInputError("conversation and previous_response_id cannot both be given")
        bound = self.api.bind(token, cid, write=True)
        items = new_input(body.get("input"))
        caller = caller_for(token)  # a review token reads its own proposal on top
        with self.api.pool.store(bound.name) as store:
            store.conversation(bound.ulid, scope=bound.scope, caller=caller)
            history = store.conversation_items(bound.ulid, scope=bound.scope, caller=caller)
        return {**body, "input": [_as_input(i) for i in [*history, *items]]}, bound, items

    def _append(self, token: Token, bound: Bound, items: list[Json], response: Json) -> None:
        output = response.get("output")
        if not isinstance(output, list):
            raise InvalidInputError("the upstream's response has no output list")
        produced = [normalize_conversation_item(o, f"output[{n}]") for n, o in enumerate(output)]
        caller = caller_for(token)  # a review token's turn lands on its proposal
        with self.api.pool.store(bound.name) as store, self.api.pool.write_lock(bound.name, bound.scope):
            store.add_conversation_items(
                bound.ulid,
                [*items, *produced],
                scope=bound.scope,
                actor=token.actor,
                session=token.session,
                caller=caller,
            )

    async def handle(self, request: Request) -> Response:
        try:
            token, body = await self.api.authenticate(request)
            if self.upstream is None:
                return openai_error(
                    501, "no upstream model is configured: set GITMEM_RESPONSES_UPSTREAM on the server"
                )
            forwarded, bound, items = await anyio.to_thread.run_sync(lambda: self._prepare(token, body))
        except Exception as exc:  # noqa: BLE001 - every failure becomes an OpenAI error body
            return self.api.failure(request, exc)
        client = httpx.AsyncClient(timeout=UPSTREAM_TIMEOUT)
        url = f"{self.upstream}/responses"
        try:
            upstream = await client.send(
                client.build_request("POST", url, json=forwarded, headers=self._headers()), stream=True
            )
        except httpx.HTTPError as exc:
            await client.aclose()
            log.warning("upstream %s failed: %s", url, exc)
            return openai_error(502, "the upstream model server could not be reached")
        headers = {k: upstream.headers[k] for k in PASSED_HEADERS if k in upstream.headers}
        if upstream.status_code != 200 or not forwarded.get("stream"):
            try:
                content = await upstream.aread()
            except httpx.HTTPError:
                return openai_error(502, "the upstream model server broke off its answer")
            finally:
                await upstream.aclose()
                await client.aclose()
            if upstream.status_code == 200 and bound is not None:
                try:
                    response = json.loads(content)
                    if isinstance(response, dict) and response.get("status", "completed") in STORED_STATUSES:
                        await anyio.to_thread.run_sync(lambda: self._append(token, bound, items, response))
                except ValueError:
                    return openai_error(
                        502, "the upstream model server answered with something else than JSON"
                    )
                except Exception as exc:  # noqa: BLE001
                    return self.api.failure(request, exc)
            return Response(content, status_code=upstream.status_code, headers=headers)
        return StreamingResponse(self._relay(request, token, bound, items, upstream, client), headers=headers)

    async def _relay(
        self,
        request: Request,
        token: Token,
        bound: Bound | None,
        items: list[Json],
        upstream: httpx.Response,
        client: httpx.AsyncClient,
    ) -> AsyncIterator[bytes]:
        watch = SseWatch()
        finished = False
        try:
            async for chunk in upstream.aiter_raw():
                watch.feed(chunk)
                yield chunk
            finished = True
        except httpx.HTTPError as exc:
            log.warning("upstream stream broke off: %s", exc)
        finally:
            await upstream.aclose()
            await client.aclose()
        if not finished or bound is None or watch.final is None:
            return
        final = watch.final
        try:
            await anyio.to_thread.run_sync(lambda: self._append(token, bound, items, final))
        except Exception as exc:  # noqa: BLE001 - the events went out: say it in the stream
            error = json.loads(bytes(self.api.failure(request, exc).body))["error"]
            message = f"the answer was not stored in the conversation: {error['message']}"
            event = {
                "type": "error",
                "code": error["code"],
                "message": message,
                "param": None,
                "sequence_number": watch.last_sequence + 1,
                "error": {**error, "message": message},  # what the openai client raises on
            }
            yield f"event: error\ndata: {json.dumps(event)}\n\n".encode()
