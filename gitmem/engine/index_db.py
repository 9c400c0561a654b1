"""The derived index's SQLite connection and write transactions (docs/architecture.md#the-index-and-search).

:class:`IndexDb` owns the file (``$GIT_DIR/gitmem/index.sqlite``, WAL; an in-memory database when
the store's directory cannot hold it), its schema, one connection per thread and the write
transaction every other part of the index goes through (:mod:`gitmem.engine.index` composes them).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from gitmem.engine import search, vectors
from gitmem.engine.forkgate import FORK_GATE
from gitmem.engine.rows import HeadRow
from gitmem.errors import ConflictError
from gitmem.git.locks import file_lock

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

# 2: full-text search tables (gitmem.engine.search); 3: body column first; 4: ``claims`` (the
# version ids commits claim and do not hold: gitmem.engine.derive.takes_version_id), and
# ``versions`` without AUTOINCREMENT, one index on the version id, a partial session index (see
# _VERSIONS below). An index of an older format is derived again (a format-3 index lacks the
# claims that commits make and do not hold, which git alone can tell).
SCHEMA_VERSION = "4"
INDEX_FILE = "index.sqlite"
MARKS_DUE = "marks"  # meta key of a new index that has not had the ledger's redaction marks yet
PURGE_PENDING = "index-purge-pending"
BUSY_TIMEOUT = 30.0  # seconds a write waits for another writer of the index
# Held while an index file is judged stale (corrupt, or of another format) and removed: only the
# file that was judged goes, never one another opener derived meanwhile (see IndexDb._remove_stale).
REMOVE_LOCK = INDEX_FILE + ".lock"


_OPEN_ATTEMPTS = 3  # a stale file removed (by this opener or another), then opened again


class _Conn(sqlite3.Connection):
    """A connection to the index file, with the identity (device, inode) of the file it opened."""

    identity: tuple[int, int] | None = None


def _identity(st: os.stat_result) -> tuple[int, int]:
    return (st.st_dev, st.st_ino)


# ``versions``: each b-tree is a page a write dirties, writes to the WAL and flushes next
# (docs/performance.md, "Issue 33, third pass"). ``seq`` is the rowid, without AUTOINCREMENT (no
# ``sqlite_sequence`` row to update): a new row gets the largest ``seq`` present plus one, so it
# orders after every row present, and ``seq`` is only ever compared between rows present together
# (never kept outside the table), as AUTOINCREMENT ordered them. ``UNIQUE(id, scope)`` answers
# lookups by id alone and by id and scope (no second index on the id); rows without a session
# (most) are not in ``versions_session``, which only ``session = ?`` and ``session IS NOT NULL``
# queries read.
_VERSION_COLUMNS = """
    id TEXT NOT NULL, memory_id TEXT NOT NULL, scope TEXT NOT NULL, path TEXT NOT NULL,
    prev_path TEXT, operation TEXT NOT NULL, actor TEXT NOT NULL, session TEXT,
    created_at INTEGER NOT NULL, sha256 TEXT, size INTEGER, blob TEXT, commit_id TEXT NOT NULL,
    redaction_id TEXT"""
_VERSIONS = (
    f"CREATE TABLE IF NOT EXISTS versions(seq INTEGER PRIMARY KEY,{_VERSION_COLUMNS}, UNIQUE(id, scope));"
)
# The secondary indexes of ``versions`` (name -> what follows ON); a rebuild creates them late.
VERSION_INDEXES = {
    "versions_path": "versions(scope, path, seq)",
    "versions_memory": "versions(memory_id, seq)",
    "versions_session": "versions(session, seq) WHERE session IS NOT NULL",
    "versions_commit": "versions(commit_id)",
}
_CREATE_INDEXES = [f"CREATE INDEX IF NOT EXISTS {name} ON {on}" for name, on in VERSION_INDEXES.items()]

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS scopes(
    scope TEXT PRIMARY KEY, tip TEXT, memories INTEGER NOT NULL DEFAULT 0, bytes INTEGER NOT NULL DEFAULT 0);
{_VERSIONS}
{";".join(_CREATE_INDEXES)};
CREATE TABLE IF NOT EXISTS heads(
    scope TEXT NOT NULL, path TEXT NOT NULL, memory_id TEXT NOT NULL, version_id TEXT NOT NULL,
    sha256 TEXT NOT NULL, size INTEGER NOT NULL, blob TEXT NOT NULL, description TEXT,
    created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
    PRIMARY KEY(scope, path)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS heads_memory ON heads(memory_id);
CREATE TABLE IF NOT EXISTS redactions(
    id TEXT PRIMARY KEY, actor TEXT NOT NULL, redacted_at INTEGER NOT NULL, reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS redacted(version_id TEXT PRIMARY KEY, redaction_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS claims(
    scope TEXT NOT NULL, commit_id TEXT NOT NULL, version_id TEXT NOT NULL,
    PRIMARY KEY(scope, commit_id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS claims_version ON claims(version_id);
"""


def busy(exc: sqlite3.DatabaseError) -> bool:
    """A lock held by another connection (SQLITE_BUSY/LOCKED), as opposed to a corrupt file."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code in (5, 6) or "locked" in str(exc) or "busy" in str(exc)


class IndexDb:
    """The index's connection, schema and write transaction (the base of :class:`gitmem.engine.index.Index`)."""

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
        # A connection a thread left for the next one (park), with its generation.
        self._parked: tuple[sqlite3.Connection, int] | None = None
        self._known_tips: dict[str, str | None] = {}
        # head_at: (scope, path) -> (the tip it was read for, the row), at most _HEADS_CACHED
        self._heads: dict[tuple[str, str], tuple[str, HeadRow]] = {}
        self.in_memory = False  # True when the store's directory cannot hold the index file
        # A new index file (or memory index) gets the ledger's redaction marks after its first
        # catch-up (meta 'marks' = 'due' until then, so a process that dies first leaves it due).
        self.marks_due = False

    def indexed_at(self, scope: str, tip_hex: str | None) -> bool:
        """Whether the index holds ``scope`` at ``tip_hex`` (None: an empty or deleted scope, which
        has no row). A row without a tip is a scope marked for re-deriving, current at no tip."""
        row = self.db.execute("SELECT tip FROM scopes WHERE scope=?", (scope,)).fetchone()
        return tip_hex is None if row is None else row[0] is not None and row[0] == tip_hex

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
            db = self._adopt() or self._connect()
            self._db = db
        return db

    def park(self) -> None:
        """This thread is done with the handle for now (a pool lends it to another thread next):
        its connection waits for the next thread that uses the handle instead of staying open with
        this one, so a handle lent thread after thread holds one connection, not one per thread.
        Only for a handle no other thread uses meanwhile (the server's pool)."""
        conn: sqlite3.Connection | None = getattr(self._local, "db", None)
        if conn is None or conn is self._shared or conn.in_transaction:
            return
        self._local.db = None
        with self._shared_lock:
            old, self._parked = self._parked, (conn, getattr(self._local, "generation", -1))
        if old is not None:
            old[0].close()

    def _adopt(self) -> sqlite3.Connection | None:
        """The connection another thread parked (:meth:`park`), when it is of this generation."""
        with self._shared_lock:
            parked, self._parked = self._parked, None
        if parked is None:
            return None
        if parked[1] != self._generation:
            parked[0].close()
            return None
        return parked[0]

    def _connect(self) -> sqlite3.Connection:
        if not self._location_writable():
            return self._memory_db()
        for attempt in range(_OPEN_ATTEMPTS):
            # Opened and judged under REMOVE_LOCK shared: no other opener removes the file (nor its
            # -wal and -shm, which SQLite makes as this opens it) meanwhile (see _remove_stale).
            # No descriptor of the file is opened beside SQLite's: closing one would drop the
            # POSIX locks this process's other SQLite connections hold on it.
            opened: _Conn | None = None
            with file_lock(self.path.with_name(REMOVE_LOCK), shared=True):
                db = sqlite3.connect(
                    str(self.path),
                    timeout=BUSY_TIMEOUT,
                    isolation_level=None,
                    check_same_thread=False,
                    factory=_Conn,
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
                        db.execute(f"INSERT OR IGNORE INTO meta VALUES('{MARKS_DUE}', 'due')")
                        search.configure(db)
                    elif row[0] != SCHEMA_VERSION:
                        raise sqlite3.DatabaseError("index schema changed")
                    if db.execute(f"SELECT 1 FROM meta WHERE key='{MARKS_DUE}'").fetchone() is not None:
                        self.marks_due = True
                    # The file SQLite opened (no gitmem process removes it while the lock is held).
                    db.identity = self._path_identity()
                    opened = db
                except sqlite3.DatabaseError as exc:
                    db.close()
                    if attempt == _OPEN_ATTEMPTS - 1:
                        raise
                    if busy(exc):
                        raise ConflictError(
                            f"the index of {self.store.path} is busy (another process is writing it); try again"
                        ) from None
            if opened is None:
                self._remove_stale()
                continue
            self._db = opened
            if self._purge_marker().exists():  # a purge blocked by a reader: finish it now
                self.purge_search(wait=0.5)
            return opened
        raise AssertionError("unreachable")

    def _path_identity(self) -> tuple[int, int] | None:
        try:
            return _identity(os.stat(self.path))
        except OSError:
            return None

    def _stale(self) -> bool:
        """Whether the index file at the path is stale: corrupt, or of another format (a file
        without ``meta`` yet is a new one, not stale). Judged by a connection of its own, so that
        of two openers of one stale file, the second finds the file the first derived good."""
        try:
            db = sqlite3.connect(f"file:{self.path}?mode=rw", uri=True, timeout=BUSY_TIMEOUT)
        except sqlite3.OperationalError:
            return False  # no file there (removed already)
        try:
            row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        except sqlite3.DatabaseError as exc:
            if busy(exc):
                raise ConflictError(
                    f"the index of {self.store.path} is busy (another process is writing it); try again"
                ) from None
            return "no such table" not in str(exc)
        finally:
            db.close()
        return row is not None and row[0] != SCHEMA_VERSION

    def _remove_stale(self) -> None:
        """Remove the index file if it is stale (an opener judged it so), under ``REMOVE_LOCK``.

        Two openers of one stale file both judge it; the first removes it and derives a new one,
        which the second must not remove in turn (its records would go to an unlinked file and be
        lost for every later reader): the file is judged again under the lock, which every opener
        holds shared while it opens and judges, so none opens (and has SQLite make a ``-wal`` and
        ``-shm`` for) a new file between the unlinks of the old one's three files."""
        if self.in_memory:
            return
        with file_lock(self.path.with_name(REMOVE_LOCK)):
            if self._stale():
                self._remove_files()

    def _remove_own(self) -> None:
        """Remove the index file this thread's connection has open (a corrupt index found by a
        query), if it is still the one at the path; closes the handle. Under ``REMOVE_LOCK``, with
        the connection still open (so the file's inode is not reused): a file another opener has
        derived meanwhile is left."""
        if self.in_memory:
            self.close()
            return
        with file_lock(self.path.with_name(REMOVE_LOCK)):
            ours = getattr(self._db, "identity", None)
            same = self._path_identity() == ours if ours is not None else self._stale()
            self.close()
            if same:
                self._remove_files()

    def remove_all(self) -> None:
        """Close the handle and remove the index file (a rebuild), under ``REMOVE_LOCK``."""
        self.close()
        if self.in_memory:
            return
        with file_lock(self.path.with_name(REMOVE_LOCK)):
            self._remove_files()

    def writable_db(self) -> sqlite3.Connection:
        """This thread's connection for a write transaction: a connection to a file another
        process has since removed (a rebuild, a stale or corrupt index it derived again) is
        replaced first, so no write goes to an unlinked file and is lost with it."""
        db = self.db
        identity = getattr(db, "identity", None)
        if identity is None or db.in_transaction or self._path_identity() == identity:
            return db
        self._heads.clear()
        self._known_tips.clear()  # the new file is caught up from git where it lags
        db.close()
        self._local.db = None
        return self.db

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
        db.execute(f"INSERT INTO meta VALUES('{MARKS_DUE}', 'due')")
        self.marks_due = True
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
            parked, self._parked = self._parked, None
            if parked is not None:
                parked[0].close()
            if self._shared is not None:
                self._shared.close()
                self._shared = None

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        db = self.writable_db()
        with self._shared_lock if db is self._shared else contextlib.nullcontext():
            FORK_GATE.enter()
            try:
                db.execute("BEGIN IMMEDIATE")
                try:
                    yield db
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
                db.execute("COMMIT")
            finally:
                FORK_GATE.leave()

    def _drop_scope(self, db: sqlite3.Connection, scope: str) -> list[tuple[str, str, str]]:
        """Drop ``scope``'s rows; returns (other scope, version id, commit) for each claim not held
        in another scope on an id that a commit of ``scope`` claims (held or not): that claim may
        hold the id once the commit no longer claims it in ``scope`` (re-derived onto another
        history, or dropped): :meth:`gitmem.engine.index_catchup.CatchUp._mark_lost` checks."""
        self._heads.clear()
        lost = db.execute(
            "SELECT c.scope, c.version_id, v.commit_id FROM claims AS c "
            "JOIN versions AS v ON v.id = c.version_id AND v.scope = ? WHERE c.scope != ? UNION "
            "SELECT c.scope, c.version_id, d.commit_id FROM claims AS c "
            "JOIN claims AS d ON d.version_id = c.version_id AND d.scope = ? WHERE c.scope != ?",
            (scope, scope, scope, scope),
        ).fetchall()
        db.execute("DELETE FROM claims WHERE scope=?", (scope,))
        db.execute("DELETE FROM versions WHERE scope=?", (scope,))
        db.execute("DELETE FROM heads WHERE scope=?", (scope,))
        search.drop_scope_text(db, scope)
        db.execute("DELETE FROM scopes WHERE scope=?", (scope,))
        return [(r[0], r[1], r[2]) for r in lost]

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
