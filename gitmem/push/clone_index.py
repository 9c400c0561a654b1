"""A clone's first index, seeded from its source's and checked against the clone's own git.

Without a seed, a clone's first command derives the index from the whole history (every version of
every scope). A local clone can instead start from the source store's index: a snapshot of it
(``VACUUM INTO``: live rows only, no free pages or WAL frames) is checked against what the clone
received, and kept only when every check holds; otherwise it is deleted and the clone derives its
index from git on first use, as always (the safe default). The source's index is derived data and
the clone treats it as untrusted input:

- its schema version is this gitmem's, ``PRAGMA quick_check`` passes, and it holds no table but
  the index's own and no trigger or view (anything else is dropped, triggers and views first);
- it covers exactly the clone's scopes, each indexed at the very commit the clone's branch holds;
- each scope's heads are the tip tree's memories: the same paths and blobs, with each blob's
  sha256, size and description recomputed here; each head's version row exists with its memory,
  path and blob, and its commit holds that blob at that path and, when its message carries
  gitmem's trailers, names that version and memory; every version row's commit is an object of
  the clone;
- search rows are rebuilt here from the heads' blobs (never copied); redaction marks are cleared
  and restored from the clone's ledger, as a rebuild does; the counters are recomputed.

- every version row is checked against git without a tree diff (:func:`_check_history`): each
  scope's history, oldest first, is made only of gitmem's own commits (well-formed trailers, one
  parent, one memory changed, its trailers' claims fitting the heads so far), each with exactly the
  one row its trailers, time, tree and blob give (sha256 and size recomputed); a row of no such
  commit, a merge, a plain-git or snapshot commit, or a commit changing anything else rejects the
  snapshot; the heads' creation and update times are the ones this walk gives. Not seeded (derived from git instead): a source with push receipts (a clone has none, so its own
derivation of pushed commits differs; docs/point-in-time.md), a source whose index is in memory or
busy, a URL clone.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sqlite3
import subprocess
from pathlib import Path

import pygit2

from gitmem.engine import receipts, search
from gitmem.engine.core import StoreCore
from gitmem.engine.derive import own_trailers
from gitmem.engine.index import Index
from gitmem.engine.index_db import INDEX_FILE, SCHEMA_VERSION
from gitmem.git.treedelta import diff_trees
from gitmem.model.frontmatter import parse_description
from gitmem.model.versions import parse_snapshot

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
    scopes = clone.scopes()
    tips = {s: clone.tip(s) for s in scopes}
    # git diffs each scope's history (for _check_history) while the snapshot is checked
    logs = {s: _git_log(clone.repo, tip) for s, tip in tips.items() if tip is not None}
    try:
        _check_snapshot(db, clone, scopes, tips, logs)
    finally:
        for log in logs.values():  # a rejected snapshot leaves some unread
            if log.poll() is None:
                log.kill()
            if log.stdout is not None:
                log.stdout.close()
            log.wait()


def _check_snapshot(
    db: sqlite3.Connection,
    clone: StoreCore,
    scopes: list[str],
    tips: dict[str, pygit2.Oid | None],
    logs: dict[str, subprocess.Popen[bytes]],
) -> None:
    if db.execute("PRAGMA quick_check").fetchone() != ("ok",):
        raise _Reject("quick_check")
    row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    if row is None or row[0] != SCHEMA_VERSION:
        raise _Reject("schema")
    db.execute("BEGIN")
    # Before anything is read or changed: the index has no triggers or views, and one could rewrite
    # rows after they were checked (a trigger on the counters' UPDATE) or later in the clone.
    for kind, name in db.execute(
        "SELECT type, name FROM sqlite_master WHERE type IN ('trigger', 'view')"
    ).fetchall():
        db.execute(f'DROP {"TRIGGER" if kind == "trigger" else "VIEW"} IF EXISTS "{name}"')
    if db.execute("SELECT COUNT(*) FROM sqlite_master WHERE type IN ('trigger', 'view')").fetchone()[0]:
        raise _Reject("a trigger or view")
    for name in _SEARCH_TABLES:
        db.execute(f"DROP TABLE IF EXISTS {name}")
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
        if name not in _TABLES and not name.startswith("search_fts_"):
            db.execute(f'DROP TABLE IF EXISTS "{name}"')
    db.execute("DELETE FROM redacted")
    db.execute("DELETE FROM redactions")
    db.execute("UPDATE versions SET redaction_id=NULL WHERE redaction_id IS NOT NULL")
    indexed = dict(db.execute("SELECT scope, tip FROM scopes").fetchall())
    if set(indexed) != set(scopes) or any(str(tips[s]) != indexed[s] for s in scopes):
        raise _Reject("tips")
    stray = db.execute("SELECT COUNT(*) FROM versions WHERE scope NOT IN (SELECT scope FROM scopes)")
    if stray.fetchone()[0]:
        raise _Reject("versions of no scope")
    exists = clone.repo.odb.exists
    for (commit_id,) in db.execute("SELECT DISTINCT commit_id FROM versions"):
        if len(commit_id) != 40 or not exists(pygit2.Oid(hex=commit_id)):
            raise _Reject("commit")
    for scope in scopes:
        _check_history(db, clone, scope, tips[scope], logs.get(scope))
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


_Row = tuple[str, str, str, str | None, str, str, str | None, int, str | None, int | None, str | None]
_Change = tuple[str, str | None]  # status (A, M, D), new blob hex (None: removed)
_ZERO = "0" * 40


def _git_log(repo: pygit2.Repository, tip: pygit2.Oid) -> subprocess.Popen[bytes]:
    """``git log --raw`` of ``tip``'s history, started (it runs while the rows are read)."""
    from gitmem import config

    env = {**config.plain_git_env(), "GIT_NO_REPLACE_OBJECTS": "1"}
    cmd = ["git", "--git-dir", repo.path, "-c", "log.showSignature=false", "log", "--raw", "--root"]
    cmd += ["--no-renames", "--no-abbrev", "-z", "--no-color", "--format=%x01%H", str(tip), "--"]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)


def _raw_changes(log: subprocess.Popen[bytes]) -> dict[str, dict[str, _Change]]:
    """What each commit of the history :func:`_git_log` lists changes against its parent, by commit
    id (git diffs the trees; no renames, replace refs off). Anything but a plain file added,
    modified or removed rejects."""
    stdout, _ = log.communicate()
    if log.returncode:
        raise _Reject("git log")
    changes: dict[str, dict[str, _Change]] = {}
    for chunk in stdout.split(b"\x01")[1:]:
        head, _, rest = chunk.partition(b"\0")
        mine: dict[str, _Change] = {}
        parts = rest.lstrip(b"\n").split(b"\0")
        for meta, path in zip(parts[0::2], parts[1::2], strict=False):
            fields = meta.decode().lstrip(":").split(" ")
            if len(fields) != 5 or fields[4] not in ("A", "M", "D") or path.decode() in mine:
                raise _Reject("a change that is not a plain file's")
            old_mode, new_mode, _old, new, status = fields
            if {old_mode, new_mode} - {"000000", "100644", "100755"}:
                raise _Reject("a change that is not a plain file's")
            mine["/" + path.decode()] = (status, None if new == _ZERO else new)
        changes[head.decode()] = mine
    return changes


def _check_history(
    db: sqlite3.Connection,
    clone: StoreCore,
    scope: str,
    tip: pygit2.Oid | None,
    log: subprocess.Popen[bytes] | None,
) -> None:
    """Every version row of ``scope`` against its commit, oldest first (module docstring); ``log``
    is :func:`_git_log` of ``tip``."""
    if tip is None or log is None:
        raise _Reject("empty scope")
    repo = clone.repo
    rows: dict[str, list[_Row]] = {}
    q = (
        "SELECT id, memory_id, path, prev_path, operation, actor, session, created_at, sha256, size, blob,"
        " commit_id FROM versions WHERE scope=?"
    )
    for *row, commit_id in db.execute(q, (scope,)):
        rows.setdefault(commit_id, []).append(tuple(row))
    others = {v for (v,) in db.execute("SELECT id FROM versions WHERE scope!=?", (scope,))}
    heads: dict[str, tuple[str, str, int, int]] = {}  # path -> memory, version, created, updated
    live: dict[str, int] = {}
    seen: set[str] = set()
    diffs = _raw_changes(log)
    read = repo.odb.read
    for commit in repo.walk(tip, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE):
        cid = str(commit.id)
        got, changed = rows.pop(cid, []), diffs.get(cid)
        if len(commit.parent_ids) > 1 or (
            not commit.parent_ids and parse_snapshot(commit.message) is not None
        ):
            raise _Reject("a merge or snapshot commit")
        if not got and changed == {}:
            continue  # changes nothing: no version, as derived
        trailers, well_formed = own_trailers(commit.message)
        if len(got) != 1 or not well_formed:
            raise _Reject("not one gitmem version")
        vid, mid, path, prev, op, actor, session, at, sha, size, blob = got[0]
        named = (trailers["Gitmem-Version"], trailers["Gitmem-Memory"], trailers["Gitmem-Actor"])
        when = max(commit.author.time, commit.committer.time)
        if (
            (vid, mid, actor, session) != (*named, trailers.get("Gitmem-Session"))
            or at != when
            or vid in seen
            or vid in others
        ):
            raise _Reject("a version not its commit's")
        seen.add(vid)
        source = prev if prev is not None else path
        if op == "created":
            ok = prev is None and blob is not None and path not in heads and mid not in live
        elif op in ("modified", "deleted"):
            ok = (op == "deleted") == (blob is None) and (op != "deleted" or prev is None)
            ok = ok and source in heads and heads[source][0] == mid and (prev is None or path not in heads)
        else:
            ok = False
        if not ok or not path.startswith("/") or (prev is not None and not prev.startswith("/")):
            raise _Reject("a version's operation")
        want: dict[str, _Change] = {
            path: ("D", None) if blob is None else ("A" if op == "created" or prev else "M", blob)
        }
        if prev is not None:
            want[prev] = ("D", None)
        if changed != want:
            raise _Reject("a commit changes other than its version")
        if blob is not None:
            kind, data = read(pygit2.Oid(hex=blob))[:2]
            if kind != 3 or hashlib.sha256(data).hexdigest() != sha or len(data) != size:
                raise _Reject("a version's content")
        elif sha is not None or size is not None:
            raise _Reject("a deletion with content")
        old = heads.pop(source, None)
        if old is not None:
            live[old[0]] -= 1
            if not live[old[0]]:
                del live[old[0]]
        if blob is not None:
            heads[path] = (mid, vid, old[2] if old is not None else at, at)
            live[mid] = live.get(mid, 0) + 1
    if rows:
        raise _Reject("versions of commits not in the scope's history")
    q = "SELECT path, memory_id, version_id, created_at, updated_at FROM heads WHERE scope=?"
    if {r[0]: tuple(r[1:]) for r in db.execute(q, (scope,))} != heads:
        raise _Reject("heads not the history's")
