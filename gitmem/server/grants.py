"""Token grants name stores by id: the migration of grants written when they named stores.

A token file written before store ids were handles keys ``stores`` by store name, and a store's
name was then its directory (``stores/<name>.git``). Such a key means the store in that directory,
whatever it is called now, so it is translated through the directory, never through the current
display names: a store created or renamed to that name later gains nothing. A key whose directory
is gone (the store was deleted) moves to ``legacy_grants``, which grants nothing and keeps the
record whole. The rewrite is one atomic replacement of ``tokens.json`` under its lock, made the
first time a process reads the file (docs/stores.md#existing-workspaces).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gitmem.ids import is_id
from gitmem.store import all_refs

ALL_STORES = "*"


def needs_migration(records: dict[str, dict[str, Any]]) -> bool:
    """Whether some record grants a store by something other than its id."""
    for record in records.values():
        stores = record.get("stores")
        if isinstance(stores, dict) and any(k != ALL_STORES and not is_id(k, "memstore") for k in stores):
            return True
    return False


def migrate(records: dict[str, dict[str, Any]], home: str | os.PathLike[str]) -> dict[str, dict[str, Any]]:
    """``records`` with every grant keyed by store id (module docstring)."""
    by_handle = {ref.handle: ref.id for ref in all_refs(home, strict=False)}
    base = Path(home) / "stores"
    out: dict[str, dict[str, Any]] = {}
    for token_id, record in records.items():
        stores = record.get("stores")
        if not isinstance(stores, dict):
            out[token_id] = record
            continue
        grants: dict[str, str] = {}
        legacy = dict(record.get("legacy_grants") or {})
        for key, access in stores.items():
            if key == ALL_STORES or is_id(key, "memstore"):
                grants[key] = access
            elif key in by_handle:
                store_id = by_handle[key]
                # two keys naming one store: the wider access wins, as either alone would grant
                grants[store_id] = "rw" if "rw" in (access, grants.get(store_id)) else access
            elif (base / f"{key}.git").exists():
                grants[key] = access  # a store whose settings cannot be read now: tried again later
            else:
                legacy[key] = access
        new = {**record, "stores": grants}
        if legacy:
            new["legacy_grants"] = legacy
        out[token_id] = new
    return out
