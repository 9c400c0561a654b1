"""Moving a proposal's chain onto its scope's current tip (docs/review.md, "When the scope moves").

A proposal is a chain of versions on its *base*; its changes are the tree diff base -> chain tip.
When the scope moves on (other writers publish), the proposer's next write first replays the
chain onto the scope's new tip, so that it plans against what it reads: a memory published since
can be changed, renamed or deleted in the proposal. The replay is a three-way rebase per path,
over the base ``B``, the scope's tip ``T`` and the chain's tip ``P``:

- the scope did not change the path (``T == B``): the proposal's change applies as it is;
- the scope made the proposal's change too (``T == P``): nothing is left to propose there;
- both changed it, differently: a *conflict*. It must stay one until a reviewer decides, never be
  settled by the rebase: the new base then is a commit on top of ``T`` whose tree holds, at each
  conflicting path, the content the proposal changed it from (``B``'s), so that the review's diff
  (gitmem.audit.review) still compares the scope's content with that origin and reports it.

This module does the git work only (no records, no locks): gitmem.engine.proposals calls it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pygit2

from gitmem.engine.core import StoreCore
from gitmem.git.treedelta import tree_deltas

#: The subject of a base that keeps conflicts (its parent is the scope's tip it stands on).
BASE_SUBJECT = "gitmem proposal base"
AUTHOR = ("gitmem", "gitmem")


@dataclass(frozen=True)
class Rebased:
    base: pygit2.Oid  # the scope's tip, or a commit on it that keeps the conflicts' origins
    tip: pygit2.Oid  # the replayed chain's tip (the base itself when the chain is empty)
    written: list[pygit2.Oid]  # the objects written (for the flush)
    conflicts: list[str]  # the paths both sides changed, differently


def stands_on(store: StoreCore, base: pygit2.Oid | None) -> pygit2.Oid | None:
    """The scope commit a proposal's ``base`` stands on: itself, or for a base that keeps
    conflicts (:data:`BASE_SUBJECT`), its parent."""
    if base is None or not store.has_object(base):
        return base
    commit = store.commit(base)
    if commit.message.split("\n", 1)[0] == BASE_SUBJECT and len(commit.parents) == 1:
        return commit.parent_ids[0]
    return base


def origin_blobs(store: StoreCore, bases: list[pygit2.Oid]) -> set[str]:
    """The blobs that bases keeping conflicts hold at their conflicting paths (the content the
    proposal changed them from): a compaction must keep them, or the review loses its three-way."""
    out: set[str] = set()
    for base in bases:
        commit = store.commit(base) if store.has_object(base) else None
        if commit is None or stands_on(store, base) == base:
            continue
        for d in tree_deltas(commit.parents[0].tree, commit.tree):
            if d.new_id is not None:
                out.add(str(d.new_id))
    return out


def _path(raw: bytes) -> str:
    return "/" + raw.decode("utf-8", "surrogateescape")


def _entry(tree: pygit2.Tree | None, path: str) -> pygit2.Object | None:
    if tree is None:
        return None
    try:
        return tree[path[1:]]
    except KeyError:
        return None


def _blob_id(tree: pygit2.Tree | None, path: str) -> pygit2.Oid | None | Literal[False]:
    """The blob at ``path`` (None: nothing there; False: a directory, which a file cannot replace)."""
    obj = _entry(tree, path)
    if obj is None:
        return None
    return obj.id if isinstance(obj, pygit2.Blob) else False


def _clashes(tree: pygit2.Tree | None, path: str, blob: pygit2.Oid | None) -> bool:
    """Whether setting ``path`` to ``blob`` in ``tree`` would replace a directory with a file or a
    file with a directory (and so drop memories that are not the proposal's to drop)."""
    if tree is None:
        return False
    if blob is None:
        return isinstance(_entry(tree, path), pygit2.Tree)
    segments = path[1:].split("/")
    for i in range(1, len(segments)):
        if isinstance(_entry(tree, "/" + "/".join(segments[:i])), pygit2.Blob):
            return True
    return isinstance(_entry(tree, path), pygit2.Tree)


class _Clash(Exception):
    pass


def _apply(
    store: StoreCore,
    tree: pygit2.Tree | None,
    changes: list[tuple[str, pygit2.Oid | None]],
    written: list[pygit2.Oid],
) -> pygit2.Tree | None:
    for path, blob in changes:
        if _clashes(tree, path, blob):
            raise _Clash(path)
        oid = store.update_tree(tree, path[1:].split("/"), blob, written)
        tree = store.written_object(oid) if oid is not None else None  # type: ignore[assignment]
    return tree


def _tree_id(store: StoreCore, tree: pygit2.Tree | None, written: list[pygit2.Oid]) -> pygit2.Oid:
    if tree is not None:
        return tree.id
    written.append(store.empty_tree())
    return written[-1]


def _step(
    path: str,
    blob: pygit2.Oid | None,
    changed: set[str],
    base_tree: pygit2.Tree | None,
    onto_tree: pygit2.Tree | None,
) -> tuple[str, pygit2.Oid | None]:
    """One step of the replay. A path the whole chain leaves as it found it (changed and changed
    back, created and deleted) is the scope's: the step that returns it to the base's content
    returns it to the scope's instead. Its other steps are replayed, so that what the chain
    wrote stays reachable from it (an erasure of the proposal purges it)."""
    if path in changed or blob != _blob_id(base_tree, path):
        return path, blob
    now = _blob_id(onto_tree, path)
    return path, None if now is False else now


def rebase_chain(
    store: StoreCore, base: pygit2.Oid | None, chain: list[pygit2.Commit], onto: pygit2.Oid
) -> Rebased | None:
    """The ``chain`` (oldest first, on ``base``) replayed onto the scope commit ``onto``; the
    commits keep their messages (trailers: version and memory ids), authors and times. None when
    the replay would put a file where the scope now has a directory or the other way round: the
    proposal then stays on its base, and its review compares it with the scope as always."""
    base_tree = store.tree_of(base)
    onto_tree = store.tree_of(onto)
    tip_tree = chain[-1].tree if chain else base_tree
    origins: list[tuple[str, pygit2.Oid | None]] = []
    changed: set[str] = set()
    for d in tree_deltas(base_tree, tip_tree):
        path = _path(d.raw_path)
        changed.add(path)
        current = _blob_id(onto_tree, path)
        if current is False:  # the scope made a directory of it
            return None
        if current != d.old_id and current != d.new_id:
            origins.append((path, d.old_id))
    written: list[pygit2.Oid] = []
    try:
        new_base = onto
        tree = _apply(store, onto_tree, origins, written)
        if origins:
            message = f"{BASE_SUBJECT}\n\nThe scope at {onto}, with the proposal's conflicting paths at their origin.\n"
            new_base = store.create_commit(_tree_id(store, tree, written), [onto], message, AUTHOR)
            written.append(new_base)
        parent, before = new_base, base_tree
        for c in chain:
            steps = [(_path(d.raw_path), d.new_id) for d in tree_deltas(before, c.tree)]
            tree = _apply(
                store, tree, [_step(p, b, changed, base_tree, onto_tree) for p, b in steps], written
            )
            author = (c.author.name, c.author.email)
            parent = store.create_commit(
                _tree_id(store, tree, written), [parent], c.message, author, c.committer.time
            )
            written.append(parent)
            before = c.tree
    except _Clash:
        return None
    return Rebased(new_base, parent, written, [p for p, _o in origins])
