"""A scripted model for the dream tests: a Messages API server on 127.0.0.1 that answers
``POST /v1/messages`` (and ``/v1/chat/completions``, OpenAI-compatible) with fixed content blocks, turn by turn (the turn is the number of assistant
messages in the request, so every conversation gets the same script from its start)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Block = dict[str, Any]


def text(t: str) -> Block:
    return {"type": "text", "text": t}


def memory(n: int, **command: Any) -> Block:
    return {"type": "tool_use", "id": f"toolu_{n:04d}", "name": "memory", "input": command}


# A store with two notes saying the same thing and a stale fact a session corrected.
STORE = {
    "/prefs/coffee.md": "The user drinks coffee black, no sugar.\n",
    "/prefs/coffee-again.md": "User likes black coffee without sugar.\n",
    "/facts/office.md": "The office is in Berlin.\n",
}
SESSION_NOTE = ("/notes/move.md", "We moved the office to Lisbon in May.\n")
MERGE_REASON = "The two coffee notes say the same thing: keep one."
STALE_REASON = "The session says the office moved to Lisbon: the Berlin fact is stale."
CONSOLIDATE: list[list[Block]] = [
    [text("Looking at the store first."), memory(1, command="view", path="/memories")],
    [text(MERGE_REASON), memory(2, command="delete", path="/memories/prefs/coffee-again.md")],
    [
        text(STALE_REASON),
        memory(
            3, command="str_replace", path="/memories/facts/office.md", old_str="Berlin", new_str="Lisbon"
        ),
    ],
    [text("The store is consolidated.")],
]


@dataclass
class Script:
    turns: list[list[Block]]
    gate_turn: int | None = None  # the turn that waits for ``release``
    release: threading.Event = field(default_factory=threading.Event)
    reached: threading.Event = field(default_factory=threading.Event)  # the gate turn was asked for
    requests: list[Json] = field(default_factory=list)
    raw: bytes | None = None  # answer these bytes instead (a model server returning garbage)


Json = dict[str, Any]


def _reply(script: Script, body: Json) -> Json:
    turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
    if script.gate_turn is not None and turn >= script.gate_turn:
        script.reached.set()
        script.release.wait(120)
    blocks = script.turns[min(turn, len(script.turns) - 1)]
    uses_tools = any(b["type"] == "tool_use" for b in blocks)
    return {
        "id": f"msg_{turn:04d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "scripted"),
        "content": blocks,
        "stop_reason": "tool_use" if uses_tools else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": 100 + turn,
            "output_tokens": 10,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def _chat_reply(script: Script, body: Json) -> Json:
    """The same script as an OpenAI-compatible chat completion (text as content, tool_use blocks
    as function tool calls)."""
    turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
    if script.gate_turn is not None and turn >= script.gate_turn:
        script.reached.set()
        script.release.wait(120)
    blocks = script.turns[min(turn, len(script.turns) - 1)]
    calls = [
        {
            "id": b["id"],
            "type": "function",
            "function": {"name": b["name"], "arguments": json.dumps(b["input"])},
        }
        for b in blocks
        if b["type"] == "tool_use"
    ]
    message: Json = {
        "role": "assistant",
        "content": " ".join(b["text"] for b in blocks if b["type"] == "text"),
    }
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{turn}",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "scripted"),
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": 100 + turn, "completion_tokens": 10, "total_tokens": 110 + turn},
    }


@contextmanager
def scripted_model(script: Script) -> Iterator[str]:
    """Serve ``script``; yields the base URL (give it to the dreamer as GITMEM_DREAM_BASE_URL)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("content-length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path.startswith("/v1/chat/completions"):
                answer = _chat_reply
            elif self.path.startswith("/v1/messages"):
                answer = _reply
            else:
                self.send_response(404)
                self.end_headers()
                return
            script.requests.append(body)
            data = script.raw if script.raw is not None else json.dumps(answer(script, body)).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # polled every 0.05 s: shutdown() waits for the next poll (0.5 s by default, each test)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        script.release.set()
        server.shutdown()
        server.server_close()


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Iterator[Script]:
    """The dream tests' model: :data:`CONSOLIDATE` served by :func:`scripted_model`, its URL and a key
    in the dreamer's environment. A plugin (``pytest_plugins`` in tests/conftest.py), so the test
    modules take it as a parameter without importing it; edit ``model.turns`` to script another reply."""
    script = Script([list(t) for t in CONSOLIDATE])
    with scripted_model(script) as url:
        monkeypatch.setenv("GITMEM_DREAM_BASE_URL", url)
        monkeypatch.setenv("GITMEM_DREAM_API_KEY", "scripted")
        yield script
