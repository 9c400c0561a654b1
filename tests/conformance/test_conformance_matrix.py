"""The conformance matrix run: every cell of tests/conformance/matrix.py with its face's real client
(drivers_local.py: the library, the CLI, the memory tool, session sync, the Agents ``Runner``, a
LangGraph graph; drivers_remote.py: the official ``anthropic`` SDK, httpx for Databricks and the
console, the ``mcp`` client over HTTP and stdio, real ``git`` over file:// and HTTP;
drivers_ssh.py: real ``git`` through gitolite over ssh; drivers_openai.py: the ``openai`` client
on conversations and responses, httpx on the dreams; drivers_webhooks.py: httpx on the admin
webhook API, the CLI and the library), on
one workspace and one server for the whole module (docs/access.md)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import drivers_local as local
import drivers_openai as openai_faces
import drivers_remote as remote
import drivers_ssh as ssh
import drivers_webhooks as hooks
import pytest
from kit import ACL_REVIEWED, ACTORS, NAME, NONE, SESSIONS, TOKENS, WRITES, World, prepare
from matrix import NA, RUN, Cell
from serverkit import running

import gitmem
from gitmem.model.caller import FACES, OPERATIONS, Caller
from gitmem.server.app import create_app
from gitmem.server.tokens import TokenStore


class _Model(BaseHTTPRequestHandler):
    """A scripted OpenAI chat-completions endpoint: it answers every turn with one sentence (a
    dream's first turn that carries :data:`drivers_openai.PENDING_MARK` with one change)."""

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
        messages = body.get("messages") or []
        if openai_faces.PENDING_MARK in json.dumps(messages) and not any(
            m.get("role") == "assistant" for m in messages
        ):  # a dream asked for a change (case=pending): one memory tool call, its reasoning beside it
            return self._send(openai_faces.pending_reply())
        if self.path.endswith("/responses"):  # the Responses API (behind gitmem's proxy)
            return self._send(
                {
                    "id": "resp_1",
                    "object": "response",
                    "created_at": int(time.time()),
                    "status": "completed",
                    "model": "scripted",
                    "output": [
                        {
                            "type": "message",
                            "id": "msg_1",
                            "status": "completed",
                            "role": "assistant",
                            "content": [{"type": "output_text", "text": "Noted.", "annotations": []}],
                        }
                    ],
                    "parallel_tool_calls": True,
                    "tool_choice": "auto",
                    "tools": [],
                }
            )
        return self._send(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": "scripted",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "Noted."},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    def _send(self, data: dict[str, Any]) -> None:
        body = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    home = tmp_path_factory.mktemp("conformance") / "ws"
    store = gitmem.create_store(NAME, home=home, full_name=NAME)  # the Databricks face finds it by this
    gitmem.create_store("other", home=home).close()
    with gitmem.create_store("gated", home=home) as gated:
        gated.write("/seed.md", "seed\n", actor="user:seed")
        gated.update_settings(acl={"review": {"main": ["user:pusher"]}})
    with gitmem.create_store("shut", home=home) as shut:  # acl.write lets only the dreamer write
        shut.write("/seed.md", "seed\n", actor="user:rw", session="sesn_rw")
        shut.update_settings(acl={"write": {"*": ["service:dreamer"]}})
        shut_id = shut.settings.id
    store.write("/seed.md", "seed\n", actor="user:seed")
    store.write("/team.md", "team\n", scope="team", actor="user:seed")
    store.update_settings(acl={"review": {"main": [ACL_REVIEWED]}})
    prep = {c.id: prepare(store, c) for c in RUN}  # before any proposal opens: one sees its base
    # a proposal that must not reach readers who are not reviewers
    store.write("/proposed.md", "proposed\n", caller=Caller(actor="user:p", session="sesn_p", review=True))
    tokens = TokenStore(home)
    secrets, ids = {}, {}
    for name, kw in TOKENS.items():
        tok, secret = tokens.create(**kw)
        secrets[name], ids[name] = secret, tok.id
    model = ThreadingHTTPServer(("127.0.0.1", 0), _Model)
    threading.Thread(target=model.serve_forever, args=(0.05,), daemon=True).start()
    model_url = f"http://127.0.0.1:{model.server_port}/v1"
    with ExitStack() as stack:
        env = stack.enter_context(pytest.MonkeyPatch.context())
        env.setenv("GITMEM_DREAM_PROVIDER", "openai")  # dreams talk to the scripted model only
        env.setenv("GITMEM_DREAM_BASE_URL", model_url)
        env.setenv("GITMEM_DREAM_API_KEY", "x")
        url = stack.enter_context(running(home, body_timeout=1.0, responses_upstream=model_url))
        w = World(home, url, store, store.settings.id, secrets, ids, model_url)
        w.prep = prep
        w.extra["shut"] = shut_id
        try:
            yield w
        finally:
            for fn in reversed(w.extra.get("cleanup", [])):
                fn()
    model.shutdown()
    store.close()


# ---------------------------------------------------------------------- the matrix itself
def test_every_face_and_operation_has_rows() -> None:
    """A face or an operation added to gitmem.model.caller without rows fails here."""
    missing = rows_missing(RUN + NA, FACES, OPERATIONS)
    assert not missing, missing
    assert {c.op for c in RUN} <= set(OPERATIONS)
    for c in NA:
        assert c.reason.strip(), f"{c.id} carries no reason"
    ids = [c.id for c in RUN]
    assert len(ids) == len(set(ids)), "two rows for one cell"
    assert set(DRIVERS) == {c.face for c in RUN}, "a face with rows but no driver, or the reverse"


def rows_missing(cells: list[Cell], faces: tuple[str, ...], ops: tuple[str, ...]) -> list[str]:
    out = [f"rows for an unknown face {f}" for f in sorted({c.face for c in cells} - set(faces))]
    for face in faces:
        for op in ops:
            if not any(c.face == face and c.op in (op, "*") for c in cells):
                out.append(f"no row for {op} on {face}")
    return out


def test_the_check_fails_for_a_face_or_operation_without_rows() -> None:
    """The check above is not vacuous: a new face, or a new operation, is reported."""
    assert rows_missing(RUN + NA, (*FACES, "carrier-pigeon"), OPERATIONS) == [
        f"no row for {op} on carrier-pigeon" for op in OPERATIONS
    ]
    teleport = rows_missing(RUN + NA, FACES, (*OPERATIONS, "teleport"))
    assert teleport and all(m.startswith("no row for teleport on ") for m in teleport)


# Which face serves each route of ``gitmem serve`` (None: it reads and writes no store content).
ROUTE_FACES = (
    ("/healthz", None),
    ("/metrics", None),
    ("/v1/memory_stores", "anthropic"),
    ("/v1/gitmem/stores/{name}/proposals", "anthropic"),  # the review API beside the Anthropic one
    ("/v1/gitmem/stores/{name}/memory_versions", "anthropic"),  # redaction receipts
    ("/v1/gitmem/webhooks", "anthropic"),  # the admin's webhook endpoints, on the Anthropic API's tokens
    ("/v1/gitmem/stores/{name}/dream_pipeline", "dreams"),
    ("/v1/dreams", "dreams"),
    ("/v1/conversations", "conversations"),
    ("/v1/responses", "responses"),
    ("/api/2.1/unity-catalog", "databricks"),
    ("/git/", "git-http"),
    ("/mcp", "mcp-http"),
    ("/console", "console"),
)


def test_every_route_of_the_server_belongs_to_a_face_with_rows(tmp_path: Any) -> None:
    """A new route of ``gitmem serve`` that no face of the matrix covers fails here."""
    gitmem.create_store("x", home=tmp_path).close()
    app = create_app(tmp_path)
    while not hasattr(app, "routes"):  # the middleware in front of the routes
        app = app.app
    for route in app.routes:
        path = getattr(route, "path", "")
        face = next((f for prefix, f in ROUTE_FACES if path.startswith(prefix)), "unknown")
        assert face != "unknown", f"route {path} belongs to no face of the matrix: add rows"
        assert face is None or face in FACES


@pytest.mark.parametrize("cell", NA, ids=lambda c: c.id)
def test_not_applicable(cell: Cell) -> None:
    """Each n/a cell says why, and the reason holds where a test can see it."""
    assert len(cell.reason) > 20
    check = NA_CHECKS.get(cell.face)
    if check is not None:
        check(cell)


@pytest.mark.parametrize("cell", RUN, ids=lambda c: c.id)
def test_cell(world: World, cell: Cell) -> None:
    got = DRIVERS[cell.face](world, cell)
    assert (got.expect, got.code) == (cell.expect, cell.code), f"{cell.id}: {got.detail}"
    if got.expect in ("allowed", "proposed", "flagged") and cell.op in WRITES and cell.face != "dreams":
        # (a dream's versions are made later by its run, attributed to the dream: tests/server)
        assert got.actor is not None, f"{cell.id}: the driver did not read the attribution back"
    if got.actor is not None:
        want = got.want_actor or ACTORS[cell.caller]
        assert got.actor == want, f"{cell.id}: attributed to {got.actor}, not {want}"
        session = got.want_session or SESSIONS.get(cell.caller)
        if session == NONE:
            assert got.session is None, f"{cell.id}: session {got.session}, not none"
        elif session is not None:
            assert got.session == session, f"{cell.id}: session {got.session}, not {session}"


DRIVERS = {
    "library": hooks.routed(local.library, hooks.library),
    "cli": hooks.routed(local.cli, hooks.cli),
    "memory-tool": local.memory_tool,
    "session-sync": local.session_sync,
    "openai-agents": local.openai_agents,
    "langgraph": local.langgraph,
    "anthropic": hooks.routed(remote.anthropic_face, hooks.api),
    "databricks": remote.databricks,
    "mcp-http": remote.mcp_http,
    "mcp-stdio": remote.mcp_stdio,
    "git-file": remote.git_file,
    "git-http": remote.git_http,
    "git-ssh": ssh.git_ssh,
    "console": remote.console,
    **openai_faces.DRIVERS,
}
NA_CHECKS = openai_faces.NA_CHECKS
