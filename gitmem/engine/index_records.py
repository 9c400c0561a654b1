"""The index's own records: the rows one commit makes applied to ``versions`` and ``heads``, the
staged record of a publish (:meth:`Records.stage`, committed once the branch moved) and the
redaction marks. Catch-up (:mod:`gitmem.engine.index_catchup`) applies its rows through the same
:meth:`Records._apply`, deferring search rows and counters to its end (:class:`Bulk`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pygit2

from gitmem.engine import ledger, receipts, search
from gitmem.engine.forkgate import FORK_GATE
from gitmem.engine.index_db import MARKS_DUE, IndexDb
from gitmem.engine.rows import VERSION_COLUMNS, VersionRow
from gitmem.git.treediff import TreeDiffer

_INSERT_VERSION = f"INSERT OR IGNORE INTO versions({VERSION_COLUMNS}) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
_UNKNOWN: Any = object()  # a head the walk has not looked up yet


class Bulk:
    """What a catch-up defers to its end: the paths whose search rows change, the counters."""

    __slots__ = (
        "paths",
        "memories",
        "bytes",
        "differ",
        "book",
        "versions",
        "pending_ids",
        "heads",
        "complete",
    )

    def __init__(self, differ: TreeDiffer, book: receipts.Receipts, complete: bool) -> None:
        self.paths: set[str] = set()
        self.memories = 0
        self.bytes = 0
        self.differ = differ  # raw trees read once for the whole walk
        self.book = book  # the store's receipts, loaded once
        # Version rows not inserted yet (one executemany per batch); their ids, so that a commit
        # whose trailers name one of them flushes first and its lookup sees them.
        self.versions: list[tuple[Any, ...]] = []
        self.pending_ids: set[str] = set()
        # (size, created_at, memory_id) of each head this walk wrote (None: none at that path);
        # ``complete``: the scope started empty, so a path not in ``heads`` has no head.
        self.heads: dict[str, tuple[int, int, str] | None] = {}
        self.complete = complete

    def flush(self, db: sqlite3.Connection) -> None:
        if self.versions:
            db.executemany(_INSERT_VERSION, self.versions)
            self.versions = []
            self.pending_ids = set()


class Records(IndexDb):
    """Recording commits and redaction marks (a part of :class:`gitmem.engine.index.Index`)."""

    def record(
        self,
        scope: str,
        parent: pygit2.Oid | None,
        commit: pygit2.Oid,
        rows: Sequence[VersionRow],
        contents: Mapping[str, bytes] | None = None,
    ) -> None:
        """Record a commit the library just made; skipped (left to catch-up) when the index was not
        current at ``parent``, so that racing writers never record out of order. ``contents`` maps
        blob ids to the bytes the writer already has (the search rows then need no blob read)."""
        self.stage(scope, parent, commit, rows, contents).commit()

    def stage(
        self,
        scope: str,
        parent: pygit2.Oid | None,
        commit: pygit2.Oid,
        rows: Sequence[VersionRow],
        contents: Mapping[str, bytes] | None = None,
    ) -> StagedRecord:
        """:meth:`record`'s work done in an open write transaction, committed by
        :meth:`StagedRecord.commit` once the branch has moved or undone by
        :meth:`StagedRecord.rollback` when it has not. The write path stages while the publish's
        flush runs (docs/durability.md, "One flush per publish"), so the index costs the write
        little more than its commit. Call commit or rollback on the same thread, soon: the
        transaction holds the index's write lock."""
        staged = StagedRecord(self, scope, str(commit))
        parent_hex = str(parent) if parent is not None else None
        self._fresh_blobs = dict(contents or {})
        try:
            staged.begin()
            db = staged.db
            assert db is not None
            row = db.execute("SELECT tip FROM scopes WHERE scope=?", (scope,)).fetchone()
            if parent_hex is None and row is None:
                db.execute("INSERT INTO scopes(scope, tip) VALUES(?, NULL)", (scope,))
            elif row is None or row[0] is None or row[0] != parent_hex:
                # not current at the parent (or marked for re-deriving, its rows those of another
                # history, maybe of a branch deleted since): catch-up records it in order
                staged.rollback()
                return staged
            self._apply(db, scope, rows, tip=str(commit))
        except sqlite3.DatabaseError:
            staged.rollback()
            self._known_tips.pop(scope, None)  # the next read catches up from git
        except BaseException:
            staged.rollback()
            raise
        finally:
            self._fresh_blobs = {}
        return staged

    def _apply(
        self, db: sqlite3.Connection, scope: str, rows: Iterable[VersionRow], tip: str | None = None
    ) -> None:
        """Apply ``rows`` to ``versions``, ``heads``, the search rows and the scope's counters
        (deferred to a catch-up's end in bulk). With ``tip`` (a staged record, not in bulk) the
        counters of every row and the scope's new tip are one ``UPDATE``."""
        bulk: Bulk | None = getattr(self._local, "bulk", None)
        total_mem, total_bytes = 0, 0
        for r in rows:
            values = version_values(r, scope)
            if bulk is not None:
                bulk.versions.append(values)
                bulk.pending_ids.add(r.id)
            else:
                db.execute(_INSERT_VERSION, values)
            dmem, dbytes = 0, 0
            created = r.created_at
            in_place = False  # the same memory modified at its path: its head row updated in place
            for p in {r.prev_path, r.path} if r.prev_path else {r.path}:
                old = bulk.heads.get(p, _UNKNOWN) if bulk is not None else _UNKNOWN
                if old is _UNKNOWN:
                    old = (
                        None
                        if bulk is not None and bulk.complete
                        else db.execute(
                            "SELECT size, created_at, memory_id FROM heads WHERE scope=? AND path=?",
                            (scope, p),
                        ).fetchone()
                    )
                if old is not None:
                    if p != r.path or r.operation == "deleted":  # else INSERT OR REPLACE below
                        db.execute("DELETE FROM heads WHERE scope=? AND path=?", (scope, p))
                        if bulk is not None:
                            bulk.heads[p] = None
                    dmem -= 1
                    dbytes -= old[0]
                    if r.operation == "modified" and old[2] == r.memory_id:
                        created = old[1]  # the memory keeps its creation time across edits and renames
                        in_place = p == r.path and bulk is None
                if bulk is not None:
                    bulk.paths.add(p)
                elif p != r.path or r.operation == "deleted" or r.blob is None:
                    search.unindex_text(db, scope, p)  # (else _index_text below replaces its row)
            if in_place:
                # No b-tree delete and insert, and ``heads_memory`` (its key unchanged) untouched:
                # one page fewer in the index's WAL, which the next flush carries.
                db.execute(
                    "UPDATE heads SET version_id=?, sha256=?, size=?, blob=?, description=?, updated_at=? "
                    "WHERE scope=? AND path=?",
                    (r.id, r.sha256, r.size, r.blob, r.description, r.created_at, scope, r.path),
                )
            elif r.operation != "deleted":
                db.execute(
                    "INSERT OR REPLACE INTO heads VALUES(?,?,?,?,?,?,?,?,?,?)",
                    (
                        scope,
                        r.path,
                        r.memory_id,
                        r.id,
                        r.sha256,
                        r.size,
                        r.blob,
                        r.description,
                        created,
                        r.created_at,
                    ),
                )
            if r.operation != "deleted":
                if bulk is None:
                    self._index_text(db, scope, r)
                else:
                    bulk.heads[r.path] = (r.size or 0, created, r.memory_id)
                dmem += 1
                dbytes += r.size or 0
            if bulk is not None:
                bulk.memories += dmem
                bulk.bytes += dbytes
            elif tip is not None:
                total_mem, total_bytes = total_mem + dmem, total_bytes + dbytes
            else:
                db.execute(
                    "UPDATE scopes SET memories=memories+?, bytes=bytes+? WHERE scope=?",
                    (dmem, dbytes, scope),
                )
        if tip is not None and bulk is None:
            db.execute(
                "UPDATE scopes SET memories=memories+?, bytes=bytes+?, tip=? WHERE scope=?",
                (total_mem, total_bytes, tip, scope),
            )
        elif tip is not None:
            db.execute("UPDATE scopes SET tip=? WHERE scope=?", (tip, scope))

    def _index_text(self, db: sqlite3.Connection, scope: str, r: VersionRow) -> None:
        if r.blob is not None:
            data = self._fresh_blobs.get(r.blob) or self.store.blob_data(pygit2.Oid(hex=r.blob))
            search.index_text(db, scope, r.path, r.id, r.description, data)

    def mark_redacted(self, redaction: tuple[str, str, int, str], version_ids: Sequence[str]) -> None:
        """Record a redaction (id, actor, time, reason) and the versions it covers."""
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO redactions VALUES(?,?,?,?)", redaction)
            db.executemany(
                "INSERT OR REPLACE INTO redacted VALUES(?,?)", [(v, redaction[0]) for v in version_ids]
            )
            db.execute(
                "UPDATE versions SET redaction_id=? WHERE id IN (SELECT version_id FROM redacted "
                "WHERE redaction_id=?)",
                (redaction[0], redaction[0]),
            )

    def restore_ledger_marks(self) -> None:
        """After a rebuild from git: redactions recorded in the ledger mark their versions again
        (versions derived later get theirs from ``redacted``: :meth:`_restore_marks`)."""
        for entry in ledger.entries(self.store, kind="redaction"):
            data = entry.data
            versions = [
                v["version"] for v in data.get("versions", []) if isinstance(v, dict) and "version" in v
            ]
            at = int(dt.datetime.fromisoformat(entry.at.replace("Z", "+00:00")).timestamp())
            self.mark_redacted((str(data.get("id")), entry.actor, at, str(data.get("reason", ""))), versions)
        with self._write() as db:
            db.execute(f"DELETE FROM meta WHERE key='{MARKS_DUE}'")
        self.marks_due = False

    def _restore_marks(self, scope: str) -> None:
        # Versions re-derived from git after a rewrite get their redaction back.
        with self._write() as db:
            db.execute(
                "UPDATE versions SET redaction_id=(SELECT redaction_id FROM redacted WHERE version_id=versions.id) "
                "WHERE scope=? AND redaction_id IS NULL AND id IN (SELECT version_id FROM redacted)",
                (scope,),
            )


def version_values(r: VersionRow, scope: str) -> tuple[object, ...]:
    """The ``versions`` row of ``r`` in ``scope`` (the order of ``_INSERT_VERSION``)."""
    return (
        r.id,
        r.memory_id,
        scope,
        r.path,
        r.prev_path,
        r.operation,
        r.actor,
        r.session,
        r.created_at,
        r.sha256,
        r.size,
        r.blob,
        r.commit_id,
        r.redaction_id,
    )


class StagedRecord:
    """A record of one publish, in an open index transaction (:meth:`Index.stage`)."""

    __slots__ = ("index", "scope", "commit_hex", "db", "_lock", "_gated")

    def __init__(self, index: Records, scope: str, commit_hex: str) -> None:
        self.index = index
        self.scope = scope
        self.commit_hex = commit_hex
        self.db: sqlite3.Connection | None = None
        self._lock: contextlib.AbstractContextManager[object] | None = None
        self._gated = False

    def begin(self) -> None:
        index = self.index
        db = index.writable_db()
        lock: contextlib.AbstractContextManager[object] = (
            index._shared_lock if db is index._shared else contextlib.nullcontext()
        )
        lock.__enter__()
        self._lock = lock
        FORK_GATE.enter()
        self._gated = True
        try:
            db.execute("BEGIN IMMEDIATE")
        except BaseException:
            self._release()
            raise
        self.db = db

    def commit(self) -> None:
        """Make the record visible (the branch moved); a failed commit leaves it to catch-up."""
        db, self.db = self.db, None
        if db is None:
            return
        try:
            db.execute("COMMIT")
            self.index._known_tips[self.scope] = self.commit_hex
        except sqlite3.DatabaseError:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
            self.index._known_tips.pop(self.scope, None)
        finally:
            self._release()

    def rollback(self) -> None:
        """Drop the record (the branch did not move, or the record was not in order)."""
        db, self.db = self.db, None
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.execute("ROLLBACK")
        self._release()

    def _release(self) -> None:
        if self._gated:
            self._gated = False
            FORK_GATE.leave()
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.__exit__(None, None, None)
