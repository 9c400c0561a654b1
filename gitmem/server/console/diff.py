"""A unified diff (``Store.diff``) as rows for the page: unified, or side by side."""

from __future__ import annotations

import re
from dataclasses import dataclass

_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")


@dataclass(frozen=True)
class Line:
    kind: str  # add | del | ctx | hunk | note
    old: int | None
    new: int | None
    text: str


@dataclass(frozen=True)
class Pair:
    """One row of a side-by-side diff; a side is None where the other side has no counterpart."""

    kind: str  # ctx | change | add | del | hunk
    left: Line | None
    right: Line | None


def unified(diff_text: str) -> list[Line]:
    out: list[Line] = []
    old = new = 0
    for raw in diff_text.splitlines():
        m = _HUNK.match(raw)
        if not out and not m:
            continue  # the "--- a/path" and "+++ b/path" header
        if m:
            old, new = int(m.group(1)), int(m.group(2))
            out.append(Line("hunk", None, None, raw))
        elif raw.startswith("\\"):
            out.append(Line("note", None, None, raw[1:].strip()))
        elif raw.startswith("+"):
            out.append(Line("add", None, new, raw[1:]))
            new += 1
        elif raw.startswith("-"):
            out.append(Line("del", old, None, raw[1:]))
            old += 1
        elif raw.startswith(" "):
            out.append(Line("ctx", old, new, raw[1:]))
            old, new = old + 1, new + 1
    return out


def side_by_side(lines: list[Line]) -> list[Pair]:
    """Deleted lines paired with the added lines that follow them, line by line."""
    out: list[Pair] = []
    dels: list[Line] = []
    adds: list[Line] = []

    def flush() -> None:
        for i in range(max(len(dels), len(adds))):
            left = dels[i] if i < len(dels) else None
            right = adds[i] if i < len(adds) else None
            kind = "change" if left and right else ("del" if left else "add")
            out.append(Pair(kind, left, right))
        dels.clear()
        adds.clear()

    for line in lines:
        if line.kind == "del":
            if adds:
                flush()
            dels.append(line)
        elif line.kind == "add":
            adds.append(line)
        else:
            flush()
            if line.kind == "note":
                continue
            out.append(Pair(line.kind, line, line))
    flush()
    return out
