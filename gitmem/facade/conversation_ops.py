"""Conversations of :class:`gitmem.Store`: OpenAI-compatible conversation state kept in one scope
under ``/conversations/<ULID>/`` (docs/conversations.md).

Each method calls :mod:`gitmem.engine.conversations`, which decides access (a caller that may not
read the scope gets AccessError; a review-mode caller reads its proposal on top and its changes land
on it), and every change is one batch through the guard and the limits, attributed to ``actor`` and
``session`` as the caller allows. A conversation is named by its ULID and scope here; its public id
(``conv_...``, what the Conversations API hands out) is ``Conversation.id``, and
``gitmem.store.parse_conversation_id`` gives the ULID, store id and scope back. Items are validated
as the Conversations API stores them (``gitmem.store.normalize_conversation_item``).
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gitmem.errors import InvalidInputError
from gitmem.ids import ULID_RE
from gitmem.model.caller import Caller

if TYPE_CHECKING:
    from gitmem.engine.conversations import Conversation
    from gitmem.engine.core import StoreCore

Item = dict[str, Any]


def _ulid(conversation: str) -> str:
    if not isinstance(conversation, str) or re.fullmatch(ULID_RE, conversation) is None:
        raise InvalidInputError(f"invalid conversation {conversation!r}: expected its ULID")
    return conversation


class ConversationOps:
    """Conversation reads and changes (mixed into :class:`gitmem.Store`)."""

    _core: StoreCore

    def _conversation(self, ulid: str, scope: str, caller: Caller | None) -> Conversation:
        from gitmem.engine import conversations

        cid = conversations.public_id(self._core.settings.id, scope, ulid)
        return conversations.get(self._core, scope, ulid, cid, caller=caller)

    def conversation(
        self, conversation: str, *, scope: str = "main", caller: Caller | None = None
    ) -> Conversation:
        """The conversation whose ULID is ``conversation`` in ``scope`` (NotFoundError: none)."""
        return self._conversation(_ulid(conversation), scope, caller)

    def create_conversation(
        self,
        *,
        scope: str = "main",
        scope_kind: str = "scope",
        metadata: dict[str, str] | None = None,
        items: Sequence[Item] = (),
        actor: str | None = None,
        session: str | None = None,
        caller: Caller | None = None,
    ) -> Conversation:
        """A new conversation in ``scope`` with its first ``items``, in one batch. ``scope_kind``
        is kept with it (the Databricks ``scope.kind``); ``metadata`` is at most 16 strings."""
        from gitmem.engine import conversations

        meta = conversations.check_metadata(metadata)
        seed = [conversations.normalize_item(i, f"items[{n}]") for n, i in enumerate(items)]
        made, _ = conversations.create(
            self._core,
            scope,
            scope_kind=scope_kind,
            metadata=meta,
            seed=seed,
            actor=actor,
            session=session,
            caller=caller,
        )
        return made

    def update_conversation(
        self,
        conversation: str,
        metadata: dict[str, str],
        *,
        scope: str = "main",
        actor: str | None = None,
        session: str | None = None,
        caller: Caller | None = None,
    ) -> Conversation:
        """The conversation with its metadata replaced by ``metadata`` (NotFoundError: none)."""
        from gitmem.engine import conversations

        ulid = _ulid(conversation)
        meta = conversations.check_metadata(metadata)
        old = self._conversation(ulid, scope, caller)
        return conversations.update(
            self._core, scope, ulid, old, meta, actor=actor, session=session, caller=caller
        )

    def delete_conversation(
        self,
        conversation: str,
        *,
        scope: str = "main",
        actor: str | None = None,
        session: str | None = None,
        caller: Caller | None = None,
    ) -> Conversation:
        """Every record of the conversation deleted in one batch (its history keeps them); returns
        the conversation as it was (NotFoundError: none)."""
        from gitmem.engine import conversations

        ulid = _ulid(conversation)
        found = self._conversation(ulid, scope, caller)
        conversations.delete(self._core, scope, ulid, actor=actor, session=session, caller=caller)
        return found

    def add_conversation_items(
        self,
        conversation: str,
        items: Sequence[Item],
        *,
        scope: str = "main",
        actor: str | None = None,
        session: str | None = None,
        caller: Caller | None = None,
    ) -> builtins.list[Item]:
        """``items`` appended to the conversation in one batch, as stored (NotFoundError: no such
        conversation; InvalidInputError: an item id it has already)."""
        from gitmem.engine import conversations

        ulid = _ulid(conversation)
        new = [conversations.normalize_item(i, f"items[{n}]") for n, i in enumerate(items)]
        self._conversation(ulid, scope, caller)
        return conversations.add_items(
            self._core, scope, ulid, new, actor=actor, session=session, caller=caller
        )

    def conversation_item(
        self, conversation: str, item_id: str, *, scope: str = "main", caller: Caller | None = None
    ) -> Item:
        """One item of the conversation (NotFoundError: no such conversation or item)."""
        from gitmem.engine import conversations

        ulid = _ulid(conversation)
        self._conversation(ulid, scope, caller)
        return conversations.find_item(self._core, scope, ulid, item_id, caller=caller).item

    def delete_conversation_item(
        self,
        conversation: str,
        item_id: str,
        *,
        scope: str = "main",
        actor: str | None = None,
        session: str | None = None,
        caller: Caller | None = None,
    ) -> Conversation:
        """One item deleted (its history keeps it); returns the conversation it was in
        (NotFoundError: no such conversation or item)."""
        from gitmem.engine import conversations

        ulid = _ulid(conversation)
        found = self._conversation(ulid, scope, caller)
        conversations.delete_item(
            self._core, scope, ulid, item_id, actor=actor, session=session, caller=caller
        )
        return found
