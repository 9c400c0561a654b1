"""Catch-up and rebuild of the derived index: each scope is brought up to its branch from the last
commit it was indexed at, in one transaction per walk (docs/architecture.md#the-index-and-search).

A scope that starts empty (a rebuild, a clone's first open) is derived in memory
(:class:`FreshHeads`); any other walk applies each commit's rows through
:meth:`gitmem.engine.index_records.Records._apply`, the search rows and counters deferred to its
end. History rewritten under the index (a redaction, a compaction) drops and re-derives the scope.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import re
import sqlite3
from collections.abc import Generator, Iterable, Iterator, Mapping
from pathlib import Path

import pygit2

from gitmem.engine import derive, receipts, search
from gitmem.engine.index_db import VERSION_INDEXES, busy
from gitmem.engine.index_records import Bulk, Records, version_values
from gitmem.engine.rows import VERSION_COLUMNS, VersionRow
from gitmem.errors import ConflictError, NotFoundError
from gitmem.git.logdiff import StreamDiffer
from gitmem.git.repo import unverified_reads
from gitmem.git.treediff import diff_trees
from gitmem.model.frontmatter import parse_description

_FLUSH_ROWS = 20_000  # version rows buffered before an executemany
# The secondary indexes of ``versions``, none of which a fresh walk into an empty table reads (its own
# rows are known in memory, no other scope has any): such a rebuild drops them for the walk and
# creates them once at its end (a sort instead of 100k inserts each), or at its first merge,
# which asks SQLite about rows by id and path again.
_LATE_INDEXES = VERSION_INDEXES
# Version ids a commit message may name (a superset of its Gitmem-Version trailer).
_VERSION_TRAILER_RE = re.compile(r"Gitmem-Version:(.*)")
# Catch-ups an ``ensure`` without a caller's tip tries when the tip it read moved under it.
_STALE_RETRIES = 4
_KEEP_BYTES = 64 << 20  # head contents a fresh walk keeps for its search rows (the rest are read again)


@contextlib.contextmanager
def _no_cycle_collection() -> Generator[None, None, None]:
    """No cyclic garbage collection while a fresh walk runs: it allocates a few containers per
    commit and frees them (no cycles), yet every 700 of them start a collection, and the older
    generations' ones traverse all it holds (the heads, the buffered rows), which grows with the
    history. Reference counting still frees everything; collections resume when the walk ends
    (if another thread paused them first, that thread resumes them)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class FreshHeads:
    """The heads of a scope being derived from nothing, in memory (:class:`derive.Heads`)."""

    __slots__ = ("heads", "live", "versions", "other_scopes", "data", "kept")

    def __init__(self, other_scopes: bool) -> None:
        # path -> (memory_id, version_id, sha256, size, blob, created_at, updated_at)
        self.heads: dict[str, tuple[str, str, str | None, int | None, str | None, int, int]] = {}
        self.live: dict[str, int] = {}  # memory id -> how many heads have it
        self.versions: dict[str, str] | None = {}  # this walk's rows: version id -> commit
        self.other_scopes = other_scopes
        self.data: dict[str, bytes] = {}  # head content by path, while under _KEEP_BYTES in all
        self.kept = 0

    def memory_at(self, path: str) -> str | None:
        head = self.heads.get(path)
        return head[0] if head is not None else None

    def is_live(self, memory_id: str) -> bool:
        return memory_id in self.live

    def _drop(self, path: str) -> None:
        head = self.heads.pop(path)
        n = self.live[head[0]] - 1
        if n:
            self.live[head[0]] = n
        else:
            del self.live[head[0]]
        data = self.data.pop(path, None)
        if data is not None:
            self.kept -= len(data)

    def apply(self, rows: Iterable[VersionRow], blobs: Mapping[str, bytes], bulk: Bulk) -> None:
        """What :meth:`Index._apply` does to the heads, here in memory; rows go to ``bulk``."""
        heads, versions = self.heads, self.versions
        assert versions is not None
        for r in rows:
            scope = r.scope
            bulk.versions.append(version_values(r, scope))
            versions.setdefault(r.id, r.commit_id)  # INSERT OR IGNORE: the first row keeps the id
            created = r.created_at
            deleted = r.operation == "deleted"
            for p in {r.prev_path, r.path} if r.prev_path else (r.path,):
                old = heads.get(p)
                if old is not None:
                    if r.operation == "modified" and old[0] == r.memory_id:
                        created = old[5]  # the memory keeps its creation time across edits and renames
                    self._drop(p)
            if not deleted:
                heads[r.path] = (r.memory_id, r.id, r.sha256, r.size, r.blob, created, r.created_at)
                self.live[r.memory_id] = self.live.get(r.memory_id, 0) + 1
                data = blobs.get(r.blob) if r.blob is not None else None
                if data is not None and self.kept + len(data) <= _KEEP_BYTES:
                    self.data[r.path] = data
                    self.kept += len(data)


class CatchUp(Records):
    """Catch-up and rebuild (a part of :class:`gitmem.engine.index.Index`)."""

    def rebuild(self) -> int:
        """Drop the index and rebuild it from git; returns the number of versions indexed."""
        self.remove_all()
        self._known_tips.clear()
        for scope in self.store.scopes():
            self.ensure(scope)
        if self.marks_due:  # (a store without scopes: ensure never ran)
            self.restore_ledger_marks()
        return int(self.db.execute("SELECT COUNT(*) FROM versions").fetchone()[0])

    def ensure(
        self, scope: str, tip: pygit2.Oid | None = None, *, known_tip: bool = False, checks_tip: bool = False
    ) -> None:
        """Bring ``scope`` up to date with its branch (``tip`` when the caller just read it).

        A tip this handle indexed before is trusted only while the index still records it: another
        handle may have moved the index on, and a plain-git reset brought the branch back. One
        query checks; ``checks_tip``: the caller's own next query checks instead (:meth:`head_at`)."""
        if not known_tip:
            tip = self.store.tip(scope)
        tip_hex = str(tip) if tip is not None else None
        if self._known_tips.get(scope, "?") == tip_hex:
            if checks_tip:
                return
            try:
                if self.indexed_at(scope, tip_hex):
                    return
            except sqlite3.DatabaseError:
                pass  # (a corrupt index: the catch-up below starts again from git)
            self._known_tips.pop(scope, None)
        try:
            for _attempt in range(_STALE_RETRIES):
                if self._catch_up_or_stale(scope, tip) or known_tip:
                    break  # a caller's stale tip: its compare-and-swap fails and it re-plans
                tip = self.store.tip(scope)  # moved since it was read (a rewrite): read it again
        except sqlite3.DatabaseError as exc:
            if busy(exc):  # another process holds the index: deleting it would pull it from under them
                raise ConflictError(
                    f"the index of {self.store.path} is busy (another process is writing it); try again"
                ) from None
            # A corrupt index file: start again from git (removed only if no other opener has
            # derived a new one meanwhile).
            self._remove_own()
            self._known_tips.clear()
            self._catch_up(scope, tip)
        if self.marks_due:  # a new index (deleted, corrupt or of an older format): who redacted what
            self.restore_ledger_marks()
        self._restore_marks(scope)
        self._settle()

    def _settle(self) -> None:
        """Re-derive the scopes a catch-up marked (their indexed tip cleared): a commit of theirs
        holds a version id an earlier claimant came to claim, or a claim of theirs may hold one
        now that its earlier claimant left (:func:`gitmem.engine.derive.reused_version_id`), until
        none is left, so that the index holds the ids a rebuild gives. One query when nothing is
        marked (a scope's re-derivation marks others only when its claims changed, so a second
        round is rare; the bound is a guard)."""
        if getattr(self._local, "settling", False):
            return  # an ensure of the loop below: the loop takes what it marks
        self._local.settling = True
        try:
            for _round in range(8):
                stale = [r[0] for r in self.db.execute("SELECT scope FROM scopes WHERE tip IS NULL")]
                if not stale:
                    return
                for scope in stale:
                    self.ensure(scope)
        finally:
            self._local.settling = False

    def forget(self, scope: str) -> None:
        """Forget how far this handle believes ``scope`` is indexed: the next ``ensure`` checks."""
        self._known_tips.pop(scope, None)
        self._heads.clear()

    def ensure_all(self) -> list[str]:
        scopes = self.store.scopes()
        for scope in scopes:
            self.ensure(scope)
        for gone in set(self._indexed_scopes()) - set(scopes):
            with self._write() as db:
                self._mark_lost(db, gone, self._drop_scope(db, gone))
        self._settle()
        return scopes

    def _indexed_scopes(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT scope FROM scopes")]

    def _catch_up_or_stale(self, scope: str, tip: pygit2.Oid | None) -> bool:
        """:meth:`_catch_up`; False when ``tip`` turned out stale and nothing was indexed, also
        when an object of its history went missing under the walk while the branch moved away
        from it (a history rewrite other than gitmem's own, which :meth:`_catch_up` detects
        before walking: a plain-git force update and prune)."""
        try:
            return self._catch_up(scope, tip)
        except (KeyError, pygit2.GitError, NotFoundError):  # pygit2.NotFoundError is both
            if self._in_history(tip, self.store.tip(scope)):
                raise  # the branch still holds it: a missing object of live history, not a race
            return False

    def _in_history(self, tip: pygit2.Oid | None, current: pygit2.Oid | None) -> bool:
        """Whether the branch, now at ``current``, still holds ``tip`` (the caller's)."""
        if tip == current:
            return True
        return tip is not None and current is not None and self.store.is_ancestor(tip, current)

    def _mark_lost(self, db: sqlite3.Connection, scope: str, lost: list[tuple[str, str, str]]) -> None:
        """Mark for re-deriving each other scope with a claim not held on a version id a commit of
        ``scope`` (re-derived or dropped) claimed and no longer claims there: that claimant is
        gone, so the other scope's commit may own the id now. Whether ``scope`` still claims the
        id with another commit does not matter (it may be the very commit the other scope holds
        back, which then holds it in both): only the claimants decide (docs/identity.md "Who
        owns a copied id across scopes"), and one of them left."""
        q = (
            "SELECT 1 FROM versions WHERE id=? AND scope=? AND commit_id=? "
            "UNION ALL SELECT 1 FROM claims WHERE scope=? AND commit_id=? AND version_id=?"
        )
        marked: set[str] = set()
        for other, vid, commit in lost:
            if other in marked or db.execute(q, (vid, scope, commit, scope, commit, vid)).fetchone():
                continue
            db.execute("UPDATE scopes SET tip=NULL WHERE scope=?", (other,))
            marked.add(other)

    def _catch_up(self, scope: str, tip: pygit2.Oid | None) -> bool:
        """Bring ``scope`` to ``tip``; False (nothing indexed) when the branch no longer holds
        ``tip``, or does and has moved on while the index is ahead of ``tip``."""
        tip_hex = str(tip) if tip is not None else None
        rewritten = walked = False
        lost: list[tuple[str, str, str]] = []  # other scopes' claims on ids this scope claimed (_drop_scope)
        with unverified_reads(), self._write() as db:
            row = db.execute("SELECT tip FROM scopes WHERE scope=?", (scope,)).fetchone()
            indexed = row[0] if row else None
            if row is not None and indexed is not None and indexed == tip_hex:  # (no tip: marked)
                self._known_tips[scope] = tip_hex
                return True
            if not self._in_history(tip, self.store.tip(scope)):
                # The caller read ``tip`` before a history rewrite (redaction, compaction) moved
                # the branch off it: deriving it would index erased content, and walk objects the
                # rewrite's purge is deleting. Checked under the write lock: a rewrite purges only
                # after it updated the index (gitmem.audit.journal.finish), which waits for this
                # transaction, so a ``tip`` the branch still holds here keeps its objects until the
                # walk is done. A writer's compare-and-swap from ``tip`` then fails and it re-plans
                # on the new tip; :meth:`ensure` reads the tip again for everyone else.
                return False
            if tip is None:
                self._mark_lost(db, scope, self._drop_scope(db, scope))
                self._known_tips[scope] = None
                return True
            hide: pygit2.Oid | None = None
            if indexed is not None:
                old = pygit2.Oid(hex=indexed)
                if self.store.has_object(old) and self.store.is_ancestor(old, tip):
                    hide = old
                elif (
                    self.store.has_object(old)
                    and self.store.is_ancestor(tip, old)
                    and self.store.tip(scope) != tip
                ):
                    # The caller's tip is stale: a racing writer already recorded a newer commit.
                    # Rebuilding back to ``tip`` would cost a full walk; its CAS fails and retries.
                    # (A branch that really is back at ``tip``, reset with plain git, is re-derived.)
                    return False
                else:  # history was rewritten under the index (redaction, compaction)
                    lost += self._drop_scope(db, scope)
                    rewritten = True
            fresh = row is None or hide is None
            if fresh:
                lost += self._drop_scope(db, scope)
                db.execute("INSERT INTO scopes(scope, tip) VALUES(?, NULL)", (scope,))
            # One transaction for the whole walk; the search rows and the scope's counters are
            # brought up to date once at the end, for the paths that changed (FTS upkeep in bulk).
            repo = self.store.repo
            walk = self.store.walk(tip, hide)
            differ = StreamDiffer(repo, tip, hide)  # git log --raw beside a long walk
            bulk = self._local.bulk = Bulk(differ, receipts.load(Path(repo.path)), fresh)
            late = hide is None and db.execute("SELECT 1 FROM versions LIMIT 1").fetchone() is None
            if late:
                for name in _LATE_INDEXES:
                    db.execute(f"DROP INDEX IF EXISTS {name}")
            try:
                if fresh:
                    with _no_cycle_collection():
                        walked = self._walk_fresh(db, scope, walk, bulk)
                for commit in walk:
                    walked = True
                    rows = self.rows_for_commit(db, scope, commit)
                    self._apply(db, scope, rows)
                    if len(commit.parent_ids) > 1:
                        bulk.flush(db)
                        self._reconcile_heads(db, scope, commit)
                        bulk.heads.clear()  # the merge rewrote heads behind the cache: ask SQLite again
                        bulk.complete = False
                    elif len(bulk.versions) >= _FLUSH_ROWS:
                        bulk.flush(db)
                bulk.flush(db)
            finally:
                self._local.bulk = None
                differ.close()
            if late:
                for name, columns in _LATE_INDEXES.items():
                    db.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {columns}")
            self._finish_bulk(db, scope, bulk)
            self._mark_lost(db, scope, lost)
            db.execute("UPDATE scopes SET tip=? WHERE scope=?", (tip_hex, scope))
        self._known_tips[scope] = tip_hex
        if rewritten:  # content that left history must leave the file too
            self.purge_search()
        if walked:  # new commits: a push may be waiting in the spool for its ledger entry
            self.store.drain_pushes()
        return True

    def _walk_fresh(
        self, db: sqlite3.Connection, scope: str, walk: Iterator[pygit2.Commit], bulk: Bulk
    ) -> bool:
        """Derive a scope that starts empty: its heads live in memory (no query per commit), the
        version rows go out by executemany, and the heads, their search rows and the counters
        are written once at the end. Stops after materializing at the first merge (which the
        caller's one-commit-at-a-time loop then replays: merges are rare). Returns whether it
        walked any commit."""
        state = FreshHeads(db.execute("SELECT 1 FROM versions LIMIT 1").fetchone() is not None)
        repo, differ, book = self.store.repo, bulk.differ, bulk.book
        blobs: dict[str, bytes] = {}
        rows_for_commit, apply = derive.rows_for_commit, state.apply
        walked = False
        merge: pygit2.Commit | None = None
        for commit in walk:
            walked = True
            if len(commit.parent_ids) > 1:
                merge = commit
                break
            blobs.clear()
            rows = rows_for_commit(repo, db, scope, commit, blobs, differ, book, state, False)
            apply(rows, blobs, bulk)
            if len(bulk.versions) >= _FLUSH_ROWS:
                bulk.flush(db)
        bulk.flush(db)
        self._write_fresh_heads(db, scope, state)
        bulk.heads.clear()
        bulk.complete = False
        if merge is not None:  # the caller's loop goes on from here: replay the merge first
            for name, columns in _LATE_INDEXES.items():  # the merge and what follows query rows
                db.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {columns}")
            rows = self.rows_for_commit(db, scope, merge)
            self._apply(db, scope, rows)
            bulk.flush(db)
            self._reconcile_heads(db, scope, merge)
            bulk.heads.clear()
        return walked

    def _write_fresh_heads(self, db: sqlite3.Connection, scope: str, state: FreshHeads) -> None:
        """The heads a fresh walk derived, their search rows (in path order) and the counters."""
        read = self.store.blob_data
        heads, texts = [], []
        row = db.execute("SELECT COALESCE(MAX(docid), 0) FROM search_docs").fetchone()
        docid = int(row[0])
        total = 0
        for path in sorted(state.heads):
            mid, vid, sha, size, blob, created, updated = state.heads[path]
            data = state.data.get(path)
            if data is None:
                assert blob is not None  # a head is a version with content
                data = read(pygit2.Oid(hex=blob))
            desc = parse_description(data.decode("utf-8", "replace")) if data.startswith(b"---") else None
            heads.append((scope, path, mid, vid, sha, size, blob, desc, created, updated))
            docid += 1
            texts.append((docid, scope, path, vid, desc, data))
            total += size or 0
        db.executemany("INSERT OR REPLACE INTO heads VALUES(?,?,?,?,?,?,?,?,?,?)", heads)
        search.index_texts(db, texts)
        db.execute("UPDATE scopes SET memories=?, bytes=? WHERE scope=?", (len(state.heads), total, scope))

    def _finish_bulk(self, db: sqlite3.Connection, scope: str, bulk: Bulk) -> None:
        """The search rows of every path a catch-up touched, from the heads it left, and the
        scope's counters: one pass over the changed paths instead of one per version."""
        for path in sorted(bulk.paths):
            search.unindex_text(db, scope, path)
            head = db.execute(
                "SELECT version_id, description, blob FROM heads WHERE scope=? AND path=?", (scope, path)
            ).fetchone()
            if head is not None:
                data = self._fresh_blobs.get(head[2]) or self.store.blob_data(pygit2.Oid(hex=head[2]))
                search.index_text(db, scope, path, head[0], head[1], data)
        db.execute(
            "UPDATE scopes SET memories=memories+?, bytes=bytes+? WHERE scope=?",
            (bulk.memories, bulk.bytes, scope),
        )

    def _reconcile_heads(self, db: sqlite3.Connection, scope: str, merge: pygit2.Commit) -> None:
        """Make the heads match a merge's tree: its parents' lines were replayed one after the
        other, so a path both lines touched may hold the wrong line's state (merges are rare)."""
        files = {path: str(new) for _kind, path, _old, new in diff_trees(self.store.repo, None, merge.tree)}
        heads = dict(db.execute("SELECT path, blob FROM heads WHERE scope=?", (scope,)).fetchall())
        bulk: Bulk | None = getattr(self._local, "bulk", None)
        for path in heads.keys() - files.keys():
            (size,) = db.execute("SELECT size FROM heads WHERE scope=? AND path=?", (scope, path)).fetchone()
            db.execute("DELETE FROM heads WHERE scope=? AND path=?", (scope, path))
            if bulk is not None:
                bulk.memories -= 1
                bulk.bytes -= size
                bulk.paths.add(path)
                continue
            db.execute("UPDATE scopes SET memories=memories-1, bytes=bytes-? WHERE scope=?", (size, scope))
            search.unindex_text(db, scope, path)
        for path, blob in files.items():
            if heads.get(path) == blob:
                continue
            row = db.execute(
                f"SELECT {VERSION_COLUMNS} FROM versions WHERE scope=? AND path=? AND blob=? ORDER BY seq DESC LIMIT 1",
                (scope, path, blob),
            ).fetchone()
            if row is None:
                continue
            data = self.store.blob_data(pygit2.Oid(hex=blob))
            desc = parse_description(data.decode("utf-8", "replace")) if data.startswith(b"---") else None
            self._apply(db, scope, [dataclasses.replace(VersionRow(*row), prev_path=None, description=desc)])

    def rows_for_commit(self, db: sqlite3.Connection, scope: str, commit: pygit2.Commit) -> list[VersionRow]:
        """The versions one commit makes (see :func:`gitmem.engine.derive.rows_for_commit`)."""
        self._fresh_blobs.clear()  # only this commit's blobs are kept (a blob id fixes its content)
        bulk: Bulk | None = getattr(self._local, "bulk", None)
        differ, book = (bulk.differ, bulk.book) if bulk is not None else (None, None)
        if bulk is not None and bulk.pending_ids:
            named = _VERSION_TRAILER_RE.findall(commit.message)
            if any(v.strip() in bulk.pending_ids for v in named):  # its reuse check must see those rows
                bulk.flush(db)
        return derive.rows_for_commit(self.store.repo, db, scope, commit, self._fresh_blobs, differ, book)
