"""Short-term records of :class:`gitmem.Store` (LangGraph checkpoints, conversations): JSON records
under a reserved prefix, a long one chunked over several memories (docs/conversations.md). Reads
show the reader's open proposal on top, as every read does (docs/review.md)."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

from gitmem.errors import InvalidInputError
from gitmem.model.caller import Caller

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore
    from gitmem.engine.shortterm import Record as ShortTermRecord


class Records:
    """Short-term record reads (mixed into :class:`gitmem.Store`); writes go through ``batch``."""

    _core: StoreCore

    def records(
        self, prefix: str, *, scope: str = "main", caller: Caller | None = None
    ) -> builtins.list[ShortTermRecord]:
        """Every record under ``prefix``, chunks joined, by path; ``caller`` must be able to read
        ``scope`` (ForbiddenError), as for every read."""
        from gitmem.engine import shortterm

        return shortterm.records_under(self._core, prefix, scope, caller)

    def record(
        self, path: str, *, scope: str = "main", caller: Caller | None = None
    ) -> ShortTermRecord | None:
        """The record at ``path`` (None: none), without reading its neighbours; ``caller`` must
        be able to read ``scope`` (ForbiddenError), as for every read."""
        from gitmem.engine import shortterm

        return shortterm.read_one(self._core, path, scope, caller)

    def record_paths(
        self, prefix: str, *, scope: str = "main", caller: Caller | None = None
    ) -> builtins.list[str]:
        """The memory paths under ``prefix`` (chunks included; no contents read), sorted;
        ``caller`` must be able to read ``scope`` (ForbiddenError), as for every read."""
        from gitmem.engine import shortterm

        return shortterm.paths_under(self._core, prefix, scope, caller)

    def conversation_items(
        self, conversation: str, *, scope: str = "main", caller: Caller | None = None
    ) -> builtins.list[dict[str, Any]]:
        """The items of the conversation whose records are under ``/conversations/<conversation>/``
        (its ULID) in ``scope``, oldest first, as the Conversations API returns them
        (docs/conversations.md); an empty list when it has none. A review-mode ``caller`` reads
        its proposal on top, as every read does."""
        import re

        from gitmem.engine import conversations
        from gitmem.ids import ULID_RE

        if not isinstance(conversation, str) or re.fullmatch(ULID_RE, conversation) is None:
            raise InvalidInputError(f"invalid conversation {conversation!r}: expected its ULID")
        return conversations.items(self._core, scope, conversation, caller=caller)  # admits the read
