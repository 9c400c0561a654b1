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
from typing import TYPE_CHECKING, Any

import pygit2

from gitmem import config
from gitmem.config import StoreSettings
from gitmem.engine.batch import BatchOp, BatchResult
from gitmem.engine.core import GITMEM_DIR, StoreCore, delete_store, list_stores, store_path
from gitmem.engine.resolve import (
    StoreRef,
    all_refs,
    check_full_name_free,
    full_name_lock,
    handle_path,
    resolve_store,
    stores_dir,
)
from gitmem.errors import ConflictError, InvalidInputError
from gitmem.git.repo import open_repository
from gitmem.ids import is_id, new_id
from gitmem.model.caller import Caller
from gitmem.model.guard import GuardPolicy
from gitmem.model.paths import validate_display_name
from gitmem.push import replica as _replica  # noqa: F401  (registers the push of rewrites to replicas)
from gitmem.push import spool as _spool  # noqa: F401  (registers the recording of spooled pushes)

if TYPE_CHECKING:
    from gitmem.audit.redact import Redaction
    from gitmem.audit.restore import Restored
    from gitmem.engine.hybrid import SearchResults
    from gitmem.engine.memories import Memory, Prefix
    from gitmem.model.versions import Version

__all__ = [
    "BatchOp",
    "BatchResult",
    "Store",
    "StoreRef",
    "all_refs",
    "handle_path",
    "resolve_store",
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
    def id(self) -> str:
        """The store id (``memstore_<ULID>``): what grants, sessions and URLs refer to."""
        return self._core.settings.id

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
        name: str | None = None,
        description: str | None = None,
        metadata: dict[str, str] | None = None,
        limits: config.Limits | None = None,
        retention: config.Retention | None = None,
        acl: dict[str, object] | None = None,
        archived_at: str | None = None,
        require_trailers: bool | None = None,
        guard: GuardPolicy | dict[str, object] | None = None,
        full_name: str | None = None,
    ) -> StoreSettings:
        """Change settings and save them atomically; every change is a ledger entry. ``guard`` is
        a :class:`GuardPolicy` or its ``gitmem.yaml`` mapping (validated the same way). ``name``
        renames the store (free text; its id, directory and git URL stay: docs/stores.md)."""
        changes: dict[str, object] = {}
        if name is not None:
            validate_display_name(name)
        for key, value in (
            ("name", name),
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
        if full_name is not None and full_name != self._core.settings.full_name:
            home = self.path.parent.parent  # <home>/stores/<handle>.git
            with full_name_lock(home):
                check_full_name_free(full_name, home, but=self.id)
                return self._core.update_settings(actor=actor, full_name=full_name, **changes)
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
        caller: Caller | None = None,
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
            caller=caller,
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
        caller: Caller | None = None,
    ) -> Version:
        """Create a memory; never overwrites (PathConflictError names the conflicting path)."""
        from gitmem.engine import memories

        return memories.create(
            self._core,
            path,
            content,
            scope=scope,
            description=description,
            actor=actor,
            session=session,
            caller=caller,
        )

    def read(
        self,
        path: str,
        *,
        scope: str = "main",
        version: str | None = None,
        session: str | None = None,
        actor: str | None = None,
        caller: Caller | None = None,
        at: str | None = None,
    ) -> Memory:
        """A memory at the scope's head, or at ``version``, or as the scope held it ``at`` a time,
        version or commit (docs/point-in-time.md). A reader with an open proposal on the scope
        (``session``/``actor``, or a review-mode ``caller``) sees it on top (never at ``at``)."""
        from gitmem.engine import access, memories, proposals

        access.admit_read(self._core, caller, scope)
        if at is not None:
            if version is not None:
                raise InvalidInputError("give a version or an at, not both")
            from gitmem.engine import past

            return past.read_at(self._core, path, scope=scope, at=at)
        if caller is None:
            owner = proposals.reader(actor, session) if version is None else None
        else:
            owner = access.reader(caller, actor, session) if version is None else None
        if owner is not None:
            mine = proposals.read_memory(self._core, path, scope, owner)
            if mine is not None:
                return mine  # type: ignore[no-any-return]
        return memories.read(self._core, path, scope=scope, version=version)

    def list(
        self,
        prefix: str = "/",
        *,
        scope: str = "main",
        depth: int = 0,
        with_content: bool = False,
        caller: Caller | None = None,
        at: str | None = None,
    ) -> builtins.list[Memory | Prefix]:
        """Memories under ``prefix`` (``depth=1``: immediate children, deeper ones rolled up); with
        ``at``, as the scope held them then (docs/point-in-time.md)."""
        from gitmem.engine import access, memories

        access.admit_read(self._core, caller, scope)

        if at is not None:
            from gitmem.engine import past

            return past.list_at(
                self._core, prefix, scope=scope, at=at, depth=depth, with_content=with_content
            )

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
        caller: Caller | None = None,
    ) -> Version | None:
        """Replace the one occurrence of ``old`` by ``new`` (several or none: InvalidInputError)."""
        from gitmem.engine import memories

        return memories.str_replace(
            self._core,
            path,
            old,
            new,
            scope=scope,
            if_sha256=if_sha256,
            actor=actor,
            session=session,
            caller=caller,
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
        caller: Caller | None = None,
    ) -> Version | None:
        """Insert ``text`` after line ``line`` (0: at the top)."""
        from gitmem.engine import memories

        return memories.insert(
            self._core,
            path,
            line,
            text,
            scope=scope,
            if_sha256=if_sha256,
            actor=actor,
            session=session,
            caller=caller,
        )

    def delete(
        self,
        path: str,
        *,
        scope: str = "main",
        if_sha256: str | None = None,
        actor: str | None = None,
        session: str | None = None,
        caller: Caller | None = None,
    ) -> Version:
        """Delete a memory (its versions stay in history)."""
        from gitmem.engine import memories

        return memories.delete(
            self._core, path, scope=scope, if_sha256=if_sha256, actor=actor, session=session, caller=caller
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
        caller: Caller | None = None,
    ) -> Version | None:
        """Move a memory to a new path (the same memory id; a conflict raises PathConflictError)."""
        from gitmem.engine import memories

        return memories.rename(
            self._core,
            old_path,
            new_path,
            scope=scope,
            if_sha256=if_sha256,
            actor=actor,
            session=session,
            caller=caller,
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

    def state_at(
        self, at: str, *, scope: str = "main", caller: Caller | None = None
    ) -> tuple[str | None, str | None]:
        """Which state of ``scope`` the moment ``at`` (a time, version or commit) names: ``(commit id,
        version time)``, both None before the scope's first version (docs/point-in-time.md); a
        read-only session mount of a past state uses it."""
        from gitmem.engine import access, past

        access.admit_read(self._core, caller, scope)
        state = past.state_at(self._core, scope, at)
        return state.commit, state.time

    def diff_at(self, start: str, end: str, *, scope: str = "main") -> str:
        """The whole scope's unified diff between two moments (times, versions or commits): what
        ``git diff`` of the two trees prints (docs/point-in-time.md)."""
        from gitmem.engine import past

        return past.diff_between(self._core, scope, start, end)

    def restore(
        self,
        version_id: str,
        *,
        actor: str | None = None,
        session: str | None = None,
        scope: str | None = None,
        caller: Caller | None = None,
    ) -> Version | None:
        """Write an old version's content back as a new version (no history rewrite), in ``scope``
        (default: the scope :meth:`version` answers for)."""
        from gitmem.engine import history

        return history.restore(
            self._core, version_id, actor=actor, session=session, scope=scope, caller=caller
        )

    def redact(
        self, version_id: str, *, reason: str, actor: str | None = None, caller: Caller | None = None
    ) -> Redaction:
        """Erase a version's content from history, keeping who and when (see docs/security.md).
        With a ``caller``: it needs the ``redact`` right, may not be in review mode and must be able
        to write every scope whose history holds that content (docs/access.md)."""
        from gitmem.audit import redact

        return redact.redact(self._core, version_id, reason=reason, actor=actor, caller=caller)

    def redact_pattern(
        self,
        pattern: str,
        *,
        reason: str,
        scope: str | None = None,
        actor: str | None = None,
        dry_run: bool = False,
        caller: Caller | None = None,
    ) -> Redaction:
        """Redact every match of ``pattern`` in history (``scope`` only when given)."""
        from gitmem.audit import redact

        return redact.redact_pattern(
            self._core, pattern, reason=reason, scope=scope, actor=actor, dry_run=dry_run, caller=caller
        )

    def batch(
        self,
        ops: builtins.list[BatchOp],
        *,
        scope: str = "main",
        actor: str | None = None,
        session: str | None = None,
        skip_refused: bool = False,
        caller: Caller | None = None,
    ) -> BatchResult:
        """Apply ``ops`` (:class:`BatchOp`) in order as one version each, moving the scope once
        (a review-mode ``caller``: onto its proposal); ``skip_refused`` keeps going past refusals."""
        from gitmem.engine.batch import apply_batch

        return apply_batch(
            self._core,
            ops,
            scope=scope,
            actor=actor,
            session=session,
            skip_refused=skip_refused,
            caller=caller,
        )

    def check_writable(self) -> None:
        """ForbiddenError when nothing may be written: an archived store, or a read-only clone."""
        self._core.check_writable()

    def redaction_receipt(self, redaction_id: str) -> dict[str, Any]:
        """The tlog-proof receipt of a redaction, ``pending`` until the witnesses' quorum cosigned
        (docs/transparency.md#receipts)."""
        from gitmem.audit import redaction_receipts as rr

        return rr.receipt(self._core, redaction_id, rr.workspace_policy(self._core)).to_dict()

    def search(
        self,
        query: str,
        *,
        scope: str = "main",
        limit: int = 10,
        path_prefix: str | None = None,
        raw: bool = False,
        caller: Caller | None = None,
        mode: str = "lexical",
        at: str | None = None,
    ) -> SearchResults:
        """Memories at the head of ``scope`` matching ``query``, best first. ``mode``: ``lexical``,
        ``semantic``, ``hybrid`` or ``auto`` (docs/search.md); the result's ``mode`` says which answered.
        With ``at``: lexical search over the scope as it was then (docs/point-in-time.md)."""
        from gitmem.engine import access, hybrid

        access.admit_read(self._core, caller, scope)

        if at is not None:
            return hybrid.search_at(
                self._core, query, scope=scope, at=at, limit=limit, path_prefix=path_prefix, mode=mode
            )

        return hybrid.search(
            self._core, query, scope=scope, limit=limit, path_prefix=path_prefix, raw=raw, mode=mode
        )


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
    full_name: str | None = None,
) -> Store:
    """Create a store: a bare repository with its settings, hooks installed, atomically; the
    ledger records ``actor`` (default ``service:gitmem``) as its creator.

    ``name`` is free text (1-255 characters, no control characters) and need not be unique: the
    store's directory and git URL follow its new id (docs/stores.md). ``full_name`` records the
    Databricks ``catalog.schema.name`` (unique: ConflictError when another store has it)."""
    validate_display_name(name)
    config.validate_description(description)
    meta = config.validate_metadata(metadata or {})
    if full_name is not None:
        with full_name_lock(home):  # the check and the store's arrival, as one step
            check_full_name_free(full_name, home)
            return _create(name, description, meta, limits, retention, home, actor, full_name)
    return _create(name, description, meta, limits, retention, home, actor, None)


def _create(
    name: str,
    description: str,
    meta: dict[str, str],
    limits: config.Limits | None,
    retention: config.Retention | None,
    home: str | os.PathLike[str] | None,
    actor: str | None,
    full_name: str | None,
) -> Store:
    store_id = new_id("memstore")
    final = handle_path(store_id, home)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{store_id}.creating-{os.getpid()}-{secrets.token_hex(6)}"
    try:
        repo = pygit2.init_repository(str(tmp), bare=True, initial_head="main")
        now = config.now_rfc3339()
        settings = StoreSettings(
            id=store_id,
            full_name=full_name,
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
            raise ConflictError(f"store {store_id} already exists at {final}") from None
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

    validate_display_name(name)
    config.validate_description(description)
    meta = config.validate_metadata(metadata or {})
    if not source.scopes():  # nothing to bundle: an empty store like it
        with create_store(name, description=description, metadata=meta, limits=source.settings.limits,
                          retention=source.settings.retention, home=home, actor=actor) as empty:  # fmt: skip
            empty.update_settings(actor=actor, acl=source.settings.acl, guard=source.settings.guard)
            record_copy(source.core, empty.core, actor=actor)
            copy_id = empty.id
        return open_store(copy_id, home)  # by id: the copy may share its name with the source
    from gitmem.engine.transfer import export_bundle

    with tempfile.TemporaryDirectory(prefix="gitmem-copy-") as tmp:
        bundle, backup = Path(tmp) / "source.bundle", Path(tmp) / "backup"
        backup.mkdir()
        export_bundle(source.core, bundle)
        write_backup(source.core, backup, name, description, meta)
        restored = restore_store(name, bundle, backup=backup, home=home, actor=actor)
    copy = open_store(restored.settings.id, home)  # by id: names need not be unique
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

    install_hooks(git_dir, label=settings.id)  # pre-receive/post-receive shims + receive.* settings


def restore_store(
    name: str,
    bundle: str | os.PathLike[str],
    *,
    backup: str | os.PathLike[str] | None = None,
    description: str | None = None,
    home: str | os.PathLike[str] | None = None,
    actor: str | None = None,
    allow_unverified: bool = False,
    keep_id: bool = False,
) -> Restored:
    """Create a store named ``name`` from a ``gitmem export --format bundle`` file: every scope
    with its versions and ids, and the audit ledger, continued by one ``store_created`` entry
    naming the bundle.

    ``backup`` is a directory with the private files a bundle cannot carry (``gitmem.yaml``,
    ``secret``, ``denylist``, ``ledger_head``; docs/operations.md#backup): settings come from its
    ``gitmem.yaml`` (renamed to ``name``), else they are new ones. The store id: the original's
    (the backup's, else the one the ledger recorded) when no store of the workspace has it, else a
    new one, so that a restore next to its original never shares its id, grants or URL
    (docs/stores.md); ``keep_id`` insists on the original's and is refused (ConflictError) while
    that store exists. The restored store is checked as ``gitmem verify`` does; when a check fails
    nothing is left in the workspace (IntegrityError naming the checks), unless
    ``allow_unverified``. Bad input (not a bundle, foreign refs, a bad backup file) changes nothing.
    """
    import dataclasses
    import secrets

    from gitmem.audit import restore
    from gitmem.errors import IntegrityError

    validate_display_name(name)
    if description is not None:
        config.validate_description(description)
    bundle_path = Path(bundle)
    refs = restore.bundle_refs(bundle_path)
    files, saved = restore.read_private(Path(backup) if backup is not None else None)
    if saved is not None and description is not None:
        raise InvalidInputError("the backup's gitmem.yaml sets the description: give no --description")
    base = stores_dir(home)
    base.mkdir(parents=True, exist_ok=True)
    digest = restore.file_sha256(bundle_path)
    tmp = base / f".restoring-{secrets.token_hex(8)}"
    tmp.mkdir()  # exclusive, and with the umask's mode like any store (mkdtemp would make it 0700)
    final: Path | None = None
    try:
        repo = pygit2.init_repository(str(tmp), bare=True, initial_head="main")
        restore.fetch_bundle(tmp, bundle_path, refs)
        restore.install_private(tmp, files)
        recorded = _bundle_store_id(tmp)
        if saved is not None and recorded is not None and saved.id != recorded:
            raise InvalidInputError(
                f"{backup}: its gitmem.yaml holds the settings of store {saved.id}, but the bundle is "
                f"of store {recorded}: give the backup made with this bundle"
            )
        original = saved.id if saved is not None else recorded
        store_id = _restored_id(original, keep_id, home)
        final = handle_path(store_id, home)
        now = config.now_rfc3339()
        settings = (
            dataclasses.replace(saved, id=store_id, name=name)
            if saved is not None
            else StoreSettings(
                id=store_id, name=name, description=description or "", created_at=now, updated_at=now
            )
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
            raise ConflictError(f"store {store_id} already exists at {final}") from None
    finally:
        restore.forget_caches(tmp)
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return restore.Restored(settings, digest, scopes, count, sorted(files), report)


def _restored_id(original: str | None, keep_id: bool, home: str | os.PathLike[str] | None) -> str:
    """The id of a restored store: the original's unless a store of the workspace has it."""
    if original is None or not is_id(original, "memstore"):
        if keep_id:
            raise InvalidInputError("--keep-id: the bundle records no store id to keep")
        return new_id("memstore")
    if any(ref.id == original for ref in all_refs(home)):
        if keep_id:
            raise ConflictError(
                f"store {original} still exists: a restore keeps its id only when the original is "
                "gone (delete it first, or restore without --keep-id to get a new id)"
            )
        return new_id("memstore")
    return original


def _bundle_store_id(git_dir: Path) -> str | None:
    from gitmem.audit.restore import ledger_store_id

    with StoreCore(open_repository(git_dir), git_dir) as core:
        return ledger_store_id(core)
