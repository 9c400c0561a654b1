"""Claude's memory tool on a gitmem store, driven by a script instead of a model (no API key, no network).

The SDK's tool runner, given a ``tool_use`` block from Claude, calls ``tool.call(block.input)`` and
sends back a ``tool_result`` (``is_error`` when the tool raised ``ToolError``). This script does the
same with a fixed list of tool_use inputs, prints each result, then shows the versions the session
wrote with ``gitmem log``. Needs the ``anthropic`` extra. ``--home DIR`` keeps the workspace there
(default: a temporary directory).

    python examples/memory_tool_scripted.py
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from typing import Any

from anthropic.tools import ToolError

import gitmem
from gitmem.integrations.anthropic_tool import GitmemMemoryTool

# What Claude typically does with the memory tool: look first, record progress, refine, tidy up.
TOOL_USES: list[dict[str, Any]] = [
    {"command": "view", "path": "/memories"},
    {
        "command": "create",
        "path": "/memories/user/preferences.md",
        "file_text": "- likes tea\n- editor: vim\n",
    },
    {"command": "create", "path": "/memories/tasks/report.md", "file_text": "# Q3 report\n- [ ] outline\n"},
    {
        "command": "str_replace",
        "path": "/memories/user/preferences.md",
        "old_str": "tea",
        "new_str": "green tea",
    },
    {
        "command": "insert",
        "path": "/memories/tasks/report.md",
        "insert_line": 2,
        "insert_text": "- [ ] figures",
    },
    {"command": "view", "path": "/memories/tasks/report.md"},
    {"command": "create", "path": "/memories/tasks/report.md", "file_text": "oops"},  # an error result
    {"command": "view", "path": "/memories/../etc/passwd"},  # traversal is refused
    {"command": "rename", "old_path": "/memories/tasks", "new_path": "/memories/done"},
    {"command": "view", "path": "/memories"},
    {"command": "delete", "path": "/memories/done"},
]


def run_tool(tool: GitmemMemoryTool, tool_use_id: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """What the SDK's tool runner does with one tool_use block."""
    try:
        return {"type": "tool_result", "tool_use_id": tool_use_id, "content": tool.call(tool_input)}
    except ToolError as exc:
        return {"type": "tool_result", "tool_use_id": tool_use_id, "content": exc.content, "is_error": True}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", help="workspace directory to use (default: a temporary one)")
    args = parser.parse_args(argv)
    home = args.home or tempfile.mkdtemp(prefix="gitmem-memory-tool-")
    store = gitmem.create_store("agent", description="Claude's memory", home=home)
    tool = GitmemMemoryTool(store, session="sesn_scripted_demo")
    print(f"workspace {home}, store 'agent', session {tool.session}\n")
    for n, tool_input in enumerate(TOOL_USES, 1):
        result = run_tool(tool, f"toolu_{n:02d}", tool_input)
        mark = "ERROR " if result.get("is_error") else ""
        print(f">>> {tool_input}\n{mark}{result['content']}\n")
    store.close()
    print(f"$ gitmem log agent --session {tool.session}", flush=True)
    log = subprocess.run(
        [sys.executable, "-m", "gitmem", "log", "agent", "--session", tool.session, "--home", home],
        capture_output=True,
        text=True,
    )
    sys.stdout.write(log.stdout + log.stderr)
    return log.returncode


if __name__ == "__main__":
    sys.exit(main())
