"""The write-time guard's memo of clean paragraphs, which lets a rewrite rescan only what changed.

Memories are rewritten with small edits: most paragraphs of a rewrite were in the previous
version. Every rule but the PEM ones (and a store's own patterns) finds its matches within one
line: no match holds a newline and no check looks past one. So what a paragraph holds does not
depend on the text around it, and a paragraph found clean once is clean wherever it appears.
Given a memo, a scan remembers such paragraphs (blocks between blank lines, at most CHUNK_MAX
long), per rule family, and looks only at the others, joined by blank lines, mapping offsets
back. Only clean paragraphs are kept, so a memo never holds what a rule would find.
docs/guard.md#speed.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gitmem.model.guard_rules import Hit

CHUNK_SEP = b"\n\n"
CHUNK_MAX = 2048
CLEAN_MAX = 2048
CLEAN_BYTES = 1 << 20

Families = list[list["Hit"]]


class ParagraphMemo:
    """The paragraphs found clean for one rule family, bounded (at most :data:`CLEAN_MAX` of them
    and :data:`CLEAN_BYTES` in all); dropped whole when full. Safe to share between threads."""

    __slots__ = ("_seen", "_bytes")

    def __init__(self) -> None:
        self._seen: set[bytes] = set()
        self._bytes = 0

    def __contains__(self, chunk: bytes) -> bool:
        return chunk in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def add(self, chunk: bytes) -> None:
        if chunk in self._seen:
            return
        if len(self._seen) >= CLEAN_MAX or self._bytes + len(chunk) > CLEAN_BYTES:
            self._seen.clear()
            self._bytes = 0
        self._seen.add(chunk)
        self._bytes += len(chunk)


class CleanParagraphs:
    """What :func:`gitmem.model.guard.scan` may skip: the paragraphs it found no secret in, and
    no personal data in. The write path keeps one per store and scope (so that how long a scan
    takes says nothing about what another store or scope holds)."""

    __slots__ = ("secrets", "pii")

    def __init__(self) -> None:
        self.secrets = ParagraphMemo()
        self.pii = ParagraphMemo()


class ScanRecord:
    """What one scan with a memo leaves for :func:`remember`: the paragraphs it looked at
    (offset, bytes) and the hits it found and then left out (high-entropy pieces inside PEM
    public blocks: left out because of text around them, so they still make a paragraph dirty)."""

    __slots__ = ("fresh", "withheld")

    def __init__(self) -> None:
        self.fresh: list[tuple[int, bytes]] = []
        self.withheld: list[Hit] = []


def remember(clean: ParagraphMemo, record: ScanRecord, hits: list[Hit]) -> None:
    """Add to ``clean`` each paragraph of ``record`` that no hit of the scan (``hits``: every hit
    of every rule, before the allow-list; and ``record.withheld``) touches: so a memo never holds
    a paragraph in which anything was found."""
    ranges = sorted((h.start, h.end) for h in hits + record.withheld)
    starts = [a for a, _ in ranges]
    reach: list[int] = []
    best = -1
    for _, b in ranges:
        best = max(best, b)
        reach.append(best)
    for start, chunk in record.fresh:
        k = bisect.bisect_left(starts, start + len(chunk))  # the hits starting before its end
        if k and reach[k - 1] > start:
            continue
        clean.add(chunk)


def by_paragraph(
    data: bytes,
    families_of: Callable[[bytes], Families],
    clean: ParagraphMemo | None,
    record: ScanRecord | None = None,
) -> Families:
    """``families_of(data)``, whose hits must all lie within one line, looking only at the
    paragraphs of ``data`` not in ``clean``; those looked at (at most CHUNK_MAX long) go to
    ``record``, for :func:`remember`. Without a memo, simply ``families_of(data)``."""
    if clean is None:
        return families_of(data)
    chunks = data.split(CHUNK_SEP)
    if len(chunks) < 2:
        return families_of(data)
    starts: list[int] = []
    dirty: list[int] = []
    pos = 0
    for k, chunk in enumerate(chunks):
        starts.append(pos)
        pos += len(chunk) + 2
        if chunk not in clean:
            dirty.append(k)
    if record is not None:
        record.fresh.extend((starts[k], chunks[k]) for k in dirty if len(chunks[k]) <= CHUNK_MAX)
    if len(dirty) == len(chunks):  # nothing known: the text itself, no copy
        return families_of(data)
    parts = [chunks[k] for k in dirty]
    residual_starts: list[int] = []
    pos = 0
    for part in parts:
        residual_starts.append(pos)
        pos += len(part) + 2
    families = families_of(CHUNK_SEP.join(parts))
    shifts = [starts[k] - r for k, r in zip(dirty, residual_starts, strict=True)]
    out: Families = []
    for family in families:
        mapped = []
        for h in family:
            d = shifts[bisect.bisect_right(residual_starts, h.start) - 1]
            mapped.append(h._replace(start=h.start + d, end=h.end + d))
        out.append(mapped)
    return out
