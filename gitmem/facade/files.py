"""Plain reads of :class:`gitmem.Store`'s git objects, for faces that mirror a scope's files
(session mounts, the memory tool): a scope's tip, a commit's files, a blob's bytes, what changed
between two commits. Ids are hex strings, never pygit2 objects; a commit id is what a face keeps
between calls (a mount's marker) and hands back.

These read the repository as git has it (no index, no access check of their own): a face that
confines its caller checks the scope first (``caller`` on :meth:`tip`).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gitmem.errors import ForbiddenError
from gitmem.git import files as gitfiles
from gitmem.model.caller import Caller

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore


class Files:
    """Git reads (mixed into :class:`gitmem.Store`)."""

    _core: StoreCore

    def tip(
        self, scope: str = "main", *, proposer: str | None = None, caller: Caller | None = None
    ) -> str | None:
        """The commit id at the head of ``scope`` (None: the scope has no version); with
        ``proposer`` (an owner: a session, else an actor), the tip of its open proposal on the
        scope when it has one: what that proposer reads (docs/review.md)."""
        from gitmem.engine import access

        access.admit_read(self._core, caller, scope)
        if caller is not None and proposer is not None and proposer != caller.owner:
            raise ForbiddenError(f"{caller.who} may not read the proposal of {proposer}")
        if proposer is not None:
            from gitmem.engine import proposals

            mine = proposals.owner_tip(self._core, scope, proposer)
            if mine is not None:
                return str(mine)
        tip = self._core.tip(scope)
        return str(tip) if tip is not None else None

    def files(self, commit: str | None) -> dict[str, str]:
        """Every file of ``commit`` (a :meth:`tip`) as ``/path`` -> blob id; None: no files."""
        return gitfiles.tree_files(self._tree(commit))

    def file_at(self, commit: str | None, path: str) -> tuple[str, str] | None:
        """What ``commit`` holds at ``path``: ``("file", blob id)``, ``("dir", tree id)`` or None."""
        return gitfiles.entry_at(self._tree(commit), path)

    def blob(self, blob_id: str) -> bytes:
        """The bytes of blob ``blob_id`` (KeyError: not in the store, e.g. purged)."""
        return self._core.blob_data(gitfiles.oid(blob_id))

    def has_object(self, object_id: str) -> bool:
        """Whether the repository holds ``object_id`` (a commit a rewrite dropped does not)."""
        return self._core.has_object(object_id)

    def changed_files(self, old: str, new: str | None) -> builtins.list[tuple[str, str | None]]:
        """The files that differ between commits ``old`` and ``new``: (path, new blob id or None)."""
        from gitmem.git.treediff import diff_trees

        changes = diff_trees(self._core.repo, self._tree(old), self._tree(new))
        return [(path, str(blob) if blob is not None else None) for _kind, path, _old, blob in changes]

    def head_bytes(self, path: str, *, scope: str = "main") -> bytes:
        """A memory's exact bytes at the head of ``scope``, straight from the tree (no index, no
        settings read: ``gitmem read``'s fast path). NotFoundError: no such memory."""
        return self._core.head_blob(scope, path)[1].data

    def redacted_files(
        self, files: Mapping[str, str], read: Callable[[str], bytes | None], *, scope: str | None = None
    ) -> builtins.list[str]:
        """Of ``files`` (path -> blob id; ``read(path)`` gives a file's bytes), those holding
        content the store redacted: a deny-listed blob (of ``scope``'s deny-list when given), or a
        match of a redacted pattern."""
        from gitmem.engine.denylist import denied_reason, read_patterns

        denied = self._core.denied_ids() if scope is None else self._core.denied_in(scope)
        patterns = read_patterns(self._core.path)
        return [
            path
            for path, blob in sorted(files.items())
            if blob in denied
            or (bool(patterns) and denied_reason(frozenset(), patterns, path, read(path)) is not None)
        ]

    def _tree(self, commit: str | None) -> Any:  # a pygit2.Tree, never handed to a face
        return self._core.tree_of(gitfiles.oid(commit)) if commit is not None else None


def blob_id(data: bytes) -> str:
    """The git blob id of ``data``: what the store's tree holds for a file with these bytes."""
    return gitfiles.blob_id(data)
