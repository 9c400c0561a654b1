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
    assert report.results["copy_thread"].passed  # the one extended capability GitmemSaver has
    assert all(r.tests_failed == 0 for r in report.results.values())


# ---------------------------------------------------------------------- real graphs vs InMemorySaver
import operator  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from typing import Annotated, Any, TypedDict  # noqa: E402

from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402


class State(TypedDict):
    log: Annotated[list[str], operator.add]
    n: int


def _graph(saver: Any) -> Any:
    def inc(s: State) -> dict[str, Any]:
        return {"log": [f"inc{s.get('n', 0)}"], "n": s.get("n", 0) + 1}

    def ask(s: State) -> dict[str, Any]:
        answer = interrupt(f"what after {s.get('n', 0)}?")
        return {"log": [f"answer:{answer}"]}

    def done(s: State) -> dict[str, Any]:
        return {"log": ["done"]}

    sub = StateGraph(State)
    sub.add_node("inner", lambda s: {"log": ["inner"], "n": s.get("n", 0) * 2})
    sub.add_edge(START, "inner")
    sub.add_edge("inner", END)
    g = StateGraph(State)
    g.add_node("inc", inc)
    g.add_node("sub", sub.compile())  # runs in its own checkpoint_ns
    g.add_node("ask", ask)
    g.add_node("done", done)
    g.add_edge(START, "inc")
    g.add_edge("inc", "sub")
    g.add_edge("sub", "ask")
    g.add_edge("ask", "done")
    g.add_edge("done", END)
    return g.compile(checkpointer=saver)


def _history(graph: Any, thread: str) -> list[Any]:
    return [
        (
            s.values,
            s.next,
            s.metadata.get("step"),
            s.metadata.get("source"),
            [tuple(i.value for i in t.interrupts) for t in s.tasks],
        )
        for s in graph.get_state_history({"configurable": {"thread_id": thread}})
    ]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_real_graphs_match_in_memory_saver(workspace: Path, seed: int) -> None:
    rnd = random.Random(seed)
    store = gitmem.create_store("graphs", home=workspace)
    ours, theirs = _graph(GitmemSaver(store, scope="g", actor="service:test")), _graph(InMemorySaver())
    threads: list[str] = []
    # Every kind of step in every run, in a random order: new threads (to an interrupt), resumes,
    # replays from an old checkpoint, forks (update_state on an old checkpoint, then run on).
    plan = ["start", *rnd.sample(["start", "resume", "resume", "replay", "replay", "fork", "fork"], 7)]
    for _step, op in enumerate(plan):
        if op == "start":
            threads.append(f"thread {len(threads)} / ünï")  # characters a path segment must encode
            inputs: Any = {"log": [], "n": rnd.randint(0, 9)}
            thread = threads[-1]
        else:
            thread = rnd.choice(threads)
            inputs = Command(resume=rnd.choice(["yes", "no"])) if op == "resume" else None
        configs = []
        index = rnd.randrange(1000)
        for graph in (ours, theirs):
            cfg: dict[str, Any] = {"configurable": {"thread_id": thread}}
            if op in ("replay", "fork"):
                states = list(graph.get_state_history(cfg))
                pick = states[index % len(states)]
                cfg = pick.config
                if op == "fork":
                    cfg = graph.update_state(cfg, {"log": ["forked"]}, as_node="inc")
            configs.append(cfg)
        for graph, cfg in zip((ours, theirs), configs, strict=True):
            graph.invoke(inputs, cfg)
        for t in threads:
            assert _history(ours, t) == _history(theirs, t), (seed, _step, op)
    # Time travel shows what gitmem log shows: one created checkpoint record per checkpoint.
    saver = ours.checkpointer
    listed = list(saver.list(None))
    created = [
        v
        for v in store.versions(scope="g", operation="created")
        if "/checkpoints/" in v.path.split("@", 2)[-1]
    ]
    assert len(created) == len(listed) == len(list(theirs.checkpointer.list(None)))
    # Subgraph checkpoints live in their own namespace.
    assert any(t.config["configurable"]["checkpoint_ns"] for t in listed)
    store.close()


async def _async_run(saver: Any) -> list[Any]:
    graph = _graph(saver)
    cfg = {"configurable": {"thread_id": "a"}}
    await graph.ainvoke({"log": [], "n": 1}, cfg)
    await graph.ainvoke(Command(resume="ok"), cfg)
    return [s.values async for s in graph.aget_state_history(cfg)]


def test_the_async_interface_matches(workspace: Path) -> None:
    store = gitmem.create_store("graphs", home=workspace)
    ours = asyncio.run(_async_run(GitmemSaver(store)))
    assert ours == asyncio.run(_async_run(InMemorySaver()))
    assert ours[0]["log"][-1] == "done"
    store.close()


CHILD = """
import sys
import gitmem
from gitmem.integrations.langgraph_checkpoint import GitmemSaver
store = gitmem.open_store("graphs", home=sys.argv[1])
saver = GitmemSaver(store, scope="g", actor="service:child")
config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "c1"}}
i = 0
while True:
    saver.put_writes(config, [("ch", f"value {i}"), ("other", {"i": i})], task_id=f"task{i}")
    print(i, flush=True)
    i += 1
"""


def test_sigkill_during_put_writes_loses_nothing_acknowledged(workspace: Path) -> None:
    gitmem.create_store("graphs", home=workspace).close()
    for kill_after in (3, 11):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(workspace)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        acked = [int(proc.stdout.readline()) for _ in range(kill_after)]
        proc.send_signal(signal.SIGKILL)  # mid-way through a later put_writes, most likely
        rest = proc.stdout.read()
        proc.wait()
        acked += [int(x) for x in rest.split()]
        with gitmem.open_store("graphs", home=workspace) as store:
            saver = GitmemSaver(store, scope="g")
            writes = saver._writes("t", "", "c1")
        have = {task for task, _c, _v in writes}
        assert {f"task{i}" for i in acked} <= have
        # Each put_writes landed whole or not at all: both of its writes, or neither.
        tasks = [task for task, _c, _v in writes]
        assert all(tasks.count(t) == 2 for t in have)
        verify = subprocess.run(
            [sys.executable, "-m", "gitmem", "verify", "graphs", "--home", str(workspace)],
            capture_output=True,
            text=True,
        )
        assert verify.returncode == 0, verify.stdout + verify.stderr
