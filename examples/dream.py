"""A dream end to end: ``gitmem serve``, the official SDK's ``client.beta.dreams``, a model that
consolidates a store, and a reviewer who accepts what it proposes (docs/dreams.md).

1. A store holds two notes saying the same thing and a stale fact; a session wrote the newer one.
2. ``client.beta.dreams.create(..., output_behavior=update_existing)`` asks ``gitmem serve`` for a
   dream. The dreamer runs a model with Claude's memory tool over the store. Here the model is a
   scripted Messages API server on 127.0.0.1 (fixed tool calls: delete the duplicate, replace the
   stale fact); the changes land as a proposal, each with the model's reasoning.
3. A reviewer accepts the proposal; the store holds the consolidated notes.
4. With ``ANTHROPIC_API_KEY`` set, the same dream runs once more against the real API (the model
   decides what to change; its proposal is left open). Without it, that part says it skipped.

    python examples/dream.py [--home DIR] [--model claude-sonnet-4-6]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic

import gitmem
from gitmem.server.tokens import TokenStore

STORE = {
    "/prefs/coffee.md": "The user drinks coffee black, no sugar.\n",
    "/prefs/coffee-again.md": "User likes black coffee without sugar.\n",
    "/facts/office.md": "The office is in Berlin.\n",
}
SESSION = "sesn_example_week1"
SCRIPT: list[list[dict[str, Any]]] = [
    [
        {"type": "text", "text": "Looking at the store first."},
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "memory",
            "input": {"command": "view", "path": "/memories"},
        },
    ],
    [
        {"type": "text", "text": "The two coffee notes say the same thing: keep one."},
        {
            "type": "tool_use",
            "id": "toolu_2",
            "name": "memory",
            "input": {"command": "delete", "path": "/memories/prefs/coffee-again.md"},
        },
    ],
    [
        {"type": "text", "text": "The session says the office moved to Lisbon: the Berlin fact is stale."},
        {
            "type": "tool_use",
            "id": "toolu_3",
            "name": "memory",
            "input": {
                "command": "str_replace",
                "path": "/memories/facts/office.md",
                "old_str": "Berlin",
                "new_str": "Lisbon",
            },
        },
    ],
    [{"type": "text", "text": "The store is consolidated."}],
]


@contextmanager
def scripted_model() -> Iterator[str]:
    """A Messages API server answering turn n of any conversation with SCRIPT[n]."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
            turn = sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")
            blocks = SCRIPT[min(turn, len(SCRIPT) - 1)]
            reply = {
                "id": f"msg_{turn}",
                "type": "message",
                "role": "assistant",
                "model": body.get("model"),
                "content": blocks,
                "stop_reason": "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 200, "output_tokens": 20},
            }
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def gitmem_serve(home: Path) -> Iterator[str]:
    import uvicorn

    from gitmem.server.app import create_app

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(home), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def dream_once(client: anthropic.Anthropic, store_id: str, model: str) -> Any:
    d = client.beta.dreams.create(
        inputs=[
            {"type": "memory_store", "memory_store_id": store_id},
            {"type": "sessions", "session_ids": [SESSION]},
        ],
        model=model,
        instructions="Merge duplicate notes and replace stale facts with what the session says.",
        output_behavior={"type": "update_existing", "memory_store_id": store_id},
    )
    print(f"created {d.id}: {d.status}")
    while d.status in ("pending", "running"):
        time.sleep(0.2)
        d = client.beta.dreams.retrieve(d.id)
    print(f"{d.id}: {d.status}, {d.usage.input_tokens} input / {d.usage.output_tokens} output tokens")
    if d.error:
        print(f"  error: {d.error.type}: {d.error.message}")
    ext = d.model_extra["gitmem"] if d.model_extra else {}
    for c in ext.get("changes", []):
        print(f"  proposed {c['operation']} {c['path']}: {c['reasoning']}")
    for r in ext.get("refused", []):
        print(f"  refused {r['command']} {r['path']}: {r['message']}")
    return d


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--home", type=Path, help="workspace directory (default: a temporary one)")
    parser.add_argument("--model", default="claude-sonnet-4-6", help="the model for the live run")
    args = parser.parse_args(argv)
    home = args.home or Path(tempfile.mkdtemp(prefix="gitmem-dream-"))
    with gitmem.create_store("notes", home=home) as s:
        for path, content in STORE.items():
            s.write(path, content, actor="user:alice")
        s.write("/notes/move.md", "We moved the office to Lisbon in May.\n", session=SESSION)
    tokens = TokenStore(home)
    writer = tokens.create(actor="user:agent-owner", stores={"notes": "rw"})[1]
    reviewer = tokens.create(actor="user:reviewer", stores={"notes": "rw"})[1]

    print("== a dream with the scripted model")
    with scripted_model() as model_url:
        os.environ["GITMEM_DREAM_BASE_URL"] = model_url  # read by the dreamer when serve starts
        os.environ["GITMEM_DREAM_API_KEY"] = "scripted"
        with gitmem_serve(home) as url:
            client = anthropic.Anthropic(base_url=url, api_key=writer)
            store_id = next(m.id for m in client.beta.memory_stores.list() if m.name == "notes")
            d = dream_once(client, store_id, "scripted-model")
            proposal = d.model_extra["gitmem"]["proposal_id"]
            rev = anthropic.Anthropic(base_url=url, api_key=reviewer)
            done = rev.post(f"/v1/gitmem/stores/notes/proposals/{proposal}/accept", body={}, cast_to=object)
            print(f"accepted {proposal}: {done['proposal']['status']}")  # type: ignore[index]
    with gitmem.open_store("notes", home) as s:
        for m in s.list():
            print(f"  {m.path}: {s.read(m.path).content.strip()}")

    print("== a dream with the real API")
    key = os.environ.get("ANTHROPIC_API_KEY")
    if not key:
        print("skipped: ANTHROPIC_API_KEY is not set")
        return 0
    os.environ.pop("GITMEM_DREAM_BASE_URL", None)
    os.environ["GITMEM_DREAM_API_KEY"] = key
    with gitmem.open_store("notes", home) as s:
        s.write("/prefs/tea.md", "Likes green tea.\n", actor="user:alice")
        s.write("/prefs/tea2.md", "The user likes green tea.\n", actor="user:alice")
    with gitmem_serve(home) as url:
        client = anthropic.Anthropic(base_url=url, api_key=writer)
        store_id = next(m.id for m in client.beta.memory_stores.list() if m.name == "notes")
        live = dream_once(client, store_id, args.model)
        proposal = (live.model_extra or {}).get("gitmem", {}).get("proposal_id")
        if proposal:
            print(f"its proposal is left open for review: {proposal}")
        return 0 if live.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
