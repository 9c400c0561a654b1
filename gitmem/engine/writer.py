"""The write path: plan one change against a scope's tip, write its objects, move the branch.

Every change runs through :func:`gitmem.engine.group.mutate`: read the scope's tip, plan the change against it (checking
preconditions and limits), write blob + spine trees + commit, then move the branch by
compare-and-swap. A lost race re-plans against the new tip, so an acknowledged write is never lost
and a precondition is never checked against a stale state. Batches (gitmem.engine.batch) reuse the pieces.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import random
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2

from gitmem.config import Limits
from gitmem.engine import ledger_text
from gitmem.engine.change import Change as Change
from gitmem.engine.core import StagedIndexRecord, StoreCore
from gitmem.engine.denylist import denied_reason, forged_mark, read_patterns
from gitmem.engine.guard import flag_trailer, screen
from gitmem.engine.rows import HeadRow, VersionRow
from gitmem.errors import ForbiddenError, GitmemError, InvalidInputError, NotFoundError
from gitmem.git.blobs import StoredBlob
from gitmem.git.locks import ordered_lock
from gitmem.git.repo import lookup
from gitmem.ids import new_id
from gitmem.model import policy
from gitmem.model.frontmatter import parse_description
from gitmem.model.paths import validate_scope
from gitmem.model.versions import (
    RedactionInfo,
    Version,
    format_message,
    timestamp,
    validate_session,
)

if TYPE_CHECKING:
    from gitmem.model.guard import GuardPolicy

_log = logging.getLogger("gitmem.write")
MAX_ATTEMPTS = 64
STORE_BYTES_LOCK = "store-bytes.lock"
# Writes in different scopes race on max_store_bytes (each CAS guards one branch). Writes that
# land within this many max-size memories of the limit check and publish under one store-wide lock;
# the others cannot overshoot unless more than this many of them race at once.
STORE_LOCK_MARGIN = 16


class ScopeState:
    """The state of one scope at one tip, as a planner sees it."""

    def __init__(self, store: StoreCore, scope: str, tip: pygit2.Oid | None) -> None:
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
        self._store_bytes_exact = False
        # Set by check_limits when this change could push the store past max_store_bytes
        # together with changes in other scopes: the write then re-plans under the store-bytes lock.
        self.needs_store_lock = False
        # Set by refuse_denied when a change holds content another scope's redaction deny-listed
        # (not refused here): the write then holds the purge lock shared (docs/redaction.md#by-scope).
        self.needs_purge_lock = False
        self._denied: frozenset[str] | None = None
        self._elsewhere: frozenset[str] = frozenset()  # the store's deny-list, when it names more
        self._patterns: tuple[re.Pattern[str], ...] | None = None
        #: The write-time guard's policy, read once per state (gitmem.engine.guard.screen).
        self.guard: GuardPolicy | None = None
        self._blobs_of: pygit2.Tree | None = None  # the tree ``_blobs`` caches lookups in
        self._blobs: dict[str, StoredBlob | None] = {}

    def denied_ids(self) -> frozenset[str]:
        """The deny-list of this scope, read once per state (a batch checks it for every change)."""
        if self._denied is None:
            self._denied, every = self.store.denied_for(self.scope)  # every: other scopes' too
            self._elsewhere = every if len(every) > len(self._denied) else frozenset()
        return self._denied

    def refuse_denied(self, path: str, data: bytes | None) -> None:
        """ForbiddenError when ``data`` at ``path`` is deny-listed or matches a deny-pattern (the
        deny-list and patterns read once per state, as :func:`gitmem.engine.denylist.refuse_denied`)."""
        if self._patterns is None:
            self._patterns = read_patterns(self.store.path)
        why = denied_reason(self.denied_ids(), self._patterns, path, data)
        if why is not None:
            raise ForbiddenError(why + " (redact it, or write different content)")
        if data is not None and self._elsewhere:
            self.needs_purge_lock |= str(pygit2.hash(data)) in self._elsewhere
        forged = forged_mark(self.store.path, path, data)
        if forged is not None:
            raise InvalidInputError(forged)

    def _index(self) -> None:
        if not self._indexed:
            self.store.index.ensure(self.scope, self.tip, known_tip=True)
            self._indexed = True

    def blob(self, path: str) -> StoredBlob | None:
        """The file at ``path`` (None when there is none, or a directory is there), looked up and
        read once per tree: planning, limits and guard each ask (gitmem.git.blobs)."""
        tree = self.tree
        if tree is None:
            return None
        if self._blobs_of is not tree:  # a batch moved ``tree`` on: forget the old one's lookups
            self._blobs_of, self._blobs = tree, {}
        if path not in self._blobs:
            try:
                obj = lookup(tree, path[1:])
            except KeyError:
                obj = None
            self._blobs[path] = StoredBlob(obj) if isinstance(obj, pygit2.Blob) else None
        return self._blobs[path]

    def require(self, path: str) -> StoredBlob:
        blob = self.blob(path)
        if blob is None:
            raise NotFoundError(f"memory {path} does not exist in scope {self.scope!r}")
        return blob

    def head(self, path: str) -> HeadRow | None:
        self._index()
        head = self.store.index.head(self.scope, path)
        if head is None and path not in self.overlay and self.blob(path) is not None:
            # The tree has the file but the index has no head for it: this handle's idea of how far
            # the index is was wrong (another handle re-derived the scope). Catch up again rather
            # than mint a new memory id for a memory that has one.
            self.store.index.forget(self.scope)
            self.store.index.ensure(self.scope, self.tip, known_tip=True)
            head = self.store.index.head(self.scope, path)
        return head

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

    def store_bytes(self, *, exact: bool = False) -> int:
        """Bytes of current content over every scope. By default from the index as it stands
        (this scope caught up; the others as their writers and post-receive left them: one query,
        whatever the number of scopes); ``exact`` first catches every scope up from git."""
        if exact and not self._store_bytes_exact:
            self.store.index.ensure_all()
            self._store_bytes = None
            self._store_bytes_exact = True
        if self._store_bytes is None:
            self._index()
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


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def encode_content(content: str | bytes) -> bytes:
    if isinstance(content, bytes):
        return content
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError("content is not valid UTF-8 text (it contains lone surrogates)") from None


def decode_content(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def authorize(
    store: StoreCore,
    scope: str,
    actor: str | None,
    session: str | None,
    reviewed_by: str | None = None,
    *,
    erasing: bool = False,
) -> tuple[str, str | None, Limits]:
    """Check who writes where before any write: scope and session syntax, the actor recorded, a
    writable store (not archived, not a clone) and the store's acl (the same one pushes obey;
    for an accepted proposal, the reviewer is the one who must be allowed).
    ``erasing``: the write only deletes, which an archived store still allows (as redaction does,
    and as Anthropic's API does); a clone stays read-only.
    Returns the actor, the session and the store's limits."""
    validate_scope(scope)
    session = validate_session(session)
    actor = ledger_text.recorded_actor(store, actor, session, scope)  # kept in the ledger too
    if not (erasing and not store.is_clone):
        store.check_writable()
    settings = store.settings
    policy.raise_first(policy.check_acl(settings.acl, scope, reviewed_by or actor))
    return actor, session, settings.limits


def scope_lock(store: StoreCore, scope: str) -> contextlib.AbstractContextManager[None]:
    """The lock under which one process at a time group-commits to ``scope``."""
    return ordered_lock("scope", scope_lock_path(store, scope))


def scope_lock_path(store: StoreCore, scope: str) -> Path:
    return store.private_path("locks", f"scope-{scope}.lock")


def store_bytes_lock(store: StoreCore) -> contextlib.AbstractContextManager[None]:
    """The store-wide lock under which writes near ``max_store_bytes`` check and publish."""
    return ordered_lock("store-bytes", store.gitmem_dir / STORE_BYTES_LOCK)


def backoff(attempt: int) -> None:
    time.sleep(random.uniform(0, 0.002 * min(attempt + 1, 20)))


def commit_change(
    store: StoreCore,
    state: ScopeState,
    change: Change,
    parent: pygit2.Oid | None,
    actor: str,
    session: str | None,
    when: int | None = None,
    written: list[pygit2.Oid] | None = None,
    reviewed_by: str | None = None,
    version_id: str | None = None,
) -> tuple[pygit2.Oid, VersionRow]:
    """Write one version's objects (blob, spine trees, commit) on top of ``state.tree``; the
    branch is not moved. ``state.tree`` becomes the new tree (so batches can chain). The ids of
    the objects written are appended to ``written`` (for fsync). ``version_id``: one the caller
    minted (a write queued by another process carries its own)."""
    version_id = version_id or new_id("memver")
    data = change.data
    blob = store.write_blob(data) if data is not None else None
    if blob is not None and written is not None:
        written.append(blob)
    tree = state.tree
    if change.previous_path is not None and change.previous_path != change.path:
        moved = store.update_tree(tree, change.previous_path[1:].split("/"), None, written)
        tree = store.written_object(moved) if moved is not None else None  # type: ignore[assignment]
    tree_oid = store.update_tree(tree, change.path[1:].split("/"), blob, written)
    if tree_oid is None:
        tree_oid = store.empty_tree()
    message = format_message(
        change.operation,
        change.path,
        version_id,
        change.memory_id,
        actor,
        session,
        change.previous_path,
        change.reverts,
        flag=flag_trailer(change.flags),
        reviewed_by=reviewed_by,
    )
    now = int(time.time()) if when is None else when
    commit = store.create_commit(
        tree_oid, [parent] if parent is not None else [], message, (actor, actor), now
    )
    if written is not None:
        written.append(commit)
    state.tree = store.written_object(tree_oid)  # type: ignore[assignment]
    row = make_row(state.scope, change, version_id, actor, session, now, blob, commit)
    return commit, row


def publish_recorded(
    store: StoreCore,
    scope: str,
    tip: pygit2.Oid | None,
    head: pygit2.Oid,
    written: list[pygit2.Oid],
    rows: list[VersionRow],
    contents: dict[str, bytes],
    check: Callable[[], bool] | None = None,
) -> bool:
    """Publish the chain ``tip..head`` of ``rows`` (one flush, one compare-and-swap) and record it
    in the index; returns False on a lost race (nothing recorded), or when ``check`` (run where a
    purge's barrier orders it, :func:`gitmem.git.intent.publish`) says no.

    The index record is staged in an open transaction and committed once the branch has moved,
    so a durable write costs little more than its flush and its objects. A chain of
    :data:`OVERLAP_MIN_ROWS` versions or more is staged while the flush runs (on a flusher thread);
    a shorter one is staged first and flushed on this thread: handing the flush to another thread
    and back costs two thread wake-ups (0.5-0.8 ms on a busy machine), more than the few hundred
    microseconds a short record takes."""
    staged: list[StagedIndexRecord] = []

    def stage() -> None:
        try:
            staged.append(store.index.stage(scope, tip, head, rows, contents))
        except Exception:  # the index is derived: the next read catches up from git
            _log.exception("could not stage the index record of %s in scope %r", str(head)[:12], scope)

    overlap = len(rows) >= OVERLAP_MIN_ROWS
    try:
        if not overlap:
            stage()
        moved = store.publish(
            store.ref_name(scope), tip, head, written, during_flush=stage if overlap else None, check=check
        )
    except BaseException:
        for s in staged:
            s.rollback()
        raise
    for s in staged:
        if moved:
            s.commit()
        else:
            s.rollback()
    return moved


#: Chains this long or longer stage their index record while the flush runs (publish_recorded).
OVERLAP_MIN_ROWS = 16


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
        description = parse_description(decode_content(data))
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
        sha256_hex(data) if data is not None else None,
        len(data) if data is not None else None,
        str(blob) if blob is not None else None,
        str(commit),
        description=description,
    )


def check_limits(store: StoreCore, state: ScopeState, change: Change, limits: Limits) -> None:
    """Path, content, memory-count and store-size limits for one planned change."""
    violations = policy.check_path(change.path, limits)
    if change.data is None:
        policy.raise_first(violations)
        if change.operation != "deleted":
            state.refuse_denied(change.path, None)
        return
    violations += policy.check_content(change.path, change.data, limits)
    policy.raise_first(violations)
    state.refuse_denied(change.path, change.data)
    old_size = current_size(state, change)
    count, _bytes = state.stats()
    if change.operation == "created":
        policy.raise_first(policy.check_memory_count(state.scope, count + 1, limits))
    growth = len(change.data) - old_size
    if growth > 0:
        near = limits.max_store_bytes - STORE_LOCK_MARGIN * limits.max_memory_bytes
        total = state.store_bytes() + state.delta_bytes + growth
        if total > near:  # close to the limit: count exactly (and publish under the lock)
            total = state.store_bytes(exact=True) + state.delta_bytes + growth
            state.needs_store_lock = True
        policy.raise_first(policy.check_store_bytes(total, limits))
    screen(store, state, change)  # the write-time guard: refuses, or flags the change


def current_size(state: ScopeState, change: Change) -> int:
    """Size of what the change replaces (0 for a create)."""
    if change.operation == "created":
        return 0
    old = state.blob(change.previous_path or change.path)
    return old.size if old is not None else 0


def version_from_row(row: VersionRow, redaction: RedactionInfo | None = None) -> Version:
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


def maintain_quietly(store: StoreCore, versions: int = 1) -> None:
    """Repack when loose objects or packs pile up, after a publish of ``versions`` versions. The
    write it follows is already durable and published, so a failed repack must not fail it: the
    next write tries again, and ``gitmem maintain`` reports the error."""
    # One look at the objects directory per handle's first write, then every few versions it
    # published (each of a group of several processes' writes: the packs pile up with every
    # process's groups), and at each publish while packs a merge replaced wait for a flush.
    store.writes_unchecked += versions
    if store.writes_unchecked < MAINTENANCE_EVERY and not store.merge_waiting:
        return
    store.writes_unchecked = 0
    if not _MAINTAINING.acquire(blocking=False):
        return  # another thread of this process is repacking: one repack at a time
    try:
        with contextlib.suppress(GitmemError):
            store.maintain()
    finally:
        _MAINTAINING.release()


_MAINTAINING = threading.Lock()
MAINTENANCE_EVERY = 8  # versions a handle publishes between two looks at its loose objects and packs
