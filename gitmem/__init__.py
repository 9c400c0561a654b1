"""gitmem: memory stores for AI agents, on plain git.

The public, typed API (docs/architecture.md#python-api)::

    import gitmem
    store = gitmem.create_store("notes", description="...")
    store.write("/notes/todo.md", "buy milk", actor="user:alice")
    store.read("/notes/todo.md").content
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from gitmem.audit.redact import Redaction
    from gitmem.audit.review import Accepted, Erased, PathDiff
    from gitmem.audit.review import Summary as ProposalSummary
    from gitmem.engine.hybrid import SearchResults
    from gitmem.engine.memories import Memory, Prefix
    from gitmem.engine.proposals import STATUSES as PROPOSAL_STATUSES
    from gitmem.engine.proposals import Decision, Proposal
    from gitmem.engine.search import SearchHit
    from gitmem.model.versions import RedactionInfo, Version
    from gitmem.store import Store, create_store, delete_store, list_stores, open_store

__version__ = "0.1.0"

# Imported on first use (PEP 562), so that `gitmem read` and the hook start without loading
# the modules they do not need. name -> "module" (the same name there) or "module:name".
_LAZY = {
    "Accepted": "gitmem.audit.review",
    "Decision": "gitmem.engine.proposals",
    "Erased": "gitmem.audit.review",
    "PathDiff": "gitmem.audit.review",
    "PROPOSAL_STATUSES": "gitmem.engine.proposals:STATUSES",
    "Proposal": "gitmem.engine.proposals",
    "ProposalSummary": "gitmem.audit.review:Summary",
    "Memory": "gitmem.engine.memories",
    "Prefix": "gitmem.engine.memories",
    "Store": "gitmem.store",
    "create_store": "gitmem.store",
    "delete_store": "gitmem.store",
    "list_stores": "gitmem.store",
    "open_store": "gitmem.store",
    "Redaction": "gitmem.audit.redact",
    "RedactionInfo": "gitmem.model.versions",
    "SearchHit": "gitmem.engine.search",
    "SearchResults": "gitmem.engine.hybrid",
    "Version": "gitmem.model.versions",
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'gitmem' has no attribute {name!r}")
    import importlib

    module, _, attr = where.partition(":")
    value = getattr(importlib.import_module(module), attr or name)
    globals()[name] = value
    return value


__all__ = [
    "Accepted",
    "Decision",
    "Erased",
    "PathDiff",
    "PROPOSAL_STATUSES",
    "Proposal",
    "ProposalSummary",
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
    "Redaction",
    "RedactionInfo",
    "SearchHit",
    "SearchResults",
    "Store",
    "Version",
    "create_store",
    "delete_store",
    "list_stores",
    "open_store",
]
