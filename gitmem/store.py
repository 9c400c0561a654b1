"""``Store``: the public facade of a memory store, and the functions that open, create, copy,
restore, list and delete stores.

The facade is assembled in :mod:`gitmem.facade` (its verbs by concern); this module is where it is
imported from (``from gitmem.store import Store``). Every method spells its parameters out and calls
one verb of the layers below; see docs/architecture.md#python-api.
"""

from __future__ import annotations

from gitmem.engine.batch import BatchOp, BatchResult
from gitmem.engine.core import delete_store, list_stores, store_path
from gitmem.engine.resolve import StoreRef, all_refs, handle_path, resolve_store, stores_dir
from gitmem.facade.handle import Store, open_store
from gitmem.facade.lifecycle import copy_store, create_store, restore_store

__all__ = [
    "BatchOp",
    "BatchResult",
    "Store",
    "StoreRef",
    "all_refs",
    "handle_path",
    "resolve_store",
    "copy_store",
    "create_store",
    "delete_store",
    "list_stores",
    "open_store",
    "restore_store",
    "store_path",
    "stores_dir",
]
