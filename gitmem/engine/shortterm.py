"""Short-term memory on a store: the layout of conversations and checkpoints (docs/conversations.md).

Conversations (the OpenAI-compatible API of ``gitmem serve``) live under ``/conversations/`` and
LangGraph checkpoints under ``/checkpoints/``; both prefixes are reserved for these records, and
mounts and search leave them out (:func:`is_shortterm`). A record is UTF-8 text (JSON) stored as one
memory, or, when it is larger than the store's ``max_memory_bytes``, as numbered chunks
``<path>.part0001of0003`` ... that :func:`read_records` joins again. One change (a turn, a
checkpoint, a set of pending writes) is one batch (:func:`commit`): every version in it lands with
one move of the scope's branch, or none does. A refused record (the guard, a limit, a path
conflict) fails the whole batch with the engine's error naming it: nothing is dropped silently.

Reads follow the reader's open proposal (review mode, :mod:`gitmem.engine.proposals`): a review
token sees what it proposed on top of the scope. The reader is named by ``owner`` (the caller's,
``gitmem.engine.access.reader``); without one, the scope only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gitmem.engine import access, memories, proposals
from gitmem.engine.batch import BatchOp, BatchResult, apply_batch
from gitmem.errors import IntegrityError, LimitExceededError, NotFoundError
from gitmem.model.reserved import CHECKPOINTS, CONVERSATIONS, SHORTTERM_PREFIXES, is_shortterm

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore
    from gitmem.engine.memories import Memory
    from gitmem.model.caller import Caller

__all__ = ["CHECKPOINTS", "CONVERSATIONS", "SHORTTERM_PREFIXES", "Record", "commit", "is_shortterm"]
_CHUNK = re.compile(r"^(?P<base>.+)\.part(?P<n>\d{4})of(?P<total>\d{4})\Z")
MAX_CHUNKS = 9999


@dataclass(frozen=True)
class Record:
    """One record: its base path, its text, and the memory paths holding it (chunks in order)."""

    path: str
    text: str
    paths: tuple[str, ...]


def _split(text: str, limit: int) -> list[str]:
    """``text`` in pieces of at most ``limit`` UTF-8 bytes, cut between characters."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return [text]
    pieces: list[str] = []
    start = 0
    while start < len(data):
        end = min(start + limit, len(data))
        while end < len(data) and (data[end] & 0xC0) == 0x80:  # not inside a character
            end -= 1
        pieces.append(data[start:end].decode("utf-8"))
        start = end
    return pieces


def write_ops(path: str, text: str, max_bytes: int, *, op: str = "create") -> list[BatchOp]:
    """The batch operations storing ``text`` at ``path`` (chunked past ``max_bytes``)."""
    pieces = _split(text, max(64, max_bytes))
    if len(pieces) == 1:
        return [BatchOp(op, path, pieces[0])]
    if len(pieces) > MAX_CHUNKS:
        raise LimitExceededError(f"{path}: a record of {len(text.encode())} bytes needs too many chunks")
    total = len(pieces)
    return [BatchOp(op, f"{path}.part{n:04d}of{total:04d}", p) for n, p in enumerate(pieces, 1)]


def replace_ops(old: Record, text: str, max_bytes: int) -> list[BatchOp]:
    """The operations replacing record ``old`` by ``text`` (its chunking may change)."""
    new = write_ops(old.path, text, max_bytes, op="write")
    kept = {o.path for o in new}
    return [BatchOp("delete", p) for p in old.paths if p not in kept] + new


def delete_ops(records: Iterable[Record]) -> list[BatchOp]:
    return [BatchOp("delete", p) for r in records for p in r.paths]


def _read(store: StoreCore, path: str, scope: str, owner: str | None = None) -> Memory:
    """``path`` in ``scope`` as the reader sees it (its open proposal on top, as ``Store.read``)."""
    if owner is not None:
        mine = proposals.read_memory(store, path, scope, owner)
        if mine is not None:
            return mine  # type: ignore[no-any-return]
    return memories.read(store, path, scope=scope)


def _memories(store: StoreCore, prefix: str, scope: str, owner: str | None = None) -> dict[str, str]:
    """Path -> content of every memory under ``prefix`` (the reader's proposal on top)."""
    listed = memories.list_memories(store, prefix, scope=scope, with_content=True)
    out = {m.path: m.content or "" for m in listed if isinstance(m, memories.Memory)}
    if owner is not None:
        p = proposals.open_proposal(store, scope, owner)
        if p is not None:
            for path in proposals.touched(store, p):
                if not path.startswith(prefix):
                    continue
                try:
                    out[path] = _read(store, path, scope, owner).content or ""
                except NotFoundError:
                    out.pop(path, None)
    return out


def read_records(store: StoreCore, prefix: str, scope: str, owner: str | None = None) -> list[Record]:
    """Every record under ``prefix``, sorted by path, chunks joined."""
    whole: dict[str, Record] = {}
    parts: dict[str, dict[int, tuple[int, str, str]]] = {}
    for path, content in _memories(store, prefix, scope, owner).items():
        m = _CHUNK.match(path)
        if m is None:
            whole[path] = Record(path, content, (path,))
        else:
            parts.setdefault(m.group("base"), {})[int(m.group("n"))] = (int(m.group("total")), path, content)
    for base, chunks in parts.items():
        total = {t for t, _p, _c in chunks.values()}
        if len(total) != 1 or sorted(chunks) != list(range(1, next(iter(total)) + 1)):
            raise IntegrityError(f"record {base} in scope {scope!r} has an incomplete set of chunks")
        ordered = [chunks[n] for n in sorted(chunks)]
        whole[base] = Record(base, "".join(c for _t, _p, c in ordered), tuple(p for _t, p, _c in ordered))
    return [whole[k] for k in sorted(whole)]


def read_record(store: StoreCore, path: str, scope: str, owner: str | None = None) -> Record | None:
    """The record at ``path`` (None: there is none)."""
    parent = path.rsplit("/", 1)[0] + "/"
    for r in read_records(store, parent, scope, owner):
        if r.path == path:
            return r
    return None


def commit(
    store: StoreCore,
    scope: str,
    ops: Sequence[BatchOp],
    *,
    actor: str | None,
    session: str | None,
    caller: Caller | None = None,
) -> BatchResult:
    """``ops`` as one batch by ``caller``: all of its versions or none (a refused one raises its
    error); a review-mode caller's land on its proposal."""
    return apply_batch(store, list(ops), scope=scope, actor=actor, session=session, caller=caller)


def read_one(store: StoreCore, path: str, scope: str, caller: Caller | None = None) -> Record | None:
    """The record at ``path`` without reading its neighbours (a chunked one lists its directory),
    as ``caller`` may read it (ForbiddenError: another scope or store; a review-mode caller's own
    proposal on top)."""
    access.admit_read(store, caller, scope)
    owner = access.reader(caller, None, None)
    try:
        return Record(path, _read(store, path, scope, owner).content or "", (path,))
    except NotFoundError:
        pass
    parent = path.rsplit("/", 1)[0] + "/"
    chunks = [p for p in _paths_under(store, parent, scope, owner) if p.startswith(path + ".part")]
    if not chunks:
        return None
    return read_record(store, path, scope, owner)


def records_under(store: StoreCore, prefix: str, scope: str, caller: Caller | None = None) -> list[Record]:
    """Every record under ``prefix`` as ``caller`` may read them (ForbiddenError: another scope or
    store; a review-mode caller's own proposal on top), chunks joined, by path."""
    access.admit_read(store, caller, scope)
    return read_records(store, prefix, scope, access.reader(caller, None, None))


def paths_under(store: StoreCore, prefix: str, scope: str, caller: Caller | None = None) -> list[str]:
    """The memory paths under ``prefix`` (no contents read), sorted, as ``caller`` may read them
    (ForbiddenError: another scope or store; a review-mode caller's own proposal on top)."""
    access.admit_read(store, caller, scope)
    return _paths_under(store, prefix, scope, access.reader(caller, None, None))


def _paths_under(store: StoreCore, prefix: str, scope: str, owner: str | None) -> list[str]:
    try:
        found = {m.path for m in memories.list_memories(store, prefix, scope=scope)}
    except NotFoundError:
        found = set()
    if owner is not None:
        p = proposals.open_proposal(store, scope, owner)
        if p is not None:
            for path in proposals.touched(store, p):
                if path.startswith(prefix):
                    try:
                        _read(store, path, scope=scope)
                        found.add(path)
                    except NotFoundError:
                        found.discard(path)
    return sorted(found)


def base_path(path: str) -> str:
    """The record a memory path belongs to (itself, or the record a chunk is part of)."""
    m = _CHUNK.match(path)
    return m.group("base") if m else path
