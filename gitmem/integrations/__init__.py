"""Agent integrations: Claude's memory tool backend, an MCP server, LangGraph and the Agents SDK.

Each lives in its own module and imports its optional SDK only there, so ``import gitmem`` never
needs them:

- :mod:`gitmem.integrations.anthropic_tool` (extra ``gitmem-store[anthropic]``):
  ``GitmemMemoryTool`` / ``GitmemAsyncMemoryTool``, backends for the ``memory_20250818`` tool.
- :mod:`gitmem.integrations.mcp_server` (extra ``gitmem-store[mcp]``): ``build_server`` and
  ``gitmem mcp``, an MCP server over stdio.
- :mod:`gitmem.integrations.langgraph` (extra ``gitmem-store[langgraph]``): ``GitmemStore``, a
  LangGraph ``BaseStore`` (long-term memory) on one store and scope.
- :mod:`gitmem.integrations.openai_agents` (extra ``gitmem-store[openai-agents]``):
  ``GitmemSession``, the OpenAI Agents SDK ``Session`` protocol on one memory per conversation.
"""

from __future__ import annotations
