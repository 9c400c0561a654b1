"""The MCP server: over stdio with the mcp package's own client (one spawned server), and in-process."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio  # noqa: E402
from mcp import Client, MCPError, StdioServerParameters  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import gitmem  # noqa: E402
from gitmem.cli.app import app  # noqa: E402
from gitmem.errors import InvalidInputError  # noqa: E402
from gitmem.integrations.mcp_server import ServedStore, build_server, parse_store_spec  # noqa: E402
from gitmem.store import Store  # noqa: E402

SESSION = "sesn_mcptest"
READ_TOOLS = {"list_memories", "read_memory", "memory_history", "search_memories"}
WRITE_TOOLS = {"write_memory", "create_memory", "edit_memory", "delete_memory", "rename_memory"}


def text(result: Any) -> str:
    return "".join(c.text for c in result.content)


def ok(result: Any) -> Any:
    assert not result.is_error, text(result)
    body = text(result)
    return json.loads(body) if body[:1] in "[{" else body


def test_stdio_server_tools_resources_and_errors(store: Store, workspace: Path) -> None:
    store.write("/prefs/editor.md", "---\ndescription: editor settings\n---\nvim, tabs\n")
    gitmem.create_store("docs", home=workspace).write("/readme.md", "read only\n")
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "gitmem",
            "mcp",
            "--store",
            "notes",
            "--store",
            "docs:ro",
            "--home",
            str(workspace),
            "--session",
            SESSION,
            "--actor",
            "user:ada",
        ],
    )

    async def session() -> None:
        async with Client(params) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert set(tools) == READ_TOOLS | WRITE_TOOLS
            assert tools["write_memory"].input_schema["properties"]["store"]["enum"] == ["notes"]
            assert tools["read_memory"].input_schema["properties"]["store"]["enum"] == ["notes", "docs"]

            async def call(name: str, **args: Any) -> Any:
                return await c.call_tool(name, args)

            created = ok(await call("create_memory", store="notes", path="/todo.md", content="milk\nbread\n"))
            assert created["operation"] == "created" and created["session"] == SESSION
            assert ok(
                await call("write_memory", store="notes", path="/todo.md", content="milk\nbread\n")
            ) == {"changed": False}
            ok(await call("edit_memory", store="notes", path="/todo.md", old_str="milk", new_str="oat milk"))
            ok(await call("edit_memory", store="notes", path="/todo.md", insert_line=0, insert_text="# list"))
            assert (
                ok(await call("read_memory", store="notes", path="/todo.md"))["content"]
                == "# list\noat milk\nbread\n"
            )
            ok(await call("rename_memory", store="notes", path="/todo.md", new_path="/lists/todo.md"))
            listed = ok(await call("list_memories", store="notes", prefix="/"))
            assert [m["path"] for m in listed["memories"]] == ["/lists/todo.md", "/prefs/editor.md"]
            hits = ok(await call("search_memories", store="notes", query="editor"))
            assert hits["hits"][0]["path"] == "/prefs/editor.md"
            history = ok(await call("memory_history", store="notes", path="/lists/todo.md"))
            assert [h["operation"] for h in history["versions"]] == ["modified"] * 3 + ["created"]
            ok(await call("delete_memory", store="notes", path="/lists/todo.md"))
            assert ok(await call("read_memory", store="docs", path="/readme.md"))["content"] == "read only\n"

            # errors come back as tool errors, and the server keeps serving
            for name, args in [
                ("read_memory", {"store": "notes", "path": "/../etc/passwd"}),
                ("read_memory", {"store": "notes", "path": "/missing.md"}),
                ("create_memory", {"store": "notes", "path": "/prefs/editor.md", "content": "x"}),
                ("write_memory", {"store": "docs", "path": "/x.md", "content": "x"}),
                ("read_memory", {"store": "nope", "path": "/x.md"}),
                ("edit_memory", {"store": "notes", "path": "/prefs/editor.md"}),
            ]:
                result = await call(name, **args)
                assert result.is_error, (name, args)
            assert "forbidden" in text(await call("write_memory", store="docs", path="/x.md", content="x"))

            uris = [r.uri for r in (await c.list_resources()).resources]
            assert uris == ["gitmem://docs/readme.md", "gitmem://notes/prefs/editor.md"]  # sorted, paginated
            got = await c.read_resource("gitmem://notes/prefs/editor.md")
            assert got.contents[0].text.endswith("vim, tabs\n")
            with pytest.raises(MCPError):
                await c.read_resource("gitmem://notes/missing.md")

    anyio.run(session)
    versions = store.versions(session=SESSION)
    assert len(versions) == 5  # create, 2 edits, rename, delete (the same write again made none)
    assert {v.actor for v in versions} == {"user:ada"}
    assert gitmem.open_store("docs", home=workspace).versions(session=SESSION) == []


def test_read_only_server_has_no_write_tools(store: Store) -> None:
    server = build_server([ServedStore("notes", store, read_only=True)], session=SESSION)

    async def names() -> set[str]:
        async with Client(server) as c:
            return {t.name for t in (await c.list_tools()).tools}

    assert anyio.run(names) == READ_TOOLS


def test_writes_get_a_generated_session(store: Store) -> None:
    server = build_server([ServedStore("notes", store)])
    assert server.session.startswith("sesn_")

    async def write() -> None:
        async with Client(server) as c:
            ok(await c.call_tool("write_memory", {"store": "notes", "path": "/x.md", "content": "x"}))

    anyio.run(write)
    (version,) = store.versions()
    assert version.session == server.session and version.actor == f"session:{server.session}"


def test_store_specs() -> None:
    assert parse_store_spec("notes") == ("notes", None, False)
    assert parse_store_spec("notes:ro") == ("notes", None, True)
    assert parse_store_spec("notes:rw") == ("notes", None, False)
    assert parse_store_spec("notes@team") == ("notes", "team", False)
    assert parse_store_spec("notes:ro@team") == parse_store_spec("notes@team:ro") == ("notes", "team", True)
    assert parse_store_spec("Team Notes (EU)") == ("Team Notes (EU)", None, False)  # names are free text
    for bad in ("notes@", "notes@te am", ":ro", "notes@team:rx"):
        with pytest.raises(InvalidInputError):
            parse_store_spec(bad)
    with pytest.raises(InvalidInputError):
        parse_store_spec("notes:rx")


def test_cli_missing_store_fails_before_serving(workspace: Path) -> None:
    result = CliRunner().invoke(app, ["mcp", "--store", "ghost", "--home", str(workspace)])
    assert result.exit_code == 3
    assert "ghost" in result.output
