"""Search modes and point-in-time reads through the faces: LangGraph's ``index=``, the MCP server's
``search_memories(mode=)`` (stdio, the mcp package's own client) and the CLI."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from gitmem.engine import vectors
from gitmem.store import Store

pytestmark = pytest.mark.skipif(not vectors.available(), reason="the extra 'semantic' is not installed")


def test_langgraph_index_searches_by_meaning(store: Store) -> None:
    pytest.importorskip("langgraph")
    from gitmem.integrations.langgraph import GitmemStore

    plain = GitmemStore(store)
    plain.put(("users", "u1"), "diet", {"text": "Bob cannot eat peanuts or shellfish"})
    plain.put(("users", "u1"), "music", {"text": "Dave plays the violin on weekends"})
    assert plain.search(("users",), query="any food allergies?") == []  # full-text: no word in common
    indexed = GitmemStore(store, index={"dims": 256, "embed": "bundled", "fields": ["text"]})
    hits = indexed.search(("users",), query="any food allergies?", limit=2)
    assert [h.key for h in hits][:1] == ["diet"]
    assert hits[0].score is not None


def test_mcp_search_memories_mode(store: Store, workspace: Path) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client, StdioServerParameters

    store.write("/people/bob.md", "Bob cannot eat peanuts or shellfish; he carries an epipen.")
    store.write("/people/dave.md", "Dave plays the violin in an orchestra on weekends.")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "gitmem", "mcp", "--store", "notes:ro", "--home", str(workspace)],
    )

    async def session() -> None:
        async with Client(params) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert "mode" in tools["search_memories"].input_schema["properties"]

            async def call(**args: Any) -> Any:
                result = await c.call_tool("search_memories", args)
                assert not result.is_error
                return json.loads("".join(x.text for x in result.content))

            lexical = await call(store="notes", query="any food allergies?")
            assert lexical["mode"] == "lexical" and lexical["hits"] == []
            meant = await call(store="notes", query="any food allergies?", mode="semantic")
            assert meant["mode"] == "semantic" and meant["hits"][0]["path"] == "/people/bob.md"
            bad = await c.call_tool("search_memories", {"store": "notes", "query": "x", "mode": "vector"})
            assert bad.is_error

    anyio.run(session)


def test_cli_search_mode_and_at(store: Store, workspace: Path) -> None:
    from typer.testing import CliRunner

    from gitmem.cli.app import app

    store.write("/people/bob.md", "Bob cannot eat peanuts or shellfish.")
    first = store.versions()[0].id
    store.write("/people/bob.md", "Bob eats anything now.")
    runner = CliRunner()
    home = ["--home", str(workspace)]
    got = runner.invoke(
        app, ["search", "notes", "any food allergies?", "--mode", "semantic", "--json", *home]
    )
    assert got.exit_code == 0, got.output
    assert "mode: semantic" in got.stderr
    assert json.loads(got.stdout)[0]["path"] == "/people/bob.md"
    got = runner.invoke(app, ["search", "notes", "peanuts", "--at", first, "--json", *home])
    assert got.exit_code == 0 and json.loads(got.stdout)[0]["path"] == "/people/bob.md"
    got = runner.invoke(app, ["search", "notes", "peanuts", "--json", *home])
    assert got.exit_code == 0 and json.loads(got.stdout) == []
    got = runner.invoke(app, ["read", "notes", "/people/bob.md", "--at", first, *home])
    assert got.exit_code == 0 and got.stdout == "Bob cannot eat peanuts or shellfish."
    got = runner.invoke(app, ["ls", "notes", "--at", "@0", "--json", *home])
    assert got.exit_code == 0 and json.loads(got.stdout) == []
    got = runner.invoke(app, ["diff", "notes", "--from", first, *home])
    assert (
        got.exit_code == 0 and "-Bob cannot eat peanuts" in got.stdout and "+Bob eats anything" in got.stdout
    )
    got = runner.invoke(app, ["export", "notes", "--at", first, *home])
    assert got.exit_code == 0 and json.loads(got.stdout.splitlines()[0])["content"].startswith("Bob cannot")
    got = runner.invoke(app, ["read", "notes", "/people/bob.md", "--at", "not a time", *home])
    assert got.exit_code != 0 and "neither a time" in got.stderr
    got = runner.invoke(app, ["search", "notes", "x", "--mode", "vector", *home])
    assert got.exit_code != 0
