"""Which store a text names: the one resolver every face uses (docs/stores.md).

A store's directory is ``<home>/stores/<handle>.git``. The handle is fixed when the store is made
and never changes: a store made by this release has its id as handle (``memstore_<ULID>``); a store
of the old layout keeps the name it was made with (its directory is not moved, so clones, hooks and
sessions that know the path keep working). The display ``name`` is free text in ``gitmem.yaml``:
it may repeat and may change.

Precedence, so that a name that looks like an id or a path never shadows one:

1. a store id, or a store's handle (the directory stem);
2. a path to a store or a clone (text with a ``/``, starting with ``.`` or ending in ``.git``) that
   exists;
3. a display name, or a Databricks ``catalog.schema.name``, that exactly one store carries; several:
   :class:`gitmem.errors.AmbiguousStoreError` (exit 4) listing them by id.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from gitmem import config
from gitmem.config import StoreSettings
from gitmem.errors import AmbiguousStoreError, ConfigError, ConflictError, InvalidInputError, NotFoundError
from gitmem.git.locks import file_lock
from gitmem.ids import is_id
from gitmem.model.paths import is_store_handle


@dataclass(frozen=True)
class StoreRef:
    """A store of the workspace as the resolver found it."""

    handle: str  # the directory stem: the id, or the old layout's name
    path: Path
    settings: StoreSettings

    @property
    def id(self) -> str:
        return self.settings.id

    @property
    def name(self) -> str:
        return self.settings.name

    @property
    def full_name(self) -> str | None:
        """The Databricks ``catalog.schema.name``: the recorded one, else (a store the Databricks
        face made before names were free text) the handle when it has that shape."""
        if self.settings.full_name is not None:
            return self.settings.full_name
        if not self.handle.startswith("memstore_") and len(self.handle.split(".")) == 3:
            return self.handle
        return None


def stores_dir(home: str | os.PathLike[str] | None = None) -> Path:
    return config.workspace_home(home) / "stores"


def handle_path(handle: str, home: str | os.PathLike[str] | None = None) -> Path:
    """``<home>/stores/<handle>.git`` (InvalidInputError for a text that can be no handle)."""
    if not is_store_handle(handle):
        raise InvalidInputError(f"invalid store handle {handle!r}: expected a store id")
    return stores_dir(home) / f"{handle}.git"


def _ref(path: Path, strict: bool = True) -> StoreRef | None:
    """The store at ``path``; a broken ``gitmem.yaml`` raises ConfigError, or (not ``strict``) is
    read for its id and name alone, so that the store can still be found (and its error shown
    when it is used) and one broken file never hides the other stores."""
    settings_file = path / config.SETTINGS_FILE
    try:
        # Through the JSON copy the receive hooks keep (validated all the same): a name is found
        # without importing yaml or parsing every store's file again (docs/performance.md).
        settings = config.load_settings_cached(settings_file, path / "gitmem" / config.SETTINGS_CACHE)
    except ConfigError:
        if not settings_file.exists():
            return None  # not a store, or deleted while we looked
        if strict:
            raise
        loose = _loose(settings_file)
        if loose is None:
            return None
        settings = loose
    return StoreRef(path.name[: -len(".git")], path, settings)


def _loose(settings_file: Path) -> StoreSettings | None:
    import yaml

    try:
        data = yaml.safe_load(settings_file.read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return None
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("id", "name")):
        return None
    full = data.get("full_name")
    return StoreSettings(id=data["id"], name=data["name"], full_name=full if isinstance(full, str) else None)


def by_handle(handle: str, home: str | os.PathLike[str] | None = None) -> StoreRef | None:
    """The store whose directory is ``<handle>.git``, or None."""
    if not is_store_handle(handle):
        return None
    return _ref(stores_dir(home) / f"{handle}.git", strict=False)


def all_refs(home: str | os.PathLike[str] | None = None, *, strict: bool = True) -> list[StoreRef]:
    """Every store of the workspace, sorted by name, then id (``strict``: a broken settings
    file raises ConfigError; else the store is listed by its id and name, see ``_ref``)."""
    base = stores_dir(home)
    if not base.is_dir():
        return []
    out = []
    for entry in base.iterdir():
        if entry.name.startswith(".") or not entry.name.endswith(".git"):
            continue  # a store being made, restored or deleted
        if not is_store_handle(entry.name[: -len(".git")]):
            continue
        ref = _ref(entry, strict)
        if ref is not None:
            out.append(ref)
    out.sort(key=lambda r: (r.name, r.id))
    return out


def looks_like_path(text: str) -> bool:
    return os.sep in text or text.startswith(".") or text.endswith(".git")


def resolve(
    text: str | os.PathLike[str], home: str | os.PathLike[str] | None = None, *, paths: bool = False
) -> StoreRef | Path:
    """The store ``text`` names (module docstring); with ``paths``, an existing path given as
    such comes back as that (resolved) Path, for the caller to open (it may be a clone)."""
    raw = os.fspath(text)
    if not raw:
        raise InvalidInputError("no store named: give a store id or name")
    if is_id(raw, "memstore"):
        ref = by_handle(raw, home)
        if ref is not None and ref.id == raw:
            return ref
        for ref in all_refs(home, strict=False):  # the old layout: the directory is the first name
            if ref.id == raw:
                return ref
    elif is_store_handle(raw):
        ref = by_handle(raw, home)
        if ref is not None:
            return ref
    if paths and looks_like_path(raw):
        path = Path(raw).expanduser()
        if path.exists():
            return path.resolve()
    found = [r for r in all_refs(home, strict=False) if raw in (r.name, r.full_name)]
    if len(found) == 1:
        return found[0]
    if found:
        ids = [r.id for r in found]
        raise AmbiguousStoreError(
            f"store name {raw!r} is ambiguous: {len(ids)} stores carry it ({', '.join(ids)}); name one by id",
            ids,
        )
    if paths and looks_like_path(raw):
        raise NotFoundError(f"no store at {Path(raw).expanduser().resolve()}")
    raise NotFoundError(f"store {raw!r} does not exist in {stores_dir(home)}")


def resolve_store(text: str | os.PathLike[str], home: str | os.PathLike[str] | None = None) -> StoreRef:
    """The workspace store ``text`` names (never a bare path: faces that must not open any
    repository a request names use this)."""
    found = resolve(text, home)
    assert isinstance(found, StoreRef)
    return found


def full_name_lock(home: str | os.PathLike[str] | None = None) -> contextlib.AbstractContextManager[object]:
    """Held while a Databricks full name is claimed (created or renamed), in every process, so
    that two claims of one name cannot both pass the uniqueness check."""
    base = stores_dir(home)
    base.mkdir(parents=True, exist_ok=True)
    return file_lock(base / ".full-names.lock")


def check_full_name_free(
    full_name: str, home: str | os.PathLike[str] | None, *, but: str | None = None
) -> None:
    """ConflictError when a store other than ``but`` (an id) has ``full_name`` (hold the lock)."""
    for ref in all_refs(home, strict=False):
        if ref.full_name == full_name and ref.id != but:
            raise ConflictError(f"memory store {full_name} already exists ({ref.id})")
