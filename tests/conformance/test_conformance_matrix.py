"""The conformance matrix run: every cell of tests/conformance/matrix.py with its face's real client
(the library, the official ``anthropic`` SDK, httpx for Databricks and the console, the ``mcp``
client over HTTP and stdio, real ``git`` over file:// and HTTP, the Agents ``Runner`` against a
scripted chat-completions server, a real LangGraph graph), on one workspace and one server for the
whole module (docs/access.md)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import string
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import httpx2 as httpx
import pytest
from consolekit import csrf_of, sign_in
from matrix import NA, RUN, TODO, Cell
from serverkit import running

import gitmem
from gitmem.engine import proposals as P
from gitmem.errors import GitmemError, GuardRejectedError, NotFoundError
from gitmem.model.caller import FACES, OPERATIONS, Caller
from gitmem.server.door import caller_for
from gitmem.server.tokens import TokenStore
from gitmem.store import Store, resolve_store

NAME = "cat.s.notes"  # a Databricks-shaped name, so that every face serves the same store
DBX = f"/api/2.1/unity-catalog/memory-stores/{NAME}"
TOKENS: dict[str, dict[str, Any]] = {
    "ro": {"actor": "user:ro", "stores": {NAME: "ro"}},
    "rw": {"actor": "user:rw", "stores": {NAME: "rw"}, "session": "sesn_rw"},
    "scoped": {"actor": "user:scoped", "stores": {NAME: "rw"}, "scope": "team"},
    "review": {"actor": "user:review", "stores": {NAME: "rw"}, "review": True, "session": "sesn_review"},
    "admin": {"actor": "user:admin", "admin": True},
    "redactor": {"actor": "user:redactor", "stores": {NAME: "rw"}, "rights": ("write", "redact")},
    "other": {"actor": "user:other", "stores": {"other": "rw"}},
}


def fake_token(seed: int) -> str:
    """A GitHub-token-shaped string made at run time (no secret-shaped literal in the repository)."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    while True:
        body = "".join(rng.choice(alphabet) for _ in range(36))
        if (
            any(c.isdigit() for c in body)
            and any(c.isupper() for c in body)
            and any(c.islower() for c in body)
        ):
            return "ghp_" + body


@dataclass
class World:
    home: Path
    url: str
    store: Store
    sid: str
    secrets: dict[str, str]
    ids: dict[str, str] = field(default_factory=dict)  # caller -> token id
    model_url: str = ""
    prep: dict[str, dict[str, Any]] = field(default_factory=dict)  # cell id -> what _prepare made

    def client(self, caller: str) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=self.url, api_key=self.secrets[caller], max_retries=0)

    def caller(self, name: str) -> Caller | None:
        """The library face's caller: the local actor, or the same Caller a token is."""
        if name == "local":
            return None
        return caller_for(TokenStore(self.home).get(self.ids[name]))

    def headers(self, caller: str) -> dict[str, str]:
        return {} if caller == "none" else {"authorization": f"Bearer {self.secrets[caller]}"}

    # ------------------------------------------------------------ what happened
    def published(self, path: str, text: str | None = None, scope: str = "main") -> bool:
        try:
            m = self.store.read(path, scope=scope)
        except NotFoundError:
            return False
        return text is None or text in (m.content or "")

    def proposed(self, owner: str, path: str, scope: str = "main") -> bool:
        p = P.open_proposal(self.store.core, scope, owner)
        return p is not None and path in P.touched(self.store.core, p)

    def latest(self, path: str, scope: str = "main") -> Any:
        return self.store.versions(path, scope=scope, limit=1)[0]

    def seed(self, path: str, text: str = "seed\n", scope: str = "main") -> Any:
        return self.store.write(path, text, scope=scope, actor="user:seed")

    def old_version(self, path: str, scope: str = "main") -> str:
        v = self.store.write(path, f"old {path} {scope}\n", scope=scope, actor="user:seed")
        self.store.write(path, f"new {path}\n", scope=scope, actor="user:seed")
        assert v is not None
        return v.id


OWNERS = {"review": "sesn_review"}
ACTORS = {k: v["actor"] for k, v in TOKENS.items()} | {"local": "user:lib"}
SESSIONS = {"rw": "sesn_rw", "review": "sesn_review"}


class _Model(BaseHTTPRequestHandler):
    """A scripted OpenAI chat-completions endpoint: it answers every turn with one sentence."""

    def do_POST(self) -> None:  # noqa: N802 - the http.server API
        self.rfile.read(int(self.headers.get("content-length") or 0))
        body = json.dumps(
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
        ).encode()
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
    store.write("/seed.md", "seed\n", actor="user:seed")
    store.write("/team.md", "team\n", scope="team", actor="user:seed")
    prep = {c.id: _prepare(store, c) for c in RUN}  # before any proposal opens: one sees its base
    # a proposal that must not reach readers who are not reviewers
    store.write("/proposed.md", "proposed\n", caller=Caller(actor="user:p", session="sesn_p", review=True))
    tokens = TokenStore(home)
    secrets, ids = {}, {}
    for name, kw in TOKENS.items():
        tok, secret = tokens.create(**kw)
        secrets[name], ids[name] = secret, tok.id
    model = ThreadingHTTPServer(("127.0.0.1", 0), _Model)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    with ExitStack() as stack:
        url = stack.enter_context(running(home, body_timeout=1.0))
        w = World(
            home, url, store, store.settings.id, secrets, ids, f"http://127.0.0.1:{model.server_port}/v1"
        )
        w.prep = prep
        yield w
    model.shutdown()
    store.close()


def _prepare(store: Store, cell: Cell) -> dict[str, Any]:
    """What a cell's operation works on, written by the seed actor before the run."""
    path = _path(cell)
    out: dict[str, Any] = {}
    if cell.op in ("update", "rename", "delete"):
        v = store.write(path, "seed\n", actor="user:seed")
        out["memory_id"] = v.memory_id if v is not None else None
    elif cell.op in ("restore", "redact"):
        scope = "team" if cell.caller == "scoped" and cell.op == "redact" else "main"
        v = store.write(path, f"old {path} {scope}\n", scope=scope, actor="user:seed")
        store.write(path, f"new {path}\n", scope=scope, actor="user:seed")
        if scope == "team":  # the same content in main's history too
            store.write(path, f"old {path} {scope}\n", actor="user:seed")
            store.write(path, "gone\n", actor="user:seed")
        assert v is not None
        out["version"] = v.id
    elif cell.op == "revert-session":
        sid = f"sesn_bad{abs(hash(cell.id))}"
        store.write(path, "by a session\n", actor=f"session:{sid}", session=sid)
        out["session"] = sid
    return out


# ---------------------------------------------------------------------- the matrix itself
def test_every_face_and_operation_has_rows() -> None:
    """A face or an operation added to gitmem.model.caller without rows fails here."""
    cells = RUN + NA + TODO
    assert {c.face for c in cells} == set(FACES), "a face without rows, or rows for an unknown face"
    for face in FACES:
        for op in OPERATIONS:
            assert any(c.face == face and c.op in (op, "*") for c in cells), f"no row for {op} on {face}"
    assert {c.op for c in RUN} <= set(OPERATIONS)
    for c in NA + TODO:
        assert c.reason.strip(), f"{c.id} carries no reason"
    ids = [c.id for c in RUN]
    assert len(ids) == len(set(ids)), "two rows for one cell"


@pytest.mark.parametrize("cell", TODO, ids=lambda c: c.id)
def test_not_yet_driven(cell: Cell) -> None:
    pytest.xfail(cell.reason)


@pytest.mark.parametrize("cell", RUN, ids=lambda c: c.id)
def test_cell(world: World, cell: Cell) -> None:
    driver = DRIVERS[cell.face]
    got = driver(world, cell)
    assert (got.expect, got.code) == (cell.expect, cell.code), f"{cell.id}: {got.detail}"
    if got.expect in ("allowed", "proposed") and got.actor is not None:
        assert got.actor == ACTORS.get(cell.caller, got.actor), f"{cell.id}: attributed to {got.actor}"
        if cell.caller in SESSIONS and got.session is not None:
            assert got.session == SESSIONS[cell.caller], f"{cell.id}: session {got.session}"


@dataclass
class Got:
    expect: str
    code: int | str | None = None
    detail: str = ""
    actor: str | None = None
    session: str | None = None


def _write_outcome(w: World, cell: Cell, path: str, text: str | None, *, gone: bool = False) -> Got:
    """Published, proposed or nothing, with the attribution of the version it made."""
    if gone:
        try:
            w.store.read(path)
            published = False
        except NotFoundError:
            published = True
    else:
        published = w.published(path, text)
    if published:
        v = w.latest(path)
        return Got("allowed", actor=v.actor, session=v.session)
    owner = OWNERS.get(cell.caller, "sesn_libreview")
    if w.proposed(owner, path):
        p = P.open_proposal(w.store.core, "main", owner)
        assert p is not None
        mine = [v for v in P.versions(w.store.core, p.id) if v.path == path]
        return Got(
            "proposed", actor=mine[-1].actor if mine else None, session=mine[-1].session if mine else None
        )
    return Got("nothing", detail=f"{path}: neither published nor proposed")


def _path(cell: Cell, suffix: str = "") -> str:
    safe = "".join(ch if ch.isalnum() else "-" for ch in cell.id)
    return f"/m/{safe}{suffix}.md"


# ---------------------------------------------------------------------- library
def library(w: World, cell: Cell) -> Got:
    c = w.caller(cell.caller)
    actor = "user:lib" if c is None else None
    path = _path(cell)
    try:
        if cell.op == "create":
            if cell.case == "secret-path":
                path = f"/m/{fake_token(1)}.md"
            w.store.create(path, f"made {cell.id}\n", actor=actor, caller=c)
            return _write_outcome(w, cell, path, cell.id)
        if cell.op == "update":
            w.store.write(path, f"changed {cell.id}\n", actor=actor, caller=c)
            return _write_outcome(w, cell, path, "changed")
        if cell.op == "rename":
            new = f"/m/{fake_token(2)}.md" if cell.case == "secret-path" else _path(cell, "-new")
            w.store.rename(path, new, actor=actor, caller=c)
            return _write_outcome(w, cell, new, None)
        if cell.op == "delete":
            w.store.delete(path, actor=actor, caller=c)
            return _write_outcome(w, cell, path, None, gone=True)
        if cell.op == "redact":
            r = w.store.redact(w.prep[cell.id]["version"], reason="conformance", actor=actor, caller=c)
            return Got("allowed", actor=r.actor if hasattr(r, "actor") else None)
        if cell.op == "restore":
            w.store.restore(w.prep[cell.id]["version"], actor=actor, caller=c)
            return _write_outcome(w, cell, path, "old")
        if cell.op == "revert-session":
            from gitmem.sessions import revert_session

            revert_session(w.store, w.prep[cell.id]["session"], actor=actor, caller=c)
            return _write_outcome(w, cell, path, None, gone=True)
        if cell.op == "search":
            w.seed(path, "conformance needle\n")
            hits = w.store.search("needle", caller=c)
            return Got("allowed" if any(h.path == path for h in hits) else "nothing")
        if cell.op == "list":
            w.seed(path)
            found = [m.path for m in w.store.list("/m/", caller=c)]
            return Got("allowed" if path in found else "nothing")
        if cell.op == "review-accept":
            from gitmem.audit import review

            proposer = Caller(actor="user:prop", session=f"sesn_prop{abs(hash(cell.id))}", review=True)
            w.store.create(path, "to review\n", caller=proposer)
            p = P.open_proposal(w.store.core, "main", proposer.session or "")
            assert p is not None
            review.accept(w.store.core, p.id, reviewer=ACTORS[cell.caller], caller=c)
            return Got("allowed" if w.published(path) else "nothing")
    except GuardRejectedError as exc:
        return Got("guard", detail=exc.message)
    except GitmemError as exc:
        return Got("refused", exc.exit_code, exc.message)
    raise AssertionError(f"no library driver for {cell.op}")


# ---------------------------------------------------------------------- Anthropic API (official SDK)
def anthropic_face(w: World, cell: Cell) -> Got:
    path = _path(cell)
    if cell.caller == "none":
        r = httpx.get(f"{w.url}/v1/memory_stores/{w.sid}/memories")
        return Got("refused", r.status_code, r.text)
    c = w.client(cell.caller)
    mem = c.beta.memory_stores.memories
    try:
        if cell.op == "create":
            if cell.case == "marker":
                path = "/.anthropic-memory-store/x.md"
            mem.create(w.sid, path=path, content=f"made {cell.id}\n")
            return _write_outcome(w, cell, path, cell.id)
        if cell.op in ("update", "rename", "delete"):
            mid = w.prep[cell.id]["memory_id"]
            if cell.op == "update":
                mem.update(mid, memory_store_id=w.sid, content=f"changed {cell.id}\n")
                return _write_outcome(w, cell, path, "changed")
            if cell.op == "rename":
                new = _path(cell, "-new")
                mem.update(mid, memory_store_id=w.sid, path=new)
                return _write_outcome(w, cell, new, None)
            mem.delete(mid, memory_store_id=w.sid)
            return _write_outcome(w, cell, path, None, gone=True)
        if cell.op == "redact":
            extra = {"scope": "team"} if cell.caller == "scoped" else None
            vid = w.prep[cell.id]["version"]
            c.beta.memory_stores.memory_versions.redact(vid, memory_store_id=w.sid, extra_query=extra)
            return Got("allowed")
        if cell.op == "list":
            w.seed(path)
            found = [m.path for m in mem.list(w.sid, path_prefix="/m/", limit=100)]
            return Got("allowed" if path in found else "nothing")
        if cell.op == "review-accept":
            proposer = Caller(actor="user:prop", session=f"sesn_prop{abs(hash(cell.id))}", review=True)
            w.store.create(path, "to review\n", caller=proposer)
            p = P.open_proposal(w.store.core, "main", proposer.session or "")
            assert p is not None
            r = httpx.post(
                f"{w.url}/v1/gitmem/stores/{NAME}/proposals/{p.id}/accept",
                headers=w.headers(cell.caller),
                json={},
            )
            if r.status_code != 200:
                return Got("refused", r.status_code, r.text)
            return Got("allowed" if w.published(path) else "nothing")
    except anthropic.APIStatusError as exc:
        return Got("refused", exc.status_code, str(exc))
    raise AssertionError(f"no anthropic driver for {cell.op}")


# ---------------------------------------------------------------------- Databricks API (httpx)
def databricks(w: World, cell: Cell) -> Got:
    path = _path(cell)
    h = w.headers(cell.caller)
    entries = f"{w.url}{DBX}/entries"
    if cell.op == "create" and cell.case == "slow-body":
        return _slow_body(w, cell)
    if cell.op == "create":
        if cell.case == "marker":
            path = "/.anthropic-memory-store"
        r = httpx.post(
            f"{entries}?scope=main", headers=h, json={"path": path, "contents": f"made {cell.id}\n"}
        )
        return _status(r) or _write_outcome(w, cell, path, cell.id)
    if cell.op == "update":
        body = {"scope": "main", "path": path, "replace_all": {"contents": f"changed {cell.id}\n"}}
        r = httpx.patch(entries, headers=h, json=body)
        return _status(r) or _write_outcome(w, cell, path, "changed")
    if cell.op == "delete":
        r = httpx.delete(entries, headers=h, params={"scope": "main", "path": path})
        return _status(r) or _write_outcome(w, cell, path, None, gone=True)
    if cell.op == "search":
        w.seed(path, "databricks needle\n")
        r = httpx.post(f"{entries}:search?scope=main", headers=h, json={"query": "needle"})
        return _status(r) or Got("allowed" if path in r.text else "nothing", detail=r.text)
    if cell.op == "list":
        w.seed(path)
        r = httpx.get(entries, headers=h, params={"scope": "main", "path_prefix": "/m/", "page_size": 1000})
        return _status(r) or Got("allowed" if path in r.text else "nothing", detail=r.text)
    raise AssertionError(f"no databricks driver for {cell.op}")


def _status(r: httpx.Response) -> Got | None:
    return None if r.status_code == 200 else Got("refused", r.status_code, r.text)


def _slow_body(w: World, cell: Cell) -> Got:
    """Headers, then half the body, then nothing: the server answers 408 after its deadline."""
    host, port = w.url.removeprefix("http://").split(":")
    body = json.dumps({"path": _path(cell), "contents": "slow\n"}).encode()
    with socket.create_connection((host, int(port)), timeout=30) as s:
        head = (
            f"POST {DBX}/entries?scope=main HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {w.secrets[cell.caller]}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        s.sendall(head.encode() + body[:10])
        reply = s.recv(65536).decode("latin-1")
    return Got("refused", int(reply.split()[1]), reply[:200])


# ---------------------------------------------------------------------- MCP over HTTP and stdio
def mcp_http(w: World, cell: Cell) -> Got:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    if cell.case == "fill-cap":
        return _fill_cap(w, cell)
    path = _path(cell)
    query = ""
    if cell.case == "claim-session":
        query = "?session=sesn_rw"
    if cell.case == "other-session":
        query = "?session=sesn_rw"  # the review token's session is sesn_review
    if cell.caller == "none" or cell.case == "other-session":
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        r = httpx.post(
            f"{w.url}/mcp{query}",
            headers={**w.headers(cell.caller), "accept": "application/json, text/event-stream"},
            json=init,
        )
        return Got("refused", r.status_code, r.text)

    async def go() -> Got:
        http = httpx2.AsyncClient(headers=w.headers(cell.caller), timeout=30)
        async with Client(streamable_http_client(f"{w.url}/mcp{query}", http_client=http)) as c:
            if cell.op == "create":
                res = await c.call_tool(
                    "create_memory", {"store": NAME, "path": path, "content": f"made {cell.id}\n"}
                )
                if res.is_error:
                    return Got("refused", "tool", str(res.content))
                return _write_outcome(w, cell, path, cell.id)
            if cell.op == "list":
                w.seed(path)
                res = await c.call_tool("list_memories", {"store": NAME, "prefix": "/m/"})
                return Got("allowed" if path in str(res.content) else "nothing", detail=str(res.content))
            if cell.op == "search":
                w.seed(path, "mcp needle\n")
                res = await c.call_tool("search_memories", {"store": NAME, "query": "needle"})
                return Got("allowed" if path in str(res.content) else "nothing", detail=str(res.content))
        raise AssertionError(f"no mcp-http driver for {cell.op}")

    return asyncio.run(go())


def _fill_cap(w: World, cell: Cell) -> Got:
    """One read-only token opening server after server by varying ?session= gets 503 at its own
    cap, and every other token is still served."""
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    accept = {"accept": "application/json, text/event-stream"}
    last = 200
    with httpx.Client(timeout=30) as http:
        for n in range(40):
            r = http.post(
                f"{w.url}/mcp?session=s{n}", headers={**w.headers(cell.caller), **accept}, json=init
            )
            last = r.status_code
            if last != 200:
                break
        other = http.post(f"{w.url}/mcp", headers={**w.headers("admin"), **accept}, json=init)
    assert other.status_code == 200, "another token was refused: one token filled the server"
    return Got("refused", last, f"after {n} servers")


def mcp_stdio(w: World, cell: Cell) -> Got:
    from mcp import StdioServerParameters
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    path = _path(cell)
    args = ["-m", "gitmem", "mcp", "--store", NAME, "--home", str(w.home), "--actor", "user:lib"]
    session = f"sesn_stdio{abs(hash(cell.id))}"
    args += ["--session", session] + (["--review"] if cell.caller == "review" else [])
    params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))

    async def go() -> Got:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            res = await s.call_tool(
                "create_memory", {"store": NAME, "path": path, "content": f"made {cell.id}\n"}
            )
            if res.is_error:
                return Got("refused", "tool", str(res.content))
        OWNERS[cell.caller] = session
        got = _write_outcome(w, cell, path, cell.id)
        OWNERS["review"] = "sesn_review"
        return replace(got, actor=None)

    return asyncio.run(go())


# ---------------------------------------------------------------------- git over file:// and HTTP
def _git(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GIT_", "GITMEM_"))}
    base.update(
        {
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.org",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.org",
        }
    )
    return subprocess.run(
        ["git", *args], cwd=cwd, env={**base, **(env or {})}, capture_output=True, text=True, timeout=120
    )


def _push_one(
    url: str, work: Path, path: str, message: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    r = _git("clone", "-q", url, str(work), env=env)
    assert r.returncode == 0, r.stderr
    (work / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (work / path.lstrip("/")).write_text("pushed\n")
    _git("add", "-A", cwd=work)
    assert _git("commit", "-qm", message, cwd=work).returncode == 0
    return _git("push", "-q", "origin", "HEAD:refs/heads/main", cwd=work, env=env)


def git_file(w: World, cell: Cell, tmp: Path | None = None) -> Got:
    work = w.home.parent / f"git-{abs(hash(cell.id))}"
    if cell.op == "clone":
        url = f"file://{w.store.path}"
        r = _git("ls-remote", url)
        full = "refs/gitmem/proposals/" in r.stdout  # file:// is full trust: everything
        return Got("allowed" if r.returncode == 0 and full else "nothing", detail=r.stdout[-500:])
    path = _path(cell)
    if cell.caller == "review":  # the store's acl.review names this pusher
        gated = resolve_store("gated", w.home).path  # stores/<id>.git: addressed by id
        r = _push_one(f"file://{gated}", work, path, "add", {"GITMEM_ACTOR": "user:pusher"})
        return Got("refused", "git", r.stderr) if r.returncode else Got("allowed")
    message = f"add with {fake_token(3)}" if cell.case == "secret-message" else "add"
    r = _push_one(f"file://{w.store.path}", work, path, message, {"GITMEM_ACTOR": "user:lib"})
    if r.returncode:
        return Got(
            "guard" if "guard" in r.stderr else "refused", None if "guard" in r.stderr else "git", r.stderr
        )
    return Got("allowed" if w.published(path) else "nothing", actor=None)


def git_http(w: World, cell: Cell) -> Got:
    work = w.home.parent / f"git-{abs(hash(cell.id))}"
    host = w.url.removeprefix("http://")
    secret = "" if cell.caller == "none" else w.secrets[cell.caller]
    url = f"http://x:{secret}@{host}/git/{NAME}.git" if secret else f"http://{host}/git/{NAME}.git"
    if cell.op == "clone":
        r = _git("clone", "-q", "--mirror", url, str(work))
        if r.returncode:
            code = next((c for c in (401, 403, 404) if str(c) in r.stderr), "git")
            if "not found" in r.stderr:
                code = 404
            if "Authentication failed" in r.stderr or "could not read Username" in r.stderr:
                code = 401
            return Got("refused", code, r.stderr)
        refs = _git("for-each-ref", "--format=%(refname)", cwd=work).stdout
        if "refs/gitmem/proposals/" in refs:
            return Got("allowed")
        return Got("hidden", detail=refs)
    path = _path(cell)
    r = _push_one(url, work, path, "add")
    if r.returncode:
        code = 403 if "403" in r.stderr else "git"
        return Got("refused", code, r.stderr)
    return Got("allowed" if w.published(path) else "nothing")


# ---------------------------------------------------------------------- console (httpx, signed in)
def console(w: World, cell: Cell) -> Got:
    path = _path(cell)
    base = f"/console/stores/{NAME}"
    with sign_in(w.url, w.secrets[cell.caller]) as c:
        if cell.op == "list":
            r = c.get(base)
            return Got("refused", r.status_code) if r.status_code != 200 else Got("allowed")
        if cell.op == "clone":  # case=verify: a full check of the store
            page = c.get(f"{base}/integrity")
            r = c.post(f"{base}/integrity", data={"csrf": csrf_of(page.text)})
            return Got("allowed") if r.status_code == 303 else Got("refused", r.status_code, r.text[:300])
        if cell.op == "restore":
            vid = w.prep[cell.id]["version"]
            page = c.get(f"{base}/restore", params={"version": vid})
            if page.status_code != 200:
                return Got("refused", page.status_code, page.text[:300])
            r = c.post(f"{base}/restore", data={"csrf": csrf_of(page.text), "version": vid, "confirm": "yes"})
            if r.status_code != 303:
                return Got("refused", r.status_code, r.text[:300])
            return _write_outcome(w, cell, path, "old")
        if cell.op == "revert-session":
            sid = w.prep[cell.id]["session"]
            page = c.get(f"{base}/revert", params={"session": sid})
            if page.status_code != 200:
                return Got("refused", page.status_code, page.text[:300])
            r = c.post(f"{base}/revert", data={"csrf": csrf_of(page.text), "session": sid, "confirm": "yes"})
            if r.status_code != 200:
                return Got("refused", r.status_code, r.text[:300])
            return _write_outcome(w, cell, path, None, gone=True)
        if cell.op == "redact":
            vid = w.prep[cell.id]["version"]
            page = c.get(f"{base}/redact", params={"version": vid})
            if page.status_code != 200:
                return Got("refused", page.status_code, page.text[:300])
            data = {"csrf": csrf_of(page.text), "version": vid, "reason": "conformance", "confirm": "yes"}
            r = c.post(f"{base}/redact", data=data)
            return Got("allowed") if r.status_code == 200 else Got("refused", r.status_code, r.text[:300])
    raise AssertionError(f"no console driver for {cell.op}")


# ---------------------------------------------------------------------- adapters
def openai_agents(w: World, cell: Cell) -> Got:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from openai import AsyncOpenAI

    from gitmem.integrations.openai_agents import GitmemSession

    set_tracing_disabled(True)
    model = OpenAIChatCompletionsModel(
        model="scripted", openai_client=AsyncOpenAI(base_url=w.model_url, api_key="x")
    )
    agent = Agent(name="a", model=model)
    session = GitmemSession(cell.id, w.store, actor="user:lib", session=f"sesn_agents{abs(hash(cell.id))}")
    text = f"my key is {fake_token(4)} keep it" if cell.case == "secret" else "I like tea"
    result = asyncio.run(Runner.run(agent, text, session=session))
    assert result.final_output == "Noted."
    stored = w.store.read(session.path).content or ""
    if cell.case == "secret":
        assert fake_token(4) not in stored and "keep it" in stored and "Noted." in stored
        return Got("flagged" if session.masked else "nothing", detail=stored)
    return Got("allowed" if "I like tea" in stored else "nothing")


def langgraph(w: World, cell: Cell) -> Got:
    from typing import TypedDict

    from langgraph.config import get_store
    from langgraph.graph import END, START, StateGraph

    from gitmem.integrations.langgraph import MASKED_KEY, GitmemStore

    class State(TypedDict):
        msg: str

    def remember(state: State) -> State:
        get_store().put(("users", "u1"), cell.id, {"text": state["msg"]})
        return state

    g = StateGraph(State)
    g.add_node("remember", remember)
    g.add_edge(START, "remember")
    g.add_edge("remember", END)
    lg = GitmemStore(w.store, prefix="/lg/", actor="user:lib")
    text = f"token {fake_token(5)} here" if cell.case == "secret" else "plain"
    g.compile(store=lg).invoke({"msg": text})
    item = lg.get(("users", "u1"), cell.id)
    assert item is not None
    if cell.case == "secret":
        assert fake_token(5) not in json.dumps(item.value)
        return Got(
            "flagged" if item.value.get(MASKED_KEY) and lg.masked else "nothing", detail=str(item.value)
        )
    return Got("allowed" if item.value["text"] == "plain" else "nothing")


DRIVERS = {
    "library": library,
    "anthropic": anthropic_face,
    "databricks": databricks,
    "mcp-http": mcp_http,
    "mcp-stdio": mcp_stdio,
    "git-file": git_file,
    "git-http": git_http,
    "console": console,
    "openai-agents": openai_agents,
    "langgraph": langgraph,
}
