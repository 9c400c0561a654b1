"""Tree diffs for deriving versions from commits: which memories a commit added, changed or removed."""

from __future__ import annotations

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
_PY_DIFF_MAX_ENTRIES = 512


def diff_trees(repo: pygit2.Repository, old: pygit2.Tree | None, new: pygit2.Tree | None) -> list[Change]:
    """Changed files between two trees as (kind, api path, old blob, new blob); kind is
    added/modified/deleted. Identical subtrees are skipped by id, so the cost follows the change:
    small directories are compared in Python (libgit2's diff setup costs milliseconds on a
    10k-file tree), large ones with libgit2."""
    out: list[Change] = []
    _diff(old, new, "", out)
    return out


def _diff(old: pygit2.Tree | None, new: pygit2.Tree | None, base: str, out: list[Change]) -> None:
    if (len(old) if old is not None else 0) + (len(new) if new is not None else 0) > _PY_DIFF_MAX_ENTRIES:
        _diff_libgit2(old, new, base, out)
        return
    old_entries = {e.name or "": e for e in old} if old is not None else {}
    new_entries = {e.name or "": e for e in new} if new is not None else {}
    for name in sorted(old_entries.keys() | new_entries.keys()):
        o, n = old_entries.get(name), new_entries.get(name)
        if o is not None and n is not None and o.id == n.id and o.filemode == n.filemode:
            continue
        path = f"{base}/{name}"
        o_tree = o if isinstance(o, pygit2.Tree) else None
        n_tree = n if isinstance(n, pygit2.Tree) else None
        if o_tree is not None or n_tree is not None:
            _diff(o_tree, n_tree, path, out)
        # Submodule entries (gitlinks) are not memories: their ids name commits of another repository.
        o_blob = o.id if o is not None and o_tree is None and o.filemode != _GITLINK else None
        n_blob = n.id if n is not None and n_tree is None and n.filemode != _GITLINK else None
        _emit(out, path, o_blob, n_blob)


def _emit(out: list[Change], path: str, o_blob: pygit2.Oid | None, n_blob: pygit2.Oid | None) -> None:
    if o_blob is None and n_blob is None:
        return
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # a non-UTF-8 name committed with plain git: not a memory path
        return
    if o_blob is not None and n_blob is not None:
        out.append(("modified", path, o_blob, n_blob))
    elif n_blob is not None:
        out.append(("added", path, None, n_blob))
    else:
        out.append(("deleted", path, o_blob, None))


def _diff_libgit2(old: pygit2.Tree | None, new: pygit2.Tree | None, base: str, out: list[Change]) -> None:
    if old is None:
        diff = new.diff_to_tree(swap=True)  # type: ignore[union-attr]
    elif new is None:
        diff = old.diff_to_tree()
    else:
        diff = old.diff_to_tree(new)
    for delta in diff.deltas:
        kind = _KINDS.get(delta.status)
        if kind is None:
            continue
        o = delta.old_file.id if kind != "added" and delta.old_file.mode != _GITLINK else None
        n = delta.new_file.id if kind != "deleted" and delta.new_file.mode != _GITLINK else None
        name = delta.new_file.path if n is not None else delta.old_file.path
        _emit(out, f"{base}/{name}", o, n)
