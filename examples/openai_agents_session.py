"""An OpenAI Agents SDK agent whose conversation lives in gitmem, with a scripted model (no key, no network).

``Runner.run(agent, text, session=GitmemSession(...))`` loads the conversation from the memory
``/conversations/<id>.jsonl`` before each turn and appends the turn's items after it, one version
per change. The model here is a script that implements the SDK's ``Model`` interface: it answers
from the history the runner hands it, so the second turn can only be answered if the session
remembered the first. A fresh ``GitmemSession`` on the same id (a new process, a new day) picks the
conversation up again. Ends with ``gitmem log``. Needs the ``openai-agents`` extra.

    python examples/openai_agents_session.py [--home DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, Model, ModelResponse, Runner, Usage, set_tracing_disabled
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

import gitmem
from gitmem.integrations.openai_agents import GitmemSession

SESSION = "sesn_agents_demo"


def _texts(items: str | list[Any]) -> list[tuple[str, str]]:
    """(role, text) of every message in the model's input."""
    if isinstance(items, str):
        return [("user", items)]
    out = []
    for item in items:
        content = item.get("content")
        if isinstance(content, list):
            content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
        if isinstance(content, str):
            out.append((item.get("role", ""), content))
    return out


class ScriptedModel(Model):
    """Answers like a tiny, honest assistant: it knows only what is in the input it is given."""

    def __init__(self) -> None:
        self.calls = 0

    def _answer(self, messages: list[tuple[str, str]]) -> str:
        question = messages[-1][1]
        if "?" not in question:
            return "Noted."
        for role, text in reversed(messages[:-1]):
            found = re.search(r"I prefer ([\w ]+)", text)
            if role == "user" and found:
                return f"You prefer {found.group(1)}."
        return "I don't know yet."

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.calls += 1
        message = ResponseOutputMessage(
            id=f"msg_{self.calls}",
            type="message",
            role="assistant",
            status="completed",
            content=[
                ResponseOutputText(type="output_text", text=self._answer(_texts(input)), annotations=[])
            ],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("this scripted model does not stream")


async def converse(store: gitmem.Store, model: ScriptedModel) -> None:
    agent = Agent(name="Assistant", instructions="Be brief.", model=model)
    first = GitmemSession("alice-chat", store, actor="user:alice", session=SESSION)
    for text in ["Hi! I prefer green tea in the morning.", "What do I like to drink?"]:
        result = await Runner.run(agent, text, session=first)
        print(f"user: {text}\nassistant: {result.final_output}")
    # Another object on the same conversation (think: the next process) continues where it stopped.
    again = GitmemSession("alice-chat", store, actor="user:alice", session=SESSION)
    result = await Runner.run(agent, "Remind me: what do I prefer?", session=again)
    print(f"user: Remind me: what do I prefer?\nassistant: {result.final_output}")
    print(f"\n{len(await again.get_items())} items in {again.path}")
    popped = await again.pop_item()
    print(f"pop_item() -> {popped and popped.get('role')}; {len(await again.get_items())} items left")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", help="workspace directory to use (default: a temporary one)")
    args = parser.parse_args(argv)
    home = args.home or tempfile.mkdtemp(prefix="gitmem-agents-")
    set_tracing_disabled(True)  # the SDK would otherwise export traces to OpenAI
    store = gitmem.create_store("agents", description="Agent conversations", home=home)
    asyncio.run(converse(store, ScriptedModel()))
    store.close()
    print(f"\n$ gitmem log agents --session {SESSION}", flush=True)
    log = subprocess.run(
        [sys.executable, "-m", "gitmem", "log", "agents", "--session", SESSION, "--home", home],
        capture_output=True,
        text=True,
    )
    sys.stdout.write(log.stdout + log.stderr)
    return log.returncode


if __name__ == "__main__":
    sys.exit(main())
