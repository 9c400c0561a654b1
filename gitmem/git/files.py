"""A commit's files as plain values (path -> blob id), for the facade's reads of trees and blobs:
the faces (sessions' mounts, the memory tool) never see a pygit2 object (docs/architecture.md)."""

from __future__ import annotations

import pygit2

from gitmem.errors import InvalidInputError
from gitmem.git.repo import lookup


def blob_id(data: bytes) -> str:
    """The git blob id of ``data`` (what a tree would hold for a file with these bytes)."""
    return str(pygit2.hash(data))


def tree_files(tree: pygit2.Tree | None) -> dict[str, str]:
    """Every file of ``tree`` as ``/path`` -> blob id (submodules and links are not files)."""
    out: dict[str, str] = {}
    if tree is not None:
        _walk(tree, "", out)
    return out


def _walk(tree: pygit2.Tree, base: str, out: dict[str, str]) -> None:
    for entry in tree:
        path = f"{base}/{entry.name}"
        if isinstance(entry, pygit2.Tree):
            _walk(entry, path, out)
        elif isinstance(entry, pygit2.Blob):
            out[path] = str(entry.id)


def entry_at(tree: pygit2.Tree | None, path: str) -> tuple[str, str] | None:
    """What ``tree`` holds at ``/path``: ("file", blob id) or ("dir", tree id); None: nothing."""
    if tree is None or path in ("", "/"):
        return ("dir", str(tree.id)) if tree is not None else None
    try:
        obj = lookup(tree, path[1:])
    except (KeyError, ValueError):
        return None
    if isinstance(obj, pygit2.Blob):
        return "file", str(obj.id)
    return ("dir", str(obj.id)) if isinstance(obj, pygit2.Tree) else None


def oid(object_id: str) -> pygit2.Oid:
    """A 40-hex object id as an Oid (InvalidInputError on anything else)."""
    try:
        return pygit2.Oid(hex=object_id)
    except (ValueError, TypeError):
        raise InvalidInputError(f"not an object id: {object_id!r}") from None
