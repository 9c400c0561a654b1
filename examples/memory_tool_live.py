"""Claude with a gitmem-backed memory tool, through the Anthropic SDK's tool runner.

Needs ``ANTHROPIC_API_KEY`` and network access (so the tests do not run it; they run
``memory_tool_scripted.py``, which calls the tool the same way without a model). Needs the
``anthropic`` extra: ``pip install 'gitmem-store[anthropic]'``.

    ANTHROPIC_API_KEY=... python examples/memory_tool_live.py --store agent "Remember that I prefer tea."
    gitmem log agent          # every memory change Claude made, tagged with the session

Options: ``--store`` (created when missing), ``--scope``, ``--session``, ``--model``, ``--home``.
"""

from __future__ import annotations

import argparse
import sys

import anthropic

import gitmem
from gitmem.errors import NotFoundError
from gitmem.integrations.anthropic_tool import GitmemMemoryTool


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("prompt", help="what to ask Claude")
    parser.add_argument("--store", default="agent", help="store name (created when missing)")
    parser.add_argument("--scope", default="main", help="scope (one per user or team)")
    parser.add_argument("--session", default=None, help="session id (default: a new sesn_ id)")
    parser.add_argument("--model", default="claude-sonnet-4-5", help="model name")
    parser.add_argument("--home", default=None, help="gitmem workspace")
    args = parser.parse_args(argv)

    try:
        store = gitmem.open_store(args.store, home=args.home)
    except NotFoundError:
        store = gitmem.create_store(args.store, description="Claude's memory", home=args.home)
    memory = GitmemMemoryTool(store, scope=args.scope, session=args.session)

    client = anthropic.Anthropic()  # reads ANTHROPIC_API_KEY
    runner = client.beta.messages.tool_runner(
        model=args.model,
        max_tokens=2048,
        tools=[memory],
        messages=[{"role": "user", "content": args.prompt}],
    )
    final = runner.until_done()
    for block in final.content:
        if block.type == "text":
            print(block.text)
    print(
        f"\n{len(memory.versions)} memory versions in session {memory.session}: gitmem log {args.store} "
        f"--session {memory.session}",
        file=sys.stderr,
    )
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
