"""A change of a store's settings made through gitmem, and its ledger entry.

The handle (gitmem.engine.core.StoreCore) only validates and saves settings; the ledger records
through the handle, so the change that needs both lives above them: a hand edit of ``gitmem.yaml``
found first is recorded before it (unattributed), then the change with its actor and a readable diff
(``archived`` when it sets ``archived_at``).
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from typing import Any

from gitmem import config
from gitmem.config import StoreSettings
from gitmem.engine import ledger, ledger_text
from gitmem.engine.core import StoreCore
from gitmem.engine.guard_policy import policy_for, policy_of
from gitmem.errors import GitmemError
from gitmem.model.guard import GuardPolicy


def update_settings(store: StoreCore, *, actor: str | None = None, **changes: Any) -> StoreSettings:
    """Change settings (description, metadata, limits, retention, acl, ...) and save them atomically;
    every change is a ledger entry."""
    store.check_writable()
    policies = _policies(store, changes)
    ledger_text.screen_settings(policies, changes)  # each value lands in the ledger, with the actor
    ledger_text.screen_who(store, actor, policies=policies)
    ledger.check_hand_edit(store)
    old = store.settings.to_dict()
    new = replace(store.settings, updated_at=config.now_rfc3339(), **changes)
    store.save_settings(new)
    ledger.record_settings_change(store, old, changes, actor)
    return store.settings


def _policies(store: StoreCore, changes: dict[str, Any]) -> list[GuardPolicy]:
    """The store's guard policy, and the one a change of ``guard`` brings (a bad one is refused
    by the save, with the settings file's own message)."""
    out = [policy_for(store)]
    if "guard" in changes:
        with contextlib.suppress(GitmemError, TypeError, ValueError):
            out.append(policy_of(changes["guard"]))
    return out
