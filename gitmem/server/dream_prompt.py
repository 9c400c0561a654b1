"""What a dream's model is told (docs/dreams.md#what-the-model-sees), and what of its own text a
dream keeps.

The first message holds the memories of the scope (their paths and sizes), then per input session
the versions it wrote in the scope and, where the session held conversations there (the
Conversations API, docs/conversations.md), the items it added to each, as a transcript; then the
instructions. Short-term records (``/conversations/``, ``/checkpoints/``) are never listed as
memories: a dream neither reads them as memories nor writes them (:func:`reserved`). Everything is
read through the public ``Store`` API as the dream's caller.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gitmem.errors import GitmemError, NotFoundError
from gitmem.ids import ULID_RE
from gitmem.model.caller import Caller
from gitmem.model.guard import GuardPolicy, scan
from gitmem.model.reserved import is_shortterm
from gitmem.store import Store

SESSION_CHARS = 4000  # of each version's content
ITEM_CHARS = 2000  # of each conversation item
PROMPT_CHARS = 120_000  # of the sessions' versions and items in all
LISTING = 1000  # memories listed by path
REASONING_CHARS = 2000  # of the model's text kept as a change's reasoning
MARKER = ".anthropic-memory-store"  # the SDK sync engine's marker file: never a memory
_ITEM = re.compile(rf"^/conversations/({ULID_RE})/items/\d{{6}}-([A-Za-z0-9_-]{{1,100}})\.json")


def reserved(store_path: str) -> bool:
    """Whether a dream may not touch ``store_path``: a short-term record (a conversation's, a
    checkpoint's) or the directory holding them, or the SDK's sync marker (in any case)."""
    top = store_path.split("/")[1] if store_path != "/" else ""
    return is_shortterm(store_path + "/") or top.casefold() == MARKER


def memories(store: Store, scope: str, caller: Caller) -> list[Any]:
    """The memories of ``scope`` a dream works on (a flat listing holds memories only)."""
    return [m for m in store.list("/", scope=scope, caller=caller) if not reserved(m.path)]


class _Budget:
    def __init__(self) -> None:
        self.left = PROMPT_CHARS

    def take(self, text: str, most: int) -> str | None:
        """``text`` cut to ``most`` characters, or None once the prompt is full."""
        if self.left <= 0:
            return None
        text = text[: min(most, self.left)]
        self.left -= max(1, len(text))
        return text


def _versions_text(store: Store, scope: str, caller: Caller, sid: str, budget: _Budget) -> list[str]:
    found = sorted(
        store.versions(scope=scope, session=sid),
        key=lambda v: (v.created_at, v.id) if v.created_at else ("", v.id),
    )
    own = [v for v in found if not reserved(v.path)]
    parts = [f"## Session {sid}: {len(own)} version(s) of memories"]
    for v in own:
        text = ""
        if v.operation != "deleted" and v.redaction is None:
            try:
                text = store.read(v.path, scope=scope, version=v.id, caller=caller).content or ""
            except NotFoundError:
                text = ""
        cut = budget.take(text, SESSION_CHARS)
        if cut is None:
            parts.append("(the rest is left out: too long)")
            break
        when = v.created_at.isoformat() if v.created_at else ""
        parts.append(f"### {v.operation} /memories{v.path} at {when}\n{cut}")
    parts += _conversations_text(store, scope, caller, [v.path for v in found], budget)
    return parts


def _conversations_text(
    store: Store, scope: str, caller: Caller, paths: list[str], budget: _Budget
) -> list[str]:
    """The items the session added to each conversation it wrote to, oldest first."""
    wrote: dict[str, set[str]] = {}
    for path in paths:
        m = _ITEM.match(path)
        if m is not None:
            wrote.setdefault(m.group(1), set()).add(m.group(2))
    parts: list[str] = []
    for ulid in sorted(wrote):
        try:
            items = [
                i
                for i in store.conversation_items(ulid, scope=scope, caller=caller)
                if i.get("id") in wrote[ulid]
            ]
        except GitmemError as exc:  # a corrupt record: said, and the dream goes on
            parts.append(f"### Conversation {ulid}: its items cannot be read ({exc.message})")
            continue
        if not items:
            continue
        parts.append(f"### Conversation {ulid}: {len(items)} item(s) this session added")
        for item in items:
            cut = budget.take(item_text(item), ITEM_CHARS)
            if cut is None:
                parts.append("(the rest is left out: too long)")
                return parts
            parts.append(cut)
    return parts


def item_text(item: dict[str, Any]) -> str:
    """One conversation item as a transcript line."""
    kind = item.get("type")
    if kind == "message":
        content = item.get("content")
        texts = (
            [str(c.get("text", "")) for c in content if isinstance(c, dict)]
            if isinstance(content, list)
            else []
        )
        return f"{item.get('role', 'unknown')}: {' '.join(t for t in texts if t)}"
    if kind == "function_call":
        return f"tool call {item.get('name', '?')}({item.get('arguments', '')})"
    if kind == "function_call_output":
        out = item.get("output")
        return f"tool output: {out if isinstance(out, str) else json.dumps(out, ensure_ascii=False)}"
    return f"({kind} item)"


def first_message(
    store: Store, scope: str, caller: Caller, *, label: str, sessions: list[str], instructions: str | None
) -> str:
    listed = memories(store, scope, caller)
    lines = [f"- /memories{m.path} ({m.size} bytes)" for m in listed[:LISTING]]
    if len(listed) > LISTING:
        lines.append(f"- ... and {len(listed) - LISTING} more (view /memories to see them)")
    text = f"# The memory store {label} (scope {scope})\n" + ("\n".join(lines) or "(empty)") + "\n\n"
    budget = _Budget()
    parts: list[str] = []
    for sid in sessions:
        parts += _versions_text(store, scope, caller, sid, budget)
    text += "# The past sessions\n" + "\n".join(parts)
    if instructions:
        text += f"\n\n# Instructions\n{instructions}"
    return text


def withheld(text: str, store: Store) -> str:
    """``text`` (the model's reasoning) cut to :data:`REASONING_CHARS`, with what the store's guard
    finds (secrets, PII) replaced: it is kept in the dream's record and shown in the console, so it
    must not carry what the store refuses."""
    try:
        policy = GuardPolicy.from_dict(store.settings.guard, f"the guard of {store.name}")
    except GitmemError:
        policy = GuardPolicy()
    for f in sorted(scan(text, policy), key=lambda f: f.start, reverse=True):
        text = text[: f.start] + f"[{f.kind} withheld]" + text[f.end :]
    return text[:REASONING_CHARS]
