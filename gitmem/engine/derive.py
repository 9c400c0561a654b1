"""Deriving versions from git: what one commit means as gitmem versions.

Trailers give ids when they fit what the commit changes; commits made with plain git (no trailers, or
several memories) get one version per changed memory with ids derived from the commit. A commit the
store received by push has a receipt (:mod:`gitmem.engine.receipts`): unless the pusher is trusted
for trailers (``acl.trust_trailers``), its trailers are ignored, its ids derive from the receipt, its
actor is the pusher and its time the receive time (docs/identity.md).
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from pathlib import Path
from typing import Any, Protocol

import pygit2

from gitmem.engine import receipts
from gitmem.engine.rows import VersionRow
from gitmem.git.treediff import TreeDiffer, merge_own_changes
from gitmem.ids import ULID_RE, derived_ulid
from gitmem.model.frontmatter import parse_description
from gitmem.model.versions import parse_snapshot, parse_trailers, trailer_problems

_OBJ_BLOB = 3
# The message gitmem itself writes (gitmem.model.versions.commit_message without the optional
# Reverts/Flag/Reviewed-By lines): a subject, then exactly these trailers, each well-formed. A
# message that matches gives what parse_trailers gives and has no trailer_problems; any other
# message takes those two.
_OWN_MESSAGE = re.compile(
    rf"[^\n]*\n\nGitmem-Version: (memver_{ULID_RE})\nGitmem-Memory: (mem_{ULID_RE})\n"
    r"Gitmem-Operation: (created|modified|deleted)\n"
    r"(?:Gitmem-Session: ([A-Za-z0-9][A-Za-z0-9_.:-]{0,127})\n)?"
    r"Gitmem-Actor: ((?:session|user|api|service|git):[^\s<>\x00-\x1f\x7f]{1,200})\n*"
)


def own_trailers(message: str) -> tuple[dict[str, str], bool]:
    """The commit's trailers (:func:`parse_trailers`) and whether they are well-formed (no
    :func:`trailer_problems`), the message gitmem writes recognized in one match."""
    m = _OWN_MESSAGE.fullmatch(message)
    if m is None:
        trailers = parse_trailers(message)
        return trailers, not trailer_problems(trailers)
    version, memory, operation, session, actor = m.groups()
    trailers = {"Gitmem-Version": version, "Gitmem-Memory": memory, "Gitmem-Operation": operation}
    if session is not None:
        trailers["Gitmem-Session"] = session
    trailers["Gitmem-Actor"] = actor
    return trailers, True


class Heads(Protocol):
    """What deriving a commit asks about the scope's state before it: a fresh walk answers from
    memory (:class:`gitmem.engine.index.Index` keeps the heads it derived), others ask SQLite."""

    def memory_at(self, path: str) -> str | None:
        """The memory id of the head at ``path`` (None: no memory there)."""

    def is_live(self, memory_id: str) -> bool:
        """Whether some head of the scope has ``memory_id``."""

    #: The commit of each row this scope has, by version id (None: not known, SQLite is asked).
    versions: dict[str, str] | None
    #: Whether another scope may have rows (False: only ``versions`` can hold a twin).
    other_scopes: bool


class DbHeads:
    """The scope's state as the index holds it."""

    __slots__ = ("db", "scope", "versions", "other_scopes")

    def __init__(self, db: sqlite3.Connection, scope: str) -> None:
        self.db, self.scope = db, scope
        self.versions: dict[str, str] | None = None
        self.other_scopes = True

    def memory_at(self, path: str) -> str | None:
        row = self.db.execute(
            "SELECT memory_id FROM heads WHERE scope=? AND path=?", (self.scope, path)
        ).fetchone()
        return row[0] if row else None

    def is_live(self, memory_id: str) -> bool:
        q = "SELECT 1 FROM heads WHERE scope=? AND memory_id=?"
        return self.db.execute(q, (self.scope, memory_id)).fetchone() is not None


def claims_fit(
    db: sqlite3.Connection,
    scope: str,
    memory_id: str,
    changes: list[tuple[str, str, Any, Any]],
    heads: Heads | None = None,
) -> bool:
    """Whether a commit's ``Gitmem-Memory`` fits what it changes: a new memory takes an id no
    live memory has; an edit, rename or delete names the memory that is at that path. A pushed
    commit claiming another memory's id is indexed as a plain git commit instead."""
    heads = heads or DbHeads(db, scope)
    source = next((c for c in changes if c[0] != "added"), None)
    if source is None:  # a create
        return not heads.is_live(memory_id)
    at = heads.memory_at(source[1])
    return at is None or at == memory_id


def _signed(c: pygit2.Commit) -> tuple[Any, ...]:
    a, m = c.author, c.committer
    return (a.name, a.email, a.time, a.offset, m.name, m.email, m.time, m.offset)


def takes_version_id(
    repo: pygit2.Repository,
    db: sqlite3.Connection,
    trailers: dict[str, str],
    commit: pygit2.Commit,
    scope: str,
    changes: list[tuple[str, str, Any, Any]],
    heads: Heads | None = None,
) -> bool:
    """Whether a commit that claims a version id (well-formed trailers, one memory changed, no
    untrusted receipt) takes it: it is no copy (:func:`reused_version_id`) and its claims fit
    (:func:`claims_fit`). A claim not taken is recorded in ``claims``: it still counts against
    another scope's later claimant (docs/identity.md "Who owns a copied id across scopes")."""
    taken = not reused_version_id(repo, db, trailers, commit, scope, heads) and claims_fit(
        db, scope, trailers["Gitmem-Memory"], changes, heads
    )
    if not taken:
        db.execute(
            "INSERT OR IGNORE INTO claims VALUES(?, ?, ?)",
            (scope, str(commit.id), trailers["Gitmem-Version"]),
        )
    return taken


def reused_version_id(
    repo: pygit2.Repository,
    db: sqlite3.Connection,
    trailers: dict[str, str],
    commit: pygit2.Commit,
    scope: str,
    heads: Heads | None = None,
) -> bool:
    """Whether this commit's ``Gitmem-Version`` is another commit's: an earlier commit of this
    scope took it, or a commit of another scope that ranks earlier claims it.

    A cherry-picked (or amended, or copied) gitmem commit carries another commit's trailers: it is
    indexed as a plain git commit, so that version ids stay unique. Two claims are not a reuse when
    the other commit is gone (a retired commit the purge removed) or is this commit as a history
    rewrite left it (a redaction keeps author, committer and their times exactly, and the trailers):
    between a redaction's branch swap and its index step, a scope that shares the rewritten commits
    still has rows naming the old ones, and re-deriving this scope then must keep the ids.

    A twin is only ever in *another* scope: a scope being re-derived has no rows left (its own are
    dropped in the same transaction), so a twin in the same scope is a copy made with plain git.
    Taking the id there would drop the copy from history (``UNIQUE(scope, id)``) while the head
    named the old version.

    Between scopes the id belongs to the earliest claimant by :func:`claim_rank`, whether that one
    took it or not (its claims may not fit, or its own scope had the id already): every commit's
    answer depends on git data alone, never on the order the scopes are indexed in, so a rebuild
    gives the ids the incremental index gave. A claimant that outranks a commit holding the id in
    another scope marks that scope for re-deriving (its indexed tip cleared;
    :meth:`gitmem.engine.index_catchup.CatchUp.ensure` settles it), where that commit is a copy.
    """
    cid = str(commit.id)
    vid = trailers.get("Gitmem-Version", "")
    same = False
    if heads is not None and heads.versions is not None:
        mine = heads.versions.get(vid)
        same = mine is not None and mine != cid  # a copy in this scope
        if not heads.other_scopes:
            return same
    others = db.execute(
        "SELECT commit_id, scope, 1 FROM versions WHERE id=? AND commit_id!=? "
        "UNION ALL SELECT commit_id, scope, 0 FROM claims WHERE version_id=? AND commit_id!=?",
        (vid, cid, vid, cid),
    ).fetchall()
    earlier = False
    outranked: list[str] = []
    mine_rank: tuple[Any, ...] | None = None
    for other_id, other_scope, held in others:
        if other_scope == scope:
            same = same or bool(held)
            continue
        try:
            other = repo[other_id]
        except (KeyError, ValueError):
            continue
        if not isinstance(other, pygit2.Commit):
            earlier = True
            continue
        theirs = parse_trailers(other.message)
        if _signed(other) == _signed(commit) and _same_claims(theirs, trailers):
            continue
        mine_rank = mine_rank or claim_rank(commit, trailers)
        if claim_rank(other, theirs) < mine_rank:
            earlier = True
        elif held:
            outranked.append(other_scope)
    for other_scope in outranked:  # this commit claims it earlier: theirs is a copy
        db.execute("UPDATE scopes SET tip=NULL WHERE scope=?", (other_scope,))
    return earlier or same


def claim_rank(c: pygit2.Commit, trailers: dict[str, str]) -> tuple[Any, ...]:
    """Which of two commits of different scopes claiming one version id owns it (the smaller):
    the earlier committed, then the earlier authored, then their signatures and claims, and the
    commit id last. Git data alone, so the same answer whatever order the scopes are indexed in (a
    rebuild takes them by name, the incremental index as they come). Rewritten twins (the same
    signatures and claims) rank alike up to the commit id, which never decides for them (they
    share the id): a third commit ranks before all of a twin set or after all of it."""
    a, m = c.author, c.committer
    claims = tuple(trailers.get(k, "") for k in _CLAIMS)
    return (m.time, a.time, a.name, a.email, a.offset, m.name, m.email, m.offset, claims, str(c.id))


_CLAIMS = ("Gitmem-Version", "Gitmem-Memory", "Gitmem-Operation", "Gitmem-Actor", "Gitmem-Session")


def _same_claims(a: dict[str, str], b: dict[str, str]) -> bool:
    return all(a.get(k) == b.get(k) for k in _CLAIMS)


def rows_for_commit(
    repo: pygit2.Repository,
    db: sqlite3.Connection,
    scope: str,
    commit: pygit2.Commit,
    fresh_blobs: dict[str, bytes],
    differ: TreeDiffer | None = None,
    book: receipts.Receipts | None = None,
    heads: Heads | None = None,
    describe: bool = True,
) -> list[VersionRow]:
    """The versions one commit makes: trailers give ids; the tree diff gives paths and operations.

    Commits made with plain git (no trailers, or several memories) get one version per changed
    memory, with deterministic ids derived from the commit, and actor ``git:<author email>``.
    A walk over many commits passes one ``differ`` (raw trees read once) and the store's
    receipts ``book`` (loaded once); without them each call makes its own. ``heads`` answers
    what the scope holds before the commit (default: the index's tables); without ``describe``
    the rows carry no description (a walk that writes the heads at its end reads it then).
    """
    heads = heads or DbHeads(db, scope)
    differ = differ or TreeDiffer(repo)
    changes = differ.commit_changes(commit)
    prefetched = differ.prefetched
    if len(commit.parent_ids) > 1:  # the other parents' lines are walked too: keep the merge's own
        changes = merge_own_changes(commit, changes)
    # When the store got the version: a rebased or back-dated commit keeps an old author
    # date, but its committer date is when it was made (the hook keeps those in order).
    when = max(commit.author.time, commit.committer.time)
    trailers, well_formed = own_trailers(commit.message)
    cid = str(commit.id)
    receipt = (book if book is not None else receipts.load(Path(repo.path))).get(cid, scope)
    received = receipt is not None and not receipt.trusted
    key = cid
    if receipt is not None and received:
        when, key = receipt.at, receipt.key  # when the store got it; ids from what it was received as

    head_memory = heads.memory_at

    def version(
        vid: str,
        mid: str,
        path: str,
        prev: str | None,
        op: str,
        actor: str,
        session: str | None,
        blob: pygit2.Oid | None,
        at: int = when,
    ) -> VersionRow:
        """A version row; the blob (None for a deletion) gives sha256, size and description."""
        if blob is None:
            return VersionRow(vid, mid, scope, path, prev, op, actor, session, at, None, None, None, cid)
        blob_hex = str(blob)
        data = prefetched(blob_hex)
        if data is None:
            kind, data = repo.odb.read(blob)[:2]
            if kind != _OBJ_BLOB:
                raise pygit2.GitError(f"{blob} is not a blob")
        fresh_blobs[blob_hex] = data
        desc = (
            parse_description(data.decode("utf-8", "replace"))
            if describe and data.startswith(b"---")
            else None
        )
        sha = hashlib.sha256(data).hexdigest()
        return VersionRow(
            vid,
            mid,
            scope,
            path,
            prev,
            op,
            actor,
            session,
            at,
            sha,
            len(data),
            blob_hex,
            cid,
            description=desc,
        )

    snapshot = None if received or commit.parent_ids else parse_snapshot(commit.message)
    if snapshot is not None and all(p[1:] in commit.tree for *_, p in snapshot):
        return [
            version(v, m, p, None, op, a, sn, commit.tree[p[1:]].id, at=t)
            for v, m, op, t, a, sn, p in snapshot
        ]

    deleted = [c for c in changes if c[0] == "deleted"]
    added = [c for c in changes if c[0] == "added"]
    modified = [c for c in changes if c[0] == "modified"]
    single = len(changes) == 1 or (len(deleted) == 1 and len(added) == 1 and len(changes) == 2)
    if (
        single
        and not received
        and well_formed
        and takes_version_id(repo, db, trailers, commit, scope, changes, heads)
    ):
        session = trailers.get("Gitmem-Session")
        actor = trailers["Gitmem-Actor"]
        vid, mid, op = trailers["Gitmem-Version"], trailers["Gitmem-Memory"], trailers["Gitmem-Operation"]
        if len(changes) == 2:  # a rename (with or without an edit)
            prev, new = deleted[0], added[0]
            return [version(vid, mid, new[1], prev[1], "modified", actor, session, new[3])]
        kind, path, _old, new_oid = changes[0]
        if kind == "deleted":
            return [version(vid, mid, path, None, "deleted", actor, session, None)]
        operation = "created" if kind == "added" else "modified"
        if op in ("created", "modified"):
            operation = op if (op == "created") == (kind == "added") else operation
        return [version(vid, mid, path, None, operation, actor, session, new_oid)]

    # Plain git: one version per changed memory; exact-content moves count as renames.
    if receipt is not None:
        actor = receipt.actor
        session = receipt.session if received else trailers.get("Gitmem-Session")
    else:
        actor = "git:" + (commit.author.email or commit.author.name or "unknown")
        session = trailers.get("Gitmem-Session")

    def derived(path: str, salt: str = "") -> str:
        # A received commit pushed to two scopes gives each its own ids.
        where = (key, scope, path) if received else (key, path)
        return derived_ulid(when * 1000, *where, *([salt] if salt else []))

    rows: list[VersionRow] = []
    by_blob: dict[pygit2.Oid | None, list[tuple[str, str, Any, Any]]] = {}
    for d in deleted:
        by_blob.setdefault(d[2], []).append(d)
    for kind, path, _old_oid, new_oid in modified + added:
        prev_path = None
        if kind == "added" and by_blob.get(new_oid):
            moved = by_blob[new_oid].pop(0)
            deleted.remove(moved)
            prev_path = moved[1]
        memory = head_memory(prev_path or path) if kind != "added" or prev_path else None
        memory = memory or "mem_" + derived(path, "memory")
        op = "created" if kind == "added" and prev_path is None else "modified"
        rows.append(version("memver_" + derived(path), memory, path, prev_path, op, actor, session, new_oid))
    for _kind, path, _old_oid, _new in deleted:
        memory = head_memory(path) or "mem_" + derived(path, "memory")
        rows.append(version("memver_" + derived(path), memory, path, None, "deleted", actor, session, None))
    return rows
