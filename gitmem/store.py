"""``Store``: the public facade of a memory store, and the functions that open, create, copy,
restore, list and delete stores.

The facade is assembled in :mod:`gitmem.facade` (its verbs by concern); this module is where it is
imported from (``from gitmem.store import Store``). Every method spells its parameters out and calls
one verb of the layers below; see docs/architecture.md#python-api.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gitmem.engine.batch import BatchOp, BatchResult
from gitmem.engine.core import list_stores, store_path
from gitmem.engine.resolve import StoreRef, all_refs, handle_path, resolve_store, stores_dir
from gitmem.facade.admin import load_tlog_policy, verify_receipt
from gitmem.facade.files import blob_id
from gitmem.facade.handle import Store, open_store
from gitmem.facade.lifecycle import copy_store, create_store, delete_store, restore_store

if TYPE_CHECKING:
    from gitmem.audit.redaction_plan import Redaction
    from gitmem.audit.redaction_receipts import Verified as VerifiedReceipt
    from gitmem.audit.restore import Restored
    from gitmem.audit.retention import PruneResult
    from gitmem.audit.review import Accepted, Erased, PathDiff
    from gitmem.audit.review import Summary as ProposalSummary
    from gitmem.audit.timeline import TYPES as AUDIT_TYPES
    from gitmem.audit.timeline import AuditEvent
    from gitmem.audit.transparency import Signed as TlogCheckpoint
    from gitmem.audit.verify import VerifyReport
    from gitmem.audit.witness import Witness
    from gitmem.audit.witnessing import Worker as WitnessWorker
    from gitmem.engine.hybrid import SearchResults
    from gitmem.engine.memories import Memory, Prefix
    from gitmem.engine.proposals import STATUSES as PROPOSAL_STATUSES
    from gitmem.engine.proposals import Decision, Proposal, acl_reviews
    from gitmem.engine.revert import RevertItem, RevertResult
    from gitmem.engine.search import SearchHit
    from gitmem.engine.shortterm import Record as ShortTermRecord
    from gitmem.engine.shortterm import base_path as record_base_path
    from gitmem.engine.shortterm import replace_ops as record_replace_ops
    from gitmem.engine.shortterm import write_ops as record_write_ops
    from gitmem.engine.transfer import ExportResult, ImportResult
    from gitmem.model.tlog.policy import Policy as TlogPolicy
    from gitmem.model.versions import RedactionInfo, Version
    from gitmem.push.replica import Replica, ReplicaPush

# The value types the facade's methods take and return, for the faces (which import this module,
# never gitmem/__init__.py, an entry point): loaded on first use (PEP 562), as gitmem/__init__.py
# does, so that importing the facade stays cheap. name -> "module" (the same name) or "module:name".
VALUES = {
    "AUDIT_TYPES": "gitmem.audit.timeline:TYPES",
    "Accepted": "gitmem.audit.review",
    "AuditEvent": "gitmem.audit.timeline",
    "Decision": "gitmem.engine.proposals",
    "Erased": "gitmem.audit.review",
    "ExportResult": "gitmem.engine.transfer",
    "ImportResult": "gitmem.engine.transfer",
    "Memory": "gitmem.engine.memories",
    "PathDiff": "gitmem.audit.review",
    "Prefix": "gitmem.engine.memories",
    "PROPOSAL_STATUSES": "gitmem.engine.proposals:STATUSES",
    "Proposal": "gitmem.engine.proposals",
    "PruneResult": "gitmem.audit.retention",
    "ProposalSummary": "gitmem.audit.review:Summary",
    "Redaction": "gitmem.audit.redaction_plan",
    "Replica": "gitmem.push.replica",
    "ReplicaPush": "gitmem.push.replica",
    "RedactionInfo": "gitmem.model.versions",
    "Restored": "gitmem.audit.restore",
    "RevertItem": "gitmem.engine.revert",
    "RevertResult": "gitmem.engine.revert",
    "SearchHit": "gitmem.engine.search",
    "SearchResults": "gitmem.engine.hybrid",
    "ShortTermRecord": "gitmem.engine.shortterm:Record",
    "record_base_path": "gitmem.engine.shortterm:base_path",
    "record_replace_ops": "gitmem.engine.shortterm:replace_ops",
    "record_write_ops": "gitmem.engine.shortterm:write_ops",
    "TlogCheckpoint": "gitmem.audit.transparency:Signed",
    "TlogPolicy": "gitmem.model.tlog.policy:Policy",
    "VerifiedReceipt": "gitmem.audit.redaction_receipts:Verified",
    "VerifyReport": "gitmem.audit.verify",
    "Version": "gitmem.model.versions",
    "Witness": "gitmem.audit.witness",
    "WitnessWorker": "gitmem.audit.witnessing:Worker",
    "acl_reviews": "gitmem.engine.proposals",
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
    "AUDIT_TYPES",
    "PROPOSAL_STATUSES",
    "Accepted",
    "AuditEvent",
    "BatchOp",
    "BatchResult",
    "Decision",
    "Erased",
    "ExportResult",
    "ImportResult",
    "Memory",
    "PathDiff",
    "Prefix",
    "Proposal",
    "ProposalSummary",
    "PruneResult",
    "Redaction",
    "RedactionInfo",
    "Replica",
    "ReplicaPush",
    "Restored",
    "RevertItem",
    "RevertResult",
    "SearchHit",
    "SearchResults",
    "ShortTermRecord",
    "Store",
    "StoreRef",
    "TlogCheckpoint",
    "TlogPolicy",
    "VerifiedReceipt",
    "VerifyReport",
    "Version",
    "Witness",
    "WitnessWorker",
    "acl_reviews",
    "all_refs",
    "blob_id",
    "copy_store",
    "create_store",
    "delete_store",
    "handle_path",
    "list_stores",
    "load_tlog_policy",
    "open_store",
    "record_base_path",
    "record_replace_ops",
    "record_write_ops",
    "resolve_store",
    "restore_store",
    "store_path",
    "stores_dir",
    "verify_receipt",
]
