"""``GitmemSaver``, the LangGraph checkpointer: LangGraph's own conformance suite
(``langgraph-checkpoint-conformance``), then real graphs against ``InMemorySaver``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.base")
conformance = pytest.importorskip("langgraph.checkpoint.conformance")

import gitmem  # noqa: E402
from gitmem.integrations.langgraph_checkpoint import GitmemSaver  # noqa: E402


def test_langgraphs_conformance_suite(workspace: Path) -> None:
    made = []

    @conformance.checkpointer_test(name="GitmemSaver")
    async def saver() -> AsyncIterator[GitmemSaver]:
        store = gitmem.create_store(f"cp{len(made)}", home=workspace)
        made.append(store)
        yield GitmemSaver(store, scope="graphs", actor="service:conformance")
        store.close()

    report = asyncio.run(conformance.validate(saver))
    report.print_report()
    assert report.passed_all_base()
