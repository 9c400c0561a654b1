"""A store's history copied into a new store: every ref, byte for byte (docs/dreams.md).

What a dream with ``output_behavior: create_new`` starts from. ``gitmem.store.copy_store`` makes
the copy the way a backup is restored (docs/operations.md#backup): a bundle of every ref and the
private files a bundle cannot carry (the ledger's secret and anchor, the deny-list), restored
under the new name with new settings and checked as ``gitmem verify`` does. So the copy has the
same commits (the same version and memory ids, redaction marks and all), the source's ledger
continued (its redactions and compactions recorded, with the same key), its deny-list, and a
``store_copied`` entry naming the source. The source is only read.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from gitmem import config
from gitmem.engine import ledger
from gitmem.engine.core import StoreCore

PRIVATE = (ledger.SECRET_FILE, ledger.DENYLIST_FILE, ledger.ANCHOR_FILE)


def write_backup(
    source: StoreCore, dest: Path, name: str, description: str, metadata: dict[str, str]
) -> config.StoreSettings:
    """Into ``dest``: the source's private files and the settings of the new store ``name`` (the
    source's limits, retention, acl and guard; not archived). The settings keep the source's id, as
    the backup made with the source's bundle must (``restore_store`` refuses another store's
    settings); the restore gives the copy its own id, since the source still holds that one."""
    for f in PRIVATE:
        path = source.gitmem_dir / f
        if path.is_file():
            shutil.copyfile(path, dest / f)
    now = config.now_rfc3339()
    settings = dataclasses.replace(
        source.settings,
        name=name,
        description=description,
        metadata=metadata,
        created_at=now,
        updated_at=now,
        archived_at=None,
    )
    config.save_settings(dest / config.SETTINGS_FILE, settings)
    return settings


def record_copy(source: StoreCore, target: StoreCore, *, actor: str | None = None) -> None:
    tips = {s: str(t) for s in target.scopes() if (t := target.tip(s)) is not None}
    ledger.append(
        target,
        "store_copied",
        {"source_id": source.settings.id, "source_name": source.name, "tips": tips},
        actor=actor,
    )
