"""Memory operations: create, read, list, write, str_replace, insert, delete, rename.

Each operation is a planner (what the change is, checked against the scope's current state) run by
:func:`gitmem.engine.group.mutate`, which commits it with compare-and-swap and retry.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

import pygit2

from gitmem.engine.core import StoreCore
from gitmem.engine.group import mutate
from gitmem.engine.writer import (
    MAX_ATTEMPTS,
    Change,
    ScopeState,
    decode_content,
    encode_content,
    sha256_hex,
)
from gitmem.errors import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    PathConflictError,
    PreconditionFailedError,
)
from gitmem.ids import is_id, new_id
from gitmem.model.frontmatter import MAX_DESCRIPTION_CHARS, parse_description, set_description
from gitmem.model.paths import validate_path, validate_prefix, validate_scope
from gitmem.model.versions import Version, timestamp


@dataclass(frozen=True)
class Memory:
    """A memory: the file is the memory (``content`` is its bytes decoded as UTF-8).

    ``content`` is None in listings made without ``with_content``.
    """

    path: str
    scope: str
    content: str | None
    content_sha256: str
    size: int
    description: str | None
    memory_id: str
    version_id: str
    created_at: dt.datetime | None = None  # time of the memory's first version
    updated_at: dt.datetime | None = None  # time of its current version


@dataclass(frozen=True)
class Prefix:
    """A directory roll-up in a ``depth=1`` listing; ``path`` ends with ``/``."""

    path: str
    memories: int


def _check_sha(value: str | None) -> None:
    if value is not None and (len(value) != 64 or any(c not in "0123456789abcdef" for c in value)):
        raise InvalidInputError(f"if_sha256 {value!r} is not 64 lowercase hex characters")


# ---------------------------------------------------------------------- the write loop
def with_description(data: bytes, description: str | None) -> bytes:
    if description is None:
        return data
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise InvalidInputError(f"description is over {MAX_DESCRIPTION_CHARS} characters")
    encode_content(description)  # lone surrogates: InvalidInputError, not a UnicodeEncodeError later
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data  # the content check reports it
    return set_description(text, description).encode("utf-8")


# ---------------------------------------------------------------------- operations
def write(
    store: StoreCore,
    path: str,
    content: str | bytes,
    *,
    scope: str = "main",
    description: str | None = None,
    if_sha256: str | None = None,
    actor: str | None = None,
    session: str | None = None,
) -> Version | None:
    """Create or replace the memory at ``path``. Returns None when nothing changed."""
    validate_path(path)
    _check_sha(if_sha256)
    data = with_description(encode_content(content), description)

    def plan(state: ScopeState) -> Change | None:
        blob = state.blob(path)
        if blob is not None:
            if blob.data == data:
                return None
            if if_sha256 is not None and sha256_hex(blob.data) != if_sha256:
                raise PreconditionFailedError(
                    f"{path} changed: its sha256 is {sha256_hex(blob.data)}, not {if_sha256}"
                )
            return Change("modified", path, data, state.memory_id(path))
        if if_sha256 is not None:
            raise PreconditionFailedError(f"{path} does not exist, so it cannot match if_sha256")
        refuse_conflict(state, path)
        return Change("created", path, data, new_id("mem"))

    return mutate(store, scope, plan, actor=actor, session=session)


def refuse_conflict(state: ScopeState, path: str, ignore: str | None = None) -> None:
    other = state.conflict(path, ignore)
    if other is None:
        return
    mid = state.memory_id_at(other) or ""
    if other == path:
        raise PathConflictError(f"{path} already exists in scope {state.scope!r}", other, mid)
    relation = "inside" if path.startswith(other + "/") else "a directory holding"
    raise PathConflictError(
        f"{path} conflicts with memory {other}: a memory cannot be {relation} another", other, mid
    )


def create(
    store: StoreCore,
    path: str,
    content: str | bytes,
    *,
    scope: str = "main",
    description: str | None = None,
    actor: str | None = None,
    session: str | None = None,
    memory_id: str | None = None,
) -> Version:
    """Create a memory; never overwrites. ``memory_id`` revives a deleted memory (restore): it must
    be a ``mem_`` id that no live memory of the scope has."""
    validate_path(path)
    if memory_id is not None and not is_id(memory_id, "mem"):
        raise InvalidInputError(f"invalid memory id {memory_id!r}: expected mem_<ulid>")
    data = with_description(encode_content(content), description)

    def plan(state: ScopeState) -> Change:
        refuse_conflict(state, path)
        if memory_id is not None and state.has_live_memory(memory_id):
            raise ConflictError(f"memory {memory_id} is live in scope {state.scope!r}; it cannot be revived")
        return Change("created", path, data, memory_id or new_id("mem"))

    version = mutate(store, scope, plan, actor=actor, session=session)
    assert version is not None
    return version


def _edit(
    store: StoreCore,
    path: str,
    edit: Callable[[str], str],
    *,
    scope: str,
    if_sha256: str | None,
    actor: str | None,
    session: str | None,
) -> Version | None:
    validate_path(path)
    _check_sha(if_sha256)

    def plan(state: ScopeState) -> Change | None:
        blob = state.require(path)
        if if_sha256 is not None and sha256_hex(blob.data) != if_sha256:
            raise PreconditionFailedError(
                f"{path} changed: its sha256 is {sha256_hex(blob.data)}, not {if_sha256}"
            )
        try:
            text = blob.data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInputError(f"{path} is not UTF-8 text and cannot be edited") from None
        data = encode_content(edit(text))
        if data == blob.data:
            return None
        return Change("modified", path, data, state.memory_id(path))

    return mutate(store, scope, plan, actor=actor, session=session)


def line_numbers(text: str, needle: str) -> list[int]:
    """1-based line numbers where each occurrence of ``needle`` starts."""
    out: list[int] = []
    start = 0
    while True:
        i = text.find(needle, start)
        if i < 0:
            return out
        out.append(text.count("\n", 0, i) + 1)
        start = i + 1


def str_replace(
    store: StoreCore,
    path: str,
    old: str,
    new: str,
    *,
    scope: str = "main",
    if_sha256: str | None = None,
    actor: str | None = None,
    session: str | None = None,
) -> Version | None:
    """Replace the one occurrence of ``old`` by ``new``; errors when it is missing or not unique."""
    if old == "":
        raise InvalidInputError("old text must not be empty")

    def edit(text: str) -> str:
        lines = line_numbers(text, old)
        if not lines:
            raise InvalidInputError(f"no replacement was made: the text was not found in {path}")
        if len(lines) > 1:
            where = ", ".join(map(str, lines))
            raise InvalidInputError(
                f"no replacement was made: the text occurs {len(lines)} times in {path} (lines {where}); "
                "give more context so that it is unique"
            )
        return text.replace(old, new, 1)

    return _edit(store, path, edit, scope=scope, if_sha256=if_sha256, actor=actor, session=session)


def insert_text(text: str, line: int, new: str) -> str:
    """``new`` inserted after line ``line`` of ``text`` (0: at the top)."""
    # Lines end at "\n" only (as in str_replace's line numbers), not at U+2028, \x0c, \x85...
    lines = [part + "\n" for part in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    if not lines[-1]:
        lines.pop()
    if isinstance(line, bool) or not 0 <= line <= len(lines):
        raise InvalidInputError(f"invalid line {line}: it must be within [0, {len(lines)}]")
    if line > 0 and not lines[line - 1].endswith("\n"):
        lines[line - 1] += "\n"
    if not new.endswith("\n"):
        new += "\n"
    lines.insert(line, new)
    return "".join(lines)


def insert(
    store: StoreCore,
    path: str,
    line: int,
    text: str,
    *,
    scope: str = "main",
    if_sha256: str | None = None,
    actor: str | None = None,
    session: str | None = None,
) -> Version | None:
    """Insert ``text`` after line ``line`` (0 = top)."""
    return _edit(
        store,
        path,
        lambda t: insert_text(t, line, text),
        scope=scope,
        if_sha256=if_sha256,
        actor=actor,
        session=session,
    )


def delete(
    store: StoreCore,
    path: str,
    *,
    scope: str = "main",
    if_sha256: str | None = None,
    actor: str | None = None,
    session: str | None = None,
) -> Version:
    """Delete a memory (its versions stay in history)."""
    validate_path(path)
    _check_sha(if_sha256)

    def plan(state: ScopeState) -> Change:
        blob = state.require(path)
        if if_sha256 is not None and sha256_hex(blob.data) != if_sha256:
            raise PreconditionFailedError(
                f"{path} changed: its sha256 is {sha256_hex(blob.data)}, not {if_sha256}; nothing was deleted"
            )
        return Change("deleted", path, None, state.memory_id(path))

    # Deleting is erasure: an archived store allows it (only new content is refused there).
    version = mutate(store, scope, plan, actor=actor, session=session, erasing=True)
    assert version is not None
    return version


def rename(
    store: StoreCore,
    old_path: str,
    new_path: str,
    *,
    scope: str = "main",
    if_sha256: str | None = None,
    actor: str | None = None,
    session: str | None = None,
) -> Version | None:
    """Move a memory to ``new_path``, keeping its memory id; never overwrites."""
    validate_path(old_path)
    validate_path(new_path)
    _check_sha(if_sha256)

    def plan(state: ScopeState) -> Change | None:
        blob = state.blob(old_path)
        if blob is None:
            target = state.blob(new_path)
            if target is not None and if_sha256 is not None and sha256_hex(target.data) == if_sha256:
                return None  # already renamed: the requested state holds
            raise NotFoundError(f"memory {old_path} does not exist in scope {state.scope!r}")
        if if_sha256 is not None and sha256_hex(blob.data) != if_sha256:
            raise PreconditionFailedError(
                f"{old_path} changed: its sha256 is {sha256_hex(blob.data)}, not {if_sha256}"
            )
        if old_path == new_path:
            return None
        refuse_conflict(state, new_path, ignore=old_path)
        return Change("modified", new_path, blob.data, state.memory_id(old_path), previous_path=old_path)

    return mutate(store, scope, plan, actor=actor, session=session)


# ---------------------------------------------------------------------- reads
def read(store: StoreCore, path: str, *, scope: str = "main", version: str | None = None) -> Memory:
    """The memory at ``path`` in ``scope`` (at its head, or at ``version``)."""
    validate_path(path)
    validate_scope(scope)
    if version is not None:
        # Reading at a version is history's job, and history's restore writes through this module.
        from gitmem.engine import history  # cycle-ok: read(version=) delegates to history at call time

        return history.read_version(store, version, path=path, scope=scope)
    for _attempt in range(MAX_ATTEMPTS):
        tip, obj = store.head_blob(scope, path)
        data = obj.data
        store.index.ensure(scope, tip, known_tip=True)
        head = store.index.head(scope, path)
        if head is not None and head.blob == str(obj.id):
            sha = head.sha256  # the index hashed this very blob
            break
        sha = sha256_hex(data)
        # Racing writers moved the index past ``tip``: read again at the current tip.
    text = decode_content(data)
    return Memory(
        path=path,
        scope=scope,
        content=text,
        content_sha256=sha,
        size=len(data),
        # The index parsed the front matter when it recorded this content; YAML is not parsed again.
        description=head.description if head is not None and sha == head.sha256 else parse_description(text),
        memory_id=head.memory_id if head else "",
        version_id=head.version_id if head else "",
        created_at=timestamp(head.created_at) if head else None,
        updated_at=timestamp(head.updated_at) if head else None,
    )


def list_memories(
    store: StoreCore, prefix: str = "/", *, scope: str = "main", depth: int = 0, with_content: bool = False
) -> list[Memory | Prefix]:
    """Memories under ``prefix`` in path order; ``depth=1`` rolls deeper ones up into Prefix items."""
    validate_prefix(prefix)
    validate_scope(scope)
    if depth not in (0, 1):
        raise InvalidInputError(f"invalid depth {depth}: use 0 (whole subtree) or 1 (immediate children)")
    store.index.ensure(scope)
    rows = store.index.heads(scope, prefix)
    out: list[Memory | Prefix] = []
    rollup: dict[str, int] = {}
    for row in rows:
        rest = row.path[len(prefix) :]
        if depth == 1 and "/" in rest:
            sub = prefix + rest.split("/", 1)[0] + "/"
            if sub not in rollup:
                rollup[sub] = 0
                out.append(Prefix(sub, 0))
            rollup[sub] += 1
            continue
        content = decode_content(store.blob_data(pygit2.Oid(hex=row.blob))) if with_content else None
        out.append(
            Memory(
                path=row.path,
                scope=scope,
                content=content,
                content_sha256=row.sha256,
                size=row.size,
                description=row.description,
                memory_id=row.memory_id,
                version_id=row.version_id,
                created_at=timestamp(row.created_at),
                updated_at=timestamp(row.updated_at),
            )
        )
    return [Prefix(item.path, rollup[item.path]) if isinstance(item, Prefix) else item for item in out]
