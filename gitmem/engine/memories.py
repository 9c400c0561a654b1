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
from gitmem.engine.planners import (
    Spec,
    check_sha,
    insert_text,
    plan_create,
    plan_delete,
    plan_edit,
    plan_rename,
    plan_write,
    replace_edit,
)
from gitmem.engine.planners import refuse_conflict as refuse_conflict  # batches and the server use it
from gitmem.engine.writer import MAX_ATTEMPTS, decode_content, encode_content, sha256_hex
from gitmem.errors import InvalidInputError
from gitmem.ids import is_id
from gitmem.model.caller import Caller
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
    caller: Caller | None = None,
) -> Version | None:
    """Create or replace the memory at ``path``. Returns None when nothing changed."""
    validate_path(path)
    check_sha(if_sha256)
    data = with_description(encode_content(content), description)
    spec: Spec = ("write", {"path": path, "data": data, "if_sha256": if_sha256})
    return mutate(
        store,
        scope,
        plan_write(path, data, if_sha256),
        actor=actor,
        session=session,
        spec=spec,
        caller=caller,
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
    caller: Caller | None = None,
) -> Version:
    """Create a memory; never overwrites. ``memory_id`` revives a deleted memory (restore): it must
    be a ``mem_`` id that no live memory of the scope has."""
    validate_path(path)
    if memory_id is not None and not is_id(memory_id, "mem"):
        raise InvalidInputError(f"invalid memory id {memory_id!r}: expected mem_<ulid>")
    data = with_description(encode_content(content), description)
    spec: Spec = ("create", {"path": path, "data": data, "memory_id": memory_id})
    plan = plan_create(path, data, memory_id)
    version = mutate(store, scope, plan, actor=actor, session=session, spec=spec, caller=caller)
    assert version is not None
    return version


def _edit(
    store: StoreCore,
    path: str,
    edit: Callable[[str], str],
    spec: Spec | None,
    *,
    scope: str,
    if_sha256: str | None,
    actor: str | None,
    session: str | None,
    caller: Caller | None = None,
) -> Version | None:
    validate_path(path)
    check_sha(if_sha256)
    plan = plan_edit(path, edit, if_sha256)
    return mutate(store, scope, plan, actor=actor, session=session, spec=spec, caller=caller)


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
    caller: Caller | None = None,
) -> Version | None:
    """Replace the one occurrence of ``old`` by ``new``; errors when it is missing or not unique."""
    if old == "":
        raise InvalidInputError("old text must not be empty")
    spec: Spec = ("str_replace", {"path": path, "old": old, "new": new, "if_sha256": if_sha256})
    edit = replace_edit(path, old, new)
    return _edit(
        store, path, edit, spec, scope=scope, if_sha256=if_sha256, actor=actor, session=session, caller=caller
    )


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
    caller: Caller | None = None,
) -> Version | None:
    """Insert ``text`` after line ``line`` (0 = top)."""
    # A line that is not an int fails in insert_text; only an int travels to another process.
    ok = isinstance(line, int) and not isinstance(line, bool)
    spec: Spec | None = ("insert", {"path": path, "line": line, "text": text, "if_sha256": if_sha256})
    return _edit(
        store,
        path,
        lambda t: insert_text(t, line, text),
        spec if ok else None,
        scope=scope,
        if_sha256=if_sha256,
        actor=actor,
        session=session,
        caller=caller,
    )


def delete(
    store: StoreCore,
    path: str,
    *,
    scope: str = "main",
    if_sha256: str | None = None,
    actor: str | None = None,
    session: str | None = None,
    caller: Caller | None = None,
) -> Version:
    """Delete a memory (its versions stay in history)."""
    validate_path(path)
    check_sha(if_sha256)
    spec: Spec = ("delete", {"path": path, "if_sha256": if_sha256})
    # Deleting is erasure: an archived store allows it (only new content is refused there).
    plan = plan_delete(path, if_sha256)
    version = mutate(store, scope, plan, actor=actor, session=session, erasing=True, spec=spec, caller=caller)
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
    caller: Caller | None = None,
) -> Version | None:
    """Move a memory to ``new_path``, keeping its memory id; never overwrites."""
    validate_path(old_path)
    validate_path(new_path)
    check_sha(if_sha256)
    spec: Spec = ("rename", {"old_path": old_path, "new_path": new_path, "if_sha256": if_sha256})
    plan = plan_rename(old_path, new_path, if_sha256)
    return mutate(store, scope, plan, actor=actor, session=session, spec=spec, caller=caller)


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
        blob_hex = str(obj.id)
        head = store.index.head_at(scope, path, str(tip), blob_hex)
        if head is not None and head.blob == blob_hex:
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
