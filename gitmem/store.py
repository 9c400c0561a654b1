"""Open and create stores; the one module that talks to pygit2 for objects and refs.

A store is a bare git repository ``<home>/stores/<name>.git``; each scope is a branch
``refs/heads/<scope>``; settings live in ``<store>.git/gitmem.yaml``, outside every tree.
``pygit2`` errors are turned into gitmem errors here, in small try blocks.
"""

from __future__ import annotations

import builtins
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pygit2

from gitmem import config
from gitmem.config import StoreSettings
from gitmem.errors import ConflictError, ForbiddenError, GitmemError, NotFoundError
from gitmem.ids import new_id
from gitmem.paths import validate_scope, validate_store_name

if TYPE_CHECKING:
    from gitmem.index import Index
    from gitmem.memories import Memory, Prefix
    from gitmem.redact import Redaction
    from gitmem.search import SearchHit
    from gitmem.versions import Version

FILEMODE_BLOB = pygit2.enums.FileMode.BLOB
FILEMODE_TREE = pygit2.enums.FileMode.TREE
GITMEM_DIR = "gitmem"  # $GIT_DIR/gitmem: index, journal, deny-list, secrets (never cloned)
COMMITTER = ("gitmem", "gitmem")


def _fsync_path(path: str) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


def _syncfs(path: str) -> None:
    """Flush the filesystem holding ``path`` (Linux syncfs; elsewhere a global sync)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY)
        try:
            if libc.syncfs(fd) == 0:
                return
        finally:
            os.close(fd)
    except (OSError, AttributeError):
        pass
    os.sync()


def stores_dir(home: str | os.PathLike[str] | None = None) -> Path:
    return config.workspace_home(home) / "stores"


def store_path(name: str, home: str | os.PathLike[str] | None = None) -> Path:
    return stores_dir(home) / f"{validate_store_name(name)}.git"


class Store:
    """A memory store. Get one with :func:`open_store` or :func:`create_store`."""

    def __init__(self, repo: pygit2.Repository, path: Path, *, clone_of: str | None = None) -> None:
        self._repo = repo
        self.path = path
        #: For a clone (offline inspection), the URL of the store it was cloned from; clones are read-only.
        self.clone_of = clone_of
        self._settings: StoreSettings | None = None
        self._settings_key: tuple[int, int, int] | None = None
        self._denied: frozenset[str] = frozenset()
        self._deny_key: tuple[int, int, int] | None = None
        self._index: Index | None = None

    # ------------------------------------------------------------------ identity and settings
    @property
    def is_clone(self) -> bool:
        return self.clone_of is not None

    @property
    def repo(self) -> pygit2.Repository:
        """The underlying pygit2 repository (for gitmem's own modules)."""
        return self._repo

    @property
    def gitmem_dir(self) -> Path:
        return self.path / GITMEM_DIR

    @property
    def settings_path(self) -> Path:
        if self.is_clone:
            return self.gitmem_dir / config.SETTINGS_FILE
        return self.path / config.SETTINGS_FILE

    @property
    def settings(self) -> StoreSettings:
        """The store's settings, re-read when the file changed (another process archived the store,
        changed its acl or limits): a long-lived Store (an MCP server, a session) obeys at once."""
        path = self.settings_path
        try:
            st = path.stat()
            key: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_size, st.st_ino)
        except FileNotFoundError:
            key = None
        if self._settings is None or key != self._settings_key:
            if self.is_clone and key is None:
                self._settings = StoreSettings(id="", name=self.path.parent.name)
            else:
                self._settings = config.load_settings(path)
            self._settings_key = key
        return self._settings

    @property
    def name(self) -> str:
        return self.settings.name

    def reload_settings(self) -> StoreSettings:
        self._settings = None
        return self.settings

    def update_settings(self, *, actor: str | None = None, **changes: Any) -> StoreSettings:
        """Change settings (description, metadata, limits, retention, acl, ...) and save them atomically.

        Every change is a ledger entry (``archived`` when it sets ``archived_at``)."""
        self.check_writable()
        new = replace(self.settings, updated_at=config.now_rfc3339(), **changes)
        # Round-trip through validation so a bad value never reaches the file.
        new = config.settings_from_dict(new.to_dict(), str(self.settings_path))
        config.save_settings(self.settings_path, new)
        self._settings = new
        from gitmem import ledger

        data = new.to_dict()
        kind = "archived" if changes.get("archived_at") is not None else "settings_changed"
        ledger.append(self, kind, {"changes": {k: data[k] for k in sorted(changes)}}, actor=actor)
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

    def denied_ids(self) -> frozenset[str]:
        """Object ids a redaction or compaction removed (``$GIT_DIR/gitmem/denylist``), re-read
        when the file changes. Writes refuse them, as the pre-receive hook does."""
        path = self.gitmem_dir / "denylist"
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return frozenset()
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        if key != self._deny_key:
            from gitmem.pushcheck import read_denylist

            self._denied = read_denylist(self.path)
            self._deny_key = key
        return self._denied

    # ------------------------------------------------------------------ refs
    def ref_name(self, scope: str) -> str:
        return f"refs/heads/{scope}"

    def tip(self, scope: str) -> pygit2.Oid | None:
        """The commit a scope's branch points at, or None for an empty (not yet written) scope."""
        for name in self._ref_candidates(scope):
            try:
                ref = self._repo.references.get(name)
            except (pygit2.GitError, ValueError):
                ref = None
            if ref is not None:
                target = ref.target
                if isinstance(target, pygit2.Oid):
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
        """Move a scope's branch from ``old`` to ``new`` only if it still points at ``old``.

        Returns False on a lost race (the ref moved, or another writer holds its lock).
        """
        name = self.ref_name(scope)
        try:
            if old is None:
                self._repo.references.create(name, new, force=False)
                return True
            ref = self._repo.references.get(name)
            if ref is None or ref.target != old:
                return False
            # libgit2 compares the ref against the value it was loaded with under the ref lock,
            # so this is a compare-and-swap even across processes.
            ref.set_target(new, message)
            return True
        except pygit2.AlreadyExistsError:
            return False
        except (pygit2.GitError, OSError) as exc:
            # "old reference value does not match" (moved) or "failed to lock file" (a writer
            # holds the ref lock; libgit2 reports it as an OS error): lost races, retried by the caller.
            text = str(exc).lower()
            if "lock" in text or "does not match" in text or "exists" in text:
                return False
            raise GitmemError(f"cannot update {name} in {self.path}: {exc}") from None

    # ------------------------------------------------------------------ objects
    def commit(self, oid: pygit2.Oid | str) -> pygit2.Commit:
        try:
            obj = self._repo[oid]
        except (KeyError, ValueError):
            raise NotFoundError(f"commit {oid} is not in store {self.path}") from None
        if not isinstance(obj, pygit2.Commit):
            raise NotFoundError(f"{oid} is not a commit")
        return obj

    def tree_of(self, tip: pygit2.Oid | None) -> pygit2.Tree | None:
        if tip is None:
            return None
        return self.commit(tip).tree

    def head_blob(self, scope: str, path: str) -> tuple[pygit2.Oid, pygit2.Blob]:
        """The scope's tip and the blob of memory ``path`` in it, straight from the tree."""
        tip = self.tip(scope)
        if tip is None:
            raise NotFoundError(f"memory {path} does not exist: scope {scope!r} is empty")
        try:
            obj = self.commit(tip).tree[path[1:]]
        except KeyError:
            obj = None
        if not isinstance(obj, pygit2.Blob):
            raise NotFoundError(f"memory {path} does not exist in scope {scope!r}")
        return tip, obj

    def blob_data(self, oid: pygit2.Oid) -> bytes:
        obj = self._repo[oid]
        assert isinstance(obj, pygit2.Blob)
        return obj.data

    def write_blob(self, data: bytes) -> pygit2.Oid:
        return self._repo.create_blob(data)

    # Durability. libgit2 writes objects and refs without fsync unless a process-wide option is on;
    # gitmem leaves that option off and makes exactly what it wrote durable itself, before the ref
    # moves (objects) and before a write is acknowledged (the ref): per file for a single version,
    # one syncfs for a batch of thousands (DESIGN section 11: batches near git fast-import speed).
    def sync_objects(self, oids: list[pygit2.Oid]) -> None:
        """fsync the loose files of ``oids`` (objects already in packs are durable) and their dirs."""
        base = os.path.join(self._repo.path, "objects")
        dirs = set()
        for oid in oids:
            h = str(oid)
            if _fsync_path(os.path.join(base, h[:2], h[2:])):
                dirs.add(os.path.join(base, h[:2]))
        for d in dirs:
            _fsync_path(d)

    def sync_all(self) -> None:
        """Make every object written so far durable at once (for batches)."""
        _syncfs(os.path.join(self._repo.path, "objects"))

    # Maintenance. Every single write leaves ~5 loose objects and every push a small pack; reads
    # slow down as they pile up. A geometric repack soaks loose objects into a new pack and merges
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

    def maintain(self, *, force: bool = False) -> bool:
        """Pack loose objects and keep packs geometric when needed (or always, with ``force``)."""
        if self.is_clone or not (force or self.needs_maintenance()):
            return False
        import subprocess

        proc = subprocess.run(
            ["git", f"--git-dir={self._repo.path}", "repack", "-d", "-q", "--geometric=2"],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise GitmemError(f"git repack failed in {self.path}: {proc.stderr.strip()[:300]}")
        return True

    def sync_ref(self, scope: str) -> None:
        """fsync a branch's loose ref file and its directory (after it moved)."""
        path = os.path.join(self._repo.path, self.ref_name(scope))
        if _fsync_path(path):
            _fsync_path(os.path.dirname(path))
        else:
            _fsync_path(os.path.join(self._repo.path, "packed-refs"))

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
        repo = self._repo
        tb = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
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
        oid = tb.write()
        if written is not None:
            written.append(oid)
        return oid

    def empty_tree(self) -> pygit2.Oid:
        return self._repo.TreeBuilder().write()

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
        return self._repo.create_commit(None, a, c, message, tree, parents)

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

    def has_object(self, oid: pygit2.Oid | str) -> bool:
        try:
            return oid in self._repo
        except (ValueError, TypeError):
            return False

    # ------------------------------------------------------------------ derived index
    @property
    def index(self) -> Index:
        if self._index is None:
            from gitmem.index import Index

            self._index = Index(self)
        return self._index

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None
        self._repo.free()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    # ------------------------------------------------------------------ public API (section 12)
    def write(self, path: str, content: str | bytes, **kw: Any) -> Version | None:
        """Create or replace a memory; None when nothing changed. See :func:`gitmem.memories.write`."""
        from gitmem import memories

        return memories.write(self, path, content, **kw)

    def create(self, path: str, content: str | bytes, **kw: Any) -> Version:
        """Create a memory; never overwrites (PathConflictError names the conflicting path)."""
        from gitmem import memories

        return memories.create(self, path, content, **kw)

    def read(self, path: str, *, scope: str = "main", version: str | None = None) -> Memory:
        """A memory at the scope's head, or at ``version``."""
        from gitmem import memories

        return memories.read(self, path, scope=scope, version=version)

    def list(
        self, prefix: str = "/", *, scope: str = "main", depth: int = 0, with_content: bool = False
    ) -> list[Memory | Prefix]:
        """Memories under ``prefix`` (``depth=1``: immediate children, deeper ones rolled up)."""
        from gitmem import memories

        return memories.list_memories(self, prefix, scope=scope, depth=depth, with_content=with_content)

    def str_replace(self, path: str, old: str, new: str, **kw: Any) -> Version | None:
        from gitmem import memories

        return memories.str_replace(self, path, old, new, **kw)

    def insert(self, path: str, line: int, text: str, **kw: Any) -> Version | None:
        from gitmem import memories

        return memories.insert(self, path, line, text, **kw)

    def delete(self, path: str, **kw: Any) -> Version:
        from gitmem import memories

        return memories.delete(self, path, **kw)

    def rename(self, old_path: str, new_path: str, **kw: Any) -> Version | None:
        from gitmem import memories

        return memories.rename(self, old_path, new_path, **kw)

    def versions(self, path: str | None = None, **kw: Any) -> builtins.list[Version]:
        """Versions, newest first, filtered by path/memory, scope, session, actor, operation, time."""
        from gitmem import history

        return history.versions(self, path, **kw)

    def version(self, version_id: str) -> Version:
        from gitmem import history

        return history.version(self, version_id)

    def restore(self, version_id: str, **kw: Any) -> Version | None:
        """Write an old version's content back as a new version (no history rewrite)."""
        from gitmem import history

        return history.restore(self, version_id, **kw)

    def redact(self, version_id: str, *, reason: str, actor: str | None = None) -> Redaction:
        """Erase a version's content from the scope's history (see :func:`gitmem.redact.redact`)."""
        from gitmem import redact

        return redact.redact(self, version_id, reason=reason, actor=actor)

    def search(
        self,
        query: str,
        *,
        scope: str = "main",
        limit: int = 10,
        path_prefix: str | None = None,
        raw: bool = False,
    ) -> builtins.list[SearchHit]:
        """Memories at the head of ``scope`` matching ``query``, best first. See :func:`gitmem.search.search`."""
        from gitmem import search

        return search.search(self, query, scope=scope, limit=limit, path_prefix=path_prefix, raw=raw)


# ---------------------------------------------------------------------- open / create / list
def _open_repo(path: Path) -> pygit2.Repository:
    try:
        return pygit2.Repository(str(path))
    except pygit2.GitError:
        raise NotFoundError(f"{path} is not a git repository") from None


def open_store(name_or_path: str | os.PathLike[str], home: str | os.PathLike[str] | None = None) -> Store:
    """A store by name in the workspace, or by path to a bare store or a clone of one."""
    text = os.fspath(name_or_path)
    is_pathlike = os.sep in text or text.startswith(".") or text.endswith(".git")
    if not is_pathlike:
        path = store_path(text, home)
        if not path.is_dir():
            raise NotFoundError(f"store {text!r} does not exist in {stores_dir(home)}")
        return _recovered(Store(_open_repo(path), path))
    path = Path(text).expanduser().resolve()
    if not path.exists():
        raise NotFoundError(f"no store at {path}")
    repo = _open_repo(path)
    if repo.is_bare:
        if (
            not (path / config.SETTINGS_FILE).exists()
            and not (path / GITMEM_DIR / config.SETTINGS_FILE).exists()
        ):
            raise NotFoundError(
                f"{path} is a git repository but not a gitmem store (no {config.SETTINGS_FILE})"
            )
        if (path / config.SETTINGS_FILE).exists():
            return _recovered(Store(repo, path))
        return Store(repo, path, clone_of=_origin_url(repo) or str(path))
    gitdir = Path(repo.path).resolve()
    return Store(repo, gitdir, clone_of=_origin_url(repo) or str(path))


def _recovered(store: Store) -> Store:
    """A history rewrite (redaction, compaction) killed half-way is finished or rolled back."""
    if (store.gitmem_dir / "journal.json").exists():
        from gitmem.journal import recover

        recover(store)
    return store


def _origin_url(repo: pygit2.Repository) -> str | None:
    try:
        return str(repo.remotes["origin"].url)
    except (KeyError, ValueError):
        return None


def create_store(
    name: str,
    *,
    description: str = "",
    metadata: dict[str, str] | None = None,
    limits: config.Limits | None = None,
    retention: config.Retention | None = None,
    home: str | os.PathLike[str] | None = None,
) -> Store:
    """Create a store: a bare repository with its settings, hooks installed, atomically."""
    validate_store_name(name)
    config.validate_description(description)
    meta = config.validate_metadata(metadata or {})
    final = store_path(name, home)
    if final.exists():
        raise ConflictError(f"store {name!r} already exists at {final}")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{name}.creating-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        repo = pygit2.init_repository(str(tmp), bare=True, initial_head="main")
        now = config.now_rfc3339()
        settings = StoreSettings(
            id=new_id("memstore"),
            name=name,
            description=description,
            metadata=meta,
            created_at=now,
            updated_at=now,
            limits=limits or config.Limits(),
            retention=retention or config.Retention(),
        )
        # The checks a later open applies: bad limits refuse the store now, not brick it then.
        config.settings_from_dict(settings.to_dict(), f"settings of new store {name!r}")
        config.save_settings(tmp / config.SETTINGS_FILE, settings)
        (tmp / GITMEM_DIR).mkdir(exist_ok=True)
        cfg = repo.config
        cfg["gc.auto"] = 6700
        cfg["core.logAllRefUpdates"] = False
        repo.free()
        from gitmem.hookinstall import install_hooks

        install_hooks(tmp, label=name)  # pre-receive/post-receive shims + receive.* settings
        try:
            os.rename(tmp, final)
        except OSError:
            raise ConflictError(f"store {name!r} already exists at {final}") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    store = Store(_open_repo(final), final)
    from gitmem import ledger

    ledger.append(store, "store_created", {"id": settings.id, "name": name})
    return store


def list_stores(home: str | os.PathLike[str] | None = None) -> list[StoreSettings]:
    """Settings of every store in the workspace, sorted by name."""
    base = stores_dir(home)
    if not base.is_dir():
        return []
    out = []
    for entry in sorted(base.iterdir()):
        if entry.name.endswith(".git") and (entry / config.SETTINGS_FILE).exists():
            out.append(config.load_settings(entry / config.SETTINGS_FILE))
    return out


def delete_store(name: str, home: str | os.PathLike[str] | None = None) -> Path:
    """Delete a store and all its memories and versions, permanently."""
    path = store_path(name, home)
    if not path.is_dir():
        raise NotFoundError(f"store {name!r} does not exist in {stores_dir(home)}")
    trash = path.parent / f".{name}.deleting-{os.getpid()}"
    os.rename(path, trash)  # atomic: the store vanishes at once, then the files go
    shutil.rmtree(trash)
    return path
