"""The derived SQLite index: versions and heads of every scope (docs/architecture.md#the-index-and-search).

Git is the source of truth. The index lives in ``$GIT_DIR/gitmem/index.sqlite`` (WAL) and is caught
up incrementally from the last indexed commit of each scope; a missing, stale, corrupt or
rewritten-under-it index is rebuilt from git transparently. Writers record their own commit
directly (no diff) when the index was current at their parent; everyone else catches up.
"""

# size-ok: one class owns one SQLite connection, its schema and its write transaction; catch-up, the
# writers' own records and rewrites all go through that transaction. What splits off already has
# (derive.py: rows from commits; rows.py: row types; search.py: the full-text tables).

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import re
import sqlite3
import stat
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pygit2

from gitmem.engine import derive, receipts, search, vectors
from gitmem.engine.rows import VERSION_COLUMNS, HeadRow, VersionRow
from gitmem.errors import ConflictError
from gitmem.git.repo import unverified_reads
from gitmem.git.treediff import TreeDiffer, diff_trees
from gitmem.model.frontmatter import parse_description

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

SCHEMA_VERSION = "3"  # 2: full-text search tables (gitmem.engine.search); 3: body column first
INDEX_FILE = "index.sqlite"
PURGE_PENDING = "index-purge-pending"
BUSY_TIMEOUT = 30.0  # seconds a write waits for another writer of the index

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS scopes(
    scope TEXT PRIMARY KEY, tip TEXT, memories INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS versions(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL, memory_id TEXT NOT NULL, scope TEXT NOT NULL, path TEXT NOT NULL,
    prev_path TEXT, operation TEXT NOT NULL, actor TEXT NOT NULL, session TEXT,
    created_at INTEGER NOT NULL, sha256 TEXT, size INTEGER, blob TEXT, commit_id TEXT NOT NULL,
    redaction_id TEXT, UNIQUE(scope, id));
CREATE INDEX IF NOT EXISTS versions_id ON versions(id);
CREATE INDEX IF NOT EXISTS versions_memory ON versions(memory_id, seq);
CREATE INDEX IF NOT EXISTS versions_path ON versions(scope, path, seq);
CREATE INDEX IF NOT EXISTS versions_session ON versions(session, seq);
CREATE INDEX IF NOT EXISTS versions_commit ON versions(commit_id);
CREATE TABLE IF NOT EXISTS heads(
    scope TEXT NOT NULL, path TEXT NOT NULL, memory_id TEXT NOT NULL, version_id TEXT NOT NULL,
    sha256 TEXT NOT NULL, size INTEGER NOT NULL, blob TEXT NOT NULL, description TEXT,
    created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
    PRIMARY KEY(scope, path)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS heads_memory ON heads(memory_id);
CREATE TABLE IF NOT EXISTS redactions(
    id TEXT PRIMARY KEY, actor TEXT NOT NULL, redacted_at INTEGER NOT NULL, reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS redacted(version_id TEXT PRIMARY KEY, redaction_id TEXT NOT NULL);
"""


_INSERT_VERSION = f"INSERT OR IGNORE INTO versions({VERSION_COLUMNS}) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
_UNKNOWN: Any = object()  # a head the walk has not looked up yet
_FLUSH_ROWS = 20_000  # version rows buffered before an executemany
# Secondary indexes of ``versions`` that a fresh walk into an empty table does not read (its own
# rows are known in memory, no other scope has any): such a rebuild drops them for the walk and
# creates them once at its end (a sort instead of 100k inserts each), or at its first merge,
# which asks SQLite about rows by id and path again.
_LATE_INDEXES = {
    "versions_id": "versions(id)",
    "versions_path": "versions(scope, path, seq)",
    "versions_memory": "versions(memory_id, seq)",
    "versions_session": "versions(session, seq)",
    "versions_commit": "versions(commit_id)",
}
# Version ids a commit message may name (a superset of its Gitmem-Version trailer).
_VERSION_TRAILER_RE = re.compile(r"Gitmem-Version:(.*)")


def _busy(exc: sqlite3.DatabaseError) -> bool:
    """A lock held by another connection (SQLITE_BUSY/LOCKED), as opposed to a corrupt file."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code in (5, 6) or "locked" in str(exc) or "busy" in str(exc)


class _Bulk:
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


_HEADS_CACHED = 512  # Index.head_at's rows (about 1 kB each), dropped whole when full
_KEEP_BYTES = 64 << 20  # head contents a fresh walk keeps for its search rows (the rest are read again)


class _FreshHeads:
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

    def apply(self, rows: Iterable[VersionRow], blobs: Mapping[str, bytes], bulk: _Bulk) -> None:
        """What :meth:`Index._apply` does to the heads, here in memory; rows go to ``bulk``."""
        heads, versions = self.heads, self.versions
        assert versions is not None
        for r in rows:
            scope = r.scope
            bulk.versions.append(_version_values(r, scope))
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


class Index:
    """The derived index of one store."""

    def __init__(self, store: StoreCore) -> None:
        self.store = store
        self.path = store.gitmem_dir / INDEX_FILE
        # Threads (docs/durability.md, "Threads"): each thread has its own SQLite connection (WAL
        # readers never block; writers serialize in BEGIN IMMEDIATE); ``close`` bumps a generation
        # and every thread replaces a connection of an older one on its next use.
        self._local = threading.local()
        self._generation = 0
        self._shared: sqlite3.Connection | None = None  # the in-memory index, one per process
        self._shared_lock = threading.RLock()
        self._known_tips: dict[str, str | None] = {}
        # head_at: (scope, path) -> (the tip it was read for, the row), at most _HEADS_CACHED
        self._heads: dict[tuple[str, str], tuple[str, HeadRow]] = {}
        self.in_memory = False  # True when the store's directory cannot hold the index file

    # ------------------------------------------------------------------ connection
    @property
    def _db(self) -> sqlite3.Connection | None:
        conn: sqlite3.Connection | None = getattr(self._local, "db", None)
        if conn is not None and getattr(self._local, "generation", -1) != self._generation:
            if conn is not self._shared:
                conn.close()
            self._local.db = conn = None
        return conn

    @_db.setter
    def _db(self, conn: sqlite3.Connection | None) -> None:
        self._local.db = conn
        self._local.generation = self._generation

    @property
    def _fresh_blobs(self) -> dict[str, bytes]:
        """Blobs this thread's catch-up or record just read or wrote, for the FTS rows."""
        blobs: dict[str, bytes] | None = getattr(self._local, "fresh_blobs", None)
        if blobs is None:
            blobs = self._local.fresh_blobs = {}
        return blobs

    @_fresh_blobs.setter
    def _fresh_blobs(self, blobs: dict[str, bytes]) -> None:
        self._local.fresh_blobs = blobs

    @property
    def db(self) -> sqlite3.Connection:
        db = self._db
        if db is None:
            db = self._connect()
            self._db = db
        return db

    def _connect(self) -> sqlite3.Connection:
        if not self._location_writable():
            return self._memory_db()
        for attempt in range(2):
            db = sqlite3.connect(
                str(self.path), timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
            try:
                db.execute("PRAGMA journal_mode=WAL")
                # Derived data: losing the last transactions on power loss only means a catch-up.
                db.execute("PRAGMA synchronous=OFF")
                # Deleted rows are overwritten with zeros: no old head content lingers in free space.
                db.execute("PRAGMA secure_delete=ON")
                db.executescript(_SCHEMA + search.SCHEMA)
                row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
                if row is None:
                    db.execute("INSERT OR IGNORE INTO meta VALUES('schema', ?)", (SCHEMA_VERSION,))
                    search.configure(db)
                elif row[0] != SCHEMA_VERSION:
                    raise sqlite3.DatabaseError("index schema changed")
                self._db = db
                if self._purge_marker().exists():  # a purge blocked by a reader: finish it now
                    self.purge_search(wait=0.5)
                return db
            except sqlite3.DatabaseError as exc:
                db.close()
                if attempt:
                    raise
                if _busy(exc):
                    raise ConflictError(
                        f"the index of {self.store.path} is busy (another process is writing it); try again"
                    ) from None
                self._remove_files()
        raise AssertionError("unreachable")

    def _location_writable(self) -> bool:
        """Whether this process may keep the index file (a reader without write access to the
        store, e.g. another user or a read-only mount, may not)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            return False
        if not os.access(self.path.parent, os.W_OK):
            return False
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return True
        # Something else in its place (a directory, a symlink, a fifo) is not the index: it cannot
        # be removed and re-derived as a corrupt index file is.
        return stat.S_ISREG(st.st_mode) and os.access(self.path, os.R_OK | os.W_OK)

    def _memory_db(self) -> sqlite3.Connection:
        """An index for this process only, caught up from git like the file one (one connection
        shared by the threads, its write transactions under a lock)."""
        self.in_memory = True
        with self._shared_lock:
            if self._shared is None:
                self._shared = self._new_memory_db()
            return self._shared

    def _new_memory_db(self) -> sqlite3.Connection:
        db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        db.executescript(_SCHEMA + search.SCHEMA)
        db.execute("INSERT INTO meta VALUES('schema', ?)", (SCHEMA_VERSION,))
        search.configure(db)
        return db

    def _remove_files(self) -> None:
        if self.in_memory:
            return
        for suffix in ("", "-wal", "-shm"):
            p = self.path.with_name(self.path.name + suffix)
            if p.exists():
                p.unlink()

    def close(self) -> None:
        """Close this thread's connection; other threads' are replaced on their next use."""
        db = self._db
        self._generation += 1
        self._heads.clear()
        if db is not None and db is not self._shared:
            db.close()
        self._local.db = None
        with self._shared_lock:
            if self._shared is not None:
                self._shared.close()
                self._shared = None

    def rebuild(self) -> int:
        """Drop the index and rebuild it from git; returns the number of versions indexed."""
        self.close()
        self._remove_files()
        self._known_tips.clear()
        for scope in self.store.scopes():
            self.ensure(scope)
        self.restore_ledger_marks()
        return int(self.db.execute("SELECT COUNT(*) FROM versions").fetchone()[0])

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        db = self.db
        with self._shared_lock if db is self._shared else contextlib.nullcontext():
            _FORK_GATE.enter()
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            finally:
                _FORK_GATE.leave()

    # ------------------------------------------------------------------ catch-up
    def ensure(self, scope: str, tip: pygit2.Oid | None = None, *, known_tip: bool = False) -> None:
        """Bring ``scope`` up to date with its branch (``tip`` when the caller just read it)."""
        if not known_tip:
            tip = self.store.tip(scope)
        tip_hex = str(tip) if tip is not None else None
        if self._known_tips.get(scope, "?") == tip_hex:
            return
        try:
            self._catch_up(scope, tip)
        except sqlite3.DatabaseError as exc:
            if _busy(exc):  # another process holds the index: deleting it would pull it from under them
                raise ConflictError(
                    f"the index of {self.store.path} is busy (another process is writing it); try again"
                ) from None
            # A corrupt index file: start again from git.
            self.close()
            self._remove_files()
            self._known_tips.clear()
            self._catch_up(scope, tip)
        self._restore_marks(scope)

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
                self._drop_scope(db, gone)
        return scopes

    def _indexed_scopes(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT scope FROM scopes")]

    def _catch_up(self, scope: str, tip: pygit2.Oid | None) -> None:
        tip_hex = str(tip) if tip is not None else None
        rewritten = walked = False
        with unverified_reads(), self._write() as db:
            row = db.execute("SELECT tip FROM scopes WHERE scope=?", (scope,)).fetchone()
            indexed = row[0] if row else None
            if row is not None and indexed == tip_hex:
                self._known_tips[scope] = tip_hex
                return
            if tip is None:
                self._drop_scope(db, scope)
                self._known_tips[scope] = None
                return
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
                    return
                else:  # history was rewritten under the index (redaction, compaction)
                    self._drop_scope(db, scope)
                    rewritten = True
            fresh = row is None or hide is None
            if fresh:
                self._drop_scope(db, scope)
                db.execute("INSERT INTO scopes(scope, tip) VALUES(?, NULL)", (scope,))
            # One transaction for the whole walk; the search rows and the scope's counters are
            # brought up to date once at the end, for the paths that changed (FTS upkeep in bulk).
            repo = self.store.repo
            walk = self.store.walk(tip, hide)
            differ = TreeDiffer(repo)
            bulk = self._local.bulk = _Bulk(differ, receipts.load(Path(repo.path)), fresh)
            late = hide is None and db.execute("SELECT 1 FROM versions LIMIT 1").fetchone() is None
            if late:
                for name in _LATE_INDEXES:
                    db.execute(f"DROP INDEX IF EXISTS {name}")
            try:
                if fresh:
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
            if late:
                for name, columns in _LATE_INDEXES.items():
                    db.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {columns}")
            self._finish_bulk(db, scope, bulk)
            db.execute("UPDATE scopes SET tip=? WHERE scope=?", (tip_hex, scope))
        self._known_tips[scope] = tip_hex
        if rewritten:  # content that left history must leave the file too
            self.purge_search()
        if walked:  # new commits: a push may be waiting in the spool for its ledger entry
            self.store.drain_pushes()

    def _walk_fresh(
        self, db: sqlite3.Connection, scope: str, walk: Iterator[pygit2.Commit], bulk: _Bulk
    ) -> bool:
        """Derive a scope that starts empty: its heads live in memory (no query per commit), the
        version rows go out by executemany, and the heads, their search rows and the counters
        are written once at the end. Stops after materializing at the first merge (which the
        caller's one-commit-at-a-time loop then replays: merges are rare). Returns whether it
        walked any commit."""
        state = _FreshHeads(db.execute("SELECT 1 FROM versions LIMIT 1").fetchone() is not None)
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

    def _write_fresh_heads(self, db: sqlite3.Connection, scope: str, state: _FreshHeads) -> None:
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

    def _drop_scope(self, db: sqlite3.Connection, scope: str) -> None:
        self._heads.clear()
        db.execute("DELETE FROM versions WHERE scope=?", (scope,))
        db.execute("DELETE FROM heads WHERE scope=?", (scope,))
        search.drop_scope_text(db, scope)
        db.execute("DELETE FROM scopes WHERE scope=?", (scope,))

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
            elif row is None or row[0] != parent_hex:
                staged.rollback()  # not current at the parent: catch-up records it in order
                return staged
            self._apply(db, scope, rows)
            db.execute("UPDATE scopes SET tip=? WHERE scope=?", (str(commit), scope))
        except sqlite3.DatabaseError:
            staged.rollback()
            self._known_tips.pop(scope, None)  # the next read catches up from git
        except BaseException:
            staged.rollback()
            raise
        finally:
            self._fresh_blobs = {}
        return staged

    def _apply(self, db: sqlite3.Connection, scope: str, rows: Iterable[VersionRow]) -> None:
        bulk: _Bulk | None = getattr(self._local, "bulk", None)
        for r in rows:
            values = _version_values(r, scope)
            if bulk is not None:
                bulk.versions.append(values)
                bulk.pending_ids.add(r.id)
            else:
                db.execute(_INSERT_VERSION, values)
            dmem, dbytes = 0, 0
            created = r.created_at
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
                if bulk is not None:
                    bulk.paths.add(p)
                else:
                    search.unindex_text(db, scope, p)
            if r.operation != "deleted":
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
                if bulk is None:
                    self._index_text(db, scope, r)
                else:
                    bulk.heads[r.path] = (r.size or 0, created, r.memory_id)
                dmem += 1
                dbytes += r.size or 0
            if bulk is not None:
                bulk.memories += dmem
                bulk.bytes += dbytes
            else:
                db.execute(
                    "UPDATE scopes SET memories=memories+?, bytes=bytes+? WHERE scope=?",
                    (dmem, dbytes, scope),
                )

    def _finish_bulk(self, db: sqlite3.Connection, scope: str, bulk: _Bulk) -> None:
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

    def _index_text(self, db: sqlite3.Connection, scope: str, r: VersionRow) -> None:
        if r.blob is not None:
            data = self._fresh_blobs.get(r.blob) or self.store.blob_data(pygit2.Oid(hex=r.blob))
            search.index_text(db, scope, r.path, r.id, r.description, data)

    def purge_search(self, *, wait: float = 2.0) -> bool:
        """Make text no longer at any head leave the database file: merge the FTS5 segments
        (dropping deleted rows' terms), then checkpoint and truncate the WAL. Call it after a
        redaction or compaction (catch-up does when it finds history rewritten).

        A reader in the middle of a transaction keeps old pages in the WAL: the checkpoint is
        retried for ``wait`` seconds; if it still cannot finish, a marker file makes the next
        process that opens the index (and ``gitmem verify``) try again. Returns whether it finished."""
        with self._write() as db:
            search.optimize(db)
        vectors.purge(self.store, self.db)  # the vector file goes with it (gitmem.engine.vectors)
        # A TRUNCATE checkpoint waits for readers through the busy handler: bound that wait.
        self.db.execute(f"PRAGMA busy_timeout={int(wait * 1000)}")
        try:
            busy = self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        finally:
            self.db.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT * 1000)}")
        if not busy or busy[0] == 0:
            self._purge_marker().unlink(missing_ok=True)
            return True
        if not self.in_memory:
            self._purge_marker().write_text("the index WAL still holds pages of purged text\n")
        return False

    def _purge_marker(self) -> Path:
        return self.path.with_name(PURGE_PENDING)

    def purge_pending(self) -> bool:
        """Whether a purge of the index's WAL could not finish yet (see :meth:`purge_search`)."""
        return not self.in_memory and self._purge_marker().exists()

    # ------------------------------------------------------------------ deriving versions from git
    def _reconcile_heads(self, db: sqlite3.Connection, scope: str, merge: pygit2.Commit) -> None:
        """Make the heads match a merge's tree: its parents' lines were replayed one after the
        other, so a path both lines touched may hold the wrong line's state (merges are rare)."""
        files = {path: str(new) for _kind, path, _old, new in diff_trees(self.store.repo, None, merge.tree)}
        heads = dict(db.execute("SELECT path, blob FROM heads WHERE scope=?", (scope,)).fetchall())
        bulk: _Bulk | None = getattr(self._local, "bulk", None)
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
        bulk: _Bulk | None = getattr(self._local, "bulk", None)
        differ, book = (bulk.differ, bulk.book) if bulk is not None else (None, None)
        if bulk is not None and bulk.pending_ids:
            named = _VERSION_TRAILER_RE.findall(commit.message)
            if any(v.strip() in bulk.pending_ids for v in named):  # its reuse check must see those rows
                bulk.flush(db)
        return derive.rows_for_commit(self.store.repo, db, scope, commit, self._fresh_blobs, differ, book)

    # ------------------------------------------------------------------ queries
    def head_at(self, scope: str, path: str, tip: str, blob: str) -> HeadRow | None:
        """:meth:`head` for a reader that found ``blob`` at ``path`` in commit ``tip`` (and made
        the index current for it), remembered per path: a scope's head at one tip never changes.
        Only a row naming that very blob is kept, and one is only returned for the same tip and
        blob; any other answer comes from SQLite again. Saves a query (most of what a read costs
        beyond the raw tree lookup)."""
        key = (scope, path)
        hit = self._heads.get(key)
        if hit is not None and hit[0] == tip and hit[1].blob == blob:
            return hit[1]
        row = self.head(scope, path)
        if row is not None and row.blob == blob:
            if len(self._heads) >= _HEADS_CACHED:
                self._heads.clear()
            self._heads[key] = (tip, row)
        return row

    def head(self, scope: str, path: str) -> HeadRow | None:
        row = self.db.execute("SELECT * FROM heads WHERE scope=? AND path=?", (scope, path)).fetchone()
        return HeadRow(*row) if row else None

    def head_by_memory(self, scope: str, memory_id: str) -> HeadRow | None:
        row = self.db.execute(
            "SELECT * FROM heads WHERE scope=? AND memory_id=?", (scope, memory_id)
        ).fetchone()
        return HeadRow(*row) if row else None

    def heads(self, scope: str, prefix: str = "/") -> list[HeadRow]:
        if prefix == "/":
            cur = self.db.execute("SELECT * FROM heads WHERE scope=? ORDER BY path", (scope,))
        else:
            # Every path under the prefix sorts in [prefix, prefix with its final '/' bumped to '0').
            cur = self.db.execute(
                "SELECT * FROM heads WHERE scope=? AND path >= ? AND path < ? ORDER BY path",
                (scope, prefix, prefix[:-1] + "0"),
            )
        return [HeadRow(*r) for r in cur]

    def scope_stats(self, scope: str) -> tuple[int, int]:
        row = self.db.execute("SELECT memories, bytes FROM scopes WHERE scope=?", (scope,)).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def store_bytes(self) -> int:
        row = self.db.execute("SELECT COALESCE(SUM(bytes), 0) FROM scopes").fetchone()
        return int(row[0])

    def version_rows(
        self, where: str = "", params: Sequence[Any] = (), limit: int | None = None
    ) -> list[VersionRow]:
        sql = f"SELECT {VERSION_COLUMNS} FROM versions"
        if where:
            sql += " WHERE " + where
        sql += " ORDER BY created_at DESC, seq DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [VersionRow(*r) for r in self.db.execute(sql, tuple(params))]

    # ------------------------------------------------------------------ history rewrites (gitmem.audit.redact)
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
        """After a rebuild from git: redactions recorded in the ledger mark their versions again."""
        from gitmem.engine import ledger  # the ledger reads the store through the handle that owns us

        for entry in ledger.entries(self.store, kind="redaction"):
            data = entry.data
            versions = [
                v["version"] for v in data.get("versions", []) if isinstance(v, dict) and "version" in v
            ]
            at = int(dt.datetime.fromisoformat(entry.at.replace("Z", "+00:00")).timestamp())
            self.mark_redacted((str(data.get("id")), entry.actor, at, str(data.get("reason", ""))), versions)

    def _restore_marks(self, scope: str) -> None:
        # Versions re-derived from git after a rewrite get their redaction back.
        with self._write() as db:
            db.execute(
                "UPDATE versions SET redaction_id=(SELECT redaction_id FROM redacted WHERE version_id=versions.id) "
                "WHERE scope=? AND redaction_id IS NULL AND id IN (SELECT version_id FROM redacted)",
                (scope,),
            )

    def apply_rewrite(
        self,
        scope: str,
        old_tip: str,
        new_tip: str,
        commit_map: dict[str, str],
        blob_map: dict[str, list[Any]],
    ) -> None:
        """Follow a history rewrite without re-deriving the scope: new commit ids, and the redacted
        blobs forgotten (``blob_map``: old blob -> [new blob, sha256, size]). When the index was not
        at ``old_tip``, the scope is dropped and re-derived from git on the next read."""
        stale = False
        with self._write() as db:
            row = db.execute("SELECT tip FROM scopes WHERE scope=?", (scope,)).fetchone()
            if row is not None and row[0] == new_tip:
                return
            if row is None or row[0] != old_tip:
                # Re-derived below, in one transaction: dropping the scope here and deriving it in
                # another would let a writer (whose handle knows the tip) see an empty scope between
                # the two and mint new memory ids for paths that have one.
                stale = True
            else:
                # One pass over the scope (a rewrite may map 100k commits).
                db.execute("CREATE TEMP TABLE IF NOT EXISTS rewrite_map(old TEXT PRIMARY KEY, new TEXT)")
                db.execute("DELETE FROM rewrite_map")
                db.executemany("INSERT INTO rewrite_map VALUES(?,?)", commit_map.items())
                big = len(commit_map) > 5000  # rebuilding the commit index beats updating it row by row
                if big:
                    db.execute("DROP INDEX IF EXISTS versions_commit")
                db.execute(
                    "UPDATE versions SET commit_id=(SELECT new FROM rewrite_map WHERE old=versions.commit_id) "
                    "WHERE scope=? AND commit_id IN (SELECT old FROM rewrite_map)",
                    (scope,),
                )
                if big:
                    db.execute("CREATE INDEX IF NOT EXISTS versions_commit ON versions(commit_id)")
                db.execute("DELETE FROM rewrite_map")
                db.executemany(
                    "UPDATE versions SET blob=?, sha256=?, size=? WHERE scope=? AND blob=?",
                    [(n[0], n[1], n[2], scope, old) for old, n in blob_map.items()],
                )
                db.execute("UPDATE scopes SET tip=? WHERE scope=?", (new_tip, scope))
        self._known_tips.pop(scope, None)
        if stale:
            self._catch_up(scope, self.store.tip(scope))  # atomic: drop and re-derive in one transaction
        self.ensure(scope)
        self.purge_search()


def _version_values(r: VersionRow, scope: str) -> tuple[object, ...]:
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

    def __init__(self, index: Index, scope: str, commit_hex: str) -> None:
        self.index = index
        self.scope = scope
        self.commit_hex = commit_hex
        self.db: sqlite3.Connection | None = None
        self._lock: contextlib.AbstractContextManager[object] | None = None
        self._gated = False

    def begin(self) -> None:
        index = self.index
        db = index.db
        lock: contextlib.AbstractContextManager[object] = (
            index._shared_lock if db is index._shared else contextlib.nullcontext()
        )
        lock.__enter__()
        self._lock = lock
        _FORK_GATE.enter()
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
            _FORK_GATE.leave()
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.__exit__(None, None, None)


class _ForkGate:
    """The index write transactions open in this process, and a fork waiting for them.

    SQLite keeps its file-lock state per process; a child forked while another thread of its
    parent has a write transaction open inherits that state and finds the index busy for good
    (every write in the child fails after the busy timeout). So a fork waits (up to
    ``FORK_WAIT`` seconds) until no transaction is open, and no new one starts until it is done.
    A transaction never waits for anything a forking thread holds (a staged record waits only for
    its flush), so the wait ends."""

    def __init__(self) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.open = 0
        self.forking = False

    def enter(self) -> None:
        with self.cond:
            while self.forking:
                self.cond.wait()
            self.open += 1

    def leave(self) -> None:
        with self.cond:
            self.open -= 1
            if self.open <= 0:
                self.cond.notify_all()

    def before_fork(self) -> None:
        with self.cond:
            self.forking = True
            self.cond.wait_for(lambda: self.open <= 0, FORK_WAIT)

    def after_fork_in_parent(self) -> None:
        with self.cond:
            self.forking = False
            self.cond.notify_all()


FORK_WAIT = 10.0
_FORK_GATE = _ForkGate()


def _after_fork_in_child() -> None:
    global _FORK_GATE
    _FORK_GATE = _ForkGate()  # the child has none of its parent's transactions (nor threads)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=lambda: _FORK_GATE.before_fork(),
        after_in_parent=lambda: _FORK_GATE.after_fork_in_parent(),
        after_in_child=_after_fork_in_child,
    )
