"""A conversation on gitmem with the official ``openai`` client, no API key needed (docs/conversations.md).

A scripted OpenAI-compatible model server runs on 127.0.0.1 (it speaks the Responses API, plain
and streamed, and answers by echoing what it was sent); ``gitmem serve`` runs with
``/v1/responses`` forwarding to it. The client creates a conversation bound to a store and a user's
scope (the Databricks document's ``extra_body``), talks two turns through
``responses.create(conversation=...)`` (the second streamed), lists the items and shows the
versions each turn wrote::

    python examples/conversations_scripted.py --home /tmp/conv-demo
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import uvicorn

import gitmem
from gitmem.server.app import create_app
from gitmem.server.tokens import TokenStore


def _text_of(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return " ".join(str(c.get("text", "")) for c in content or [] if isinstance(c, dict))


class ScriptedUpstream:
    """An OpenAI-compatible ``POST /v1/responses`` on 127.0.0.1 that echoes its input.

    ``requests`` keeps every body it received. A last user message containing ``FAIL`` gets a
    500; with ``BREAK`` a stream stops after its first delta, without a final event; with
    ``BADEND`` a stream ends with ``response.failed``.
    """

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.sent: list[bytes] = []  # the body of each answer, as written
        self.turns = 0
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                upstream.requests.append(body)
                upstream.answer(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def answer(self, h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        items = (
            body["input"] if isinstance(body["input"], list) else [{"role": "user", "content": body["input"]}]
        )
        last = _text_of(items[-1])
        if "FAIL" in last:
            data = json.dumps({"error": {"message": "scripted failure", "type": "server_error"}}).encode()
            h.send_response(500)
            h.send_header("content-type", "application/json")
            h.send_header("content-length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        self.turns += 1
        text = f"turn {self.turns}: I saw {len(items)} item(s), the last was {last!r}"
        rid, mid = f"resp_scripted{self.turns}", f"msg_scripted{self.turns}"
        message = {
            "id": mid,
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }
        response = {
            "id": rid,
            "object": "response",
            "created_at": int(time.time()),
            "model": body.get("model", "scripted"),
            "status": "completed",
            "output": [message],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "metadata": {},
        }
        if not body.get("stream"):
            data = json.dumps(response).encode()
            self.sent.append(data)
            h.send_response(200)
            h.send_header("content-type", "application/json")
            h.send_header("content-length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
            return
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.end_headers()
        self.sent.append(b"")
        pending = {**message, "status": "in_progress", "content": []}
        words = text.split(" ")
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {**response, "status": "in_progress", "output": []}},
            {"type": "response.output_item.added", "output_index": 0, "item": pending},
        ]
        events += [
            {
                "type": "response.output_text.delta",
                "item_id": mid,
                "output_index": 0,
                "content_index": 0,
                "delta": (" " if n else "") + w,
                "logprobs": [],
            }
            for n, w in enumerate(words)
        ]
        events += [
            {
                "type": "response.output_text.done",
                "item_id": mid,
                "output_index": 0,
                "content_index": 0,
                "text": text,
                "logprobs": [],
            },
            {"type": "response.output_item.done", "output_index": 0, "item": message},
            {"type": "response.completed", "response": response},
        ]
        if "BADEND" in last:
            failed = {
                **response,
                "status": "failed",
                "error": {"code": "server_error", "message": "scripted"},
            }
            events[-1] = {"type": "response.failed", "response": failed}
        for n, event in enumerate(events):
            if "BREAK" in last and n == 3:
                return  # the connection closes mid-stream
            event["sequence_number"] = n
            chunk = f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
            self.sent[-1] += chunk
            h.wfile.write(chunk)
            h.wfile.flush()

    def __enter__(self) -> ScriptedUpstream:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def gitmem_serve(home: Path, upstream: str) -> Iterator[str]:
    """``gitmem serve``'s app on 127.0.0.1 (in a thread), forwarding ``/v1/responses`` to ``upstream``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(home, responses_upstream=upstream), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, help="workspace directory (default: a temporary one)")
    args = parser.parse_args(argv)
    home = args.home or Path(tempfile.mkdtemp(prefix="gitmem-conv-"))
    gitmem.create_store("support", home=home).close()
    _token, secret = TokenStore(home).create(
        actor="service:support-bot", stores={"support": "rw"}, session="sesn_demo"
    )
    with ScriptedUpstream() as upstream, gitmem_serve(home, upstream.url) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key=secret, max_retries=0)
        conversation = client.conversations.create(
            extra_body={"memory_store": {"name": "support"}, "scope": {"kind": "user", "value": "user-123"}},
            items=[{"role": "system", "content": "You are a helpful support agent."}],
        )
        print("conversation", conversation.id)
        first = client.responses.create(
            model="scripted", conversation=conversation.id, input="My order is late."
        )
        print("turn 1:", first.output_text)
        streamed = []
        with client.responses.create(
            model="scripted", conversation=conversation.id, input="Order 42, please check.", stream=True
        ) as stream:
            for event in stream:
                if event.type == "response.output_text.delta":
                    streamed.append(event.delta)
        print("turn 2 (streamed):", "".join(streamed))
        print("items, oldest first:")
        for item in client.conversations.items.list(conversation.id, order="asc"):
            print(f"  {item.role:9} {_text_of(item.model_dump())}")  # type: ignore[union-attr]
    print("$ gitmem log support --scope user-123")
    with gitmem.open_store("support", home=home) as store:
        for v in store.versions(scope="user-123"):
            print(f"  {v.operation:8} {v.path}  {v.actor}  {v.session}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
