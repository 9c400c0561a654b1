"""``Store``: the public facade of a memory store, assembled from its verbs by concern
(:mod:`gitmem.facade.memories`, :mod:`gitmem.facade.history`, ...).

Every method spells its parameters out (IDEs, ``help()`` and mypy see them) and calls one verb of
the layers below (``gitmem.engine``, ``gitmem.audit``, ``gitmem.push``). Nothing internal is on it:
gitmem's own layers work with the handle :class:`gitmem.engine.core.StoreCore` (``store.core``);
faces never do (tests/project/test_faces_public_api.py); see docs/architecture.md.
"""

from __future__ import annotations

import builtins
import os
from pathlib import Path

from gitmem import config
from gitmem.config import StoreSettings
from gitmem.engine import events, settings_change
from gitmem.engine.core import StoreCore
from gitmem.engine.resolve import check_full_name_free, full_name_lock
from gitmem.facade.admin import Admin
from gitmem.facade.console_ops import ConsoleOps
from gitmem.facade.conversation_ops import ConversationOps
from gitmem.facade.files import Files
from gitmem.facade.history import History
from gitmem.facade.house_ops import HouseOps
from gitmem.facade.memories import Memories
from gitmem.facade.records import Records
from gitmem.facade.review import Review
from gitmem.facade.server_ops import ServerOps
from gitmem.model.guard import GuardPolicy
from gitmem.model.paths import validate_display_name


class Store(
    Memories, History, Review, Files, Admin, Records, ConsoleOps, ConversationOps, ServerOps, HouseOps
):
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
        was_archived = self._core.settings.archived_at is not None
        if full_name is not None and full_name != self._core.settings.full_name:
            home = self.path.parent.parent  # <home>/stores/<handle>.git
            with full_name_lock(home):
                check_full_name_free(full_name, home, but=self.id)
                new = settings_change.update_settings(self._core, actor=actor, full_name=full_name, **changes)
        else:
            new = settings_change.update_settings(self._core, actor=actor, **changes)
        if new.archived_at is not None and not was_archived:  # webhooks (docs/webhooks.md)
            events.record_store_event(self.path, "memory_store.archived", self.id)
        return new

    def hand_over(self) -> None:
        """This thread is done with the Store for now and another thread may use it next (a pool
        lending Stores): the next thread takes over its index connection instead of opening one
        of its own, so a Store lent thread after thread holds one connection. Call it only when no
        other thread uses the Store until then."""
        self._core.hand_over()

    def close(self) -> None:
        self._core.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"


# ---------------------------------------------------------------------- open / create / list
def open_store(name_or_path: str | os.PathLike[str], home: str | os.PathLike[str] | None = None) -> Store:
    """A store by name in the workspace, or by path to a bare store or a clone of one.

    A history rewrite (redaction, compaction) killed half-way is finished or rolled back first."""
    from gitmem.audit.journal import open_checked

    return Store(open_checked(name_or_path, home))  # a hand edit of gitmem.yaml is recorded too
