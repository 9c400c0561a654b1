"""Conversations: OpenAI-compatible conversation state stored in one scope of a store.

The layout (docs/conversations.md)::

    /conversations/<ULID>/conversation.json          the conversation: created_at, metadata, scope kind
    /conversations/<ULID>/items/<seq>-<item id>.json  one item per memory (chunked past max_memory_bytes)

``<seq>`` is a six-digit counter that orders the items. Every change (create with its seed items,
an update, a set of added items, a deletion, a turn through ``/v1/responses``) is one batch: one
version per record, one move of the branch. A conversation's public id names its store and scope
(``conv_<ULID><base64url of "store id\\nscope">``), so that a request needs no lookup table and a
forged id only ever points into a store and scope the caller's token is then checked against.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gitmem.engine import access, shortterm
from gitmem.engine.batch import BatchOp
from gitmem.errors import IntegrityError, InvalidInputError, NotFoundError
from gitmem.ids import ULID_RE, new_ulid
from gitmem.model.paths import validate_scope
from gitmem.model.reserved import CONVERSATIONS

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore
    from gitmem.model.caller import Caller

Json = dict[str, Any]
META = "conversation.json"
MAX_ITEMS_PER_CALL = 20
MAX_METADATA = 16
ROLES = ("user", "assistant", "system", "developer", "tool", "critic", "discriminator", "unknown")
_ITEM_ID = re.compile(r"^[A-Za-z0-9_-]{1,100}\Z")
_CONV_ID = re.compile(rf"^conv_({ULID_RE})([A-Za-z0-9_-]+)\Z")
_ITEM_FILE = re.compile(r"^(\d{6})-([A-Za-z0-9_-]{1,100})\.json\Z")
# The item types whose Conversations API shape carries a status ("completed" unless given).
_WITH_STATUS = frozenset(
    {
        "message",
        "function_call",
        "function_call_output",
        "file_search_call",
        "web_search_call",
        "image_generation_call",
        "computer_call",
        "computer_call_output",
        "tool_search_call",
        "tool_search_output",
        "program_output",
        "code_interpreter_call",
        "local_shell_call",
        "shell_call",
        "shell_call_output",
        "apply_patch_call",
        "apply_patch_call_output",
    }
)
_PREFIXES = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
}


@dataclass(frozen=True)
class Conversation:
    id: str
    created_at: int
    metadata: dict[str, str] = field(default_factory=dict)
    scope_kind: str = "scope"

    def to_json(self) -> Json:
        return {
            "id": self.id,
            "object": "conversation",
            "created_at": self.created_at,
            "metadata": self.metadata,
        }


# ---------------------------------------------------------------------- ids
def public_id(store_id: str, scope: str, ulid: str) -> str:
    tail = base64.urlsafe_b64encode(f"{store_id}\n{scope}".encode()).decode("ascii").rstrip("=")
    return f"conv_{ulid}{tail}"


def parse_id(conversation_id: str) -> tuple[str, str, str]:
    """(ULID, store id, scope) of a public id; NotFoundError for anything else."""
    m = _CONV_ID.match(conversation_id) if isinstance(conversation_id, str) else None
    if m is not None:
        tail = m.group(2)
        try:
            text = base64.urlsafe_b64decode(tail + "=" * (-len(tail) % 4)).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            text = ""
        store_id, sep, scope = text.partition("\n")
        if sep and store_id and scope and public_id(store_id, scope, m.group(1)) == conversation_id:
            try:
                validate_scope(scope)
            except InvalidInputError:
                pass
            else:
                return m.group(1), store_id, scope
    raise NotFoundError(f"conversation {conversation_id!r} does not exist")


def _dir(ulid: str) -> str:
    return f"{CONVERSATIONS}{ulid}/"


# ---------------------------------------------------------------------- validation
def check_metadata(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInputError("metadata: expected an object of strings")
    if len(value) > MAX_METADATA:
        raise InvalidInputError(f"metadata: at most {MAX_METADATA} keys")
    for k, v in value.items():
        if not isinstance(v, str) or len(k) > 64 or len(v) > 512:
            raise InvalidInputError(f"metadata.{k}: keys are at most 64 characters, values strings of 512")
    return dict(value)


def _new_item_id(kind: str) -> str:
    # 48 hex digits, as OpenAI's own item ids: hex is below the guard's entropy test.
    return f"{_PREFIXES.get(kind, 'item')}_{secrets.token_hex(24)}"


def normalize_item(raw: Any, where: str = "item") -> Json:
    """An input item as the Conversations API stores and returns it: a ``type``, an ``id``, and a
    message's string ``content`` as a list of text parts."""
    if not isinstance(raw, dict):
        raise InvalidInputError(f"{where}: expected an object")
    item = dict(raw)
    kind = item.get("type", "message" if "role" in item else None)
    if not isinstance(kind, str) or not kind:
        raise InvalidInputError(f"{where}.type: expected a string")
    item["type"] = kind
    if kind == "message":
        role = item.get("role")
        if role not in ROLES:
            raise InvalidInputError(f"{where}.role: expected one of {', '.join(ROLES)}")
        part = "output_text" if role == "assistant" else "input_text"
        content = item.get("content")
        if isinstance(content, str):
            content = [{"type": part, "text": content}]
        if not isinstance(content, list) or not all(
            isinstance(c, dict) and isinstance(c.get("type"), str) for c in content
        ):
            raise InvalidInputError(f"{where}.content: expected a string or a list of content parts")
        content = [
            {**c, "annotations": c.get("annotations", [])} if c["type"] == "output_text" else c
            for c in content
        ]
        item["content"] = content
    if kind in _WITH_STATUS:
        item.setdefault("status", "completed")
    given = item.get("id")
    if given is None:
        item["id"] = _new_item_id(kind)
    elif not isinstance(given, str) or not _ITEM_ID.match(given):
        raise InvalidInputError(f"{where}.id: 1-100 characters of letters, digits, _ and -")
    return item


def normalize_items(raw: Any, where: str = "items") -> list[Json]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidInputError(f"{where}: expected a list of items")
    if len(raw) > MAX_ITEMS_PER_CALL:
        raise InvalidInputError(f"{where}: at most {MAX_ITEMS_PER_CALL} items at a time")
    out = [normalize_item(r, f"{where}[{n}]") for n, r in enumerate(raw)]
    ids = [i["id"] for i in out]
    if len(set(ids)) != len(ids):
        raise InvalidInputError(f"{where}: two items with one id")
    return out


def _load(rec: shortterm.Record) -> Json:
    try:
        data = json.loads(rec.text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise IntegrityError(f"{rec.path} is not a conversation record (a JSON object)")
    return data


def _text(data: Json) -> str:
    return json.dumps(data, ensure_ascii=False, sort_keys=True, indent=1) + "\n"


# ---------------------------------------------------------------------- reads
def _reader(store: StoreCore, caller: Caller | None, scope: str) -> str | None:
    """A read of ``scope`` by ``caller`` admitted (AccessError when it may not read it), and whose
    proposal it shows on top: a review-mode caller's own (None: the ambient one)."""
    if caller is None:
        return None
    access.admit_read(store, caller, scope)
    return access.reader(caller, None, None)


def get(
    store: StoreCore, scope: str, ulid: str, conversation_id: str, *, caller: Caller | None = None
) -> Conversation:
    rec = shortterm.read_record(store, _dir(ulid) + META, scope, _reader(store, caller, scope))
    if rec is None:
        raise NotFoundError(f"conversation {conversation_id} does not exist")
    data = _load(rec)
    return Conversation(
        conversation_id,
        int(data["created_at"]),
        dict(data.get("metadata") or {}),
        str(data.get("scope_kind", "scope")),
    )


@dataclass(frozen=True)
class StoredItem:
    seq: int
    item: Json
    record: shortterm.Record


def stored_items(
    store: StoreCore, scope: str, ulid: str, *, caller: Caller | None = None
) -> list[StoredItem]:
    """The conversation's items, oldest first."""
    prefix = _dir(ulid) + "items/"
    out = []
    for rec in shortterm.read_records(store, prefix, scope, _reader(store, caller, scope)):
        m = _ITEM_FILE.match(rec.path[len(prefix) :])
        if m is not None:
            out.append(StoredItem(int(m.group(1)), _load(rec), rec))
    out.sort(key=lambda s: (s.seq, s.item.get("id", "")))
    return out


def items(store: StoreCore, scope: str, ulid: str, *, caller: Caller | None = None) -> list[Json]:
    return [s.item for s in stored_items(store, scope, ulid, caller=caller)]


# ---------------------------------------------------------------------- writes
def _item_ops(
    store: StoreCore, ulid: str, new: Sequence[Json], existing: Sequence[StoredItem]
) -> list[BatchOp]:
    taken = {s.item.get("id") for s in existing}
    for item in new:
        if item["id"] in taken:
            raise InvalidInputError(f"item {item['id']} is already in the conversation")
    seq = max((s.seq for s in existing), default=0)
    limit = store.settings.limits.max_memory_bytes
    ops: list[BatchOp] = []
    for n, item in enumerate(new, 1):
        ops += shortterm.write_ops(f"{_dir(ulid)}items/{seq + n:06d}-{item['id']}.json", _text(item), limit)
    return ops


def create(
    store: StoreCore,
    scope: str,
    *,
    scope_kind: str,
    metadata: dict[str, str],
    seed: Sequence[Json],
    actor: str | None,
    session: str | None,
    caller: Caller | None = None,
) -> tuple[Conversation, list[Json]]:
    """A new conversation with its seed items, as one batch."""
    ulid = new_ulid()
    conv = Conversation(public_id(store.settings.id, scope, ulid), int(time.time()), metadata, scope_kind)
    meta = {"created_at": conv.created_at, "metadata": metadata, "scope_kind": scope_kind}
    limit = store.settings.limits.max_memory_bytes
    ops = shortterm.write_ops(_dir(ulid) + META, _text(meta), limit) + _item_ops(store, ulid, seed, [])
    shortterm.commit(store, scope, ops, actor=actor, session=session, caller=caller)
    return conv, list(seed)


def update(
    store: StoreCore,
    scope: str,
    ulid: str,
    conv: Conversation,
    metadata: dict[str, str],
    *,
    actor: str | None,
    session: str | None,
    caller: Caller | None = None,
) -> Conversation:
    rec = shortterm.read_record(store, _dir(ulid) + META, scope, _reader(store, caller, scope))
    if rec is None:
        raise NotFoundError(f"conversation {conv.id} does not exist")
    data = _load(rec)
    data["metadata"] = metadata
    ops = shortterm.replace_ops(rec, _text(data), store.settings.limits.max_memory_bytes)
    shortterm.commit(store, scope, ops, actor=actor, session=session, caller=caller)
    return Conversation(conv.id, conv.created_at, metadata, conv.scope_kind)


def delete(
    store: StoreCore,
    scope: str,
    ulid: str,
    *,
    actor: str | None,
    session: str | None,
    caller: Caller | None = None,
) -> None:
    """Every record of the conversation deleted, in one batch (the history keeps them)."""
    records = shortterm.read_records(store, _dir(ulid), scope, _reader(store, caller, scope))
    ops = shortterm.delete_ops(records)
    shortterm.commit(store, scope, ops, actor=actor, session=session, caller=caller)


def add_items(
    store: StoreCore,
    scope: str,
    ulid: str,
    new: Sequence[Json],
    *,
    actor: str | None,
    session: str | None,
    caller: Caller | None = None,
) -> list[Json]:
    """Append ``new`` (normalized items) in one batch."""
    if not new:
        return []
    ops = _item_ops(store, ulid, new, stored_items(store, scope, ulid, caller=caller))
    shortterm.commit(store, scope, ops, actor=actor, session=session, caller=caller)
    return list(new)


def find_item(
    store: StoreCore, scope: str, ulid: str, item_id: str, *, caller: Caller | None = None
) -> StoredItem:
    for s in stored_items(store, scope, ulid, caller=caller):
        if s.item.get("id") == item_id:
            return s
    raise NotFoundError(f"item {item_id} does not exist in this conversation")


def delete_item(
    store: StoreCore,
    scope: str,
    ulid: str,
    item_id: str,
    *,
    actor: str | None,
    session: str | None,
    caller: Caller | None = None,
) -> None:
    found = find_item(store, scope, ulid, item_id, caller=caller)
    ops = shortterm.delete_ops([found.record])
    shortterm.commit(store, scope, ops, actor=actor, session=session, caller=caller)
