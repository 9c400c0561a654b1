"""Remote MCP on ``gitmem serve`` (``/mcp``), driven by the mcp package's streamable-HTTP client."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
pytest.importorskip("uvicorn")

import anyio  # noqa: E402
import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from serverkit import running, token  # noqa: E402

import gitmem  # noqa: E402
from gitmem.store import Store  # noqa: E402

READ_TOOLS = {"list_memories", "read_memory", "memory_history", "search_memories"}
WRITE_TOOLS = {"write_memory", "create_memory", "edit_memory", "delete_memory", "rename_memory"}


def text(result: Any) -> str:
    return "".join(c.text for c in result.content)


def ok(result: Any) -> Any:
    assert not result.is_error, text(result)
    body = text(result)
    return json.loads(body) if body[:1] in "[{" else body


def connect(url: str, secret: str) -> Client:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=30)
    return Client(streamable_http_client(f"{url}/mcp", http_client=http))


def test_tools_over_http_write_read_search_history(store: Store, workspace: Path) -> None:
    store.write("/prefs/editor.md", "---\ndescription: editor settings\n---\nvim, tabs\n")
    gitmem.create_store("docs", home=workspace).write("/readme.md", "read only\n")
    secret = token(workspace, actor="user:ada", stores={"notes": "rw", "docs": "ro"})
    with running(workspace) as url:

        async def session() -> None:
            async with connect(url, secret) as c:
                tools = {t.name: t for t in (await c.list_tools()).tools}
                assert set(tools) == READ_TOOLS | WRITE_TOOLS
                assert tools["write_memory"].input_schema["properties"]["store"]["enum"] == ["notes"]
                assert tools["read_memory"].input_schema["properties"]["store"]["enum"] == ["docs", "notes"]

                async def call(name: str, **args: Any) -> Any:
                    return await c.call_tool(name, args)

                made = ok(await call("create_memory", store="notes", path="/todo.md", content="milk\n"))
                assert made["actor"] == "user:ada" and made["session"].startswith("sesn_mcp_")
                ok(
                    await call(
                        "edit_memory", store="notes", path="/todo.md", old_str="milk", new_str="oat milk"
                    )
                )
                assert (
                    ok(await call("read_memory", store="notes", path="/todo.md"))["content"] == "oat milk\n"
                )
                hits = ok(await call("search_memories", store="notes", query="editor"))
                assert hits["hits"][0]["path"] == "/prefs/editor.md"
                history = ok(await call("memory_history", store="notes", path="/todo.md"))
                assert [h["operation"] for h in history["versions"]] == ["modified", "created"]
                assert (
                    ok(await call("read_memory", store="docs", path="/readme.md"))["content"] == "read only\n"
                )
                refused = await call("write_memory", store="docs", path="/x.md", content="x")
                assert refused.is_error and "forbidden" in text(refused)

        anyio.run(session)
    versions = store.versions(scope="main", actor="user:ada")
    assert len(versions) == 2 and len({v.session for v in versions}) == 1
    assert gitmem.open_store("docs", home=workspace).versions(actor="user:ada") == []


def test_token_session_tags_writes_and_read_only_token_has_no_write_tools(
    store: Store, workspace: Path
) -> None:
    store.write("/a.md", "alpha\n")
    tagged = token(workspace, actor="user:bot", stores={"notes": "rw"}, session="sesn_agent7")
    reader = token(workspace, actor="user:eve", stores={"notes": "ro"})
    with running(workspace) as url:

        async def session() -> None:
            async with connect(url, tagged) as c:
                v = ok(await c.call_tool("write_memory", {"store": "notes", "path": "/b.md", "content": "b"}))
                assert v["session"] == "sesn_agent7"
            async with connect(url, reader) as c:
                names = {t.name for t in (await c.list_tools()).tools}
                assert names == READ_TOOLS
                assert (
                    ok(await c.call_tool("read_memory", {"store": "notes", "path": "/a.md"}))["content"]
                    == "alpha\n"
                )
                missing = await c.call_tool(
                    "write_memory", {"store": "notes", "path": "/c.md", "content": "c"}
                )
                assert missing.is_error

        anyio.run(session)
    assert [v.path for v in store.versions(session="sesn_agent7")] == ["/b.md"]
    assert store.versions(actor="user:eve") == []


def test_bad_token_and_tokens_without_stores_are_refused(store: Store, workspace: Path) -> None:
    with gitmem.create_store("other", home=workspace) as other:
        other_id = other.id
    nothing = token(workspace, actor="user:nobody", stores={"other": "rw"})
    gitmem.delete_store(other_id, workspace)  # its grant named that store's id: now nothing
    scoped = token(workspace, actor="user:carol", stores={"notes": "rw"}, scope="carol")
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
    accept = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    with running(workspace) as url:
        r = httpx2.post(f"{url}/mcp", json=init, headers=accept)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        r = httpx2.post(f"{url}/mcp", json=init, headers={**accept, "authorization": "Bearer gitmem_bogus"})
        assert r.status_code == 401
        r = httpx2.post(f"{url}/mcp", json=init, headers={**accept, "authorization": f"Bearer {nothing}"})
        assert r.status_code == 403 and "no store to serve" in r.json()["error"]["message"]
        r = httpx2.post(
            f"{url}/mcp?scope=main", json=init, headers={**accept, "authorization": f"Bearer {scoped}"}
        )
        assert r.status_code == 403
        r = httpx2.post(
            f"{url}/mcp?session=bad%20id", json=init, headers={**accept, "authorization": f"Bearer {scoped}"}
        )
        assert r.status_code == 400

        # An MCP session opened by one token is unknown to another.
        good = token(workspace, actor="user:ada", stores={"notes": "rw"})
        r = httpx2.post(f"{url}/mcp", json=init, headers={**accept, "authorization": f"Bearer {good}"})
        assert r.status_code == 200
        sid = r.headers.get("mcp-session-id")
        assert sid
        other = token(workspace, actor="user:bob", stores={"notes": "rw"})
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        headers = {**accept, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
        r = httpx2.post(f"{url}/mcp", json=ping, headers={**headers, "authorization": f"Bearer {other}"})
        assert r.status_code == 404

        async def refused() -> None:
            async with connect(url, "gitmem_bogus") as c:
                await c.list_tools()

        with pytest.raises(Exception):  # noqa: B017 - the client's own error for a 401
            anyio.run(refused)
