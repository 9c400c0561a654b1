"""The pending-erase record of a proposal's erasure (``$GIT_DIR/gitmem/erasing.json``, 0600) and
what it drives to completion (docs/review.md, "Erasing a proposal").

``gitmem.audit.review.erase`` writes the record before it changes anything; it carries the
erasure's plan, and with it what the erasure's last step needs: the erasure's id and the
proposal's versions, whose dream records are scrubbed (gitmem.audit.record_scrub.scrub_erasure).
The record is removed only after that scrub. An erase killed half-way leaves it:

- killed once the proposal was saved as erased (its objects purged, its ledger entry written),
  only the records' scrub is left: the next open of the store (:func:`finish`, from
  gitmem.audit.journal.open_recovered) or ``gitmem verify`` runs it, and removes the record;
- killed before that, the deny-list entry, the purge and the proposal's save are the next
  ``review erase`` of that proposal's to finish, and ``gitmem verify`` reports the erase as
  unfinished until then (:func:`check_pending`).

The scrub is idempotent: running it again over records it already scrubbed changes nothing.
The locks are taken in the engine's order (docs/durability.md#lock-order): the store lock, then
``proposals.lock`` (the erase itself holds the purge lock between the two).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from gitmem.engine import proposals as P
from gitmem.engine.core import StoreCore
from gitmem.errors import GitmemError
from gitmem.git.locks import proposals_lock

ERASE_FILE = "erasing.json"  # $GIT_DIR/gitmem/: an erase between its plan and its records' scrub

# gitmem.audit.journal.store_lock (passed in, as to gitmem.audit.purge_order.erasing: the journal
# opens stores through this module's finish)
StoreLock = Callable[..., AbstractContextManager[bool]]


def pending(store: StoreCore) -> dict[str, Any] | None:
    """The pending-erase record, or None (no erase was interrupted, or it is unreadable)."""
    try:
        data = json.loads((store.gitmem_dir / ERASE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def close(store: StoreCore, record: dict[str, Any]) -> None:
    """The erasure's last step, once its proposal is saved as erased (the caller holds the store
    lock and ``proposals.lock``): the dream records quoting its versions are scrubbed, then the
    pending-erase record is removed."""
    from gitmem.audit import record_scrub

    record_scrub.scrub_erasure(store, str(record["id"]), [str(v) for v in record.get("versions") or []])
    (store.gitmem_dir / ERASE_FILE).unlink(missing_ok=True)


def finish(store: StoreCore, store_lock: StoreLock, *, blocking: bool = False) -> str | None:
    """Finish an erase killed after its proposal was saved as erased (the records' scrub); returns
    "completed", "pending" (killed earlier: the next ``review erase`` of it finishes it) or None
    (nothing pending, a clone, or, when not ``blocking``, a live process holds the store lock)."""
    if store.is_clone or not (store.gitmem_dir / ERASE_FILE).exists():
        return None
    with store_lock(store, blocking=blocking) as held:
        if not held:
            return None  # a live erase (or rewrite) holds it: that one finishes its own
        with proposals_lock(store.path):
            record = pending(store)
            if record is None:
                return None if not (store.gitmem_dir / ERASE_FILE).exists() else "pending"
            if not _saved_erased(store, record):
                return "pending"
            close(store, record)
    return "completed"


def check_pending(store: StoreCore, store_lock: StoreLock) -> list[str]:
    """For ``gitmem verify``: an erase left unfinished, once :func:`finish` ran (empty: none)."""
    state = finish(store, store_lock, blocking=True)
    if state != "pending":
        return []
    record = pending(store) or {}
    what = f"of proposal {record['proposal']}" if "proposal" in record else "(its record is unreadable)"
    return [
        f"the erasure {what} was interrupted before the proposal was saved as erased: "
        f"run `gitmem review erase` of it again ({store.gitmem_dir / ERASE_FILE})"
    ]


def _saved_erased(store: StoreCore, record: dict[str, Any]) -> bool:
    try:
        return P.get(store, str(record.get("proposal"))).erased == record.get("id")
    except GitmemError:
        return False
