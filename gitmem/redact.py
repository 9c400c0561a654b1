"""Redaction: rewrite a scope's history without some content, audit it, purge it (DESIGN section 6).

A history rewrite (redaction here, compaction in :mod:`gitmem.retention`) runs in steps, under the
exclusive store lock ``$GIT_DIR/gitmem/lock`` (fcntl):

1. plan: the new commits are written (nothing refers to them yet);
2. journal: ``$GIT_DIR/gitmem/journal.json`` records the plan (raw ids: it is server-side only);
3. ref: the scope's branch moves old tip -> new tip by compare-and-swap; a writer that moved it in the
   meantime makes the rewrite start again from the new tip (the writer's version is kept);
4. deny-list, ledger entry, derived index (each idempotent);
5. purge: reflogs expired, the loose copies of the retired objects deleted, packs holding them
   repacked (``git repack -a -d``), then ``git cat-file`` must report every one missing;
6. the journal is removed.

A process killed anywhere leaves the store before (journal, branch not moved: rolled back) or after
(branch moved: steps 4-6 are completed) the rewrite, by :func:`recover`, which ``verify`` and
``open_store`` run. Unreachable objects are deleted by id, never by ``git prune --expire=now``:
that would also delete the fresh objects of a concurrent writer whose branch update is in flight.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import json
import os
import re
import signal
import struct
import subprocess
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2

from gitmem import config, ledger
from gitmem.errors import (
    ConflictError,
    ForbiddenError,
    GitmemError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
)
from gitmem.ids import is_id, new_id
from gitmem.index import VersionRow
from gitmem.paths import validate_scope
from gitmem.store import Store
from gitmem.versions import resolve_actor

JOURNAL_FILE = "journal.json"
LOCK_FILE = "lock"
FAULT_ENV = "GITMEM_FAULT"  # test hook: the name of a step at which the process SIGKILLs itself
MAX_ATTEMPTS = 20
_BLOB = pygit2.enums.ObjectType.BLOB
_TREE = pygit2.enums.ObjectType.TREE
_COMMIT = pygit2.enums.ObjectType.COMMIT


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


@dataclass
class Rewrite:
    """A planned history rewrite of one scope; also the journal's content."""

    op: str  # redaction | compaction
    id: str
    scope: str
    actor: str
    reason: str
    at: int
    old_tip: str
    new_tip: str = ""
    commit_map: dict[str, str] = field(default_factory=dict)
    blob_map: dict[str, list[Any]] = field(default_factory=dict)  # old blob -> [new blob, sha256, size]
    retired_trees: list[str] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)
    ledger: dict[str, Any] = field(default_factory=dict)

    @property
    def retired(self) -> list[str]:
        """Objects that must be gone after the purge: redacted blobs, retired commits and trees."""
        return [*self.blob_map, *self.commit_map, *self.retired_trees]


# ---------------------------------------------------------------------- lock, journal, faults
@contextmanager
def store_lock(store: Store, *, blocking: bool = True) -> Iterator[bool]:
    """The exclusive store lock; yields False (not held) when ``blocking`` is off and it is busy."""
    store.gitmem_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(store.gitmem_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def fault(step: str) -> None:
    """Crash tests: die here, like a power cut, when ``$GITMEM_FAULT`` names this step."""
    if config.env(FAULT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def _journal_path(store: Store) -> Path:
    return store.gitmem_dir / JOURNAL_FILE


def _write_journal(store: Store, rw: Rewrite) -> None:
    path = _journal_path(store)
    tmp = path.with_name(JOURNAL_FILE + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(vars(rw), fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_journal(store: Store) -> Rewrite | None:
    try:
        data = json.loads(_journal_path(store).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError:
        # A torn journal was never complete, so the branch never moved: nothing to finish.
        _journal_path(store).unlink()
        return None
    return Rewrite(**data)


def recover(store: Store, *, blocking: bool = False) -> str | None:
    """Finish or roll back an interrupted rewrite; returns "completed", "rolled back" or None."""
    if store.is_clone or not _journal_path(store).exists():
        return None
    with store_lock(store, blocking=blocking) as held:
        if not held:
            return None  # a live process is rewriting right now
        rw = _read_journal(store)
        if rw is None:
            return None
        _clear_stale_lock(store, rw.scope)
        tip = store.tip(rw.scope)
        new = pygit2.Oid(hex=rw.new_tip)
        if tip is not None and store.is_ancestor(new, tip):
            finish(store, rw)
            return "completed"
        _journal_path(store).unlink()
        return "rolled back"


# ---------------------------------------------------------------------- the rewrite engine
class PackWriter:
    """New objects written as one pack (``git index-pack`` would make the same files): a rewrite
    creates up to one commit per commit of history, and 100k loose files cost more than the rewrite."""

    TYPES = {_COMMIT: 1, _TREE: 2}

    def __init__(self, store: Store) -> None:
        self.store = store
        self.pending: list[tuple[bytes, bytes, bytes]] = []  # (oid, pack entry header, data)
        self.seen: set[bytes] = set()

    def add(self, kind: pygit2.enums.ObjectType, data: bytes) -> pygit2.Oid:
        name = {_COMMIT: b"commit", _TREE: b"tree"}[kind]
        raw = hashlib.sha1(b"%s %d\0" % (name, len(data)) + data).digest()
        if raw not in self.seen:
            self.seen.add(raw)
            size = len(data)
            head = bytearray()
            c = (self.TYPES[kind] << 4) | (size & 15)
            size >>= 4
            while size:
                head.append(c | 0x80)
                c = size & 0x7F
                size >>= 7
            head.append(c)
            self.pending.append((raw, bytes(head), data))
        return pygit2.Oid(raw=raw)

    def _entries(self) -> list[tuple[bytes, int, bytes]]:
        """(oid, crc32, packed bytes) of the pending objects; zlib runs on every core (it drops the GIL)."""
        from concurrent.futures import ThreadPoolExecutor

        def pack(part: list[tuple[bytes, bytes, bytes]]) -> list[tuple[bytes, int, bytes]]:
            out = []
            for raw, head, data in part:
                packed = head + zlib.compress(data, 1)
                out.append((raw, zlib.crc32(packed), packed))
            return out

        workers = max(1, min(os.cpu_count() or 1, 4))
        step = -(-len(self.pending) // workers)
        parts = [self.pending[i : i + step] for i in range(0, len(self.pending), step)]
        with ThreadPoolExecutor(workers) as pool:
            return [e for done in pool.map(pack, parts) for e in done]

    def flush(self) -> None:
        """Write ``objects/pack/pack-<sha>.pack`` and its ``.idx`` (fsynced, idx last)."""
        if not self.pending:
            return
        entries = self._entries()
        body = bytearray(b"PACK" + struct.pack(">II", 2, len(entries)))
        offsets = {}
        for raw, _crc, packed in entries:
            offsets[raw] = len(body)
            body += packed
        if len(body) >= 1 << 31:
            raise GitmemError("a rewrite of this size needs large pack offsets; not supported")
        checksum = hashlib.sha1(body).digest()
        body += checksum
        ordered = sorted(entries)
        fanout = [0] * 256
        for raw, _crc, _packed in ordered:
            fanout[raw[0]] += 1
        total = 0
        for i in range(256):
            total += fanout[i]
            fanout[i] = total
        idx = bytearray(b"\377tOc" + struct.pack(">I", 2) + struct.pack(">256I", *fanout))
        idx += b"".join(raw for raw, _c, _p in ordered)
        idx += b"".join(struct.pack(">I", crc) for _r, crc, _p in ordered)
        idx += b"".join(struct.pack(">I", offsets[raw]) for raw, _c, _p in ordered)
        idx += checksum
        idx += hashlib.sha1(idx).digest()
        base = self.store.path / "objects" / "pack" / f"pack-{checksum.hex()}"
        for suffix, data in ((".pack", body), (".idx", idx)):
            tmp = base.with_name(f"tmp_{base.name}{suffix}")
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.chmod(tmp, 0o444)
            os.replace(tmp, base.with_suffix(suffix))
        self.pending.clear()


class Rewriter:
    """Rewrites commits with some blobs replaced; every other byte of each commit is kept.

    Trees are rewritten as raw bytes (only the changed entries' ids differ), commits by their raw
    header (see :func:`rewrite_header`); both go to one new pack (:meth:`flush`)."""

    def __init__(self, store: Store, blob_map: dict[pygit2.Oid, pygit2.Oid]) -> None:
        self.store = store
        self.repo = store.repo
        self.odb = store.repo.odb
        self.blobs = {k.raw: v.raw for k, v in blob_map.items()}
        self.trees: dict[bytes, bytes] = {}
        self.commits: dict[pygit2.Oid, pygit2.Oid] = {}
        self.pack = PackWriter(store)

    def tree(self, oid: pygit2.Oid) -> pygit2.Oid:
        return pygit2.Oid(raw=self._tree(oid.raw))

    def _tree(self, raw_id: bytes) -> bytes:
        done = self.trees.get(raw_id)
        if done is not None:
            return done
        data = self.odb.read(pygit2.Oid(raw=raw_id))[1]
        out: bytearray | None = None
        pos, end = 0, len(data)
        while pos < end:
            nul = data.index(b"\0", pos)
            sha = data[nul + 1 : nul + 21]
            # "40000 ..." is a subtree; anything else a blob (a gitlink's id is never in the map)
            new = self._tree(sha) if data[pos] == 0x34 else self.blobs.get(sha, sha)
            if new != sha:
                if out is None:
                    out = bytearray(data)
                out[nul + 1 : nul + 21] = new
            pos = nul + 21
        result = raw_id if out is None else self.pack.add(_TREE, bytes(out)).raw
        self.trees[raw_id] = result
        return result

    def tree_at(self, oid: pygit2.Oid, paths: list[list[bytes]]) -> pygit2.Oid:
        """Like :meth:`tree` when the caller knows every replaced blob in it is at one of ``paths``
        (tree path segments): only the trees along them are read."""
        return pygit2.Oid(raw=self._tree_at(oid.raw, paths))

    def _tree_at(self, raw_id: bytes, paths: list[list[bytes]]) -> bytes:
        done = self.trees.get(raw_id)
        if done is not None:
            return done
        data = self.odb.read(pygit2.Oid(raw=raw_id))[1]
        groups: dict[bytes, list[list[bytes]]] = {}
        for p in paths:
            groups.setdefault(p[0], []).append(p[1:])
        out: bytearray | None = None
        found = 0
        pos, end = 0, len(data)
        while pos < end and found < len(groups):
            nul = data.index(b"\0", pos)
            name = data[data.index(b" ", pos) + 1 : nul]
            rest = groups.get(name)
            if rest is not None:
                found += 1
                deeper = [r for r in rest if r]
                sha = data[nul + 1 : nul + 21]
                if deeper and data[pos] != 0x34:  # not a directory, though the index says so
                    return self._tree(raw_id)
                new = self._tree_at(sha, deeper) if deeper else self.blobs.get(sha, sha)
                if new != sha:
                    if out is None:
                        out = bytearray(data)
                    out[nul + 1 : nul + 21] = new
            pos = nul + 21
        if found < len(groups):
            return self._tree(raw_id)  # not where the index said: walk the whole tree
        result = raw_id if out is None else self.pack.add(_TREE, bytes(out)).raw
        self.trees[raw_id] = result
        return result

    def commit(
        self,
        commit: pygit2.Commit,
        parents: list[pygit2.Oid] | None = None,
        *,
        paths: list[list[bytes]] | None = None,
        same_tree: bool = False,
    ) -> pygit2.Oid:
        """``commit`` with its tree rewritten (only along ``paths`` when given; kept when
        ``same_tree``: no replaced blob is in it) and its parents mapped (or ``parents``)."""
        done = self.commits.get(commit.id)
        if done is not None and parents is None:
            return done
        old_parents = list(commit.parent_ids)
        new_parents = [self.commits.get(p, p) for p in old_parents] if parents is None else parents
        if same_tree:
            new_tree = commit.tree_id
        elif paths is not None:
            new_tree = self.tree_at(commit.tree_id, paths)
        else:
            new_tree = self.tree(commit.tree_id)
        if new_tree == commit.tree_id and new_parents == old_parents:
            return commit.id
        oid = self.pack.add(_COMMIT, rewrite_header(self.odb.read(commit.id)[1], new_tree, new_parents))
        self.commits[commit.id] = oid
        return oid

    def flush(self) -> None:
        self.pack.flush()

    def retired_trees(self) -> list[str]:
        return [old.hex() for old, new in self.trees.items() if old != new]


def rewrite_header(raw: bytes, tree: pygit2.Oid, parents: list[pygit2.Oid]) -> bytes:
    """A raw commit with new ``tree`` and ``parent`` lines; author, committer, encoding and the
    message stay byte for byte. A signature (``gpgsig``) would no longer verify, so it is dropped."""
    header, sep, message = raw.partition(b"\n\n")
    out = [b"tree " + str(tree).encode()] + [b"parent " + str(p).encode() for p in parents]
    skipping = False
    for line in header.split(b"\n"):
        if line.startswith(b" ") and skipping:
            continue
        skipping = line.startswith((b"gpgsig", b"gpgsig-sha256"))
        if skipping or line.startswith((b"tree ", b"parent ")):
            continue
        out.append(line)
    return b"\n".join(out) + sep + message


def run_rewrite(store: Store, scope: str, build: Callable[[pygit2.Oid], Rewrite]) -> Rewrite:
    """Steps 1-6 under the store lock; ``build(tip)`` plans and writes the new commits.

    The swap holds the branch's own lock file (``refs/heads/<scope>.lock``, as git does), so a
    writer's compare-and-swap fails meanwhile and it retries after the swap, on the new history.
    Commits a writer added while the plan was made are rewritten under that lock (``build`` keeps
    its memo, so only they cost anything): the rewrite cannot be starved and no write is lost."""
    with store_lock(store):
        recover(store, blocking=True)
        tip = store.require_scope(scope)
        rw = build(tip)
        store.sync_all()
        fault("objects")
        _write_journal(store, rw)
        try:
            with _ref_lock(store, scope) as lock:
                current = store.require_scope(scope)
                if current != tip:
                    rw = build(current)
                    store.sync_all()
                    _write_journal(store, rw)
                fault("journal")
                _publish(lock, rw.new_tip)
        except BaseException:
            _journal_path(store).unlink(missing_ok=True)  # the branch did not move
            raise
        store.sync_ref(scope)
        fault("ref")
        finish(store, rw)
        return rw


@contextmanager
def _ref_lock(store: Store, scope: str) -> Iterator[tuple[int, Path]]:
    """Hold ``refs/heads/<scope>.lock`` (waiting out a writer that holds it for its update)."""
    path = store.path / "refs" / "heads" / f"{scope}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(2000):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            break
        except FileExistsError:
            time.sleep(0.001 * min(attempt + 1, 10))
    else:
        raise ConflictError(f"{path} stays locked; if no git process is running, remove it")
    try:
        os.write(fd, LOCK_MARK)
        yield fd, path
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)


LOCK_MARK = b"gitmem-rewrite\n"


def _publish(lock: tuple[int, Path], new_tip: str) -> None:
    """Write the new tip into the held lock file and rename it over the ref (git's protocol)."""
    fd, path = lock
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, new_tip.encode() + b"\n")
    os.fsync(fd)
    os.rename(path, path.with_suffix(""))


def _clear_stale_lock(store: Store, scope: str) -> None:
    """A rewrite killed while holding the branch lock left it behind: remove it (recovery holds
    the store lock, so no rewrite is running; a writer's own lock never carries the mark)."""
    path = store.path / "refs" / "heads" / f"{scope}.lock"
    try:
        data = path.read_bytes()
        if data == LOCK_MARK or (data == b"" and time.time() - path.stat().st_mtime > 5):
            path.unlink()
    except FileNotFoundError:
        pass


def finish(store: Store, rw: Rewrite) -> None:
    """Steps 4-6; every one may run twice (recovery after a crash)."""
    denied = [*rw.blob_map, *rw.commit_map] if rw.op == "redaction" else list(rw.commit_map)
    ledger.deny(store, denied, f"{rw.op} {rw.id}")
    fault("denylist")
    if ledger.find(store, rw.op, "id", rw.id) is None:
        ledger.append(store, rw.op, rw.ledger, actor=rw.actor)
    fault("ledger")
    if rw.op == "redaction":
        store.index.mark_redacted((rw.id, rw.actor, rw.at, rw.reason), rw.versions)
        store.index.apply_rewrite(rw.scope, rw.old_tip, rw.new_tip, rw.commit_map, rw.blob_map)
    else:  # compaction: versions leave history; the scope is re-derived from git
        store.index.apply_rewrite(rw.scope, "", rw.new_tip, {}, {})
    fault("index")
    purge(store, rw.retired)
    fault("purged")
    _journal_path(store).unlink(missing_ok=True)


# ---------------------------------------------------------------------- purge and proof
def _git(store: Store, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", f"--git-dir={store.path}", *args], input=stdin, capture_output=True, text=True, check=False
    )


def existing_objects(store: Store) -> set[str]:
    """Every object plain git can read in the store (``git cat-file --batch-all-objects``: one
    pass over the pack indexes and loose objects, far faster than looking up 100k missing ids)."""
    out = _git(store, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    if out.returncode != 0:
        raise IntegrityError(f"git cat-file failed in {store.path}: {out.stderr.strip()}")
    return set(out.stdout.split())


def missing_objects(store: Store, oids: list[str]) -> set[str]:
    """Which of ``oids`` plain git cannot find."""
    if not oids:
        return set()
    return set(oids) - existing_objects(store)


def purge(store: Store, oids: list[str]) -> None:
    """Make ``oids`` (unreachable now) unreadable, then prove it; IntegrityError when it cannot."""
    if not oids:
        return
    retired = set(oids)
    _git(store, "reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all")
    _unlink_loose(store, retired)
    still = retired & existing_objects(store)
    if still:
        # Some are packed: rewrite the packs holding them with only what is reachable, keeping every
        # other pack as it is. (Geometric maintenance keeps recent objects loose or in small packs,
        # so a recent redaction rewrites little.)
        keep = [f"--keep-pack={p.with_suffix('.pack').name}" for p in packs_without(store, still)]
        res = _git(store, "-c", "repack.writeBitmaps=false", "repack", "-a", "-d", "-q", *keep)
        if res.returncode != 0:
            raise IntegrityError(f"the purge failed: git repack: {res.stderr.strip()}")
    left = retired & existing_objects(store)
    if left:
        raise IntegrityError(
            f"the purge failed: {len(left)} retired objects are still readable in {store.path} "
            "(are they reachable from another ref?); run gitmem verify"
        )


def _unlink_loose(store: Store, retired: set[str]) -> None:
    objects = str(store.path / "objects")
    for entry in os.scandir(objects):
        if len(entry.name) != 2 or not entry.is_dir():
            continue
        for name in os.listdir(entry.path):
            if entry.name + name in retired:
                os.unlink(os.path.join(entry.path, name))


def packs_without(store: Store, oids: set[str]) -> list[Path]:
    """The ``.idx`` files of packs holding none of ``oids`` (read directly: version 2 indexes)."""
    wanted = {bytes.fromhex(o) for o in oids}
    out = []
    for idx in sorted((store.path / "objects" / "pack").glob("pack-*.idx")):
        data = idx.read_bytes()
        if data[:8] != b"\377tOc\x00\x00\x00\x02":
            continue  # unknown format: not kept, so it is repacked (safe)
        count = int.from_bytes(data[8 + 4 * 255 : 8 + 1024], "big")
        if len(wanted) * 32 < count:  # few ids: binary searches; else one set of the pack's ids
            holds = any(_idx_has(data, w) for w in wanted)
        else:
            base = 8 + 1024
            holds = not wanted.isdisjoint(data[base + 20 * i : base + 20 * i + 20] for i in range(count))
        if not holds:
            out.append(idx)
    return out


def _idx_has(data: bytes, oid: bytes) -> bool:
    fan = 8
    first = oid[0]
    lo = int.from_bytes(data[fan + 4 * (first - 1) : fan + 4 * first], "big") if first else 0
    hi = int.from_bytes(data[fan + 4 * first : fan + 4 * first + 4], "big")
    base = fan + 1024
    while lo < hi:
        mid = (lo + hi) // 2
        here = data[base + 20 * mid : base + 20 * mid + 20]
        if here == oid:
            return True
        if here < oid:
            lo = mid + 1
        else:
            hi = mid
    return False


# ---------------------------------------------------------------------- redaction
def _rows(store: Store, where: str, params: tuple[Any, ...]) -> list[VersionRow]:
    return store.index.version_rows(where, params)


def _check_blobs(store: Store, scope: str, blobs: list[str], what: str) -> list[VersionRow]:
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
    store: Store,
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
        rewriter.flush()
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
    store: Store, commits: list[pygit2.Commit], rows: list[VersionRow]
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


def _seq(store: Store, row: VersionRow) -> int:
    found = store.index.db.execute(
        "SELECT seq FROM versions WHERE scope=? AND id=?", (row.scope, row.id)
    ).fetchone()
    return int(found[0]) if found else 0


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _prepare(store: Store, reason: str, actor: str | None) -> str:
    store.check_writable()
    if not isinstance(reason, str) or not reason.strip() or len(reason) > 1024:
        raise InvalidInputError("a redaction needs a reason of 1-1024 characters")
    return resolve_actor(actor, None)


def redact(store: Store, version_id: str, *, reason: str, actor: str | None = None) -> Redaction:
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
    store: Store, pattern: str, *, reason: str, scope: str = "main", actor: str | None = None
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


def restore_marks(store: Store) -> None:
    """After the index was rebuilt from git: redactions recorded in the ledger mark their versions."""
    for entry in ledger.entries(store, kind="redaction"):
        data = entry.data
        versions = [v["version"] for v in data.get("versions", []) if isinstance(v, dict) and "version" in v]
        at = int(dt.datetime.fromisoformat(entry.at.replace("Z", "+00:00")).timestamp())
        store.index.mark_redacted(
            (str(data.get("id")), entry.actor, at, str(data.get("reason", ""))), versions
        )
