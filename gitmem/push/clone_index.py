"""A clone's first index, seeded from its source's and checked against the clone's own git.

Without a seed, a clone's first command derives the index from the whole history (every version of
every scope). A local clone can instead start from the source store's index: a snapshot of it
(``VACUUM INTO``: live rows only, no free pages or WAL frames) is checked against what the clone
received, and kept only when every check holds; otherwise it is deleted and the clone derives its
index from git on first use, as always (the safe default). The source's index is derived data and
the clone treats it as untrusted input:

- its schema version is this gitmem's, ``PRAGMA quick_check`` passes, and it holds no table but
  the index's own (anything else is dropped);
- it covers exactly the clone's scopes, each indexed at the very commit the clone's branch holds;
- each scope's heads are the tip tree's memories: the same paths and blobs, with each blob's
  sha256, size and description recomputed here; each head's version row exists with its memory,
  path and blob, and its commit holds that blob at that path and, when its message carries
  gitmem's trailers, names that version and memory; every version row's commit is an object of
  the clone;
- search rows are rebuilt here from the heads' blobs (never copied); redaction marks are cleared
  and restored from the clone's ledger, as a rebuild does; the counters are recomputed.

What these checks do not re-derive: the rows of older versions and a memory's creation time (taken
as the source derived them, consistent with the heads); ``gitmem reindex`` on the clone derives
everything from git. Not seeded (derived from git instead): a source with push receipts (a clone has none, so its own
derivation of pushed commits differs; docs/point-in-time.md), a source whose index is in memory or
busy, a URL clone.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
from pathlib import Path

import pygit2

from gitmem.engine import receipts, search
from gitmem.engine.core import StoreCore
from gitmem.engine.derive import own_trailers
from gitmem.engine.index import Index
from gitmem.engine.index_db import INDEX_FILE, SCHEMA_VERSION
from gitmem.git.treedelta import diff_trees
from gitmem.model.frontmatter import parse_description

_TABLES = {"meta", "scopes", "versions", "heads", "redactions", "redacted", "sqlite_sequence"}
_SEARCH_TABLES = ("search_fts", "search_docs")


class _Reject(Exception):
    """The snapshot failed a check: it is deleted and the clone derives its index from git."""


def snapshot(source: StoreCore, gitdir: Path) -> Path | None:
    """A snapshot of ``source``'s index (brought up to date first) in the clone's ``gitdir``, not
    yet checked (:func:`seed`); None when the source's index cannot be offered."""
    if receipts.load(Path(source.repo.path)):
        return None
    index = source.index
    try:
        index.db  # noqa: B018  (connects: a store this process may not write has its index in memory)
        if getattr(index, "in_memory", False):
            return None  # deriving it here would cost what the clone's own derivation costs
        index.ensure_all()
        target = gitdir / "gitmem" / f".{INDEX_FILE}.seed{os.getpid()}"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.unlink(missing_ok=True)
        index.db.execute("VACUUM INTO ?", (str(target),))
    except (sqlite3.Error, OSError, pygit2.GitError):
        return None
    return target


def seed(clone: StoreCore, candidate: Path) -> bool:
    """Check ``candidate`` (:func:`snapshot`) against ``clone`` and, when every check holds, make
    it the clone's index (``clone``'s index must not be open yet); the candidate is removed either
    way. True when it was kept."""
    try:
        db = sqlite3.connect(str(candidate), isolation_level=None)
    except sqlite3.Error:
        candidate.unlink(missing_ok=True)
        return False
    try:
        _check(db, clone)
    except (_Reject, sqlite3.Error, pygit2.GitError, KeyError, ValueError, UnicodeError):
        db.close()
        candidate.unlink(missing_ok=True)
        return False
    db.close()
    os.replace(candidate, clone.gitmem_dir / INDEX_FILE)
    index = clone.index
    if isinstance(index, Index):  # the marks: a broken ledger is left for verify to report
        with contextlib.suppress(Exception):
            index.restore_ledger_marks()
    return True


def _check(db: sqlite3.Connection, clone: StoreCore) -> None:
    if db.execute("PRAGMA quick_check").fetchone() != ("ok",):
        raise _Reject("quick_check")
    row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    if row is None or row[0] != SCHEMA_VERSION:
        raise _Reject("schema")
    db.execute("BEGIN")
    for name in _SEARCH_TABLES:
        db.execute(f"DROP TABLE IF EXISTS {name}")
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
        if name not in _TABLES and not name.startswith("search_fts_"):
            db.execute(f'DROP TABLE IF EXISTS "{name}"')
    db.execute("DELETE FROM redacted")
    db.execute("DELETE FROM redactions")
    db.execute("UPDATE versions SET redaction_id=NULL WHERE redaction_id IS NOT NULL")
    scopes = clone.scopes()
    indexed = dict(db.execute("SELECT scope, tip FROM scopes").fetchall())
    tips = {s: clone.tip(s) for s in scopes}
    if set(indexed) != set(scopes) or any(str(tips[s]) != indexed[s] for s in scopes):
        raise _Reject("tips")
    stray = db.execute("SELECT COUNT(*) FROM versions WHERE scope NOT IN (SELECT scope FROM scopes)")
    if stray.fetchone()[0]:
        raise _Reject("versions of no scope")
    exists = clone.repo.odb.exists
    for (commit_id,) in db.execute("SELECT DISTINCT commit_id FROM versions"):
        if len(commit_id) != 40 or not exists(pygit2.Oid(hex=commit_id)):
            raise _Reject("commit")
    texts: list[tuple[int, str, str, str, str | None, bytes]] = []
    for scope in scopes:
        texts += _check_heads(db, clone, scope, tips[scope], len(texts))
    db.execute("COMMIT")
    # The search rows, rebuilt from the checked heads (the source's are never taken).
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'search_%'"):
        raise _Reject(f"search table {name} survived")
    db.executescript(search.SCHEMA)
    search.configure(db)
    db.execute("BEGIN")
    search.index_texts(db, texts)
    db.execute("COMMIT")
    db.execute("VACUUM")


def _check_heads(
    db: sqlite3.Connection, clone: StoreCore, scope: str, tip: pygit2.Oid | None, docid: int
) -> list[tuple[int, str, str, str, str | None, bytes]]:
    """The scope's heads against its tip tree; returns their search rows."""
    if tip is None:
        raise _Reject("empty scope")
    repo = clone.repo
    tree = clone.commit(tip).tree
    files = {path: new for _kind, path, _old, new in diff_trees(repo, None, tree)}
    rows = db.execute(
        "SELECT path, memory_id, version_id, sha256, size, blob, description FROM heads WHERE scope=? ORDER BY path",
        (scope,),
    ).fetchall()
    if len(rows) != len(files):
        raise _Reject("heads")
    texts = []
    total = 0
    for path, memory_id, version_id, sha, size, blob, description in rows:
        oid = files.get(path)
        if oid is None or str(oid) != blob:
            raise _Reject(f"head {path}")
        data = clone.blob_data(oid)
        desc = parse_description(data.decode("utf-8", "replace")) if data.startswith(b"---") else None
        if hashlib.sha256(data).hexdigest() != sha or len(data) != size or desc != description:
            raise _Reject(f"head {path} content")
        found = db.execute(
            "SELECT commit_id FROM versions WHERE scope=? AND id=? AND memory_id=? AND path=? AND blob=?",
            (scope, version_id, memory_id, path, blob),
        ).fetchone()
        if found is None:
            raise _Reject(f"head {path} version")
        _check_commit(clone, found[0], path, oid, version_id, memory_id)
        docid += 1
        texts.append((docid, scope, path, version_id, description, data))
        total += size
    db.execute("UPDATE scopes SET memories=?, bytes=? WHERE scope=?", (len(rows), total, scope))
    return texts


def _check_commit(
    clone: StoreCore, commit_id: str, path: str, blob: pygit2.Oid, version_id: str, memory_id: str
) -> None:
    """The commit a head's version names holds that blob at that path, and when its message has
    gitmem's well-formed trailers, they name that version and memory (a commit made with plain git
    has ids derived from it: not recomputed here)."""
    commit = clone.commit(pygit2.Oid(hex=commit_id))
    try:
        entry = commit.tree[path[1:]]
    except KeyError:
        raise _Reject(f"head {path} not in its commit") from None
    if entry.id != blob:
        raise _Reject(f"head {path} blob not its commit's")
    trailers, well_formed = own_trailers(commit.message)
    named = trailers.get("Gitmem-Version"), trailers.get("Gitmem-Memory")
    if well_formed and named[0] is not None and named != (version_id, memory_id):
        raise _Reject(f"head {path} ids not its commit's")
