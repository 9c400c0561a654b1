"""A LangGraph graph that remembers a user's preference in one thread and recalls it in another.

The graph has one node. It keeps long-term memories in ``GitmemStore`` (namespace
``("users", <user_id>, "memories")``, so the memory file is ``/users/<user_id>/memories/<key>.json``)
and short-term chat state per thread in LangGraph's own checkpointer. When the user says
"remember ...", the node writes a memory; on every turn it searches the user's memories and puts
what it finds in the system prompt. The chat model is ``GenericFakeChatModel`` from
``langchain_core`` with scripted replies (no key, no network); what the store gave the node is
printed, so the recall in thread 2 is visible. Ends with ``gitmem log``. Needs the ``langgraph``
extra plus ``langgraph`` and ``langchain-core``.

    python examples/langgraph_preferences.py [--home DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.store.base import BaseStore

import gitmem
from gitmem.integrations.langgraph import GitmemStore

SESSION = "sesn_langgraph_demo"
SCRIPT = [
    AIMessage(content="Got it, I'll remember that you like green tea."),
    AIMessage(content="From what I remember, you prefer green tea. Shall I put the kettle on?"),
]


def build_graph(store: BaseStore, model: GenericFakeChatModel) -> Any:
    def chat(state: MessagesState, config: RunnableConfig, *, store: BaseStore) -> dict[str, Any]:
        user_id = config["configurable"]["user_id"]
        namespace = ("users", user_id, "memories")
        said = str(state["messages"][-1].content)
        if said.lower().startswith("remember"):
            store.put(namespace, "drink", {"topic": "drink", "preference": said.split(":", 1)[1].strip()})
        found = store.search(namespace, query="drink")
        known = "; ".join(f"{m.value['topic']}: {m.value['preference']}" for m in found) or "nothing yet"
        print(f"  [node] memories of {user_id} found in the store: {known}")
        reply = model.invoke([SystemMessage(f"What you know about the user: {known}"), *state["messages"]])
        return {"messages": [reply]}

    builder = StateGraph(MessagesState)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    return builder.compile(checkpointer=InMemorySaver(), store=store)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", help="workspace directory to use (default: a temporary one)")
    args = parser.parse_args(argv)
    home = args.home or tempfile.mkdtemp(prefix="gitmem-langgraph-")
    store = gitmem.create_store("assistant", description="What the assistant remembers", home=home)
    memory = GitmemStore(store, actor="service:assistant", session=SESSION)
    graph = build_graph(memory, GenericFakeChatModel(messages=iter(SCRIPT)))
    turns = [
        ("thread-1", "Remember: I prefer green tea."),
        ("thread-2", "What should I drink this afternoon?"),
    ]
    for thread, text in turns:
        config: RunnableConfig = {"configurable": {"thread_id": thread, "user_id": "alice"}}
        print(f"{thread} user: {text}")
        result = graph.invoke({"messages": [{"role": "user", "content": text}]}, config)
        print(f"{thread} assistant: {result['messages'][-1].content}")
        print(f"  ({len(result['messages'])} messages in {thread}: threads share no chat history)\n")
    path = "/users/alice/memories/drink.json"
    print(f"$ gitmem read assistant {path}\n{store.read(path).content}")
    store.close()
    print(f"$ gitmem log assistant --session {SESSION}", flush=True)
    log = subprocess.run(
        [sys.executable, "-m", "gitmem", "log", "assistant", "--session", SESSION, "--home", home],
        capture_output=True,
        text=True,
    )
    sys.stdout.write(log.stdout + log.stderr)
    return log.returncode


if __name__ == "__main__":
    sys.exit(main())
