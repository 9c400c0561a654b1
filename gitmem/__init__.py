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
    from gitmem.audit.redaction_plan import Redaction
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


def _record_spooled_pushes(core: Any) -> None:
    from gitmem.push.spool import drain

    drain(core)


def _push_rewrite_to_replicas(core: Any) -> None:
    from gitmem.push.replica import after_rewrite

    after_rewrite(core)


def install_default_hooks() -> None:
    """Register the push layer's hooks (gitmem.events): spooled pushes are recorded when a handle
    opens or meets new commits, and a completed rewrite is pushed to the store's read replicas.
    Run when gitmem is imported, so a handle opened at any layer has them; idempotent. The hooks
    import the push layer only when they first run."""
    from gitmem import events

    events.register(events.NEW_COMMIT, _record_spooled_pushes)
    events.register(events.AFTER_REWRITE, _push_rewrite_to_replicas)


install_default_hooks()

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
    "Redaction": "gitmem.audit.redaction_plan",
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
