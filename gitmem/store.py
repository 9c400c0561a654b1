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
from gitmem.facade.hooks_ops import (
    clone_store,
    fence_epoch,
    fetch_clone,
    init_replica,
    install_hooks,
    install_hooks_at,
    purge_and_prove,
    render_hook,
    store_id_by_handle,
)
from gitmem.facade.house_ops import (
    dream_records_lock,
    dream_seen_by,
    file_lock,
    read_dream_record,
    start_witness_worker,
    write_dream_record,
    write_file,
)
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
    from gitmem.audit.witness import MAX_BODY as WITNESS_MAX_BODY
    from gitmem.audit.witness import Reply as WitnessReply
    from gitmem.audit.witness import Witness
    from gitmem.audit.witnessing import Worker as WitnessWorker
    from gitmem.engine.access import dream_review
    from gitmem.engine.conversations import Conversation
    from gitmem.engine.conversations import check_metadata as check_conversation_metadata
    from gitmem.engine.conversations import normalize_item as normalize_conversation_item
    from gitmem.engine.conversations import normalize_items as normalize_conversation_items
    from gitmem.engine.conversations import parse_id as parse_conversation_id
    from gitmem.engine.hybrid import MODES as SEARCH_MODES
    from gitmem.engine.hybrid import SearchResults
    from gitmem.engine.memories import Memory, Prefix
    from gitmem.engine.overview import RedactionPreview, SessionWrites
    from gitmem.engine.proposal_view import MemoryPage
    from gitmem.engine.proposals import STATUSES as PROPOSAL_STATUSES
    from gitmem.engine.proposals import Decision, Proposal, acl_reviews
    from gitmem.engine.revert import RevertItem, RevertResult
    from gitmem.engine.search import SearchHit
    from gitmem.engine.shortterm import Record as ShortTermRecord
    from gitmem.engine.shortterm import base_path as record_base_path
    from gitmem.engine.shortterm import replace_ops as record_replace_ops
    from gitmem.engine.shortterm import write_ops as record_write_ops
    from gitmem.engine.transfer import ExportResult, ImportResult
    from gitmem.git.fence import shut_fence, write_fence
    from gitmem.git.refgen import read as ref_generation
    from gitmem.git.reflocks import break_if_stale as break_stale_lock
    from gitmem.git.reflocks import clear_stale_packed_refs
    from gitmem.git.tmpdirs import TMP_DIR as STORE_TMP_DIR
    from gitmem.git.tmpdirs import held_dir as held_tmp_dir
    from gitmem.git.tmpdirs import sweep as sweep_tmp_dirs
    from gitmem.model.tlog.policy import Policy as TlogPolicy
    from gitmem.model.versions import RedactionInfo, Version
    from gitmem.push.clone import CloneResult, FetchResult, RewrittenScope
    from gitmem.push.hookinstall import InstalledHook
    from gitmem.push.pushenv import SERVER_REVIEW_ENV as PUSH_REVIEW_ENV
    from gitmem.push.pushenv import SERVER_SESSION_ENV as PUSH_SESSION_ENV
    from gitmem.push.replica import Replica, ReplicaPush

# The value types the facade's methods take and return, for the faces (which import this module,
# never gitmem/__init__.py, an entry point): loaded on first use (PEP 562), as gitmem/__init__.py
# does, so that importing the facade stays cheap. name -> "module" (the same name) or "module:name".
VALUES = {
    "AUDIT_TYPES": "gitmem.audit.timeline:TYPES",
    "Accepted": "gitmem.audit.review",
    "AuditEvent": "gitmem.audit.timeline",
    "Conversation": "gitmem.engine.conversations",
    "check_conversation_metadata": "gitmem.engine.conversations:check_metadata",
    "normalize_conversation_item": "gitmem.engine.conversations:normalize_item",
    "normalize_conversation_items": "gitmem.engine.conversations:normalize_items",
    "parse_conversation_id": "gitmem.engine.conversations:parse_id",
    "CloneResult": "gitmem.push.clone",
    "Decision": "gitmem.engine.proposals",
    "Erased": "gitmem.audit.review",
    "ExportResult": "gitmem.engine.transfer",
    "FetchResult": "gitmem.push.clone",
    "ImportResult": "gitmem.engine.transfer",
    "InstalledHook": "gitmem.push.hookinstall",
    "Memory": "gitmem.engine.memories",
    "MemoryPage": "gitmem.engine.proposal_view",
    "PathDiff": "gitmem.audit.review",
    "Prefix": "gitmem.engine.memories",
    "PROPOSAL_STATUSES": "gitmem.engine.proposals:STATUSES",
    "PUSH_REVIEW_ENV": "gitmem.push.pushenv:SERVER_REVIEW_ENV",
    "PUSH_SESSION_ENV": "gitmem.push.pushenv:SERVER_SESSION_ENV",
    "Proposal": "gitmem.engine.proposals",
    "PruneResult": "gitmem.audit.retention",
    "ProposalSummary": "gitmem.audit.review:Summary",
    "Redaction": "gitmem.audit.redaction_plan",
    "RedactionPreview": "gitmem.engine.overview",
    "Replica": "gitmem.push.replica",
    "ReplicaPush": "gitmem.push.replica",
    "RedactionInfo": "gitmem.model.versions",
    "Restored": "gitmem.audit.restore",
    "RevertItem": "gitmem.engine.revert",
    "RevertResult": "gitmem.engine.revert",
    "RewrittenScope": "gitmem.push.clone",
    "SearchHit": "gitmem.engine.search",
    "SearchResults": "gitmem.engine.hybrid",
    "SEARCH_MODES": "gitmem.engine.hybrid:MODES",
    "SessionWrites": "gitmem.engine.overview",
    "ShortTermRecord": "gitmem.engine.shortterm:Record",
    "record_base_path": "gitmem.engine.shortterm:base_path",
    "record_replace_ops": "gitmem.engine.shortterm:replace_ops",
    "record_write_ops": "gitmem.engine.shortterm:write_ops",
    "TlogCheckpoint": "gitmem.audit.transparency:Signed",
    "TlogPolicy": "gitmem.model.tlog.policy:Policy",
    "VerifiedReceipt": "gitmem.audit.redaction_receipts:Verified",
    "VerifyReport": "gitmem.audit.verify",
    "Version": "gitmem.model.versions",
    "WITNESS_MAX_BODY": "gitmem.audit.witness:MAX_BODY",
    "Witness": "gitmem.audit.witness",
    "WitnessReply": "gitmem.audit.witness:Reply",
    "WitnessWorker": "gitmem.audit.witnessing:Worker",
    "ref_generation": "gitmem.git.refgen:read",
    "break_stale_lock": "gitmem.git.reflocks:break_if_stale",
    "clear_stale_packed_refs": "gitmem.git.reflocks",
    "STORE_TMP_DIR": "gitmem.git.tmpdirs:TMP_DIR",
    "held_tmp_dir": "gitmem.git.tmpdirs:held_dir",
    "sweep_tmp_dirs": "gitmem.git.tmpdirs:sweep",
    "shut_fence": "gitmem.git.fence",
    "write_fence": "gitmem.git.fence",
    "acl_reviews": "gitmem.engine.proposals",
    "dream_review": "gitmem.engine.access",
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
    "SEARCH_MODES",
    "PUSH_REVIEW_ENV",
    "PUSH_SESSION_ENV",
    "Accepted",
    "AuditEvent",
    "BatchOp",
    "BatchResult",
    "Conversation",
    "CloneResult",
    "Decision",
    "Erased",
    "ExportResult",
    "FetchResult",
    "ImportResult",
    "InstalledHook",
    "Memory",
    "MemoryPage",
    "PathDiff",
    "Prefix",
    "Proposal",
    "ProposalSummary",
    "PruneResult",
    "Redaction",
    "RedactionInfo",
    "RedactionPreview",
    "Replica",
    "ReplicaPush",
    "Restored",
    "RevertItem",
    "RevertResult",
    "RewrittenScope",
    "SearchHit",
    "SearchResults",
    "SessionWrites",
    "ShortTermRecord",
    "Store",
    "StoreRef",
    "TlogCheckpoint",
    "TlogPolicy",
    "VerifiedReceipt",
    "VerifyReport",
    "Version",
    "WITNESS_MAX_BODY",
    "Witness",
    "WitnessReply",
    "WitnessWorker",
    "acl_reviews",
    "all_refs",
    "blob_id",
    "break_stale_lock",
    "clear_stale_packed_refs",
    "STORE_TMP_DIR",
    "held_tmp_dir",
    "sweep_tmp_dirs",
    "check_conversation_metadata",
    "clone_store",
    "copy_store",
    "create_store",
    "delete_store",
    "dream_review",
    "fence_epoch",
    "fetch_clone",
    "dream_records_lock",
    "dream_seen_by",
    "file_lock",
    "handle_path",
    "init_replica",
    "install_hooks",
    "install_hooks_at",
    "list_stores",
    "load_tlog_policy",
    "normalize_conversation_item",
    "normalize_conversation_items",
    "open_store",
    "parse_conversation_id",
    "purge_and_prove",
    "record_base_path",
    "record_replace_ops",
    "record_write_ops",
    "ref_generation",
    "render_hook",
    "resolve_store",
    "restore_store",
    "shut_fence",
    "store_id_by_handle",
    "start_witness_worker",
    "store_path",
    "stores_dir",
    "verify_receipt",
    "write_fence",
    "read_dream_record",
    "write_dream_record",
    "write_file",
]
