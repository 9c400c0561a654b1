"""Memory operations: create, read, list, write, str_replace, insert, delete, rename.

Each operation is a planner (what the change is, checked against the scope's current state) run by
:func:`gitmem.engine.group.mutate`, which commits it with compare-and-swap and retry.
"""

from __future__ import annotations

from collections.abc import Callable

import pygit2

from gitmem.engine import access, history
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
from gitmem.engine.rows import HeadRow
from gitmem.engine.rows import Memory as Memory  # the public record, importable from here
from gitmem.engine.rows import Prefix as Prefix
from gitmem.engine.writer import MAX_ATTEMPTS, decode_content, encode_content, sha256_hex
from gitmem.errors import InvalidInputError
from gitmem.ids import is_id
from gitmem.model.caller import Caller
from gitmem.model.frontmatter import MAX_DESCRIPTION_CHARS, parse_description, set_description
from gitmem.model.paths import validate_path, validate_prefix, validate_scope
from gitmem.model.versions import Version, timestamp


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
        return history.read_version(store, version, path=path, scope=scope)
    for _attempt in range(MAX_ATTEMPTS):
        tip, obj = store.head_blob(scope, path)
        data = obj.data
        store.index.ensure(scope, tip, known_tip=True, checks_tip=True)  # head_at checks the index's tip
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
        out.append(memory_of(store, row, with_content=with_content))
    return [Prefix(item.path, rollup[item.path]) if isinstance(item, Prefix) else item for item in out]


def restore(
    store: StoreCore,
    version_id: str,
    *,
    actor: str | None = None,
    session: str | None = None,
    scope: str | None = None,
    caller: Caller | None = None,
) -> Version | None:
    """Write an old version's content back as a new version of the same memory, in ``scope`` (by
    default the scope :func:`version` answers for: main first, for a version forked scopes share).

    A live memory is restored at its current path (it may have been renamed since); a deleted one is
    recreated at the version's path. None when the memory already has that content.
    """
    if scope is None and caller is not None:
        scope = caller.scope  # a scope-confined caller restores its scope's row of a shared version
    row = history.version_row(store, version_id, scope)
    access.admit_write(store, caller, row.scope, actor, session)  # before reading what it restores
    data = history.row_content(store, row)
    if data is None:
        raise InvalidInputError(f"version {version_id} is a deletion; restore the version before it")
    store.index.ensure(row.scope)
    head = store.index.head_by_memory(row.scope, row.memory_id)
    if head is not None:
        return write(store, head.path, data, scope=row.scope, actor=actor, session=session, caller=caller)
    return create(
        store,
        row.path,
        data,
        scope=row.scope,
        actor=actor,
        session=session,
        memory_id=row.memory_id,
        caller=caller,
    )


def memory_of(store: StoreCore, row: HeadRow, *, with_content: bool) -> Memory:
    """The memory an index row names (its content read from the row's blob when asked for)."""
    content = decode_content(store.blob_data(pygit2.Oid(hex=row.blob))) if with_content else None
    return Memory(
        path=row.path,
        scope=row.scope,
        content=content,
        content_sha256=row.sha256,
        size=row.size,
        description=row.description,
        memory_id=row.memory_id,
        version_id=row.version_id,
        created_at=timestamp(row.created_at),
        updated_at=timestamp(row.updated_at),
    )
