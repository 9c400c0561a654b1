"""Agent integrations: Claude's memory tool backend and an MCP server.

Each lives in its own module and imports its optional SDK only there, so ``import gitmem`` never
needs them:

- :mod:`gitmem.integrations.anthropic_tool` (extra ``gitmem-store[anthropic]``):
  ``GitmemMemoryTool`` / ``GitmemAsyncMemoryTool``, backends for the ``memory_20250818`` tool.
- :mod:`gitmem.integrations.mcp_server` (extra ``gitmem-store[mcp]``): ``build_server`` and
  ``gitmem mcp``, an MCP server over stdio.
"""

from __future__ import annotations
