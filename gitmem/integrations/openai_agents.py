"""An OpenAI Agents SDK session (conversation history) kept as one gitmem memory.

``GitmemSession(session_id, store, scope="main", prefix="/conversations/", actor=None,
session=None, session_settings=None)`` implements the SDK's ``agents.memory.Session`` protocol
(extra ``gitmem-store[openai-agents]``); pass it as ``Runner.run(agent, input, session=...)``.

The conversation is the memory ``<prefix><session_id>.jsonl`` (the id percent-encoded where a path
segment needs it: :mod:`gitmem.integrations.common`): one JSON object per line, oldest first,
each item exactly as the SDK gave it. Every ``add_items``, ``pop_item`` and ``clear_session`` that
changes something is one version, tagged with ``actor`` and ``session`` (the gitmem session, a new
``sesn_...`` when none is given), so a conversation's history can be read, diffed, restored and
redacted like any memory. Changes are compare-and-swap on the file's sha256, so two processes
appending to one conversation never lose each other's items.

Results are those of the SDK's ``SQLiteSession`` for the same calls (the tests run one sequence
through both): ``get_items(limit)`` gives the latest ``limit`` items in chronological order (all of
them for None, or for a negative limit; none for 0), lines that are not valid JSON are skipped, and
``pop_item`` drops such lines while it looks for the last valid item.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from agents.items import TResponseInputItem
from agents.memory.session_settings import SessionSettings, resolve_session_limit

from gitmem.errors import (
    ConflictError,
    GuardRejectedError,
    NotFoundError,
    PathConflictError,
    PreconditionFailedError,
)
from gitmem.integrations.common import encode_segment, mask_findings, store_lock, valid_identity, valid_scope
from gitmem.model.versions import Version
from gitmem.store import Store

__all__ = ["GitmemSession", "Masked"]
log = logging.getLogger("gitmem.integrations.openai_agents")

SUFFIX = ".jsonl"
_ATTEMPTS = 16
T = TypeVar("T")


def _line(item: TResponseInputItem) -> str:
    text = json.dumps(item, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: \\u escapes keep it exactly
        text = json.dumps(item)
    return text


def _parse(lines: list[str]) -> list[TResponseInputItem]:
    items: list[TResponseInputItem] = []
    for line in lines:
        try:
            items.append(json.loads(line))
        except ValueError:
            continue  # not an item (a hand edit gone wrong): skipped, as SQLiteSession skips bad rows
    return items


@dataclass(frozen=True)
class Masked:
    """Items the store's guard refused, kept with the secret masked (``GitmemSession.masked``)."""

    version_id: str | None
    rules: list[str]


class GitmemSession:
    """The Agents SDK ``Session`` protocol on one memory of a gitmem store.

    When the store's guard refuses what a turn adds (a credential pasted into the chat), the
    items are stored anyway with each refused span replaced by ``[masked by gitmem's guard:
    <rule>]``, so ``Runner.run`` keeps its turn and nothing else the user said is lost; the masking
    is reported in :attr:`masked` and logged (logger ``gitmem.integrations.openai_agents``).

    Args:
        session_id: the conversation's id (any string).
        store: an open gitmem store. Adapters sharing this ``Store`` object take turns on it;
            other code using it from other threads should open its own (``gitmem.open_store``).
        scope: the scope (branch) holding the conversation.
        prefix: the directory of conversation files.
        actor: recorded on every version; default from the gitmem session.
        session: the gitmem session recorded on every version; default a new ``sesn_...`` id.
        session_settings: the SDK's settings (``limit`` is the default for ``get_items``).
    """

    def __init__(
        self,
        session_id: str,
        store: Store,
        *,
        scope: str = "main",
        prefix: str = "/conversations/",
        actor: str | None = None,
        session: str | None = None,
        session_settings: SessionSettings | None = None,
    ) -> None:
        if not isinstance(session_id, str):
            raise TypeError(f"session_id must be a string, not {type(session_id).__name__}")
        self.session_id = session_id
        self.session_settings: SessionSettings | None = session_settings or SessionSettings()
        self.store = store
        self.scope = valid_scope(scope)
        self.path = _valid_path(_valid_prefix(prefix) + encode_segment(session_id + SUFFIX))
        self.actor, self.session = valid_identity(actor, session)
        self._lock = store_lock(store)
        self.masked: list[Masked] = []

    async def _run(self, fn: Callable[[], T]) -> T:
        def locked() -> T:
            with self._lock:
                return fn()

        return await asyncio.to_thread(locked)

    # -------------------------------------------------------------- the file
    def _lines(self) -> tuple[list[str], str | None]:
        """The conversation's lines and the file's sha256 (None when there is no file yet)."""
        try:
            memory = self.store.read(self.path, scope=self.scope)
        except NotFoundError:
            return [], None
        # Split on "\n" only: items may hold U+2028 and the like, which str.splitlines() splits on.
        lines = (memory.content or "").split("\n")
        return lines[:-1] if lines[-1] == "" else lines, memory.content_sha256

    def _update(self, change: Callable[[list[str]], tuple[list[str], T] | None]) -> T | None:
        """Apply ``change`` to the lines by compare-and-swap; None from it means nothing to write.
        What the guard refuses is masked and written again (see the class)."""
        for _attempt in range(_ATTEMPTS):
            lines, sha = self._lines()
            planned = change(lines)
            if planned is None:
                return None
            new_lines, result = planned
            text = "".join(line + "\n" for line in new_lines)
            try:
                self._write(text, sha)
                return result
            except (PreconditionFailedError, PathConflictError):
                continue  # another writer changed the conversation since we read it: redo
        raise ConflictError(f"{self.path} kept changing under concurrent writers; try again")

    def _write(self, text: str, sha: str | None) -> None:
        kw: dict[str, Any] = {"scope": self.scope, "actor": self.actor, "session": self.session}
        rules: list[str] = []
        version: Version | None
        for _mask in range(_ATTEMPTS):
            try:
                if sha is None:
                    version = self.store.create(self.path, text, **kw)
                else:
                    version = self.store.write(self.path, text, if_sha256=sha, **kw)
            except GuardRejectedError as exc:
                masked, found = mask_findings(text, exc.findings)
                if not found or masked == text:
                    raise
                text, rules = masked, rules + found
                continue
            if rules:
                self.masked.append(Masked(version.id if version is not None else None, rules))
                log.warning("%s: the guard refused %s; stored with it masked", self.path, ", ".join(rules))
            return
        raise ConflictError(f"{self.path}: the guard kept refusing the masked text")

    # -------------------------------------------------------------- the protocol
    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The conversation, oldest first; with ``limit``, its latest ``limit`` items."""
        session_limit = resolve_session_limit(limit, self.session_settings)
        items = await self._run(lambda: _parse(self._lines()[0]))
        if session_limit is None or session_limit < 0:
            return items
        return items[-session_limit:] if session_limit > 0 else []

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append ``items`` (one version)."""
        if not items:
            return
        added = [_line(item) for item in items]
        await self._run(lambda: self._update(lambda lines: (lines + added, None)))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the newest item (one version), or None when there is none."""

        def pop(lines: list[str]) -> tuple[list[str], TResponseInputItem | None] | None:
            for n in range(len(lines) - 1, -1, -1):
                items = _parse([lines[n]])
                if items:
                    return lines[:n], items[0]  # invalid lines after it are dropped too
            return ([], None) if lines else None  # only invalid lines: dropped, like SQLiteSession

        return await self._run(lambda: self._update(pop))

    async def clear_session(self) -> None:
        """Delete the conversation (one version; its history stays in the store)."""

        def clear() -> None:
            with contextlib.suppress(NotFoundError):
                self.store.delete(self.path, scope=self.scope, actor=self.actor, session=self.session)

        await self._run(clear)

    def __repr__(self) -> str:
        return f"GitmemSession({self.session_id!r}, {self.store!r}, path={self.path!r})"


# ---------------------------------------------------------------------- gitmem internals, kept in one place
def _valid_prefix(prefix: str) -> str:
    from gitmem.model.paths import validate_prefix

    return validate_prefix(prefix)


def _valid_path(path: str) -> str:
    from gitmem.model.paths import validate_path

    return validate_path(path)
