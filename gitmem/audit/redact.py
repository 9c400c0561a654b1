"""Redaction: erase content from a scope's history, keep the audit trail (docs/architecture.md#redaction).

:func:`redact` replaces one version's blob, :func:`redact_pattern` every regex match, wherever they
occur in the scope's history, by ``[redacted: <id>]``; the transaction (lock, journal, swap, ledger,
deny-list, index, purge and proof) is :func:`gitmem.audit.journal.run_rewrite`.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import time
from dataclasses import dataclass
from typing import Any

import pygit2

from gitmem.audit.journal import Rewrite, run_rewrite
from gitmem.engine import ledger, proposals
from gitmem.engine.core import StoreCore
from gitmem.engine.rows import VersionRow
from gitmem.errors import ForbiddenError, InvalidInputError, NotFoundError
from gitmem.git.rewrite import Rewriter
from gitmem.ids import is_id, new_id
from gitmem.model.paths import validate_scope
from gitmem.model.versions import resolve_actor


def placeholder(redaction_id: str) -> bytes:
    return f"[redacted: {redaction_id}]".encode()


@dataclass(frozen=True)
class Redaction:
    """What a redaction did. ``versions``: ids of the versions whose content was replaced."""

    id: str
    scope: str
    reason: str
    actor: str
    redacted_at: dt.datetime
    versions: list[str]
    rewritten_commits: int
    new_tip: str
    purged: bool


# ---------------------------------------------------------------------- redaction
def _rows(store: StoreCore, where: str, params: tuple[Any, ...]) -> list[VersionRow]:
    return store.index.version_rows(where, params)


def _check_blobs(store: StoreCore, scope: str, blobs: list[str], what: str) -> list[VersionRow]:
    """Affected version rows of ``scope``; refusals (head, other scopes) before anything is written."""
    marks = ",".join("?" * len(blobs))
    heads = [h for h in store.index.heads(scope) if h.blob in blobs]
    if heads:
        raise ForbiddenError(
            f"cannot redact {what}: it is the current content of {heads[0].path} in scope {scope!r}; "
            "write a new version or delete the memory first, then redact"
        )
    others = store.index.db.execute(
        f"SELECT DISTINCT scope FROM versions WHERE blob IN ({marks}) AND scope != ?", (*blobs, scope)
    ).fetchall()
    if others:
        names = ", ".join(sorted(r[0] for r in others))
        raise ForbiddenError(
            f"cannot redact {what} in scope {scope!r} alone: the same content is also in scope(s) {names}; "
            "redact it there too (each scope is rewritten on its own)"
        )
    return _rows(store, f"scope=? AND blob IN ({marks})", (scope, *blobs))


def _redact(
    store: StoreCore,
    scope: str,
    contents: dict[str, bytes],
    rows: list[VersionRow],
    rid: str,
    *,
    reason: str,
    actor: str,
    extra: dict[str, Any],
) -> Redaction:
    repo = store.repo
    blob_map = {pygit2.Oid(hex=b): repo.create_blob(data) for b, data in contents.items()}
    rewriter = Rewriter(store, blob_map)
    at = int(time.time())
    first = min(rows, key=lambda r: _seq(store, r)).commit_id
    affected_commits = {r.commit_id for r in rows}

    def build(tip: pygit2.Oid) -> Rewrite:
        # Commits before the first affected one keep their ids: the walk starts there.
        walker = repo.walk(tip, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
        for parent in store.commit(first).parent_ids:
            walker.hide(parent)
        commits = list(walker)
        head = store.commit(tip)
        if rewriter.tree(head.tree_id) != head.tree_id:  # a writer just wrote the content back
            raise ForbiddenError(f"cannot redact: the content is again a current memory in scope {scope!r}")
        active = _active_paths(store, commits, rows)
        last = tip
        for commit in commits:
            if active is None:
                last = rewriter.commit(commit)
            else:
                where = active.get(commit.id)
                last = rewriter.commit(commit, paths=where, same_tree=where is None)
        move_proposals = proposals.rewrite_chains(store, scope, rewriter, first)  # they hold copies too
        rewriter.flush()
        move_proposals()
        originals = {str(c): store.commit(c) for c in affected_commits}
        listed = []
        for r in rows:
            c = originals[r.commit_id]
            listed.append(
                {
                    "version": r.id,
                    "memory": r.memory_id,
                    "path": r.path,
                    "operation": r.operation,
                    "author": f"{c.author.name} <{c.author.email}>",
                    "author_time": c.author.time,
                    "committer": f"{c.committer.name} <{c.committer.email}>",
                    "committer_time": c.committer.time,
                    "commit_digest": ledger.digest(store, r.commit_id),
                    "new_commit": str(rewriter.commits.get(c.id, c.id)),
                }
            )
        commit_map = {str(k): str(v) for k, v in rewriter.commits.items()}
        return Rewrite(
            op="redaction",
            id=rid,
            scope=scope,
            actor=actor,
            reason=reason,
            at=at,
            old_tip=str(tip),
            new_tip=str(last),
            commit_map=commit_map,
            blob_map={b: [str(blob_map[pygit2.Oid(hex=b)]), _sha256(d), len(d)] for b, d in contents.items()},
            retired_trees=rewriter.retired_trees(),
            versions=[r.id for r in rows],
            ledger={
                "id": rid,
                "scope": scope,
                "reason": reason,
                **extra,
                "versions": listed,
                "blob_digests": sorted(ledger.digest(store, b) for b in contents),
                "retired_commits": len(commit_map),
                "retired_commits_digest": ledger.set_digest(store, commit_map),
                "rewritten_commits": len(commit_map),
                "new_tip": str(last),
            },
        )

    rw = run_rewrite(store, scope, build)
    return Redaction(
        id=rid,
        scope=scope,
        reason=reason,
        actor=actor,
        redacted_at=dt.datetime.fromtimestamp(at, dt.UTC),
        versions=rw.versions,
        rewritten_commits=len(rw.commit_map),
        new_tip=rw.new_tip,
        purged=True,
    )


def _active_paths(
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


def _seq(store: StoreCore, row: VersionRow) -> int:
    found = store.index.db.execute(
        "SELECT seq FROM versions WHERE scope=? AND id=?", (row.scope, row.id)
    ).fetchone()
    return int(found[0]) if found else 0


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _prepare(store: StoreCore, reason: str, actor: str | None) -> str:
    store.check_writable()
    if not isinstance(reason, str) or not reason.strip() or len(reason) > 1024:
        raise InvalidInputError("a redaction needs a reason of 1-1024 characters")
    return resolve_actor(actor, None)


def redact(store: StoreCore, version_id: str, *, reason: str, actor: str | None = None) -> Redaction:
    """Replace one version's content everywhere it occurs in its scope's history by
    ``[redacted: <id>]``; refused (ForbiddenError) while that content is the head of a live memory."""
    actor = _prepare(store, reason, actor)
    if not is_id(version_id, "memver"):
        raise InvalidInputError(f"invalid version id {version_id!r}: expected memver_<ulid>")
    store.index.ensure_all()
    found = _rows(store, "id=?", (version_id,))
    if not found:
        raise NotFoundError(f"version {version_id} does not exist in store {store.name!r}")
    row = found[0]
    if row.redaction_id is not None:
        raise InvalidInputError(f"version {version_id} was already redacted ({row.redaction_id})")
    if row.blob is None:
        raise InvalidInputError(f"version {version_id} deleted {row.path}: it has no content to redact")
    rows = _check_blobs(store, row.scope, [row.blob], f"version {version_id}")
    rid = new_id("redact")
    return _redact(
        store,
        row.scope,
        {row.blob: placeholder(rid)},
        rows,
        rid,
        reason=reason,
        actor=actor,
        extra={"target": version_id},
    )


def redact_pattern(
    store: StoreCore, pattern: str, *, reason: str, scope: str = "main", actor: str | None = None
) -> Redaction:
    """Replace every match of the regex ``pattern`` in every historical version of ``scope`` by
    ``[redacted: <id>]`` (like ``git filter-repo --replace-text``, scoped and audited); refused when a
    live memory's current content matches."""
    actor = _prepare(store, reason, actor)
    validate_scope(scope)
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise InvalidInputError(f"invalid pattern {pattern!r}: {exc}") from None
    store.require_scope(scope)
    store.index.ensure_all()
    rid = new_id("redact")
    blobs = [
        r[0]
        for r in store.index.db.execute(
            "SELECT DISTINCT blob FROM versions WHERE scope=? AND blob IS NOT NULL", (scope,)
        )
    ]
    contents: dict[str, bytes] = {}
    for b in blobs:
        text = store.blob_data(pygit2.Oid(hex=b)).decode("utf-8", "surrogateescape")
        new = regex.sub(placeholder(rid).decode(), text)
        if new != text:
            contents[b] = new.encode("utf-8", "surrogateescape")
    if not contents:
        raise InvalidInputError(f"pattern {pattern!r} matches no version in scope {scope!r}")
    rows = _check_blobs(store, scope, list(contents), f"pattern {pattern!r}")
    return _redact(
        store,
        scope,
        contents,
        rows,
        rid,
        reason=reason,
        actor=actor,
        extra={"pattern_digest": ledger.digest(store, pattern)},
    )
