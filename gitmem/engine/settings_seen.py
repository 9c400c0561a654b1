"""The settings gitmem last wrote or recorded (``$GIT_DIR/gitmem/settings_seen.json``: the
SHA-256 of ``gitmem.yaml`` and its values), by which a hand edit of the file is told apart
(gitmem.engine.ledger.check_hand_edit records one). Kept light: a store's open asks this on
every ``gitmem read`` (gitmem.facade.headread).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

SETTINGS_SEEN = "settings_seen.json"


def file_digest(path: Path) -> str | None:
    """The SHA-256 of the file at ``path`` (hex), or None when there is none."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def read_seen(gitmem_dir: Path) -> Any:
    """The record (parsed JSON), or None when there is none or it is not JSON."""
    try:
        return json.loads((gitmem_dir / SETTINGS_SEEN).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None


def recorded(seen: Any, settings_path: Path) -> bool:
    """Whether the settings file is the one the record ``seen`` holds: no hand edit to record."""
    return isinstance(seen, dict) and seen.get("sha256") == file_digest(settings_path)
