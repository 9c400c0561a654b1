"""``Repo``: the one wrapper around a pygit2 repository (objects, refs by CAS, durability, maintenance).

It knows branches, commits, trees and blobs, never memories. ``pygit2`` errors become gitmem errors
here, in small try blocks. Everything above (the store handle in ``gitmem.engine.core``) builds on it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pygit2

from gitmem.errors import GitmemError, NotFoundError
from gitmem.git import intent, refmove
from gitmem.git.fence import fenced
from gitmem.git.intent import syncfs
from gitmem.git.locks import close_lock_fd, open_lock_fd
from gitmem.git.packwriter import Staging, loose_writer
from gitmem.git.repoinit import Repository as Repository
from gitmem.git.repoinit import configure_new_store as configure_new_store
from gitmem.git.repoinit import fsync_path as fsync_path
from gitmem.git.repoinit import init_bare_repository as init_bare_repository
from gitmem.git.repoinit import open_repository as open_repository
from gitmem.git.repoinit import unverified_reads as unverified_reads

#: Pack files libgit2 keeps open at once in this process (it closes the least recently used
#: beyond). Unlimited by default, and a repository never forgets a pack it has read, even once
#: deleted: with a small pack a group commit (gitmem.git.consolidate), a long-lived handle held
#: one more descriptor every group (1,000 groups: past a default ``ulimit -n``). Left as set when
#: the embedding program chose a limit.
PACK_FILES_OPEN_MAX = 128
if pygit2.settings.mwindow_file_limit == 0:
    pygit2.settings.mwindow_file_limit = PACK_FILES_OPEN_MAX

FILEMODE_BLOB = pygit2.enums.FileMode.BLOB
FILEMODE_TREE = pygit2.enums.FileMode.TREE
COMMITTER = ("gitmem", "gitmem")


class Repo:
    """A git repository: objects, refs by compare-and-swap, durability, maintenance."""

    def __init__(self, repo: pygit2.Repository, path: Path) -> None:
        # A pygit2 Repository (a libgit2 git_repository) must not be used by two threads at once:
        # each thread gets its own, opened on first use (docs/durability.md, "Threads").
        self._git_dir = repo.path
        self._opener = threading.get_ident()
        self._local = threading.local()
        self._local.repo = repo
        # Weak: a thread that ends drops its repository (a server's pool threads come and go).
        self._all_repos: weakref.WeakSet[pygit2.Repository] = weakref.WeakSet([repo])
        self._repos_lock = threading.Lock()
        # Bumped by free(): a thread's writers made before it are not used again (their
        # repositories have no path to reopen an object database from once freed).
        self._generation = 0
        self._recovered = False
        self.path = path
        self._real_path: str | None = None
        #: Writes since the objects directory was last checked for maintenance (the first write
        #: of a handle checks: gitmem.engine.writer.maintain_quietly).
        self.writes_unchecked = 1 << 30

    @property
    def _repo(self) -> pygit2.Repository:
        repo: pygit2.Repository | None = getattr(self._local, "repo", None)
        if repo is None:
            repo = pygit2.Repository(self._git_dir)
            self._local.repo = repo
            with self._repos_lock:
                self._all_repos.add(repo)
        return repo

    @property
    def _writer(self) -> pygit2.Repository:
        """Where this thread's new objects go: its staging pack while one is active, else loose
        files, through a repository of its own that writes without libgit2's existence check and
        refresh (gitmem.git.packwriter.loose_writer)."""
        staging: Staging | None = getattr(self._local, "active", None)
        if staging is not None:
            return staging.repo
        loose: pygit2.Repository | None = getattr(self._local, "loose", None)
        if loose is None or getattr(self._local, "loose_generation", -1) != self._generation:
            loose = loose_writer(os.path.join(self._git_dir, "objects"), self._repo.odb)
            self._local.loose = loose
            self._local.loose_generation = self._generation
            with self._repos_lock:
                self._all_repos.add(loose)
        return loose

    @contextlib.contextmanager
    def staged(self) -> Iterator[Staging]:
        """Objects this thread writes inside the block are kept in memory; the caller writes them
        as one pack (``staging.write()``) before it publishes. Left unwritten, they are dropped."""
        staging: Staging | None = getattr(self._local, "staging", None)
        if staging is None or getattr(self._local, "staging_generation", -1) != self._generation:
            staging = Staging(self.git_dir, self._repo.odb)
            self._local.staging = staging
            self._local.staging_generation = self._generation
            with self._repos_lock:
                self._all_repos.add(staging.repo)
        self._local.active = staging
        try:
            yield staging
        finally:
            self._local.active = None
            staging.discard()

    def written_object(self, oid: pygit2.Oid) -> pygit2.Object:
        """An object this thread just wrote (staged or loose)."""
        return self._writer[oid]

    @property
    def real_path(self) -> str:
        """The repository's path with symlinks resolved (one key per store on disk)."""
        if self._real_path is None:
            self._real_path = os.path.realpath(self.path)
        return self._real_path

    @property
    def git_dir(self) -> str:
        """The repository's git directory, as libgit2 names it."""
        return str(self._git_dir)

    @property
    def repo(self) -> pygit2.Repository:
        """The underlying pygit2 repository (this thread's own)."""
        return self._repo

    # ------------------------------------------------------------------ refs
    def ref_target(self, name: str) -> pygit2.Oid | None:
        """The commit a ref points at, or None."""
        try:
            ref = self._repo.references.get(name)
        except (pygit2.GitError, ValueError):
            return None
        if ref is None:
            return None
        target = ref.target
        return target if isinstance(target, pygit2.Oid) else None

    def first_target(self, names: tuple[str, ...]) -> pygit2.Oid | None:
        """The commit the first of ``names`` that exists points at (a store's own ref, then a
        clone's copies of it), or None."""
        for name in names:
            target = self.ref_target(name)
            if target is not None:
                return target
        return None

    def cas(self, name: str, old: pygit2.Oid | None, new: pygit2.Oid, message: str = "gitmem") -> bool:
        """Move ref ``name`` from ``old`` to ``new`` only if it still points at ``old``.

        Returns False on a lost race (the ref moved, or another writer holds its lock). A store in a
        cluster moves no ref unless this node holds its write lease (:func:`gitmem.git.fence.check_fence`).
        """
        with fenced(self.path):  # the fence checked, and held until the ref moved
            return refmove.cas(self, name, old, new, message)

    def reopen_thread_repository(self) -> None:
        """Drop this thread's repository and loose writer; the next use opens them afresh (an
        active staging pack keeps its own, and is written already when a ref moves)."""
        self._local.repo = None
        self._local.loose = None

    def sync_ref_file(self, name: str) -> None:
        """fsync a loose ref file and its directory (after it moved), else packed-refs."""
        path = os.path.join(self._repo.path, name)
        if fsync_path(path):
            fsync_path(os.path.dirname(path))
        else:
            fsync_path(os.path.join(self._repo.path, "packed-refs"))

    # ------------------------------------------------------------------ objects
    def commit(self, oid: pygit2.Oid | str) -> pygit2.Commit:
        obj = self._object(oid)
        if obj is None:
            raise NotFoundError(f"commit {oid} is not in store {self.path}")
        if not isinstance(obj, pygit2.Commit):
            raise NotFoundError(f"{oid} is not a commit")
        return obj

    def _object(self, oid: pygit2.Oid | str) -> pygit2.Object | None:
        """The object ``oid``, or None. A miss is looked for twice more, as
        :func:`gitmem.git.refmove.seen_target` does for a ref's target: a repack or a merge
        swapping packs in another process can hide an object from this thread's object database
        (the pack directory listed mid-swap, or a pack whose index it loaded deleted since); a look
        again lists the pack directory anew, and a reopened repository lists the packs as they are
        now. No sleep: a truly missing id costs one reopen."""
        for attempt in range(3):
            try:
                return self._repo[oid]
            except ValueError:  # not an object id at all
                return None
            except KeyError:
                if attempt == 0:
                    with contextlib.suppress(ValueError, TypeError):
                        self._repo.odb.exists(oid)  # a miss makes libgit2 list the packs again
                elif attempt == 1:
                    self.reopen_thread_repository()
        return None

    def tree_of(self, tip: pygit2.Oid | None) -> pygit2.Tree | None:
        if tip is None:
            return None
        return self.commit(tip).tree

    def blob_data(self, oid: pygit2.Oid) -> bytes:
        obj = self._repo[oid]
        assert isinstance(obj, pygit2.Blob)
        return obj.data

    def write_blob(self, data: bytes) -> pygit2.Oid:
        return _retry_loose(lambda: self._writer.create_blob(data))

    def has_object(self, oid: pygit2.Oid | str) -> bool:
        try:
            return oid in self._repo
        except (ValueError, TypeError):
            return False

    def update_tree(
        self,
        tree: pygit2.Tree | None,
        segments: list[str],
        blob: pygit2.Oid | None,
        written: list[pygit2.Oid] | None = None,
    ) -> pygit2.Oid | None:
        """A new tree: ``tree`` with the file at ``segments`` set to ``blob`` (None: removed).

        Only the spine of trees along the path is rewritten: O(path depth). Directories left
        empty disappear. Returns None for an empty tree.
        """
        repo = self._writer
        # By id: a builder made from a Tree object works in that tree's repository, not the writer's.
        tb = repo.TreeBuilder(tree.id) if tree is not None else repo.TreeBuilder()
        name = segments[0]
        if len(segments) == 1:
            if blob is None:
                if tb.get(name) is not None:
                    tb.remove(name)
            else:
                tb.insert(name, blob, FILEMODE_BLOB)
        else:
            sub = None
            if tree is not None and name in tree:
                obj = tree[name]
                if isinstance(obj, pygit2.Tree):
                    sub = obj
            new_sub = self.update_tree(sub, segments[1:], blob, written)
            if new_sub is None:
                if tb.get(name) is not None:
                    tb.remove(name)
            else:
                tb.insert(name, new_sub, FILEMODE_TREE)
        if len(tb) == 0:
            return None
        oid = _retry_loose(tb.write)
        if written is not None:
            written.append(oid)
        return oid

    def empty_tree(self) -> pygit2.Oid:
        return _retry_loose(self._writer.TreeBuilder().write)

    def create_commit(
        self,
        tree: pygit2.Oid,
        parents: list[pygit2.Oid],
        message: str,
        author: tuple[str, str],
        when: int | None = None,
    ) -> pygit2.Oid:
        now = int(time.time()) if when is None else when
        a = pygit2.Signature(author[0], author[1], now, 0)
        c = pygit2.Signature(COMMITTER[0], COMMITTER[1], now, 0)
        try:
            return _retry_loose(lambda: self._writer.create_commit(None, a, c, message, tree, parents))
        except pygit2.GitError as exc:
            if not isinstance(exc, KeyError) or not any(str(p) in str(exc) for p in parents):
                raise
        # A parent is gone: a history rewrite moved the branch off the tip the writer read and
        # purged it. libgit2 refuses such a commit; it is written as is instead, so that the
        # writer's compare-and-swap from that parent, which cannot succeed, loses the race and the
        # writer re-plans on the new tip (the commit stays unreachable, like any lost race's).
        lines = [f"tree {tree}", *(f"parent {p}" for p in parents)]
        lines += [
            f"{who} {s.name} <{s.email}> {s.time} +0000" for who, s in (("author", a), ("committer", c))
        ]
        data = ("\n".join(lines) + "\n\n" + message).encode("utf-8")
        return _retry_loose(lambda: self._writer.odb.write(pygit2.enums.ObjectType.COMMIT, data))

    def walk(self, tip: pygit2.Oid, hide: pygit2.Oid | None = None) -> Iterator[pygit2.Commit]:
        """Commits reachable from ``tip`` and not from ``hide``, oldest first."""
        walker = self._repo.walk(tip, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
        if hide is not None:
            walker.hide(hide)
        return iter(walker)

    def is_ancestor(self, ancestor: pygit2.Oid, descendant: pygit2.Oid) -> bool:
        if ancestor == descendant:
            return True
        try:
            return bool(self._repo.descendant_of(descendant, ancestor))
        except (pygit2.GitError, KeyError, ValueError):
            return False

    # Durability (docs/durability.md). libgit2 writes objects and refs without fsync unless a
    # process-wide option is on; gitmem leaves it off and publishes each commit (or chain of
    # commits) with one filesystem flush: the ref move is first appended to an intent log, one
    # syncfs makes the new objects and that line durable, then the ref moves (in the page cache).
    # After a reboot the first gitmem process replays intent lines whose ref still points at
    # their old value and whose objects are all readable; so no acknowledged write is lost and no
    # ref ever points at an object that was not flushed first.
    def sync_objects(self, oids: list[pygit2.Oid]) -> None:
        """fsync the loose files of ``oids`` (objects already in packs are durable) and their dirs."""
        base = os.path.join(self._repo.path, "objects")
        dirs = set()
        for oid in oids:
            h = str(oid)
            if fsync_path(os.path.join(base, h[:2], h[2:])):
                dirs.add(os.path.join(base, h[:2]))
        for d in dirs:
            fsync_path(d)

    def sync_all(self) -> None:
        """Make every object written so far durable at once (for batches)."""
        syncfs(os.path.join(self._repo.path, "objects"))

    def publish(
        self,
        ref: str,
        old: pygit2.Oid | None,
        new: pygit2.Oid,
        objects: Sequence[pygit2.Oid],
        during_flush: Callable[[], object] | None = None,
        check: Callable[[], bool] | None = None,
    ) -> bool:
        """Move ``ref`` from ``old`` to ``new`` by compare-and-swap, durably, with one flush
        (:func:`gitmem.git.intent.publish`; ``during_flush`` runs while the flush is under way,
        ``check`` before it, where a purge's barrier orders it: False gives up, as a lost race).
        Returns False on a lost race."""
        return intent.publish(self, ref, old, new, objects, during_flush, check)

    def recover(self) -> int:
        """After a reboot, replay the intent log (once per handle); returns the refs moved."""
        if self._recovered:
            return 0
        moved = intent.recover(self)
        self._recovered = True
        return moved

    # Maintenance. Every single write leaves ~5 loose objects, every group commit, batch and push
    # a small pack (gitmem.git.consolidate merges those in-process); reads slow down as they pile
    # up. A geometric repack soaks loose objects into a new pack and merges
    # small packs only as far as needed to keep pack sizes a geometric series, so its cost follows
    # what was added, and a later redaction rewrites only the small packs holding recent content.
    # It never deletes unreachable loose objects, so it is safe beside concurrent writers.
    LOOSE_SAMPLE_LIMIT = 27  # objects in objects/17/: ~6,900 loose objects, git's gc.auto
    MAX_PACKS = 32

    def needs_maintenance(self) -> bool:
        """Cheap estimate (one directory listing): too many loose objects or packs?"""
        objects = os.path.join(self._repo.path, "objects")
        try:
            if len(os.listdir(os.path.join(objects, "17"))) > self.LOOSE_SAMPLE_LIMIT:
                return True
        except FileNotFoundError:
            pass
        try:
            packs = sum(1 for n in os.listdir(os.path.join(objects, "pack")) if n.endswith(".pack"))
        except FileNotFoundError:
            return False
        return packs > self.MAX_PACKS

    def repack(self, wait: float = 0.0) -> bool:
        """Pack loose objects and keep packs geometric (``git repack -d --geometric=2``), holding
        the store lock ``gitmem/lock`` shared, as a push does: never while a history rewrite holds
        it (waiting up to ``wait`` seconds; False: skipped). A repack that read the packs before a
        redaction's purge and wrote its pack after the purge's proof would put the redacted objects
        back (``gitmem verify``: deny-listed objects still in the store)."""
        lock = os.path.join(self._repo.path, "gitmem", STORE_LOCK)
        os.makedirs(os.path.dirname(lock), exist_ok=True)
        fd = open_lock_fd(lock)  # a child forked during the repack does not keep the lock
        try:
            deadline = time.monotonic() + wait
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        return False
                    time.sleep(0.05)
            import subprocess  # here: a handle that never repacks (gitmem read) starts without it

            proc = subprocess.run(
                ["git", f"--git-dir={self._repo.path}", "repack", "-d", "-q", "--geometric=2"],
                capture_output=True,
                text=True,
                check=False,
            )
        finally:
            close_lock_fd(fd)
        if proc.returncode != 0:
            raise GitmemError(f"git repack failed in {self.path}: {proc.stderr.strip()[:300]}")
        return True

    def free(self) -> None:
        with self._repos_lock:
            repos, self._all_repos = list(self._all_repos), weakref.WeakSet()
            self._generation += 1
        for repo in repos:
            repo.free()


STORE_LOCK = "lock"  # $GIT_DIR/gitmem/lock: exclusive for a history rewrite (gitmem.audit.journal)


def _retry_loose(write: Callable[[], pygit2.Oid]) -> pygit2.Oid:
    """Write one object, again if a concurrent ``git repack -d`` (its prune-packed step) removed
    the ``objects/xx/`` directory between libgit2 creating it and renaming the object into it.
    Writing an object is idempotent; a persistent error is raised on the last attempt.

    The first attempts follow at once; then each waits a little longer (up to 2 ms, about 0.2 s in
    all), so that a writer and a sweeper running in step on two cores fall out of step: CI lost 16
    immediate attempts in a row, twice in 8,000 writes, to a sweeper removing the directory in a
    tight loop."""
    for attempt in range(_LOOSE_RETRIES - 1):
        with contextlib.suppress(OSError):
            return write()
        if attempt >= _LOOSE_QUICK:
            time.sleep(min(0.002, 0.0001 * (attempt - _LOOSE_QUICK + 1)))
    return write()


_LOOSE_QUICK = 8


def lookup(tree: pygit2.Tree, rel: str) -> pygit2.Object:
    """``tree[rel]`` (KeyError when nothing is there), looked up again when libgit2 lost one of the
    objects on the way to a concurrent repack: a subtree or blob that moved from a loose file into a
    new pack and back out as ``git repack -A -d`` loosened it can be missed by both of libgit2's
    passes (the loose store, then the packs listed again), and ``GitError: object not found`` came
    out of a write's planning. A fresh lookup reads the loose store again; an object really missing
    is still an error after the third."""
    for attempt in range(_LOOKUPS):
        try:
            return tree[rel]
        except pygit2.GitError as exc:
            if isinstance(exc, KeyError) or "not found" not in str(exc) or attempt == _LOOKUPS - 1:
                raise
            time.sleep(0.001 * attempt)
    raise AssertionError("not reached")


_LOOKUPS = 3
_LOOSE_RETRIES = 128
retrying = _retry_loose  # for object writes outside this class (the ledger's commits)


def recover_intent_log(git_dir: str | os.PathLike[str]) -> int:
    """Replay a store's intent log after a reboot (see :meth:`Repo.recover`); for callers that hold
    no :class:`Repo`, such as a hook. Returns the refs moved; one small read when nothing is due."""
    path = Path(git_dir)
    log = path / intent.INTENT_LOG
    boot = intent.boot_id()
    try:
        with open(log, "rb") as fh:
            if boot is None or fh.readline() == f"{intent.INTENT_HEADER}{boot}\n".encode():
                return 0
    except OSError:
        return 0
    repo = Repo(open_repository(path), path)
    try:
        return repo.recover()
    finally:
        repo.free()
