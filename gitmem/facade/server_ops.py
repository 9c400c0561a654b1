"""The verbs of :class:`gitmem.Store` that address a memory by its ``mem_`` id (as the Anthropic
memory stores API does), and a listing a page at a time as a reader sees it.

A review-mode reader sees its own open proposal on top of the scope (docs/review.md, "Reading"),
as :meth:`Store.read` shows it; ``at`` reads a past state (docs/point-in-time.md), which no
proposal is part of. Writes go through the engine's one write path (access, review routing, the
guard, limits, attribution).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gitmem.errors import NotFoundError
from gitmem.model.caller import Caller
from gitmem.model.paths import validate_path, validate_prefix, validate_scope

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore
    from gitmem.engine.memories import Memory
    from gitmem.engine.proposal_view import MemoryPage
    from gitmem.model.versions import Version


class ServerOps:
    """Memory verbs by id, and listing pages (mixed into :class:`gitmem.Store`)."""

    _core: StoreCore

    def memory_by_id(
        self,
        memory_id: str,
        *,
        scope: str = "main",
        with_content: bool = True,
        at: str | None = None,
        actor: str | None = None,
        session: str | None = None,
        caller: Caller | None = None,
    ) -> Memory:
        """The live memory with id ``memory_id`` (NotFoundError: none), or the one the scope held
        ``at`` a time, version or commit. A reader with an open proposal on the scope (a review-mode
        ``caller``, else ``session``/``actor``) sees it on top, as :meth:`read` does."""
        from gitmem.engine import access, proposal_view
        from gitmem.engine.rows import Memory

        validate_scope(scope)
        access.admit_read(self._core, caller, scope)
        if at is not None:
            from gitmem.engine import past

            for m in past.list_at(self._core, "/", scope=scope, at=at, with_content=with_content):
                if isinstance(m, Memory) and m.memory_id == memory_id:
                    return m
            raise NotFoundError(f"memory {memory_id} did not exist in scope {scope!r} at {at}")
        owner = access.reader(caller, actor, session)
        return proposal_view.get(self._core, scope, memory_id, with_content=with_content, owner=owner)

    def list_page(
        self,
        prefix: str = "/",
        *,
        scope: str = "main",
        depth: int = 0,
        after: str | None = None,
        limit: int = 20,
        with_content: bool = False,
        at: str | None = None,
        actor: str | None = None,
        session: str | None = None,
        caller: Caller | None = None,
    ) -> MemoryPage:
        """Up to ``limit`` items of :meth:`list` after the path ``after`` (after a prefix ``a/``:
        after everything under it), with ``more`` and the ``last`` path to go on from. A reader
        with an open proposal on the scope sees it on top (never ``at``); with content, a scope's
        memory is read as it is now (one deleted since the listing is left out)."""
        from gitmem.engine import access, proposal_view

        validate_prefix(prefix)
        validate_scope(scope)
        access.admit_read(self._core, caller, scope)
        owner = access.reader(caller, actor, session)
        return proposal_view.page(
            self._core,
            prefix,
            scope,
            depth,
            at=at,
            after=after,
            limit=limit,
            with_content=with_content,
            owner=owner,
        )

    def update_by_id(
        self,
        memory_id: str,
        *,
        scope: str = "main",
        content: str | None = None,
        path: str | None = None,
        if_sha256: str | None = None,
        with_content: bool = False,
        actor: str | None = None,
        session: str | None = None,
        caller: Caller | None = None,
    ) -> Memory:
        """Change the content and/or the path of the memory ``memory_id`` as one version; the
        memory as it then is. A failed ``if_sha256`` is PreconditionFailedError unless the memory
        already is what was asked; nothing to change writes no version."""
        from gitmem.engine import by_id

        validate_scope(scope)
        if path is not None:
            validate_path(path)
        return by_id.update(
            self._core,
            scope,
            memory_id,
            content=content,
            path=path,
            if_sha256=if_sha256,
            with_content=with_content,
            actor=actor,
            session=session,
            caller=caller,
        )

    def delete_by_id(
        self,
        memory_id: str,
        *,
        scope: str = "main",
        if_sha256: str | None = None,
        actor: str | None = None,
        session: str | None = None,
        caller: Caller | None = None,
    ) -> Version:
        """Delete the memory ``memory_id``, only if its content still hashes to ``if_sha256``
        (when given); works in an archived store, as :meth:`delete` does."""
        from gitmem.engine import by_id

        validate_scope(scope)
        return by_id.delete(
            self._core, scope, memory_id, if_sha256=if_sha256, actor=actor, session=session, caller=caller
        )
