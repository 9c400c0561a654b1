"""``BatchState``: a scope state that sees changes planned on top of its tip (batches, group commit)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pygit2

from gitmem.engine.core import StoreCore
from gitmem.engine.writer import Change, ScopeState
from gitmem.git.blobs import StoredBlob
from gitmem.git.repo import lookup


class _Pending:
    """Content a batch has planned but not written yet (quacks like a pygit2.Blob)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    @property
    def size(self) -> int:
        return len(self.data)


class BatchState(ScopeState):
    """A scope state that sees the batch's planned changes on top of the base tree."""

    def __init__(self, store: StoreCore, scope: str, tip: pygit2.Oid | None) -> None:
        super().__init__(store, scope, tip)
        self.base_tree = self.tree
        self._base_blobs: dict[str, StoredBlob | None] = {}  # base_tree never changes
        self.pending: dict[str, bytes | None] = {}  # path -> content (None: removed)
        self.pending_dirs: dict[str, set[str]] = {}  # directory -> planned files under it
        self.taken_ids: set[str] = set()  # memory ids revived by this batch
        self.peak_delta = 0

    def has_live_memory(self, memory_id: str) -> bool:
        """Live at the tip and not deleted or replaced by an earlier change here, or made live by one."""
        if memory_id in self.taken_ids or memory_id in self.overlay.values():
            return True
        self._index()
        head = self.store.index.head_by_memory(self.scope, memory_id)
        return head is not None and self.overlay.get(head.path, memory_id) == memory_id

    def blob(self, path: str) -> Any:
        if path in self.pending:
            data = self.pending[path]
            return _Pending(data) if data is not None else None
        return self._base_blob(path)

    def _base_blob(self, path: str) -> StoredBlob | None:
        """The file at ``path`` in the base tree, looked up and read once (:meth:`ScopeState.blob`)."""
        if path not in self._base_blobs:
            obj = None
            if self.base_tree is not None:
                try:
                    obj = lookup(self.base_tree, path[1:])
                except KeyError:
                    obj = None
            self._base_blobs[path] = StoredBlob(obj) if isinstance(obj, pygit2.Blob) else None
        return self._base_blobs[path]

    def _set(self, path: str, data: bytes | None) -> None:
        self.pending[path] = data
        parts = path.split("/")
        for i in range(2, len(parts)):
            files = self.pending_dirs.setdefault("/".join(parts[:i]), set())
            if data is None:
                files.discard(path)
            else:
                files.add(path)

    def applied(self, change: Change, old_size: int) -> None:
        growth = len(change.data or b"") - old_size if change.operation != "deleted" else 0
        if growth > 0:  # the most the store is above its tip at any step of the batch
            self.peak_delta = max(self.peak_delta, self.delta_bytes + growth)
        super().applied(change, old_size)
        if change.previous_path is not None and change.previous_path != change.path:
            self._set(change.previous_path, None)
        self._set(change.path, change.data)

    def conflict(self, path: str, ignore: str | None = None) -> str | None:
        segments = path[1:].split("/")
        for i in range(1, len(segments) + 1):
            here = "/" + "/".join(segments[:i])
            if here != ignore and self.blob(here) is not None:
                return here
        for planned in self.pending_dirs.get(path, ()):
            if planned != ignore:
                return planned
        base = None
        if self.base_tree is not None:
            try:
                base = lookup(self.base_tree, path[1:])
            except KeyError:
                base = None
        if isinstance(base, pygit2.Tree):
            for found in _files_under(base, path):
                if found != ignore and self.pending.get(found, b"") is not None:
                    return found
        return None


def _files_under(tree: pygit2.Tree, base: str) -> Iterator[str]:
    for entry in tree:
        p = f"{base}/{entry.name}"
        if isinstance(entry, pygit2.Tree):
            yield from _files_under(entry, p)
        else:
            yield p
