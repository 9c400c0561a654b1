"""``Store``: the public facade of a memory store.

Every method spells its parameters out (IDEs, ``help()`` and mypy see them) and calls one verb of
the layers below (``gitmem.engine``, ``gitmem.audit``). Nothing internal is on it: gitmem's own
layers work with the handle :class:`gitmem.engine.core.StoreCore` (``store.core``); see
docs/architecture.md.
"""

# size-ok: the facade spells out every parameter of every verb (typed, no **kwargs) and delegates;
# it is long by design and flat: no logic of its own to split along.
from __future__ import annotations

import builtins
import datetime as dt
import os
import secrets
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2

from gitmem import config
from gitmem.config import StoreSettings
from gitmem.engine.core import GITMEM_DIR, StoreCore, delete_store, list_stores, store_path, stores_dir
from gitmem.errors import ConflictError, InvalidInputError
from gitmem.git.repo import open_repository
from gitmem.ids import new_id
from gitmem.model.guard import GuardPolicy
from gitmem.model.paths import validate_store_name
from gitmem.push import replica as _replica  # noqa: F401  (registers the push of rewrites to replicas)
from gitmem.push import spool as _spool  # noqa: F401  (registers the recording of spooled pushes)

if TYPE_CHECKING:
    from gitmem.audit.redact import Redaction
    from gitmem.audit.restore import Restored
    from gitmem.engine.memories import Memory, Prefix
    from gitmem.engine.search import SearchHit
    from gitmem.model.versions import Version

__all__ = [
    "Store",
    "copy_store",
    "create_store",
    "delete_store",
    "list_stores",
    "open_store",
    "restore_store",
    "store_path",
    "stores_dir",
]


class Store:
    """A memory store. Get one with :func:`open_store` or :func:`create_store`.

    A ``Store`` is safe to use from one thread at a time; see docs/architecture.md.
    """

    def __init__(self, core: StoreCore) -> None:
        self._core = core

    @property
    def core(self) -> StoreCore:
        """The store handle gitmem's own layers work with (repository, index, settings)."""
        return self._core

    # ------------------------------------------------------------------ identity and settings
    @property
    def name(self) -> str:
        return self._core.name

    @property
    def path(self) -> Path:
        """The bare repository (or a clone's git directory)."""
        return self._core.path

    @property
    def settings(self) -> StoreSettings:
        """The store's settings (re-read when ``gitmem.yaml`` changed)."""
        return self._core.settings

    @property
    def is_clone(self) -> bool:
        """True for a clone made for offline inspection (read-only)."""
        return self._core.is_clone

    def scopes(self) -> builtins.list[str]:
        """Every scope with at least one version, sorted."""
        return self._core.scopes()

    def update_settings(
        self,
        *,
        actor: str | None = None,
        description: str | None = None,
        metadata: dict[str, str] | None = None,
        limits: config.Limits | None = None,
        retention: config.Retention | None = None,
        acl: dict[str, object] | None = None,
        archived_at: str | None = None,
        require_trailers: bool | None = None,
        guard: GuardPolicy | dict[str, object] | None = None,
    ) -> StoreSettings:
        """Change settings and save them atomically; every change is a ledger entry. ``guard`` is
        a :class:`GuardPolicy` or its ``gitmem.yaml`` mapping (validated the same way)."""
        changes: dict[str, object] = {}
        for key, value in (
            ("description", description),
            ("metadata", metadata),
            ("limits", limits),
            ("retention", retention),
            ("acl", acl),
            ("archived_at", archived_at),
            ("require_trailers", require_trailers),
            ("guard", guard.to_dict() if isinstance(guard, GuardPolicy) else guard),
        ):
            if value is not None:
                changes[key] = value
        return self._core.update_settings(actor=actor, **changes)

    def close(self) -> None:
        self._core.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    # ------------------------------------------------------------------ memories
    def write(
        self,
        path: str,
        content: str | bytes,
        *,
        scope: str = "main",
        description: str | None = None,
        if_sha256: str | None = None,
        actor: str | None = None,
        session: str | None = None,
    ) -> Version | None:
        """Create or replace a memory; None when nothing changed."""
        from gitmem.engine import memories

        return memories.write(
            self._core,
            path,
            content,
            scope=scope,
            description=description,
            if_sha256=if_sha256,
            actor=actor,
            session=session,
        )

    def create(
        self,
        path: str,
        content: str | bytes,
        *,
        scope: str = "main",
        description: str | None = None,
        actor: str | None = None,
        session: str | None = None,
    ) -> Version:
        """Create a memory; never overwrites (PathConflictError names the conflicting path)."""
        from gitmem.engine import memories

        return memories.create(
            self._core, path, content, scope=scope, description=description, actor=actor, session=session
        )

    def read(
        self,
        path: str,
        *,
        scope: str = "main",
        version: str | None = None,
        session: str | None = None,
        actor: str | None = None,
    ) -> Memory:
        """A memory at the scope's head, or at ``version``. A reader with an open proposal on the
        scope (``session``/``actor``, or the owner set by ``proposals.reviewing``) sees it on top."""
        from gitmem.engine import memories, proposals

        owner = proposals.reader(actor, session) if version is None else None
        if owner is not None:
            mine = proposals.read_memory(self._core, path, scope, owner)
            if mine is not None:
                return mine  # type: ignore[no-any-return]
        return memories.read(self._core, path, scope=scope, version=version)

    def list(
        self, prefix: str = "/", *, scope: str = "main", depth: int = 0, with_content: bool = False
    ) -> builtins.list[Memory | Prefix]:
        """Memories under ``prefix`` (``depth=1``: immediate children, deeper ones rolled up)."""
        from gitmem.engine import memories

        return memories.list_memories(self._core, prefix, scope=scope, depth=depth, with_content=with_content)

    def str_replace(
        self,
        path: str,
        old: str,
        new: str,
        *,
        scope: str = "main",
        if_sha256: str | None = None,
        actor: str | None = None,
        session: str | None = None,
    ) -> Version | None:
        """Replace the one occurrence of ``old`` by ``new`` (several or none: InvalidInputError)."""
        from gitmem.engine import memories

        return memories.str_replace(
            self._core, path, old, new, scope=scope, if_sha256=if_sha256, actor=actor, session=session
        )

    def insert(
        self,
        path: str,
        line: int,
        text: str,
        *,
        scope: str = "main",
        if_sha256: str | None = None,
        actor: str | None = None,
        session: str | None = None,
    ) -> Version | None:
        """Insert ``text`` after line ``line`` (0: at the top)."""
        from gitmem.engine import memories

        return memories.insert(
            self._core, path, line, text, scope=scope, if_sha256=if_sha256, actor=actor, session=session
        )

    def delete(
        self,
        path: str,
        *,
        scope: str = "main",
        if_sha256: str | None = None,
        actor: str | None = None,
        session: str | None = None,
    ) -> Version:
        """Delete a memory (its versions stay in history)."""
        from gitmem.engine import memories

        return memories.delete(
            self._core, path, scope=scope, if_sha256=if_sha256, actor=actor, session=session
        )

    def rename(
        self,
        old_path: str,
        new_path: str,
        *,
        scope: str = "main",
        if_sha256: str | None = None,
        actor: str | None = None,
        session: str | None = None,
    ) -> Version | None:
        """Move a memory to a new path (the same memory id; a conflict raises PathConflictError)."""
        from gitmem.engine import memories

        return memories.rename(
            self._core, old_path, new_path, scope=scope, if_sha256=if_sha256, actor=actor, session=session
        )

    # ------------------------------------------------------------------ history
    def versions(
        self,
        path: str | None = None,
        *,
        memory_id: str | None = None,
        scope: str | None = None,
        session: str | None = None,
        actor: str | None = None,
        operation: str | None = None,
        since: dt.datetime | None = None,
        until: dt.datetime | None = None,
        limit: int | None = None,
    ) -> builtins.list[Version]:
        """Versions, newest first, filtered by path/memory, scope, session, actor, operation, time."""
        from gitmem.engine import history

        return history.versions(
            self._core,
            path,
            memory_id=memory_id,
            scope=scope,
            session=session,
            actor=actor,
            operation=operation,
            since=since,
            until=until,
            limit=limit,
        )

    def version(self, version_id: str, *, scope: str | None = None) -> Version:
        """One version by id; ``scope`` picks that scope's row of a version forked scopes share
        (without it: main first, then by scope name)."""
        from gitmem.engine import history

        return history.version(self._core, version_id, scope)

    def diff(self, old_id: str, new_id: str | None = None) -> str:
        """A unified diff from ``old_id`` to ``new_id`` (default: from the version before ``old_id``)."""
        from gitmem.engine import history

        return history.diff(self._core, old_id, new_id)

    def restore(
        self,
        version_id: str,
        *,
        actor: str | None = None,
        session: str | None = None,
        scope: str | None = None,
    ) -> Version | None:
        """Write an old version's content back as a new version (no history rewrite), in ``scope``
        (default: the scope :meth:`version` answers for)."""
        from gitmem.engine import history

        return history.restore(self._core, version_id, actor=actor, session=session, scope=scope)

    def redact(self, version_id: str, *, reason: str, actor: str | None = None) -> Redaction:
        """Erase a version's content from history, keeping who and when (see docs/security.md)."""
        from gitmem.audit import redact

        return redact.redact(self._core, version_id, reason=reason, actor=actor)

    def search(
        self,
        query: str,
        *,
        scope: str = "main",
        limit: int = 10,
        path_prefix: str | None = None,
        raw: bool = False,
    ) -> builtins.list[SearchHit]:
        """Memories at the head of ``scope`` matching ``query``, best first."""
        from gitmem.engine import search

        return search.search(self._core, query, scope=scope, limit=limit, path_prefix=path_prefix, raw=raw)


# ---------------------------------------------------------------------- open / create / list
def open_store(name_or_path: str | os.PathLike[str], home: str | os.PathLike[str] | None = None) -> Store:
    """A store by name in the workspace, or by path to a bare store or a clone of one.

    A history rewrite (redaction, compaction) killed half-way is finished or rolled back first."""
    from gitmem.audit.journal import open_recovered
    from gitmem.engine.ledger import check_hand_edit

    core = open_recovered(name_or_path, home)
    check_hand_edit(core)  # a hand edit of gitmem.yaml is recorded, unattributed (docs/identity.md)
    return Store(core)


def create_store(
    name: str,
    *,
    description: str = "",
    metadata: dict[str, str] | None = None,
    limits: config.Limits | None = None,
    retention: config.Retention | None = None,
    home: str | os.PathLike[str] | None = None,
    actor: str | None = None,
) -> Store:
    """Create a store: a bare repository with its settings, hooks installed, atomically; the
    ledger records ``actor`` (default ``service:gitmem``) as its creator."""
    validate_store_name(name)
    config.validate_description(description)
    meta = config.validate_metadata(metadata or {})
    final = store_path(name, home)
    if final.exists():
        raise ConflictError(f"store {name!r} already exists at {final}")
    final.parent.mkdir(parents=True, exist_ok=True)
    # Unique per attempt: threads of one process creating the same name must not share it.
    tmp = final.parent / f".{name}.creating-{os.getpid()}-{secrets.token_hex(6)}"
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
        _configure(tmp, repo, settings)
        try:
            os.rename(tmp, final)
        except OSError:
            raise ConflictError(f"store {name!r} already exists at {final}") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    core = StoreCore(open_repository(final), final)
    from gitmem.engine import ledger

    ledger.append(core, "store_created", {"id": settings.id, "name": name}, actor=actor)
    ledger.remember_settings(core)
    return Store(core)


def copy_store(
    source: Store,
    name: str,
    *,
    description: str = "",
    metadata: dict[str, str] | None = None,
    home: str | os.PathLike[str] | None = None,
    actor: str | None = None,
) -> Store:
    """A new store ``name`` holding every scope of ``source`` with its history (the same commits,
    versions and ids) and its ledger continued, with the source's limits, acl and guard; ``source``
    is only read. Made as a backup is restored (``restore_store``) and verified the same way; its
    ledger ends with ``store_copied`` naming the source."""
    import tempfile

    from gitmem.engine.copying import record_copy, write_backup

    validate_store_name(name)
    config.validate_description(description)
    meta = config.validate_metadata(metadata or {})
    if not source.scopes():  # nothing to bundle: an empty store like it
        with create_store(name, description=description, metadata=meta, limits=source.settings.limits,
                          retention=source.settings.retention, home=home, actor=actor) as empty:  # fmt: skip
            empty.update_settings(actor=actor, acl=source.settings.acl, guard=source.settings.guard)
            record_copy(source.core, empty.core, actor=actor)
        return open_store(name, home)
    from gitmem.engine.transfer import export_bundle

    with tempfile.TemporaryDirectory(prefix="gitmem-copy-") as tmp:
        bundle, backup = Path(tmp) / "source.bundle", Path(tmp) / "backup"
        backup.mkdir()
        export_bundle(source.core, bundle)
        write_backup(source.core, backup, name, description, meta)
        restore_store(name, bundle, backup=backup, home=home, actor=actor)
    copy = open_store(name, home)
    record_copy(source.core, copy.core, actor=actor)
    return copy


def _configure(git_dir: Path, repo: pygit2.Repository, settings: StoreSettings) -> None:
    """Settings, git config and hooks of a new store's repository (not yet in the workspace)."""
    # The checks a later open applies: bad limits refuse the store now, not brick it then.
    config.settings_from_dict(settings.to_dict(), f"settings of new store {settings.name!r}")
    config.save_settings(git_dir / config.SETTINGS_FILE, settings)
    (git_dir / GITMEM_DIR).mkdir(exist_ok=True)
    cfg = repo.config
    cfg["gc.auto"] = 6700  # gc.autoPackLimit: set with the hooks (gitmem.push.hookinstall)
    cfg["core.logAllRefUpdates"] = False
    repo.free()
    from gitmem.push.hookinstall import install_hooks

    install_hooks(git_dir, label=settings.name)  # pre-receive/post-receive shims + receive.* settings


def restore_store(
    name: str,
    bundle: str | os.PathLike[str],
    *,
    backup: str | os.PathLike[str] | None = None,
    description: str | None = None,
    home: str | os.PathLike[str] | None = None,
    actor: str | None = None,
    allow_unverified: bool = False,
) -> Restored:
    """Create store ``name`` from a ``gitmem export --format bundle`` file: every scope with its
    versions and ids, and the audit ledger, continued by one ``store_created`` entry naming the bundle.

    ``backup`` is a directory with the private files a bundle cannot carry (``gitmem.yaml``,
    ``secret``, ``denylist``, ``ledger_head``; docs/operations.md#backup): settings come from its
    ``gitmem.yaml`` (which must be the settings of store ``name``), else they are new ones keeping
    the store id the ledger recorded. The restored store is checked as ``gitmem verify`` does; when
    a check fails nothing is left in the workspace (IntegrityError naming the checks), unless
    ``allow_unverified``. Bad input (not a bundle, foreign refs, a bad backup file) changes nothing.
    """
    import secrets

    from gitmem.audit import restore
    from gitmem.errors import IntegrityError

    validate_store_name(name)
    if description is not None:
        config.validate_description(description)
    bundle_path = Path(bundle)
    refs = restore.bundle_refs(bundle_path)
    files, saved = restore.read_private(Path(backup) if backup is not None else None)
    if saved is not None and saved.name != name:
        raise InvalidInputError(
            f"{backup}: its gitmem.yaml holds the settings of store {saved.name!r}, not {name!r}: "
            "restore a store under its own name"
        )
    if saved is not None and description is not None:
        raise InvalidInputError("the backup's gitmem.yaml sets the description: give no --description")
    final = store_path(name, home)
    if final.exists():
        raise ConflictError(f"store {name!r} already exists at {final}")
    final.parent.mkdir(parents=True, exist_ok=True)
    digest = restore.file_sha256(bundle_path)
    tmp = final.parent / f".{name}.restoring-{secrets.token_hex(8)}"
    tmp.mkdir()  # exclusive, and with the umask's mode like any store (mkdtemp would make it 0700)
    try:
        repo = pygit2.init_repository(str(tmp), bare=True, initial_head="main")
        restore.fetch_bundle(tmp, bundle_path, refs)
        restore.install_private(tmp, files)
        now = config.now_rfc3339()
        settings = saved or StoreSettings(
            id=_bundle_store_id(tmp) or new_id("memstore"),
            name=name,
            description=description or "",
            created_at=now,
            updated_at=now,
        )
        _configure(tmp, repo, settings)
        with StoreCore(open_repository(tmp), tmp) as core:
            count, report = restore.record_and_verify(core, bundle_path, digest, refs, sorted(files), actor)
            scopes = core.scopes()
        restore.forget_caches(tmp)
        if not report.ok and not allow_unverified:
            failed = "; ".join(f"{c.name}: {c.detail}" for c in report.checks if not c.ok)
            raise IntegrityError(
                f"the store restored from {bundle_path} does not verify, so it was not kept: {failed} "
                "(--backup DIR brings the secret, deny-list and ledger anchor; --allow-unverified keeps it)"
            )
        try:
            os.rename(tmp, final)
        except OSError:
            raise ConflictError(f"store {name!r} already exists at {final}") from None
    finally:
        restore.forget_caches(tmp)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return restore.Restored(settings, digest, scopes, count, sorted(files), report)


def _bundle_store_id(git_dir: Path) -> str | None:
    from gitmem.audit.restore import ledger_store_id

    with StoreCore(open_repository(git_dir), git_dir) as core:
        return ledger_store_id(core)
