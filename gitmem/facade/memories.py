"""The memory verbs of :class:`gitmem.Store`: write, create, read, list, edit, delete, rename."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING

from gitmem.errors import InvalidInputError
from gitmem.model.caller import Caller

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore
    from gitmem.engine.memories import Memory, Prefix
    from gitmem.model.versions import Version


class Memories:
    """Memory verbs (mixed into :class:`gitmem.Store`)."""

    _core: StoreCore

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
