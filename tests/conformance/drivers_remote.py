"""Drivers of the faces a client reaches over the network: the Anthropic API (the official SDK),
the Databricks API (httpx), the console (httpx, signed in), MCP over HTTP and stdio (the ``mcp``
client), and git over file://, HTTP and ssh through gitolite (real ``git``)."""

from __future__ import annotations

import asyncio
import html
import json
import os
import socket
import sys
import threading
from typing import Any

import anthropic
import httpx2 as httpx
from consolekit import csrf_of, sign_in
from drivers_openai import judge_pending, pending_dream
from kit import (
    DBX,
    NAME,
    Got,
    World,
    fake_token,
    git,
    list_prefix,
    needle_of,
    outcome,
    owner_of,
    path_of,
    push_change,
    sid_of,
)
from matrix import Cell

from gitmem.engine import proposals as P
from gitmem.model.caller import Caller
from gitmem.push.pushenv import session_namespace
from gitmem.store import resolve_store

SSHD = "/usr/sbin/sshd"
GITOLITE_SHELL = "/usr/share/gitolite3/gitolite-shell"


# ---------------------------------------------------------------------- reading a proposal
def read_proposal(w: World, cell: Cell, get: Any, base: str) -> Got:
    """Another caller's fresh proposal as ``cell.caller`` reads it through ``get`` (the review API
    or the console, under ``base``): ``allowed`` when listed and shown (a reviewer), ``hidden``
    when neither listed nor shown, its page answering as an unknown id's (docs/access.md: only its
    proposer and reviewers read it)."""
    proposer = Caller(actor="user:prop", session=sid_of(cell, "prop"), review=True)
    w.store.create(path_of(cell, "-proposed"), "unreviewed\n", caller=proposer)
    p = P.open_proposal(w.store.core, "main", proposer.session or "")
    assert p is not None
    listed, one = get(f"{base}/proposals"), get(f"{base}/proposals/{p.id}")
    unknown = get(f"{base}/proposals/prop_01ZZZZZZZZZZZZZZZZZZZZZZZZ")
    if listed.status_code != 200:
        return Got("refused", listed.status_code, listed.text[:300])
    if p.id in listed.text and one.status_code == 200:
        return Got("allowed")
    if p.id not in listed.text and one.status_code == unknown.status_code == 404:
        return Got("hidden")
    return Got("leaked", one.status_code, f"listed: {p.id in listed.text}; {one.text[:300]}")


# ---------------------------------------------------------------------- Anthropic API (official SDK)
def anthropic_face(w: World, cell: Cell) -> Got:
    path = path_of(cell)
    if cell.op == "list" and cell.case == "proposals":  # the review API beside it
        return read_proposal(
            w,
            cell,
            lambda u: httpx.get(u, headers=w.headers(cell.caller)),
            f"{w.url}/v1/gitmem/stores/{NAME}",
        )
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
            return outcome(w, path, cell.id, owner=owner_of(cell))
        if cell.op in ("update", "rename", "delete"):
            mid = w.prep[cell.id]["memory_id"]
            if cell.op == "update":
                mem.update(mid, memory_store_id=w.sid, content=f"changed {cell.id}\n")
                return outcome(w, path, "changed", owner=owner_of(cell))
            if cell.op == "rename":
                new = path_of(cell, "-new")
                mem.update(mid, memory_store_id=w.sid, path=new)
                return outcome(w, new, None, owner=owner_of(cell))
            mem.delete(mid, memory_store_id=w.sid)
            return outcome(w, path, None, owner=owner_of(cell), gone=True)
        if cell.op == "redact" and cell.case == "receipt":  # the receipt endpoint beside it
            vid = w.prep[cell.id]["version"]
            w.store.redact(vid, reason="conformance")  # for scoped: team's content, also in main
            r = httpx.get(
                f"{w.url}/v1/memory_stores/{w.sid}/memory_versions/{vid}/receipt",
                params={"scope": "team"} if cell.caller == "scoped" else {},
                headers=w.headers(cell.caller),
            )
            return Got("allowed") if r.status_code == 200 else Got("refused", r.status_code, r.text)
        if cell.op == "redact":
            extra = {"scope": "team"} if cell.caller == "scoped" else None
            vid = w.prep[cell.id]["version"]
            c.beta.memory_stores.memory_versions.redact(vid, memory_store_id=w.sid, extra_query=extra)
            return Got("allowed")
        if cell.op == "list":
            found = [m.path for m in mem.list(w.sid, path_prefix=list_prefix(cell), limit=100)]
            return Got("allowed" if path in found else "nothing")
        if cell.op == "review-accept":
            proposer = Caller(actor="user:prop", session=sid_of(cell, "prop"), review=True)
            w.store.create(path, "to review\n", caller=proposer)
            p = P.open_proposal(w.store.core, "main", proposer.session or "")
            assert p is not None
            r = httpx.post(
                f"{w.url}/v1/gitmem/stores/{NAME}/proposals/{p.id}/accept",
                headers=w.headers(cell.caller),
                json={"reason": f"it held {fake_token(8)}"} if cell.case == "secret-reason" else {},
            )
            if r.status_code == 400 and "refused by the store's guard" in r.text:
                return Got("guard", None, r.text)
            if r.status_code != 200:
                return Got("refused", r.status_code, r.text)
            return outcome(
                w, path, "to review", owner="-", want_actor="user:prop", want_session=proposer.session
            )
    except anthropic.APIStatusError as exc:
        return Got("refused", exc.status_code, str(exc))
    raise AssertionError(f"no anthropic driver for {cell.op}")


# ---------------------------------------------------------------------- Databricks API (httpx)
def databricks(w: World, cell: Cell) -> Got:
    path = path_of(cell)
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
        return _status(r) or outcome(w, path, cell.id, owner=owner_of(cell))
    if cell.op == "update":
        body = {"scope": "main", "path": path, "replace_all": {"contents": f"changed {cell.id}\n"}}
        r = httpx.patch(entries, headers=h, json=body)
        return _status(r) or outcome(w, path, "changed", owner=owner_of(cell))
    if cell.op == "delete":
        r = httpx.delete(entries, headers=h, params={"scope": "main", "path": path})
        return _status(r) or outcome(w, path, None, owner=owner_of(cell), gone=True)
    if cell.op == "search":
        r = httpx.post(f"{entries}:search?scope=main", headers=h, json={"query": needle_of(cell)})
        return _status(r) or Got("allowed" if path in r.text else "nothing", detail=r.text)
    if cell.op == "list":
        r = httpx.get(
            entries, headers=h, params={"scope": "main", "path_prefix": list_prefix(cell), "page_size": 1000}
        )
        return _status(r) or Got("allowed" if path in r.text else "nothing", detail=r.text)
    raise AssertionError(f"no databricks driver for {cell.op}")


def _status(r: httpx.Response) -> Got | None:
    return None if r.status_code == 200 else Got("refused", r.status_code, r.text)


def _slow_body(w: World, cell: Cell) -> Got:
    """Headers, then half the body, then nothing: the server answers 408 after its deadline."""
    host, port = w.url.removeprefix("http://").split(":")
    body = json.dumps({"path": path_of(cell), "contents": "slow\n"}).encode()
    with socket.create_connection((host, int(port)), timeout=30) as s:
        head = (
            f"POST {DBX}/entries?scope=main HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {w.secrets[cell.caller]}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        s.sendall(head.encode() + body[:10])
        reply = s.recv(65536).decode("latin-1")
    return Got("refused", int(reply.split()[1]), reply[:200])


# ---------------------------------------------------------------------- MCP over HTTP and stdio
INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ACCEPT = {"accept": "application/json, text/event-stream"}


async def _mcp_tools(c: Any, w: World, cell: Cell, owner: str, **want: Any) -> Got:
    """One cell's operation through an MCP client session (the same tools on both transports)."""
    path = path_of(cell)
    calls = {
        "create": ("create_memory", {"path": path, "content": f"made {cell.id}\n"}),
        "update": ("write_memory", {"path": path, "content": f"changed {cell.id}\n"}),
        "rename": ("rename_memory", {"path": path, "new_path": path_of(cell, "-new")}),
        "delete": ("delete_memory", {"path": path}),
        "search": ("search_memories", {"query": needle_of(cell)}),
        "list": ("list_memories", {"prefix": list_prefix(cell)}),
    }
    tool, args = calls[cell.op]
    res = await c.call_tool(tool, {"store": NAME, **args})
    if res.is_error:
        return Got("refused", "tool", str(res.content))
    if cell.op in ("search", "list"):
        return Got("allowed" if path in str(res.content) else "nothing", detail=str(res.content))
    if cell.op == "rename":
        return outcome(w, path_of(cell, "-new"), None, owner=owner, **want)
    text = {"create": cell.id, "update": "changed"}.get(cell.op)
    return outcome(w, path, text, owner=owner, gone=cell.op == "delete", **want)


def mcp_http(w: World, cell: Cell) -> Got:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    if cell.case == "fill-cap":
        return _fill_cap(w, cell)
    query = "?session=sesn_rw" if cell.case in ("claim-session", "other-session") else ""
    if cell.caller == "none" or cell.case == "other-session":  # the review token's is sesn_review
        r = httpx.post(f"{w.url}/mcp{query}", headers={**w.headers(cell.caller), **ACCEPT}, json=INIT)
        return Got("refused", r.status_code, r.text)

    async def go() -> Got:
        http = httpx.AsyncClient(headers=w.headers(cell.caller), timeout=30)
        async with Client(streamable_http_client(f"{w.url}/mcp{query}", http_client=http)) as c:
            return await _mcp_tools(c, w, cell, owner_of(cell))

    return asyncio.run(go())


def _fill_cap(w: World, cell: Cell) -> Got:
    """One read-only token opening server after server by varying ?session= gets 503 at its own
    cap, and every other token is still served."""
    last = 200
    with httpx.Client(timeout=30) as http:
        for n in range(40):
            r = http.post(
                f"{w.url}/mcp?session=s{n}", headers={**w.headers(cell.caller), **ACCEPT}, json=INIT
            )
            last = r.status_code
            if last != 200:
                break
        other = http.post(f"{w.url}/mcp", headers={**w.headers("admin"), **ACCEPT}, json=INIT)
    assert other.status_code == 200, "another token was refused: one token filled the server"
    return Got("refused", last, f"after {n} servers")


class StdioServers:
    """One ``gitmem mcp`` process per caller (local, --review) for the whole module, each behind a
    client session on one event loop in a thread: a process start is the costly part of a cell."""

    def __init__(self, w: World) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.sessions: dict[str, tuple[str, Any]] = {}
        self.stop_events: list[asyncio.Event] = []
        self.tasks: list[Any] = []
        self.w = w

    def session(self, caller: str) -> tuple[str, Any]:
        if caller not in self.sessions:
            self.sessions[caller] = self.run(self._open(caller))
        return self.sessions[caller]

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=120)

    async def _open(self, caller: str) -> tuple[str, Any]:
        from mcp import StdioServerParameters
        from mcp.client.session import ClientSession
        from mcp.client.stdio import stdio_client

        sid = f"sesn_stdio_{caller}"
        args = ["-m", "gitmem", "mcp", "--store", NAME, "--home", str(self.w.home), "--actor", "user:lib"]
        args += ["--session", sid] + (["--review"] if caller == "review" else [])
        params = StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))
        ready: asyncio.Future[Any] = self.loop.create_future()
        stop = asyncio.Event()
        self.stop_events.append(stop)

        async def hold() -> None:  # the client's context lives in one task, start to end
            async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
                await s.initialize()
                ready.set_result(s)
                await stop.wait()

        self.tasks.append(self.loop.create_task(hold()))
        return sid, await ready

    def close(self) -> None:
        for stop in self.stop_events:
            self.loop.call_soon_threadsafe(stop.set)
        for t in self.tasks:
            asyncio.run_coroutine_threadsafe(asyncio.wait_for(asyncio.shield(t), 30), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)


def mcp_stdio(w: World, cell: Cell) -> Got:
    if "stdio" not in w.extra:
        w.extra["stdio"] = StdioServers(w)
        w.extra.setdefault("cleanup", []).append(w.extra["stdio"].close)
    servers: StdioServers = w.extra["stdio"]
    sid, session = servers.session(cell.caller)
    return servers.run(_mcp_tools(session, w, cell, sid, want_actor="user:lib", want_session=sid))


# ---------------------------------------------------------------------- git over file://, HTTP, ssh
def push_outcome(
    r: Any, w: World, path: str, text: str | None, gone: bool, store: Any = None, **want: Any
) -> Got:
    if r.returncode:
        if "guard" in r.stderr:
            return Got("guard", None, r.stderr)
        code = "denied" if "DENIED" in r.stderr else 403 if "403" in r.stderr else "git"
        return Got("refused", code, r.stderr)
    return outcome(w, path, text, owner="-", gone=gone, store=store, **want)


def git_file(w: World, cell: Cell) -> Got:
    work = w.home.parent / f"git-{sid_of(cell, 'f')}"
    if cell.op == "clone":
        r = git("ls-remote", f"file://{w.store.path}")
        full = "refs/gitmem/proposals/" in r.stdout  # file:// is full trust: everything
        return Got("allowed" if r.returncode == 0 and full else "nothing", detail=r.stdout[-500:])
    if cell.caller == "review":  # the store's acl.review names this pusher
        gated = resolve_store("gated", w.home).path  # stores/<id>.git: addressed by id
        r, *_ = push_change(f"file://{gated}", work, cell, "add", {"GITMEM_ACTOR": "user:pusher"})
        return Got("refused", "git", r.stderr) if r.returncode else Got("allowed")
    message = f"add with {fake_token(3)}" if cell.case == "secret-message" else "change"
    r, path, text, gone = push_change(
        f"file://{w.store.path}", work, cell, message, {"GITMEM_ACTOR": "user:lib"}
    )
    return push_outcome(r, w, path, text, gone, want_actor="user:lib")


def git_http(w: World, cell: Cell) -> Got:
    work = w.home.parent / f"git-{sid_of(cell, 'h')}"
    host = w.url.removeprefix("http://")
    secret = "" if cell.caller == "none" else w.secrets[cell.caller]
    url = f"http://x:{secret}@{host}/git/{NAME}.git" if secret else f"http://{host}/git/{NAME}.git"
    if cell.op == "clone":
        r = git("clone", "-q", "--mirror", url, str(work))
        if r.returncode:
            code: int | str = next((c for c in (401, 403, 404) if str(c) in r.stderr), "git")
            if "not found" in r.stderr:
                code = 404
            if "Authentication failed" in r.stderr or "could not read Username" in r.stderr:
                code = 401
            return Got("refused", code, r.stderr)
        refs = git("for-each-ref", "--format=%(refname)", cwd=work).stdout
        return Got("allowed") if "refs/gitmem/proposals/" in refs else Got("hidden", detail=refs)
    if cell.case == "claim-session":  # a token without a session names another token's
        r, path, text, gone = push_change(url, work, cell, options=("session=sesn_rw",))
        return push_outcome(
            r, w, path, text, gone, want_session=f"{session_namespace('user:' + cell.caller)}.sesn_rw"
        )
    r, path, text, gone = push_change(url, work, cell)
    return push_outcome(r, w, path, text, gone)


# ---------------------------------------------------------------------- console (httpx, signed in)
def console(w: World, cell: Cell) -> Got:
    path = path_of(cell)
    base = f"/console/stores/{NAME}"
    with sign_in(w.url, w.secrets[cell.caller]) as c:
        if cell.op == "list" and cell.case == "proposals":
            return read_proposal(w, cell, c.get, base)
        if cell.op == "list" and cell.case == "pending":  # a reviewed dream's pending change
            dream_id = pending_dream(w)
            listed, page = c.get(f"{base}/dreams"), c.get(f"{base}/dreams/{dream_id}")
            if listed.status_code != 200 or page.status_code != 200:
                return Got("refused", page.status_code, page.text[:300])
            return judge_pending(dream_id, listed.text, [html.unescape(page.text)])
        if cell.op == "list":
            r = c.get(base)
            return Got("refused", r.status_code) if r.status_code != 200 else Got("allowed")
        if cell.op == "search":
            r = c.get(base, params={"q": needle_of(cell), "prefix": "/m/"})
            if r.status_code != 200:
                return Got("refused", r.status_code, r.text[:300])
            return Got("allowed" if path in r.text else "nothing", detail=r.text[-2000:])
        if cell.op == "review-accept":
            proposer = Caller(actor="user:prop", session=sid_of(cell, "prop"), review=True)
            w.store.create(path, "to review\n", caller=proposer)
            p = P.open_proposal(w.store.core, "main", proposer.session or "")
            assert p is not None
            page = c.get(f"{base}/proposals/{p.id}")
            if page.status_code != 200:
                return Got("refused", page.status_code, page.text[:300])
            r = c.post(f"{base}/proposals/{p.id}/accept", data={"csrf": csrf_of(page.text), "path": path})
            if r.status_code not in (200, 303):
                return Got("refused", r.status_code, r.text[:300])
            return outcome(
                w, path, "to review", owner="-", want_actor="user:prop", want_session=proposer.session
            )
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
            return outcome(w, path, "old", owner=owner_of(cell))
        if cell.op == "revert-session":
            sid = w.prep[cell.id]["session"]
            page = c.get(f"{base}/revert", params={"session": sid})
            if page.status_code != 200:
                return Got("refused", page.status_code, page.text[:300])
            r = c.post(f"{base}/revert", data={"csrf": csrf_of(page.text), "session": sid, "confirm": "yes"})
            if r.status_code != 200:
                return Got("refused", r.status_code, r.text[:300])
            return outcome(w, path, None, owner=owner_of(cell), gone=True)
        if cell.op == "redact":
            vid = w.prep[cell.id]["version"]
            page = c.get(f"{base}/redact", params={"version": vid})
            if page.status_code != 200:
                return Got("refused", page.status_code, page.text[:300])
            data = {"csrf": csrf_of(page.text), "version": vid, "reason": "conformance", "confirm": "yes"}
            r = c.post(f"{base}/redact", data=data)
            return Got("allowed") if r.status_code == 200 else Got("refused", r.status_code, r.text[:300])
    raise AssertionError(f"no console driver for {cell.op}")
