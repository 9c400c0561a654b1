"""What a redaction covers, found and checked before anything is written (docs/redaction.md): the
versions and scopes that hold the content, the live memories that block it, the preview of a dry
run, the placeholders of redacted content and paths, and where in each commit's tree a replaced
blob can be. :mod:`gitmem.audit.redact` rewrites the history with them."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pygit2

from gitmem.engine import ledger_text
from gitmem.engine.core import StoreCore
from gitmem.engine.rows import VersionRow
from gitmem.errors import ForbiddenError, InvalidInputError


def placeholder(redaction_id: str) -> bytes:
    return f"[redacted: {redaction_id}]".encode()


@dataclass(frozen=True)
class Touched:
    """One version a redaction covers (or, in a preview, would cover)."""

    scope: str
    version: str
    path: str


@dataclass(frozen=True)
class LiveMatch:
    """A live memory whose current content holds what is being redacted: it blocks the redaction."""

    scope: str
    path: str
    version: str


@dataclass(frozen=True)
class Redaction:
    """What a redaction did (or, with ``dry_run``, would do). ``versions``: ids of the versions
    whose content was replaced; ``scopes``: every scope whose history was rewritten; ``sessions``:
    active session mounts that still held the content (their next sync replaces it)."""

    id: str
    scope: str
    reason: str
    actor: str
    redacted_at: dt.datetime
    versions: list[str]
    rewritten_commits: int
    new_tip: str
    purged: bool
    scopes: list[str] = field(default_factory=list)
    touched: list[Touched] = field(default_factory=list)
    sessions: list[str] = field(default_factory=list)  # filled by faces: gitmem.sessions.mounts_holding
    remembered: bool = False
    dry_run: bool = False
    blobs: list[str] = field(default_factory=list)  # ids of the redacted (old) blobs
    receipt: dict[str, Any] | None = None  # the tlog-proof receipt (gitmem.audit.redaction_receipts)


# ---------------------------------------------------------------------- redaction
def version_rows(store: StoreCore, where: str, params: tuple[Any, ...]) -> list[VersionRow]:
    return store.index.version_rows(where, params)


def live_matches(store: StoreCore, blobs: list[str], scopes: list[str]) -> list[LiveMatch]:
    """Every live memory (any of ``scopes``) whose current content is one of ``blobs``."""
    wanted = set(blobs)
    out = []
    for scope in scopes:
        for h in store.index.heads(scope):
            if h.blob in wanted:
                out.append(LiveMatch(scope, h.path, h.version_id))
    return sorted(out, key=lambda m: (m.scope, m.path))


def scopes_holding(store: StoreCore, blobs: list[str]) -> list[str]:
    marks = ",".join("?" * len(blobs))
    sql = f"SELECT DISTINCT scope FROM versions WHERE blob IN ({marks})"
    return sorted(r[0] for r in store.index.db.execute(sql, blobs))


def check_blobs(
    store: StoreCore, blobs: list[str], what: str, only: str | None = None
) -> tuple[list[str], list[VersionRow]]:
    """The scopes whose history holds ``blobs`` and their version rows; refusals (live matches,
    all listed at once; content also in a scope outside ``--scope``) before anything is written."""
    marks = ",".join("?" * len(blobs))
    scopes = sorted(
        r[0]
        for r in store.index.db.execute(f"SELECT DISTINCT scope FROM versions WHERE blob IN ({marks})", blobs)
    )
    if only is not None:
        others = [s for s in scopes if s != only]
        if others:
            raise ForbiddenError(
                f"cannot redact {what} in scope {only!r} alone: the same content is also in scope(s) "
                f"{', '.join(others)}; leave out --scope to redact it in every scope at once"
            )
    heads = live_matches(store, blobs, scopes)
    if heads:
        listed = ", ".join(f"{h.path} in scope {h.scope!r}" for h in heads)
        raise ForbiddenError(
            f"cannot redact {what}: it is the current content of {listed}; "
            "write a new version or delete those memories first, then redact"
        )
    return scopes, version_rows(store, f"blob IN ({marks})", tuple(blobs))


def touched_by(rows: list[VersionRow], shown: Callable[[str], str] = lambda p: p) -> list[Touched]:
    found = {Touched(r.scope, r.id, shown(r.path)) for r in rows}
    return sorted(found, key=lambda t: (t.scope, t.path, t.version))


def path_placeholder(redaction_id: str) -> str:
    """What a redacted part of a path becomes (a valid path segment)."""
    return f"redacted-{redaction_id}"


def redact_path(regex: re.Pattern[str], path: str, redaction_id: str) -> str:
    """``path`` with every match replaced, segment by segment (a match never swallows a "/")."""
    mark = path_placeholder(redaction_id)
    return "/".join(regex.sub(mark, seg) for seg in path.split("/"))


def preview(
    store: StoreCore,
    scopes: list[str],
    rows: list[VersionRow],
    rid: str,
    reason: str,
    actor: str,
    shown: Callable[[str], str] = lambda p: p,
) -> Redaction:
    return Redaction(
        id=rid,
        scope=scopes[0],
        reason=reason,
        actor=actor,
        redacted_at=dt.datetime.now(dt.UTC),
        versions=sorted({r.id for r in rows}),
        rewritten_commits=0,
        new_tip="",
        purged=False,
        scopes=scopes,
        touched=touched_by(rows, shown),
        dry_run=True,
        blobs=sorted({r.blob for r in rows if r.blob}),
    )


def active_paths(
    store: StoreCore, commits: list[pygit2.Commit], rows: list[VersionRow]
) -> dict[pygit2.Oid, list[list[bytes]]] | None:
    """Where each commit's tree can hold a replaced blob: in a linear history a blob is at a
    version's path from that version until its memory's next version. Commits absent from the
    answer hold none; None (a merge, or the index disagrees with the walk): walk every tree."""
    if any(len(c.parent_ids) > 1 for c in commits):
        return None
    pos = {str(c.id): i for i, c in enumerate(commits)}
    spans: list[tuple[int, int, list[bytes]]] = []
    for r in rows:
        start = pos.get(r.commit_id)
        if start is None:
            return None
        nxt = store.index.db.execute(
            "SELECT commit_id FROM versions WHERE scope=? AND memory_id=? AND seq > "
            "(SELECT seq FROM versions WHERE scope=? AND id=?) ORDER BY seq LIMIT 1",
            (r.scope, r.memory_id, r.scope, r.id),
        ).fetchone()
        end = pos.get(nxt[0], len(commits)) if nxt else len(commits)
        spans.append((start, end, r.path[1:].encode("utf-8").split(b"/")))
    out: dict[pygit2.Oid, list[list[bytes]]] = {}
    for start, end, segments in spans:
        for c in commits[start:end]:
            out.setdefault(c.id, []).append(segments)
    return out


def seq_of(store: StoreCore, row: VersionRow) -> int:
    found = store.index.db.execute(
        "SELECT seq FROM versions WHERE scope=? AND id=?", (row.scope, row.id)
    ).fetchone()
    return int(found[0]) if found else 0


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def prepare(store: StoreCore, reason: str, actor: str | None) -> str:
    # An archived store is read-only for new content, but erasure must stay possible (as in
    # Anthropic's API): only a clone refuses.
    if store.is_clone:
        store.check_writable()
    if not isinstance(reason, str) or not reason.strip() or len(reason) > 1024:
        raise InvalidInputError("a redaction needs a reason of 1-1024 characters")
    ledger_text.screen_ledger_text(store, "reason", reason)  # kept in the ledger and on each version
    return ledger_text.recorded_actor(store, actor)
