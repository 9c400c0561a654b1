"""Creating stores: ``create_store``, ``copy_store`` and ``restore_store`` (a bundle and its backup)."""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from gitmem import config
from gitmem.config import StoreSettings
from gitmem.engine import events
from gitmem.engine.core import GITMEM_DIR
from gitmem.engine.core import delete_store as _delete_store
from gitmem.engine.opening import handle
from gitmem.engine.resolve import (
    all_refs,
    check_full_name_free,
    full_name_lock,
    handle_path,
    resolve_store,
    stores_dir,
)
from gitmem.errors import ConflictError, InvalidInputError
from gitmem.facade.handle import Store, open_store
from gitmem.git.repo import Repository, configure_new_store, init_bare_repository, open_repository
from gitmem.ids import is_id, new_id
from gitmem.model.paths import validate_display_name

if TYPE_CHECKING:
    from gitmem.audit.restore import Restored
    from gitmem.engine.core import StoreCore


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
    _screen(name, description, meta, actor)
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
        repo = init_bare_repository(tmp)
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
    core = handle(open_repository(final), final)
    from gitmem.engine import ledger

    ledger.append(core, "store_created", {"id": settings.id, "name": name}, actor=actor)
    ledger.remember_settings(core)
    events.record_store_event(final, "memory_store.created", store_id)
    return Store(core)


def delete_store(name_or_id: str, home: str | os.PathLike[str] | None = None) -> Path:
    """Delete a store (by id, handle or unique name) and all its memories and versions,
    permanently (:func:`gitmem.engine.core.delete_store`; journaled for webhooks)."""
    store_id = resolve_store(name_or_id, home).settings.id
    path = _delete_store(name_or_id, home)
    events.record_store_event(path, "memory_store.deleted", store_id)
    return path


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
    _screen(name, description, meta, actor, source.core)
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


def _screen(
    name: str,
    description: str | None,
    meta: dict[str, str],
    actor: str | None,
    source: StoreCore | None = None,
) -> None:
    """A new store's name, description and metadata, and the actor who makes it, go into its
    ledger: screened by the guard of new stores first (the actor also by the source's guard, which
    a copy takes; docs/guard.md#text-in-the-audit-ledger)."""
    from gitmem.engine import ledger_text
    from gitmem.engine.guard_policy import policy_for, policy_of

    new = policy_of(config.DEFAULT_GUARD)
    fields = {"name": name, "description": description or "", "metadata": meta}
    ledger_text.screen_settings([new], fields)
    ledger_text.screen_who(None, actor, policies=[new, *([policy_for(source)] if source else [])])


def _configure(git_dir: Path, repo: Repository, settings: StoreSettings) -> None:
    """Settings, git config and hooks of a new store's repository (not yet in the workspace)."""
    # The checks a later open applies: bad limits refuse the store now, not brick it then.
    config.settings_from_dict(settings.to_dict(), f"settings of new store {settings.name!r}")
    config.save_settings(git_dir / config.SETTINGS_FILE, settings)
    (git_dir / GITMEM_DIR).mkdir(exist_ok=True)
    configure_new_store(repo)
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
    _screen(name, description, {}, actor)
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
        repo = init_bare_repository(tmp)
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
        with handle(open_repository(tmp), tmp) as core:
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
    events.record_store_event(handle_path(settings.id, home), "memory_store.created", settings.id)
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

    with handle(open_repository(git_dir), git_dir) as core:
        return ledger_store_id(core)
