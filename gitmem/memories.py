"""Memory operations: create, read, list, write, str_replace, insert, delete, rename.

Every change runs through :func:`mutate`: read the scope's tip, plan the change against it (checking
preconditions and limits), write blob + spine trees + commit, then move the branch by
compare-and-swap. A lost race re-plans against the new tip, so an acknowledged write is never lost
and a precondition is never checked against a stale state.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import pygit2

from gitmem import policy
from gitmem.errors import (
    ConflictError,
    InvalidInputError,
    NotFoundError,
    PathConflictError,
    PreconditionFailedError,
)
from gitmem.frontmatter import MAX_DESCRIPTION_CHARS, parse_description, set_description
from gitmem.ids import new_id
from gitmem.index import HeadRow, VersionRow
from gitmem.paths import validate_path, validate_prefix, validate_scope
from gitmem.store import Store
from gitmem.versions import RedactionInfo, Version, format_message, resolve_actor, timestamp, validate_session

MAX_ATTEMPTS = 64


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


@dataclass(frozen=True)
class Change:
    """What one version does: the planner's answer."""

    operation: str  # created | modified | deleted
    path: str
    data: bytes | None
    memory_id: str
    previous_path: str | None = None


class ScopeState:
    """The state of one scope at one tip, as a planner sees it."""

    def __init__(self, store: Store, scope: str, tip: pygit2.Oid | None) -> None:
        self.store = store
        self.scope = scope
        self.tip = tip
        self.tree = store.tree_of(tip)
        self._indexed = False
        # Batches chain several changes on one state: what they did so far.
        self.overlay: dict[str, str | None] = {}  # path -> memory id (None: deleted)
        self.delta_memories = 0
        self.delta_bytes = 0
        self._store_bytes: int | None = None

    def _index(self) -> None:
        if not self._indexed:
            self.store.index.ensure(self.scope, self.tip, known_tip=True)
            self._indexed = True

    def blob(self, path: str) -> pygit2.Blob | None:
        """The file at ``path`` (None when there is none, or a directory is there)."""
        if self.tree is None:
            return None
        try:
            obj = self.tree[path[1:]]
        except KeyError:
            return None
        return obj if isinstance(obj, pygit2.Blob) else None

    def require(self, path: str) -> pygit2.Blob:
        blob = self.blob(path)
        if blob is None:
            raise NotFoundError(f"memory {path} does not exist in scope {self.scope!r}")
        return blob

    def head(self, path: str) -> HeadRow | None:
        self._index()
        return self.store.index.head(self.scope, path)

    def has_live_memory(self, memory_id: str) -> bool:
        """Whether a memory with this id is at the head of the scope (before any batch changes)."""
        self._index()
        return self.store.index.head_by_memory(self.scope, memory_id) is not None

    def memory_id_at(self, path: str) -> str | None:
        if path in self.overlay:
            return self.overlay[path]
        head = self.head(path)
        return head.memory_id if head is not None else None

    def memory_id(self, path: str) -> str:
        return self.memory_id_at(path) or new_id("mem")

    def applied(self, change: Change, old_size: int) -> None:
        """Account for a change a batch just committed on this state."""
        if change.previous_path is not None and change.previous_path != change.path:
            self.overlay[change.previous_path] = None
        if change.operation == "deleted":
            self.overlay[change.path] = None
            self.delta_memories -= 1
            self.delta_bytes -= old_size
            return
        self.overlay[change.path] = change.memory_id
        self.delta_bytes += len(change.data or b"") - old_size
        if change.operation == "created":
            self.delta_memories += 1

    def conflict(self, path: str, ignore: str | None = None) -> str | None:
        """The path of a memory at ``path`` or overlapping it (ancestor or descendant), or None."""
        if self.tree is None:
            return None
        segments = path[1:].split("/")
        node: pygit2.Tree = self.tree
        for i, seg in enumerate(segments):
            if seg not in node:
                return None
            obj = node[seg]
            here = "/" + "/".join(segments[: i + 1])
            if isinstance(obj, pygit2.Blob):
                return None if here == ignore else here
            if not isinstance(obj, pygit2.Tree):
                return here
            node = obj
        for found in _blobs_under(node, path, ignore):
            if found != ignore:
                return found
        return None

    def store_bytes(self) -> int:
        """Bytes of current content over every scope (as of this state's first look)."""
        if self._store_bytes is None:
            self.store.index.ensure_all()
            self._store_bytes = self.store.index.store_bytes()
        return self._store_bytes

    def stats(self) -> tuple[int, int]:
        self._index()
        count, size = self.store.index.scope_stats(self.scope)
        return count + self.delta_memories, size + self.delta_bytes


def _blobs_under(tree: pygit2.Tree, base: str, ignore: str | None = None) -> list[str]:
    out = []
    for entry in tree:
        p = f"{base}/{entry.name}"
        if isinstance(entry, pygit2.Tree):
            out.extend(_blobs_under(entry, p, ignore))
        elif p != ignore:
            out.append(p)
        if out:
            break
    return out


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _encode(content: str | bytes) -> bytes:
    if isinstance(content, bytes):
        return content
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError("content is not valid UTF-8 text (it contains lone surrogates)") from None


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _check_sha(value: str | None) -> None:
    if value is not None and (len(value) != 64 or any(c not in "0123456789abcdef" for c in value)):
        raise InvalidInputError(f"if_sha256 {value!r} is not 64 lowercase hex characters")


# ---------------------------------------------------------------------- the write loop
def mutate(
    store: Store,
    scope: str,
    plan: Callable[[ScopeState], Change | None],
    *,
    actor: str | None,
    session: str | None,
) -> Version | None:
    """Plan and commit one change to one memory, with compare-and-swap and retry."""
    validate_scope(scope)
    session = validate_session(session)
    actor = resolve_actor(actor, session)
    store.check_writable()
    # The same acl the pre-receive hook applies to pushes.
    policy.raise_first(policy.check_acl(store.settings.acl, scope, actor))
    limits = store.settings.limits
    for attempt in range(MAX_ATTEMPTS):
        tip = store.tip(scope)
        state = ScopeState(store, scope, tip)
        change = plan(state)
        if change is None:
            return None
        check_limits(store, state, change, limits)
        written: list[pygit2.Oid] = []
        commit, row = commit_change(store, state, change, tip, actor, session, written=written)
        store.sync_objects(written)
        if store.cas_ref(scope, tip, commit):
            store.sync_ref(scope)
            store.index.record(scope, tip, commit, [row])
            return _version(row)
        backoff(attempt)
    raise ConflictError(
        f"could not write to scope {scope!r}: the branch kept moving ({MAX_ATTEMPTS} attempts); try again"
    )


def backoff(attempt: int) -> None:
    time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 20)))


def commit_change(
    store: Store,
    state: ScopeState,
    change: Change,
    parent: pygit2.Oid | None,
    actor: str,
    session: str | None,
    when: int | None = None,
    written: list[pygit2.Oid] | None = None,
) -> tuple[pygit2.Oid, VersionRow]:
    """Write one version's objects (blob, spine trees, commit) on top of ``state.tree``; the
    branch is not moved. ``state.tree`` becomes the new tree (so batches can chain). The ids of
    the objects written are appended to ``written`` (for fsync)."""
    version_id = new_id("memver")
    data = change.data
    blob = store.write_blob(data) if data is not None else None
    if blob is not None and written is not None:
        written.append(blob)
    tree = state.tree
    if change.previous_path is not None and change.previous_path != change.path:
        moved = store.update_tree(tree, change.previous_path[1:].split("/"), None, written)
        tree = store.repo[moved] if moved is not None else None  # type: ignore[assignment]
    tree_oid = store.update_tree(tree, change.path[1:].split("/"), blob, written)
    if tree_oid is None:
        tree_oid = store.empty_tree()
    message = format_message(
        change.operation, change.path, version_id, change.memory_id, actor, session, change.previous_path
    )
    now = int(time.time()) if when is None else when
    commit = store.create_commit(
        tree_oid, [parent] if parent is not None else [], message, (actor, actor), now
    )
    if written is not None:
        written.append(commit)
    state.tree = store.repo[tree_oid]  # type: ignore[assignment]
    row = make_row(state.scope, change, version_id, actor, session, now, blob, commit)
    return commit, row


def make_row(
    scope: str,
    change: Change,
    version_id: str,
    actor: str,
    session: str | None,
    when: int,
    blob: pygit2.Oid | None,
    commit: pygit2.Oid,
) -> VersionRow:
    """The index record of a version the library just wrote."""
    data = change.data
    description = None
    if data is not None and data.startswith(b"---"):
        description = parse_description(_decode(data))
    return VersionRow(
        version_id,
        change.memory_id,
        scope,
        change.path,
        change.previous_path,
        change.operation,
        actor,
        session,
        when,
        _sha(data) if data is not None else None,
        len(data) if data is not None else None,
        str(blob) if blob is not None else None,
        str(commit),
        description=description,
    )


def check_limits(store: Store, state: ScopeState, change: Change, limits: object) -> None:
    from gitmem.config import Limits

    assert isinstance(limits, Limits)
    violations = policy.check_path(change.path, limits)
    if change.data is None:
        policy.raise_first(violations)
        return
    violations += policy.check_content(change.path, change.data, limits)
    policy.raise_first(violations)
    old_size = current_size(state, change)
    count, _bytes = state.stats()
    if change.operation == "created":
        policy.raise_first(policy.check_memory_count(state.scope, count + 1, limits))
    growth = len(change.data) - old_size
    if growth > 0:
        total = state.store_bytes() + state.delta_bytes + growth
        policy.raise_first(policy.check_store_bytes(total, limits))


def current_size(state: ScopeState, change: Change) -> int:
    """Size of what the change replaces (0 for a create)."""
    if change.operation == "created":
        return 0
    old = state.blob(change.previous_path or change.path)
    return old.size if old is not None else 0


def _version(row: VersionRow, redaction: RedactionInfo | None = None) -> Version:
    """The public record of an index row; a redacted version carries no content hash or size."""
    return Version(
        id=row.id,
        memory_id=row.memory_id,
        scope=row.scope,
        path=row.path,
        operation=row.operation,
        actor=row.actor,
        session=row.session,
        created_at=timestamp(row.created_at),
        commit=row.commit_id,
        content_sha256=None if redaction else row.sha256,
        size=None if redaction else row.size,
        previous_path=row.prev_path,
        redaction=redaction,
    )


def _with_description(data: bytes, description: str | None) -> bytes:
    if description is None:
        return data
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise InvalidInputError(f"description is over {MAX_DESCRIPTION_CHARS} characters")
    _encode(description)  # lone surrogates: InvalidInputError, not a UnicodeEncodeError later
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return data  # the content check reports it
    return set_description(text, description).encode("utf-8")


# ---------------------------------------------------------------------- operations
def write(
    store: Store,
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
    data = _with_description(_encode(content), description)

    def plan(state: ScopeState) -> Change | None:
        blob = state.blob(path)
        if blob is not None:
            if blob.data == data:
                return None
            if if_sha256 is not None and _sha(blob.data) != if_sha256:
                raise PreconditionFailedError(
                    f"{path} changed: its sha256 is {_sha(blob.data)}, not {if_sha256}"
                )
            return Change("modified", path, data, state.memory_id(path))
        if if_sha256 is not None:
            raise PreconditionFailedError(f"{path} does not exist, so it cannot match if_sha256")
        _refuse_conflict(state, path)
        return Change("created", path, data, new_id("mem"))

    return mutate(store, scope, plan, actor=actor, session=session)


def _refuse_conflict(state: ScopeState, path: str, ignore: str | None = None) -> None:
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
    store: Store,
    path: str,
    content: str | bytes,
    *,
    scope: str = "main",
    description: str | None = None,
    actor: str | None = None,
    session: str | None = None,
    memory_id: str | None = None,
) -> Version:
    """Create a memory; never overwrites. ``memory_id`` revives a deleted memory (restore)."""
    validate_path(path)
    data = _with_description(_encode(content), description)

    def plan(state: ScopeState) -> Change:
        _refuse_conflict(state, path)
        return Change("created", path, data, memory_id or new_id("mem"))

    version = mutate(store, scope, plan, actor=actor, session=session)
    assert version is not None
    return version


def _edit(
    store: Store,
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
        if if_sha256 is not None and _sha(blob.data) != if_sha256:
            raise PreconditionFailedError(f"{path} changed: its sha256 is {_sha(blob.data)}, not {if_sha256}")
        try:
            text = blob.data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidInputError(f"{path} is not UTF-8 text and cannot be edited") from None
        data = _encode(edit(text))
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
    store: Store,
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
    store: Store,
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
    store: Store,
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
        if if_sha256 is not None and _sha(blob.data) != if_sha256:
            raise PreconditionFailedError(
                f"{path} changed: its sha256 is {_sha(blob.data)}, not {if_sha256}; nothing was deleted"
            )
        return Change("deleted", path, None, state.memory_id(path))

    version = mutate(store, scope, plan, actor=actor, session=session)
    assert version is not None
    return version


def rename(
    store: Store,
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
            if target is not None and if_sha256 is not None and _sha(target.data) == if_sha256:
                return None  # already renamed: the requested state holds
            raise NotFoundError(f"memory {old_path} does not exist in scope {state.scope!r}")
        if if_sha256 is not None and _sha(blob.data) != if_sha256:
            raise PreconditionFailedError(
                f"{old_path} changed: its sha256 is {_sha(blob.data)}, not {if_sha256}"
            )
        if old_path == new_path:
            return None
        _refuse_conflict(state, new_path, ignore=old_path)
        return Change("modified", new_path, blob.data, state.memory_id(old_path), previous_path=old_path)

    return mutate(store, scope, plan, actor=actor, session=session)


# ---------------------------------------------------------------------- reads
def head_blob(store: Store, path: str, scope: str) -> tuple[pygit2.Oid, pygit2.Blob]:
    """The scope's tip and the blob at ``path`` (see Store.head_blob)."""
    return store.head_blob(scope, path)


def read(store: Store, path: str, *, scope: str = "main", version: str | None = None) -> Memory:
    """The memory at ``path`` in ``scope`` (at its head, or at ``version``)."""
    validate_path(path)
    validate_scope(scope)
    if version is not None:
        from gitmem import history

        return history.read_version(store, version, path=path, scope=scope)
    for _attempt in range(MAX_ATTEMPTS):
        tip, obj = store.head_blob(scope, path)
        data = obj.data
        store.index.ensure(scope, tip, known_tip=True)
        head = store.index.head(scope, path)
        if head is not None and head.blob == str(obj.id):
            sha = head.sha256  # the index hashed this very blob
            break
        sha = _sha(data)
        # Racing writers moved the index past ``tip``: read again at the current tip.
    text = _decode(data)
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
    store: Store, prefix: str = "/", *, scope: str = "main", depth: int = 0, with_content: bool = False
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
        content = _decode(store.blob_data(pygit2.Oid(hex=row.blob))) if with_content else None
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
