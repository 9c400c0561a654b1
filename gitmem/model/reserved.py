"""Paths reserved for short-term memory records (docs/conversations.md): conversations and checkpoints.

Mounts and search leave them out by default; the conversations API and the LangGraph checkpointer
read and write them (:mod:`gitmem.engine.shortterm`).
"""

from __future__ import annotations

CONVERSATIONS = "/conversations/"
CHECKPOINTS = "/checkpoints/"
SHORTTERM_PREFIXES = (CONVERSATIONS, CHECKPOINTS)


def is_shortterm(path: str) -> bool:
    """Whether ``path`` is a conversation or checkpoint record (left out of mounts and search)."""
    return path.startswith(SHORTTERM_PREFIXES)
