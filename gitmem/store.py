"""``Store``: the public facade of a memory store, and the functions that open, create, copy,
restore, list and delete stores.

The facade is assembled in :mod:`gitmem.facade` (its verbs by concern); this module is where it is
imported from (``from gitmem.store import Store``). Every method spells its parameters out and calls
one verb of the layers below; see docs/architecture.md#python-api.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gitmem.engine.batch import BatchOp, BatchResult
from gitmem.engine.core import delete_store, list_stores, store_path
from gitmem.engine.resolve import StoreRef, all_refs, handle_path, resolve_store, stores_dir
from gitmem.facade.files import blob_id
from gitmem.facade.handle import Store, open_store
from gitmem.facade.lifecycle import copy_store, create_store, restore_store

if TYPE_CHECKING:
    from gitmem.audit.redact import Redaction
    from gitmem.audit.restore import Restored
    from gitmem.audit.review import Accepted, Erased, PathDiff
    from gitmem.audit.review import Summary as ProposalSummary
    from gitmem.engine.hybrid import SearchResults
    from gitmem.engine.memories import Memory, Prefix
    from gitmem.engine.proposals import STATUSES as PROPOSAL_STATUSES
    from gitmem.engine.proposals import Decision, Proposal
    from gitmem.engine.revert import RevertItem, RevertResult
    from gitmem.engine.search import SearchHit
    from gitmem.model.versions import RedactionInfo, Version

# The value types the facade's methods take and return, for the faces (which import this module,
# never gitmem/__init__.py, an entry point): loaded on first use (PEP 562), as gitmem/__init__.py
# does, so that importing the facade stays cheap. name -> "module" (the same name) or "module:name".
VALUES = {
    "Accepted": "gitmem.audit.review",
    "Decision": "gitmem.engine.proposals",
    "Erased": "gitmem.audit.review",
    "Memory": "gitmem.engine.memories",
    "PathDiff": "gitmem.audit.review",
    "Prefix": "gitmem.engine.memories",
    "PROPOSAL_STATUSES": "gitmem.engine.proposals:STATUSES",
    "Proposal": "gitmem.engine.proposals",
    "ProposalSummary": "gitmem.audit.review:Summary",
    "Redaction": "gitmem.audit.redact",
    "RedactionInfo": "gitmem.model.versions",
    "Restored": "gitmem.audit.restore",
    "RevertItem": "gitmem.engine.revert",
    "RevertResult": "gitmem.engine.revert",
    "SearchHit": "gitmem.engine.search",
    "SearchResults": "gitmem.engine.hybrid",
    "Version": "gitmem.model.versions",
}


def __getattr__(name: str) -> Any:
    where = VALUES.get(name)
    if where is None:
        raise AttributeError(f"module 'gitmem.store' has no attribute {name!r}")
    import importlib

    module, _, attr = where.partition(":")
    value = getattr(importlib.import_module(module), attr or name)
    globals()[name] = value
    return value


__all__ = [
    "PROPOSAL_STATUSES",
    "Accepted",
    "BatchOp",
    "BatchResult",
    "Decision",
    "Erased",
    "Memory",
    "PathDiff",
    "Prefix",
    "Proposal",
    "ProposalSummary",
    "Redaction",
    "RedactionInfo",
    "Restored",
    "RevertItem",
    "RevertResult",
    "SearchHit",
    "SearchResults",
    "Store",
    "StoreRef",
    "Version",
    "all_refs",
    "blob_id",
    "copy_store",
    "create_store",
    "delete_store",
    "handle_path",
    "list_stores",
    "open_store",
    "resolve_store",
    "restore_store",
    "store_path",
    "stores_dir",
]
