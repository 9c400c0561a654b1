"""The memory tool's search extension (gitmem.integrations.memory_search): ``memory_search`` as the
SDK's own function tool, called the way its tool runner calls tools, finds a paraphrase by meaning
and not by words, answers with the mode that answered and memory-tool paths, stays in the tool's
scope, and turns bad input into tool errors; the async variant too. With the real bundled model."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("anthropic")

from anthropic.tools import ToolError  # noqa: E402

from gitmem.engine import vectors  # noqa: E402
from gitmem.integrations.anthropic_tool import GitmemAsyncMemoryTool, GitmemMemoryTool  # noqa: E402
from gitmem.store import Store  # noqa: E402

pytestmark = pytest.mark.skipif(
    not vectors.available(), reason="optional: the extra 'semantic' is not installed"
)


@pytest.fixture
def seeded(store: Store) -> Store:
    store.write("/people/bob.md", "Bob cannot eat peanuts or shellfish; he carries an epipen.\n")
    store.write("/people/alice.md", "Alice takes her coffee black, no sugar.\n")
    store.write("/infra/db.md", "The primary database is PostgreSQL 15 on db-primary.\n")
    store.write("/people/eve.md", "Eve is allergic to peanuts too.\n", scope="team")
    return store


def test_search_tool_by_meaning_and_by_words(seeded: Store) -> None:
    tool = GitmemMemoryTool(seeded)
    search = tool.search_tool()
    spec = search.to_dict()
    assert spec["name"] == "memory_search"
    assert spec["input_schema"]["properties"]["mode"]["enum"] == ["lexical", "semantic", "hybrid", "auto"]
    assert spec["input_schema"]["required"] == ["query"]
    words = json.loads(search.call({"query": "any food allergies?", "mode": "lexical"}))
    assert words == {"mode": "lexical", "hits": []}
    for mode in ("semantic", "hybrid"):
        meant = json.loads(search.call({"query": "any food allergies?", "mode": mode}))
        assert meant["mode"] == mode and meant["hits"][0]["path"] == "/memories/people/bob.md", mode
        assert all(not h["path"].endswith("eve.md") for h in meant["hits"])  # another scope
    auto = json.loads(search.call({"query": "PostgreSQL"}))
    assert auto["mode"] == "hybrid" and auto["hits"][0]["path"] == "/memories/infra/db.md"
    assert "**PostgreSQL**" in auto["hits"][0]["snippet"]
    view = tool.call({"command": "view", "path": auto["hits"][0]["path"]})
    assert "PostgreSQL 15" in view
    lexical_default = json.loads(tool.search_tool(mode="lexical").call({"query": "any food allergies?"}))
    assert lexical_default["mode"] == "lexical"


def test_bad_input_is_a_tool_error(seeded: Store) -> None:
    search = GitmemMemoryTool(seeded).search_tool()
    for bad in (
        {"query": " "},
        {"query": "x", "limit": 0},
        {"query": "x", "limit": 51},
        {"query": "x", "mode": "vector"},
    ):
        with pytest.raises(ToolError, match="^Error: "):
            search.call(bad)
    with pytest.raises(ValueError):
        GitmemMemoryTool(seeded).search_tool(mode="vector")


def test_async_search_tool(seeded: Store) -> None:
    tool = GitmemAsyncMemoryTool(seeded, scope="team")
    search = tool.search_tool()
    got = json.loads(asyncio.run(search.call({"query": "nut allergy", "mode": "semantic"})))
    assert got["mode"] == "semantic" and [h["path"] for h in got["hits"]] == ["/memories/people/eve.md"]
