"""The summary reads of :class:`gitmem.Store` the web console shows: a scope's counters, a memory's
head by id, search with the caller's own snippet marks, the sessions that wrote to a store, and
the dry-run of a redaction (see :mod:`gitmem.engine.overview`). Each takes the caller explicitly:
the engine decides what it may see (docs/access.md)."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING

from gitmem.model.caller import Caller

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore
    from gitmem.engine.hybrid import SearchResults
    from gitmem.engine.overview import RedactionPreview, SessionWrites
    from gitmem.model.versions import Version

_REDACT = "redact history"


class ConsoleOps:
    """Summary reads (mixed into :class:`gitmem.Store`)."""

    _core: StoreCore

    def scope_counts(self, scope: str, *, caller: Caller | None) -> tuple[int, int]:
        """``(memories, bytes)`` at the head of ``scope``, without listing its memories."""
        from gitmem.engine import access, overview

        access.admit_read(self._core, caller, scope)
        return overview.scope_counts(self._core, scope)

    def memory_head(self, memory_id: str, *, scope: str, caller: Caller | None) -> Version | None:
        """The version at the head of memory ``memory_id`` in ``scope``; None when the memory is
        deleted there (or never was in it)."""
        from gitmem.engine import access, overview

        access.admit_read(self._core, caller, scope)
        return overview.memory_head(self._core, scope, memory_id)

    def search_marked(
        self,
        query: str,
        *,
        marks: tuple[str, str],
        scope: str,
        limit: int,
        path_prefix: str | None,
        mode: str,
        caller: Caller | None,
    ) -> SearchResults:
        """:meth:`search` with each snippet's matches between ``marks`` (open, close) instead of
        ``**``: marks a caller picks so that no memory's own text can pass for a match."""
        from gitmem.engine import access, hybrid

        access.admit_read(self._core, caller, scope)
        return hybrid.search(
            self._core, query, scope=scope, limit=limit, path_prefix=path_prefix, marks=marks, mode=mode
        )

    def session_writes(
        self, scopes: builtins.list[str], *, caller: Caller | None
    ) -> builtins.list[SessionWrites]:
        """What each session wrote in ``scopes`` (one :class:`SessionWrites` per session and
        scope), the most recently active first."""
        from gitmem.engine import access, overview

        for scope in scopes:
            access.admit_read(self._core, caller, scope)
        return overview.session_writes(self._core, scopes)

    def redaction_preview(self, version_id: str, *, caller: Caller | None) -> RedactionPreview:
        """The dry-run of redacting version ``version_id``: the versions it would replace and why it
        would be refused. Nothing is written; the caller needs the ``redact`` right."""
        from gitmem.engine import access, overview

        access.admit_right(self._core, caller, "redact", _REDACT)
        return overview.preview_version(self._core, version_id)

    def unredacted_blobs(self, scope: str, *, caller: Caller | None) -> builtins.list[str]:
        """The distinct blob ids of ``scope``'s versions whose content is not redacted (what a
        redaction pattern is matched against); the caller needs the ``redact`` right."""
        from gitmem.engine import access, overview

        access.admit_right(self._core, caller, "redact", _REDACT)
        return overview.unredacted_blobs(self._core, scope)

    def redaction_preview_blobs(
        self, blobs: builtins.list[str], *, scope: str, caller: Caller | None
    ) -> RedactionPreview:
        """The dry-run of redacting the contents ``blobs`` (blob ids) in ``scope``, as
        :meth:`redaction_preview` gives it for one version."""
        from gitmem.engine import access, overview

        access.admit_right(self._core, caller, "redact", _REDACT)
        return overview.preview_blobs(self._core, scope, blobs)
