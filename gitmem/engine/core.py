"""``StoreCore``: the store handle every layer above git works with.

A store is a bare git repository ``<home>/stores/<id>.git`` (the old layout: ``<name>.git``,
gitmem.engine.resolve); each scope is a branch
``refs/heads/<scope>``; settings live in ``<store>.git/gitmem.yaml``, outside every tree; gitmem's
private files (index, journal, deny-list, secrets) in ``<store>.git/gitmem/``, never cloned. The
handle adds to :class:`gitmem.git.repo.Repo` what makes a repository a store: settings, scopes,
the deny-list and the derived index. Users get the typed facade :class:`gitmem.store.Store` instead.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import pygit2

from gitmem import config, events
from gitmem.config import StoreSettings
from gitmem.engine.denylist import DENYLIST, denied_in, denylist_of, scoped_of
from gitmem.engine.locate import GITMEM_DIR as GITMEM_DIR
from gitmem.engine.locate import blob_at
from gitmem.engine.resolve import all_refs, resolve_store
from gitmem.engine.rows import HeadRow, VersionRow
from gitmem.errors import ConfigError, ConflictError, ForbiddenError, NotFoundError
from gitmem.git.consolidate import merge_small_packs, remove_replaced
from gitmem.git.intent import flushes, note_flush, syncfs
from gitmem.git.repo import STORE_LOCK, Repo
from gitmem.model.guard import GuardPolicy
from gitmem.model.paths import validate_scope


class StagedIndexRecord(Protocol):
    """An index record staged during a publish's flush (gitmem.engine.index.StagedRecord)."""

    def commit(self) -> None: ...
    def rollback(self) -> None: ...


class IndexLike(Protocol):
    """What the handle and its users ask of the derived index (gitmem.engine.index.Index). The
    index reads through the handle; the handle takes the index from whoever opens it
    (gitmem.engine.opening), so this layer never imports the index."""

    @property
    def db(self) -> sqlite3.Connection: ...
    def ensure(
        self, scope: str, tip: pygit2.Oid | None = None, *, known_tip: bool = False, checks_tip: bool = False
    ) -> None: ...
    def ensure_all(self) -> list[str]: ...
    def forget(self, scope: str) -> None: ...
    def rebuild(self) -> int: ...
    def close(self) -> None: ...
    def park(self) -> None: ...
    def head(self, scope: str, path: str) -> HeadRow | None: ...
    def head_at(self, scope: str, path: str, tip: str, blob: str) -> HeadRow | None: ...
    def head_by_memory(self, scope: str, memory_id: str) -> HeadRow | None: ...
    def heads(self, scope: str, prefix: str = "/") -> list[HeadRow]: ...
    def scope_stats(self, scope: str) -> tuple[int, int]: ...
    def store_bytes(self) -> int: ...
    def purge_search(self, *, wait: float = 2.0) -> bool: ...
    def purge_pending(self) -> bool: ...
    def version_rows(
        self, where: str = "", params: Sequence[Any] = (), limit: int | None = None
    ) -> list[VersionRow]: ...
    def stage(
        self,
        scope: str,
        parent: pygit2.Oid | None,
        commit: pygit2.Oid,
        rows: Sequence[VersionRow],
        contents: Mapping[str, bytes] | None = None,
    ) -> StagedIndexRecord: ...
    def mark_redacted(self, redaction: tuple[str, str, int, str], version_ids: Sequence[str]) -> None: ...
    def apply_rewrite(
        self,
        scope: str,
        old_tip: str,
        new_tip: str,
        commit_map: dict[str, str],
        blob_map: dict[str, list[Any]],
    ) -> None: ...


PRIVATE_PATHS_MAX = 4096  # paths under it one handle keeps built (StoreCore.private_path)


def guard_policy(settings: StoreSettings, where: str) -> GuardPolicy:
    """The validated write-time guard of ``settings`` (ConfigError naming ``where`` and the key)."""
    return GuardPolicy.from_dict(settings.guard, where)


def store_path(name_or_id: str, home: str | os.PathLike[str] | None = None) -> Path:
    """The directory of the store ``name_or_id`` names (an id, handle or unique name: the
    resolver's precedence, docs/stores.md); NotFoundError when none does."""
    return resolve_store(name_or_id, home).path


# Settings changed less than this before they were read are read again (git's "racy" files).
RACY_NS = 2_000_000_000


class StoreCore(Repo):
    """A memory store's repository with its settings, scopes, deny-list and index."""

    def __init__(
        self,
        repo: pygit2.Repository,
        path: Path,
        *,
        clone_of: str | None = None,
        index: Callable[[StoreCore], IndexLike] | None = None,
    ) -> None:
        super().__init__(repo, path)
        #: Makes the derived index of this handle (gitmem.engine.index.Index; the opener passes it).
        self._make_index = index
        #: For a clone (offline inspection), the URL of the store it was cloned from; clones are read-only.
        self.clone_of = clone_of
        self._settings: StoreSettings | None = None
        self._settings_key: tuple[int, int, int] | None = None
        self._settings_racy = False
        self._settings_bytes: bytes | None = None
        self._settings_file: str | None = None
        self._denied: frozenset[str] = frozenset()
        self._deny_key: tuple[int, int, int] | None = None
        self._deny_pair: tuple[frozenset[str], dict[str, frozenset[str]]] = (frozenset(), {})
        self._denied_in: dict[str, tuple[frozenset[str], frozenset[str]]] = {}  # scope -> (of, denied_in)
        self._index: IndexLike | None = None
        #: The packs this handle's last merge of small packs replaced, and the flush count then.
        self._replaced: tuple[list[str], int] | None = None
        self._merge_lock = threading.Lock()
        #: Whether other processes group-commit to this store too (gitmem.engine.xqueue): a merge
        #: then flushes itself rather than wait for this handle's next publish.
        self.writers_elsewhere = False

    # ------------------------------------------------------------------ identity and settings
    @property
    def is_clone(self) -> bool:
        return self.clone_of is not None

    @property
    def gitmem_dir(self) -> Path:
        cached: tuple[Path, Path] | None = self.__dict__.get("_gitmem_dir")
        if cached is None or cached[0] is not self.path:  # built once a handle (a write asks ~4 times)
            cached = (self.path, self.path / GITMEM_DIR)
            self.__dict__["_gitmem_dir"] = cached
        return cached[1]

    def private_path(self, *parts: str) -> Path:
        """``gitmem_dir / parts...``, built once a handle (a write asks for its scope lock, its queue
        directory and the deny-list: each a ``pathlib`` join of several microseconds)."""
        base = self.gitmem_dir
        cached: tuple[Path, dict[tuple[str, ...], Path]] | None = self.__dict__.get("_private_paths")
        if cached is None or cached[0] is not base or len(cached[1]) >= PRIVATE_PATHS_MAX:
            cached = (base, {})
            self.__dict__["_private_paths"] = cached
        path = cached[1].get(parts)
        if path is None:
            path = cached[1][parts] = base.joinpath(*parts)
        return path

    @property
    def settings_path(self) -> Path:
        if self.is_clone:
            return self.gitmem_dir / config.SETTINGS_FILE
        return self.path / config.SETTINGS_FILE

    @property
    def settings(self) -> StoreSettings:
        """The store's settings, re-read when the file changed (another process archived the store,
        changed its acl or limits): a long-lived handle (an MCP server, a session) obeys at once."""
        if self._settings_file is None:  # the path never changes: one stat a call, no Path math
            self._settings_file = str(self.settings_path)
        try:
            st = os.stat(self._settings_file)
            key: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            key = None
        if self._settings is not None and key == self._settings_key:
            if not self._settings_racy:
                return self._settings
            # git's racy rule: a file changed within the file clock's tick of its read may have
            # changed again with the same size, time stamp and inode (an edit in place): compare
            # its bytes until a read is safely later than its time stamp.
            if self._settings_bytes == self._read_settings_bytes():
                self._settings_racy = key is not None and key[0] + RACY_NS > time.time_ns()
                return self._settings
        loaded_at = time.time_ns()
        if self.is_clone and key is None:
            self._settings = StoreSettings(id="", name=self.path.parent.name)
            self._settings_bytes = None
        else:
            path = self.settings_path
            self._settings_bytes = self._read_settings_bytes()
            try:
                if key is None:
                    raise ConfigError(f"{path}: settings file is missing")
                self._settings = config.load_settings(path)
            except ConfigError:
                if path.exists():
                    raise
                # The store went away under this handle (deleted, or being deleted, by another
                # request or process): the store is not found, not misconfigured.
                raise NotFoundError(
                    f"store {self.path.name} no longer exists: its settings file is gone"
                ) from None
            guard_policy(self._settings, str(path))  # a bad 'guard' is refused on load too
        self._settings_key = key
        self._settings_racy = key is not None and key[0] + RACY_NS > loaded_at
        return self._settings

    def _read_settings_bytes(self) -> bytes | None:
        try:
            with open(str(self._settings_file), "rb") as fh:
                return fh.read()
        except OSError:
            return None

    @property
    def name(self) -> str:
        return self.settings.name

    def reload_settings(self) -> StoreSettings:
        self._settings = None
        return self.settings

    def save_settings(self, new: StoreSettings) -> StoreSettings:
        """Validate ``new`` and save it atomically; no ledger entry (a change made through gitmem is
        :func:`gitmem.engine.settings_change.update_settings`, which records one)."""
        # Round-trip through validation so a bad value never reaches the file.
        new = config.settings_from_dict(new.to_dict(), str(self.settings_path))
        guard_policy(new, str(self.settings_path))
        config.save_settings(self.settings_path, new)
        self._settings = new
        return new

    def check_writable(self) -> None:
        """Raise ForbiddenError when this store may not be written (clone, archived)."""
        if self.is_clone:
            raise ForbiddenError(
                f"{self.path} is a clone for offline inspection and is read-only: "
                "commit with git and push to the store instead"
            )
        archived = self.settings.archived_at
        if archived is not None:
            raise ForbiddenError(f"store {self.name!r} was archived at {archived} and is read-only")
        try:
            read_only = bool(os.statvfs(self.path).f_flag & os.ST_RDONLY)
        except OSError:
            read_only = False
        if read_only:
            raise ForbiddenError(
                f"store {self.name!r} is on a read-only file system ({self.path}): it cannot be written"
            )

    def denied_ids(self) -> frozenset[str]:
        """Object ids a redaction or compaction removed (``$GIT_DIR/gitmem/denylist``), re-read
        when the file changes. Writes refuse them, as the pre-receive hook does."""
        path = self.private_path(DENYLIST)
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return frozenset()
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key != self._deny_key:
            try:
                text = path.read_text(encoding="utf-8")
            except (FileNotFoundError, NotADirectoryError):
                return frozenset()
            denied = denylist_of(text)
            self._deny_pair = (denied, scoped_of(text))  # one assignment: threads see both or neither
            self._denied = denied
            self._deny_key = key
        return self._denied

    def denied_in(self, scope: str) -> frozenset[str]:
        """The deny-listed ids a write to ``scope`` refuses: a redaction's blobs in the scopes it
        rewrote, everything else in every scope (docs/redaction.md#by-scope)."""
        return self.denied_for(scope)[0]

    def denied_for(self, scope: str) -> tuple[frozenset[str], frozenset[str]]:
        """:meth:`denied_in` ``scope``, and the whole deny-list (one stat); made once per scope
        and deny-list."""
        if not self.denied_ids():
            return frozenset(), frozenset()
        denied, scoped = self._deny_pair
        if not scoped:
            return denied, denied
        cached = self._denied_in.get(scope)
        if cached is None or cached[0] is not denied:  # (another thread's re-read meanwhile)
            cached = self._denied_in[scope] = (denied, denied_in(denied, scoped, scope))
        return cached[1], denied

    # ------------------------------------------------------------------ scopes (branches)
    def ref_name(self, scope: str) -> str:
        return f"refs/heads/{scope}"

    def tip(self, scope: str) -> pygit2.Oid | None:
        """The commit a scope's branch points at, or None for an empty (not yet written) scope."""
        for name in self._ref_candidates(scope):
            target = self.ref_target(name)
            if target is not None:
                return target
        return None

    def _ref_candidates(self, scope: str) -> tuple[str, ...]:
        if self.is_clone:
            return (f"refs/heads/{scope}", f"refs/remotes/origin/{scope}")
        return (f"refs/heads/{scope}",)

    def scopes(self) -> list[str]:
        """Every scope with at least one version, sorted."""
        found: set[str] = set()
        prefixes = ["refs/heads/"] + (["refs/remotes/origin/"] if self.is_clone else [])
        for name in self._repo.references:
            for prefix in prefixes:
                if name.startswith(prefix) and name != "refs/remotes/origin/HEAD":
                    found.add(name[len(prefix) :])
        return sorted(found)

    def require_scope(self, scope: str) -> pygit2.Oid:
        validate_scope(scope)
        tip = self.tip(scope)
        if tip is None:
            raise NotFoundError(f"scope {scope!r} does not exist in store {self.name!r}")
        return tip

    def cas_ref(self, scope: str, old: pygit2.Oid | None, new: pygit2.Oid, message: str = "gitmem") -> bool:
        """Move a scope's branch from ``old`` to ``new`` only if it still points at ``old``."""
        return self.cas(self.ref_name(scope), old, new, message)

    def sync_ref(self, scope: str) -> None:
        """fsync a branch's loose ref file and its directory (after it moved)."""
        self.sync_ref_file(self.ref_name(scope))

    def head_blob(self, scope: str, path: str) -> tuple[pygit2.Oid, pygit2.Blob]:
        """The scope's tip and the blob of memory ``path`` in it, straight from the tree."""
        tip = self.tip(scope)
        blob = blob_at(self, tip, scope, path)
        assert tip is not None  # an empty scope has no blob: NotFoundError above
        return tip, blob

    def maintain(self, *, force: bool = False) -> bool:
        """Merge the small packs writes leave, in-process, once there are enough of them
        (gitmem.git.consolidate); pack loose objects and keep packs geometric when needed (or
        always, with ``force``)."""
        if self.is_clone:
            return False
        merged = False
        if not force:
            merged = self._merge_small_packs()
        if not (force or self.needs_maintenance()):
            return merged
        logging.getLogger("gitmem.maintenance").info("repacking %s (git repack -d --geometric=2)", self.path)
        if self.repack(wait=60.0 if force else 0.0):
            return True
        if force:
            raise ConflictError(
                f"a history rewrite of {self.path} is running; run maintenance again after it"
            )
        return False  # a rewrite runs: it repacks what it touches; the next write tries again

    @property
    def merge_waiting(self) -> bool:
        """Whether packs this handle's last merge replaced wait for a flush to be deleted."""
        return self._replaced is not None

    def _merge_small_packs(self) -> bool:
        """Delete the packs this handle's last merge replaced, once a flush has made the merged
        pack durable; then merge small packs again if they piled up (gitmem.git.consolidate)."""
        if not self._merge_lock.acquire(blocking=False):
            return False  # another thread of this handle merges (or a fork copied the lock held)
        try:
            if self._replaced is not None:
                packs, flushes_at = self._replaced
                if not remove_replaced(self.git_dir, packs, flushes_at):
                    return False  # not flushed yet: no new merge while one waits
                self._replaced = None
            flushes_at = flushes(self.git_dir)
            replaced = merge_small_packs(
                self.git_dir, os.path.join(self.git_dir, "gitmem", STORE_LOCK), self.repo.odb
            )
            if replaced:
                self._replaced = (replaced, flushes_at)
                if self.writers_elsewhere:
                    # Other processes publish most of the groups: this handle's next flush may be
                    # many packs away, and until the replaced packs go, every process sees them
                    # as small packs to merge again. One flush of its own, then they go.
                    syncfs(self.git_dir)
                    note_flush(self.git_dir)
                    if remove_replaced(self.git_dir, replaced, flushes_at):
                        self._replaced = None
            return bool(replaced)
        finally:
            self._merge_lock.release()

    # ------------------------------------------------------------------ derived index
    @property
    def index(self) -> IndexLike:
        if self._index is None:
            if self._make_index is None:
                raise ConfigError(
                    f"{self.path}: this handle was opened without an index (gitmem.engine.opening)"
                )
            self._index = self._make_index(self)
        return self._index

    def drain_pushes(self) -> None:
        """Run the :data:`gitmem.events.NEW_COMMIT` hooks (the push layer records spooled pushes
        there): on open and when the index meets new commits. Never fails the caller."""
        if self.is_clone:
            return
        for hook in events.NEW_COMMIT:
            with contextlib.suppress(Exception):
                hook(self)

    def hand_over(self) -> None:
        """This thread is done with the handle for now; the next thread to use it takes over its
        index connection (gitmem.engine.index_db.IndexDb.park). Only when no other thread uses
        the handle meanwhile."""
        if self._index is not None:
            self._index.park()

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None
        self.free()

    def __enter__(self) -> StoreCore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StoreCore({str(self.path)!r})"


def list_stores(home: str | os.PathLike[str] | None = None) -> list[StoreSettings]:
    """Settings of every store in the workspace, sorted by name, then id."""
    return [ref.settings for ref in all_refs(home)]


def delete_store(name_or_id: str, home: str | os.PathLike[str] | None = None) -> Path:
    """Delete a store (by id, handle or unique name) and all its memories and versions, permanently."""
    ref = resolve_store(name_or_id, home)
    path = ref.path
    trash = path.parent / f".{ref.handle}.deleting-{os.getpid()}"
    os.rename(path, trash)  # atomic: the store vanishes at once, then the files go
    shutil.rmtree(trash)
    return path
