"""A history rewrite's step for the proposal chains of a scope (gitmem.audit.redact): the chains
are rewritten with the same blob replacement and moved onto the rewritten history, so no proposal
keeps the retired history alive (docs/review.md, "Redaction and retention")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pygit2

from gitmem.engine import proposals as P
from gitmem.engine.core import StoreCore
from gitmem.git.locks import proposals_lock


def _chain_deltas(store: StoreCore, scope: str | None) -> Iterator[tuple[str, Any]]:
    """(scope, delta) of every change the proposal chains (open, accepted or rejected, while their
    ref exists) made that their scope's branch does not hold."""
    repo = store.repo
    for name in P.proposal_refs(store, scope):
        tip = repo.references[name].target
        chain_scope = name[len(P.REF_PREFIX) :].rpartition("/")[0]
        if not isinstance(tip, pygit2.Oid):
            continue
        walker = repo.walk(tip, pygit2.enums.SortMode.TOPOLOGICAL)
        branch = store.tip(chain_scope)
        if branch is not None:
            walker.hide(branch)
        for commit in walker:
            base = commit.parents[0].tree if commit.parents else None
            diff = (
                commit.tree.diff_to_tree(base, swap=True)
                if base is not None
                else commit.tree.diff_to_tree(swap=True)
            )
            for delta in diff.deltas:
                yield chain_scope, delta


def chain_blobs(store: StoreCore, scope: str | None = None) -> dict[str, set[str]]:
    """The blobs the proposal chains wrote that their scope's branch does not hold: blob id ->
    the scopes. A pattern redaction must see them, or a proposal keeps the secret (issue 26)."""
    out: dict[str, set[str]] = {}
    for chain_scope, delta in _chain_deltas(store, scope):
        if delta.new_file.id != pygit2.Oid(hex="0" * 40):
            out.setdefault(str(delta.new_file.id), set()).add(chain_scope)
    return out


def chain_paths(store: StoreCore, scope: str | None = None) -> dict[str, set[str]]:
    """The paths (``/a/b.md``) the proposal chains changed that their scope's branch does not
    hold: path -> the scopes. A pattern redaction matches them as it matches the versions' paths
    (a path only a rejected proposal names is found, docs/redaction.md)."""
    out: dict[str, set[str]] = {}
    for chain_scope, delta in _chain_deltas(store, scope):
        for f in (delta.old_file, delta.new_file):
            if f.id != pygit2.Oid(hex="0" * 40):
                path = "/" + f.raw_path.decode("utf-8", "surrogateescape")
                out.setdefault(path, set()).add(chain_scope)
    return out


def rewrite_chains(store: StoreCore, scope: str, rewriter: Any, first: str) -> Callable[[], None]:
    """Rewrite the proposal chains of ``scope`` with a redaction's ``rewriter`` (the replaced
    blobs replaced there too, parents mapped onto the rewritten history), so that no proposal
    keeps the retired history alive. Returns the step that moves the proposal refs (and their
    recorded bases), to run once the rewritten objects are written."""
    repo = store.repo
    hide = list(store.commit(first).parent_ids)
    moves: list[tuple[str, pygit2.Oid, pygit2.Oid]] = []
    for name in P.proposal_refs(store, scope):
        old = repo.references[name].target
        if not isinstance(old, pygit2.Oid):
            continue
        walker = repo.walk(old, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
        for parent in hide:
            walker.hide(parent)
        new = old
        for commit in walker:
            new = rewriter.commit(commit)
        if new != old:
            moves.append((name, old, new))

    def publish() -> None:
        # Under the lock decisions and proposal writes take, so that none of them is saved over.
        # Lock order: the store lock (held by the rewrite), then this one; nothing that holds
        # this lock waits for the store lock (a write's repack only tries it).
        with proposals_lock(store.path):
            by_id = {p.id: p for p in P.proposals(store, scope=scope)}
            for name, old, new in moves:
                store.cas(name, old, new, "gitmem redaction")
                p = by_id.get(name.rsplit("/", 1)[-1])
                if p is not None and p.base:
                    p.base = str(rewriter.commits.get(pygit2.Oid(hex=p.base), p.base))
                    P.save(store, p)

    return publish


class OnDroppedHistory(Exception):
    """A proposal chain starts from a commit a compaction drops (its diff would change)."""


def move_chains(
    store: StoreCore,
    scope: str,
    rewriter: Any,
    root: pygit2.Oid,
    retired: set[pygit2.Oid],
    last: pygit2.Oid,
) -> tuple[dict[str, str], Callable[[], None]]:
    """A compaction's step for the proposal chains of ``scope``: each chain commit rewritten onto
    the compacted history (a parent the compaction retires becomes its new ``root``; the others as
    ``rewriter`` mapped them; ``last``, the newest retired commit, is the root's tree). A chain
    started on an older retired commit raises OnDroppedHistory (nothing moved). Returns the old -> new ids of the chain commits (they are retired
    too) and the step that moves the refs and recorded bases, to run once the objects are written."""
    repo = store.repo
    tip = store.tip(scope)
    moves: list[tuple[str, pygit2.Oid, pygit2.Oid]] = []
    chain_map: dict[str, str] = {}

    def mapped(p: pygit2.Oid) -> pygit2.Oid:
        if p in rewriter.commits:
            return rewriter.commits[p]  # type: ignore[no-any-return]
        if p == last:
            return root  # the root holds exactly this commit's tree
        if p in retired:
            raise OnDroppedHistory(
                f"a proposal ({name}) is based on history this compaction would drop; decide it "
                "(gitmem review) first"
            )
        return p

    name = ""
    for name in P.proposal_refs(store, scope):
        old = repo.references[name].target
        if not isinstance(old, pygit2.Oid):
            continue
        walker = repo.walk(old, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
        if tip is not None:
            walker.hide(tip)
        new = old
        for commit in walker:
            new = rewriter.commit(commit, [mapped(p) for p in commit.parent_ids])
            if new != commit.id:
                chain_map[str(commit.id)] = str(new)
        if new != old:
            moves.append((name, old, new))

    def publish() -> None:
        with proposals_lock(store.path):
            by_id = {p.id: p for p in P.proposals(store, scope=scope)}
            for name, old, new in moves:
                store.cas(name, old, new, "gitmem compaction")
                p = by_id.get(name.rsplit("/", 1)[-1])
                if p is not None and p.base:
                    p.base = str(mapped(pygit2.Oid(hex=p.base)))
                    P.save(store, p)

    return chain_map, publish
