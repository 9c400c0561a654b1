"""Tree diffs, the reference answer: which files and memories differ between two trees (``git diff-tree -r``'s
list; Python for small directories, libgit2 for large ones). :mod:`gitmem.git.treediff`'s walk differ
must give exactly this answer."""

from __future__ import annotations

from typing import NamedTuple

import pygit2

_KINDS = {
    pygit2.enums.DeltaStatus.ADDED: "added",
    pygit2.enums.DeltaStatus.DELETED: "deleted",
    pygit2.enums.DeltaStatus.MODIFIED: "modified",
    pygit2.enums.DeltaStatus.TYPECHANGE: "modified",
}


_GITLINK = pygit2.enums.FileMode.COMMIT


def merge_own_changes(
    merge: pygit2.Commit, changes: list[tuple[str, str, pygit2.Oid | None, pygit2.Oid | None]]
) -> list[tuple[str, str, pygit2.Oid | None, pygit2.Oid | None]]:
    """Of a merge's changes against its first parent, those no other parent already has."""

    def entry(tree: pygit2.Tree, path: str) -> pygit2.Oid | None:
        try:
            return tree[path[1:]].id
        except (KeyError, ValueError, pygit2.GitError):
            return None

    others = [p.tree for p in merge.parents[1:]]
    return [c for c in changes if all(entry(t, c[1]) != c[3] for t in others)]


Change = tuple[str, str, pygit2.Oid | None, pygit2.Oid | None]

# Above this many entries in a pair of directories, libgit2's C diff beats walking them in Python.
PY_DIFF_MAX_ENTRIES = 512


class Delta(NamedTuple):
    """One non-tree entry that differs between two trees (files, symlinks, gitlinks)."""

    kind: str  # added | modified | deleted
    raw_path: bytes  # the path in the tree, as git stores it (no leading '/')
    old_id: pygit2.Oid | None
    new_id: pygit2.Oid | None
    old_mode: int
    new_mode: int


def tree_deltas(old: pygit2.Tree | None, new: pygit2.Tree | None) -> list[Delta]:
    """Every non-tree entry added, modified or deleted from ``old`` to ``new``, the way
    ``git diff-tree -r`` lists them. Identical subtrees are skipped by id, so the cost follows
    the change: small directories are compared in Python (libgit2's diff setup costs milliseconds
    on a 10k-file tree), large ones with libgit2."""
    out: list[Delta] = []
    _deltas(old, new, b"", out)
    return out


def _deltas(old: pygit2.Tree | None, new: pygit2.Tree | None, base: bytes, out: list[Delta]) -> None:
    if (len(old) if old is not None else 0) + (len(new) if new is not None else 0) > PY_DIFF_MAX_ENTRIES:
        deltas_libgit2(old, new, base, out)
        return
    old_entries = {e.raw_name or b"": e for e in old} if old is not None else {}
    new_entries = {e.raw_name or b"": e for e in new} if new is not None else {}
    for name in sorted(old_entries.keys() | new_entries.keys()):
        o, n = old_entries.get(name), new_entries.get(name)
        if o is not None and n is not None and o.id == n.id and o.filemode == n.filemode:
            continue
        path = base + name
        o_tree = o if isinstance(o, pygit2.Tree) else None
        n_tree = n if isinstance(n, pygit2.Tree) else None
        if o_tree is not None or n_tree is not None:
            _deltas(o_tree, n_tree, path + b"/", out)
        o_file = o if o is not None and o_tree is None else None
        n_file = n if n is not None and n_tree is None else None
        if o_file is not None and n_file is not None:
            out.append(Delta("modified", path, o_file.id, n_file.id, o_file.filemode, n_file.filemode))
        elif n_file is not None:
            out.append(Delta("added", path, None, n_file.id, 0, n_file.filemode))
        elif o_file is not None:
            out.append(Delta("deleted", path, o_file.id, None, o_file.filemode, 0))


def deltas_libgit2(old: pygit2.Tree | None, new: pygit2.Tree | None, base: bytes, out: list[Delta]) -> None:
    if old is None:
        diff = new.diff_to_tree(swap=True)  # type: ignore[union-attr]
    elif new is None:
        diff = old.diff_to_tree()
    else:
        diff = old.diff_to_tree(new)
    for d in diff.deltas:
        kind = _KINDS.get(d.status)
        if kind is None:
            continue
        o, n = d.old_file, d.new_file
        raw = (n.raw_path if kind != "deleted" else o.raw_path) or b""
        out.append(
            Delta(
                kind,
                base + raw,
                o.id if kind != "added" else None,
                n.id if kind != "deleted" else None,
                int(o.mode) if kind != "added" else 0,
                int(n.mode) if kind != "deleted" else 0,
            )
        )


def diff_trees(repo: pygit2.Repository, old: pygit2.Tree | None, new: pygit2.Tree | None) -> list[Change]:
    """Changed memories between two trees as (kind, api path, old blob, new blob); kind is
    added/modified/deleted. Submodule entries (gitlinks) are not memories, and neither are names
    that are not UTF-8 (committed with plain git)."""
    return changes_of(tree_deltas(old, new))


def changes_of(deltas: list[Delta]) -> list[Change]:
    out: list[Change] = []
    for d in deltas:
        o = d.old_id if d.old_mode not in (0, _GITLINK) else None
        n = d.new_id if d.new_mode not in (0, _GITLINK) else None
        if o is None and n is None:
            continue
        try:
            path = "/" + d.raw_path.decode("utf-8")
        except UnicodeDecodeError:
            continue
        if o is not None and n is not None:
            out.append(("modified", path, o, n))
        elif n is not None:
            out.append(("added", path, None, n))
        else:
            out.append(("deleted", path, o, None))
    return out
