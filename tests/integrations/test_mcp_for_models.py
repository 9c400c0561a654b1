"""MCP tools a model can use well: pages that fit a context, one argument vocabulary, short errors,
structured results, instructions that describe the stores (driven by the mcp package's own clients)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

import anyio  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

import gitmem  # noqa: E402
from gitmem.cli.app import app  # noqa: E402
from gitmem.engine.batch import BatchOp, apply_batch  # noqa: E402
from gitmem.errors import InvalidInputError  # noqa: E402
from gitmem.integrations.mcp_server import PAGE_SIZE, ServedStore, build_server  # noqa: E402
from gitmem.store import Store  # noqa: E402

MAX_RESULT = 20_000


def text(result: Any) -> str:
    return "".join(c.text for c in result.content)


def big_store(workspace: Path, n: int = 3000) -> Store:
    store = gitmem.create_store("big", description="Team knowledge base", home=workspace)
    ops = [
        BatchOp("write", f"/topics/t{i // 100:02d}/note-{i:04d}.md", f"note {i}: " + "words " * 20,
                description=f"note number {i} about topic {i // 100}")
        for i in range(n)
    ]  # fmt: skip
    apply_batch(store.core, ops, actor="user:seed")
    return store


def test_list_memories_pages_cover_a_3000_memory_store_exactly_once(workspace: Path) -> None:
    store = big_store(workspace)
    server = build_server([ServedStore("big", store)], session="sesn_pages")

    async def run() -> tuple[list[str], list[int], int]:
        seen: list[str] = []
        sizes: list[int] = []
        total = 0
        async with Client(server) as c:
            cursor = None
            while True:
                args: dict[str, Any] = {"store": "big"} | ({"cursor": cursor} if cursor else {})
                result = await c.call_tool("list_memories", args)
                assert not result.is_error, text(result)
                sizes.append(len(text(result)))
                page = result.structured_content
                assert page is not None and page == json.loads(text(result))
                total = page["total"]
                seen += [m["path"] for m in page["memories"]]
                cursor = page["next_cursor"]
                if cursor is None:
                    break
            resources: list[str] = []
            rcursor = None
            while True:
                listed = await c.list_resources(cursor=rcursor) if rcursor else await c.list_resources()
                assert len(listed.resources) <= PAGE_SIZE
                resources += [str(r.uri) for r in listed.resources]
                rcursor = listed.next_cursor
                if rcursor is None:
                    break
            assert len(resources) == len(set(resources)) == 3000
        return seen, sizes, total

    seen, sizes, total = anyio.run(run)
    assert total == 3000 and len(seen) == len(set(seen)) == 3000
    assert sorted(seen) == seen
    assert max(sizes) < MAX_RESULT and len(sizes) <= 2 * 3000 // PAGE_SIZE


def test_arguments_are_one_vocabulary_and_errors_are_one_sentence(store: Store) -> None:
    store.write("/a.md", "alpha\n")
    server = build_server([ServedStore("notes", store)], session="sesn_args")

    async def run() -> None:
        async with Client(server) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            for name, tool in tools.items():
                props = set(tool.input_schema["properties"])
                assert not props & {"old_path", "src", "dest", "file"}, name
                assert tool.output_schema is not None, name
            assert {"path", "new_path"} <= set(tools["rename_memory"].input_schema["properties"])
            unknown = await c.call_tool("read_memory", {"store": "notes", "path": "/a.md", "bogus": 1})
            assert unknown.is_error
            assert text(unknown) == (
                "invalid_input: unknown argument 'bogus' for read_memory; it takes path, store, version"
            )
            wrong = await c.call_tool("memory_history", {"store": "notes", "limit": "many"})
            assert wrong.is_error and "\n" not in text(wrong) and "pydantic" not in text(wrong)
            assert text(wrong).startswith("invalid_input: argument 'limit'")
            missing = await c.call_tool("read_memory", {"store": "notes"})
            assert text(missing) == "invalid_input: argument 'path' is required"
            bad_cursor = await c.call_tool("list_memories", {"store": "notes", "cursor": "@@@"})
            assert bad_cursor.is_error and "invalid cursor" in text(bad_cursor)
            renamed = await c.call_tool(
                "rename_memory", {"store": "notes", "path": "/a.md", "new_path": "/b.md"}
            )
            assert renamed.structured_content["operation"] == "modified"
            same = await c.call_tool(
                "write_memory", {"store": "notes", "path": "/b.md", "content": "alpha\n"}
            )
            assert same.structured_content == {"changed": False}

    anyio.run(run)
    assert [m.path for m in store.list()] == ["/b.md"]


def test_store_at_scope_and_instructions_reach_the_model(workspace: Path) -> None:
    notes = gitmem.create_store("notes", description="What the team learned", home=workspace)
    notes.write("/team.md", "team only\n", scope="team")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "gitmem", "mcp", "--store", "notes@team:ro", "--home", str(workspace),
              "--instructions", "notes=Read before answering"],
    )  # fmt: skip

    async def run() -> None:
        async with Client(params) as c:
            instructions = c.instructions or ""
            assert "notes (read-only, scope team): What the team learned" in instructions
            assert "Instructions: Read before answering" in instructions
            page = (await c.call_tool("list_memories", {"store": "notes"})).structured_content
            assert [m["path"] for m in page["memories"]] == ["/team.md"] and page["scope"] == "team"

    anyio.run(run)


def test_a_bad_actor_fails_at_start(workspace: Path, store: Store) -> None:
    with pytest.raises(InvalidInputError):
        build_server([ServedStore("notes", store)], actor="nobody")
    result = CliRunner().invoke(
        app, ["mcp", "--store", "notes", "--actor", "bad actor", "--home", str(workspace)]
    )
    assert result.exit_code == 2 and "invalid actor" in result.output
