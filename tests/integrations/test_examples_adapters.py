"""The LangGraph and Agents SDK examples run as processes, with no API key and no network."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, home: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--home", str(home)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def log_lines(out: list[str], header: str) -> list[list[str]]:
    # the line after the command is the TSV header row
    return [line.split("\t") for line in out[out.index(header) + 2 :]]


def test_langgraph_example_recalls_the_preference_in_another_thread(tmp_path: Path) -> None:
    pytest.importorskip("langgraph.graph")
    out = run_example("langgraph_preferences.py", tmp_path / "ws")
    thread2 = out[out.index("thread-2 user: What should I drink this afternoon?") :]
    assert thread2[1] == "  [node] memories of alice found in the store: drink: I prefer green tea."
    assert "  (2 messages in thread-2: threads share no chat history)" in thread2
    log = log_lines(out, "$ gitmem log assistant --session sesn_langgraph_demo")
    assert [(f[3], f[4], f[5], f[6]) for f in log] == [
        ("created", "/users/alice/memories/drink.json", "service:assistant", "sesn_langgraph_demo")
    ]


def test_agents_example_keeps_the_conversation_in_one_memory(tmp_path: Path) -> None:
    pytest.importorskip("agents")
    out = run_example("openai_agents_session.py", tmp_path / "ws")
    assert "assistant: You prefer green tea in the morning." in out
    assert (
        out[out.index("user: Remind me: what do I prefer?") + 1]
        == "assistant: You prefer green tea in the morning."
    )
    log = log_lines(out, "$ gitmem log agents --session sesn_agents_demo")
    # three turns of two add_items each (input, then output), and one pop_item
    assert [f[3] for f in log] == ["modified"] * 6 + ["created"]
    assert {(f[4], f[5]) for f in log} == {("/conversations/alice-chat.jsonl", "user:alice")}
