"""gitmem: memory stores for AI agents, on plain git.

The public, typed API (DESIGN section 12)::

    import gitmem
    store = gitmem.create_store("notes", description="...")
    store.write("/notes/todo.md", "buy milk", actor="user:alice")
    store.read("/notes/todo.md").content
"""

from __future__ import annotations

from gitmem.errors import (
    ConfigError,
    ConflictError,
    ForbiddenError,
    GitmemError,
    IntegrityError,
    InvalidInputError,
    LimitExceededError,
    NotFoundError,
    PathConflictError,
    PreconditionFailedError,
)
from gitmem.memories import Memory, Prefix
from gitmem.store import Store, create_store, delete_store, list_stores, open_store
from gitmem.versions import RedactionInfo, Version

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "ConflictError",
    "ForbiddenError",
    "GitmemError",
    "IntegrityError",
    "InvalidInputError",
    "LimitExceededError",
    "Memory",
    "NotFoundError",
    "PathConflictError",
    "PreconditionFailedError",
    "Prefix",
    "RedactionInfo",
    "Store",
    "Version",
    "create_store",
    "delete_store",
    "list_stores",
    "open_store",
]
