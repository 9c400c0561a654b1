"""A change of a store's settings made through gitmem, and its ledger entry.

The handle (gitmem.engine.core.StoreCore) only validates and saves settings; the ledger records
through the handle, so the change that needs both lives above them: a hand edit of ``gitmem.yaml``
found first is recorded before it (unattributed), then the change with its actor and a readable diff
(``archived`` when it sets ``archived_at``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gitmem import config
from gitmem.config import StoreSettings
from gitmem.engine import ledger
from gitmem.engine.core import StoreCore


def update_settings(store: StoreCore, *, actor: str | None = None, **changes: Any) -> StoreSettings:
    """Change settings (description, metadata, limits, retention, acl, ...) and save them atomically;
    every change is a ledger entry."""
    store.check_writable()
    ledger.check_hand_edit(store)
    old = store.settings.to_dict()
    new = replace(store.settings, updated_at=config.now_rfc3339(), **changes)
    store.save_settings(new)
    ledger.record_settings_change(store, old, changes, actor)
    return store.settings
