"""The store's deny-list: object ids that a redaction or compaction removed.

``$GIT_DIR/gitmem/denylist`` holds one 40-hex object id per line ('#' comments). Writes refuse them
and so does the pre-receive hook, which imports this module on every push (keep it import-light).
"""

from __future__ import annotations

import re
from pathlib import Path

DENYLIST = "denylist"
HEX40 = re.compile(r"^[0-9a-f]{40}$")


def read_denylist(git_dir: Path) -> frozenset[str]:
    """The store's deny-list (redacted blobs, retired commits); empty when there is none."""
    try:
        text = (git_dir / "gitmem" / DENYLIST).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return frozenset()
    ids = set()
    for line in text.splitlines():
        item = line.split("#", 1)[0].strip().lower()
        if HEX40.match(item):
            ids.add(item)
    return frozenset(ids)
