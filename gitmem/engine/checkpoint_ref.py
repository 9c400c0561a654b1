"""The commits on ``refs/gitmem/checkpoints`` (docs/transparency.md#checkpoints): their layout, read
and written for :mod:`gitmem.engine.checkpoints`.

Each commit carries ``checkpoint`` (the newest signed note, with the cosignatures gathered so far)
as its message's body, then, after a form feed line, ``witnessed`` (the newest checkpoint a witness
cosigned, when it is not the newest); its tree holds one blob, ``keys`` (every log vkey, oldest
first). Older commits hold ``checkpoint`` and ``witnessed`` as blobs; they read the same. A commit
is one object (the tree changes only with the keys), written through the thread's lean object
writer, flushed, and the ref moved by compare-and-swap (:meth:`gitmem.git.repo.Repo.cas`).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import pygit2

from gitmem.errors import ConflictError
from gitmem.git.repo import retrying
from gitmem.model.tlog import note
from gitmem.model.tlog.checkpoint import parse_body

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

CHECKPOINTS_REF = "refs/gitmem/checkpoints"
CLONE_CHECKPOINTS_REFS = ("refs/remotes/origin/gitmem/checkpoints", "refs/gitmem/remote/checkpoints")
WITNESSED_SEP = "\f\n"  # never in a signed note (no control characters but newlines)
MESSAGE_FILES = ("checkpoint", "witnessed")
_files_memo: dict[tuple[str, str], dict[str, str]] = {}


def ref_tip(store: StoreCore) -> pygit2.Oid | None:
    """The newest checkpoint commit (on a clone, else the remote's), or None."""
    return store.first_target(
        (CHECKPOINTS_REF, *CLONE_CHECKPOINTS_REFS) if store.is_clone else (CHECKPOINTS_REF,)
    )


def files_at(store: StoreCore, tip: pygit2.Oid | None) -> dict[str, str]:
    """The checkpoint commit's files: ``checkpoint`` from its message (or, before 0.x, its tree),
    the rest from its tree. Memoised by commit id (commits never change)."""
    if tip is None:
        return {}
    key = (str(store.path), str(tip))
    cached = _files_memo.get(key)
    if cached is not None:
        return dict(cached)
    commit = store.commit(tip)
    out = {}
    for entry in commit.tree:
        obj = store.repo[entry.id]
        if isinstance(obj, pygit2.Blob) and entry.name:
            out[entry.name] = obj.data.decode("utf-8", "replace")
    _subject, sep, body = commit.message.partition("\n\n")
    if sep and body:  # the current layout: the notes are the message's body, split by a form feed
        newest, _, witnessed = body.partition(WITNESSED_SEP)
        out["checkpoint"] = newest
        out.pop("witnessed", None)
        if witnessed:
            out["witnessed"] = witnessed
    if len(_files_memo) > 64:
        _files_memo.clear()
    _files_memo[key] = dict(out)
    return out


def keys_of(files: dict[str, str]) -> list[str]:
    return [line for line in files.get("keys", "").splitlines() if line.strip()]


def commit(store: StoreCore, tip: pygit2.Oid | None, files: dict[str, str], what: str) -> pygit2.Oid:
    """One commit on the ref: the signed notes are its message's body (after the subject and a blank
    line: ``checkpoint``, then a form feed line and ``witnessed`` when there is one), ``keys`` its tree.
    An append writes one object: the tree changes only with the keys. The commit is written through
    the thread's lean object writer (no existence check, no refresh of the pack directory), flushed
    (the object and its directory), and the ref moved by compare-and-swap with git's lock protocol
    (:meth:`gitmem.git.repo.Repo.cas`: fenced in a cluster, a stale lock broken)."""
    rest = {k: v for k, v in files.items() if k not in MESSAGE_FILES}
    old = _tree_of(store, tip)
    written: list[pygit2.Oid] = []
    if old is not None and old[1] == rest:
        tree = old[0]
    else:
        repo = store.repo
        ids = {e.name: e.id for e in store.commit(tip).tree} if tip is not None else {}
        builder = repo.TreeBuilder()
        for name in sorted(rest):
            blob = pygit2.hash(rest[name].encode("utf-8"))
            if ids.get(name) != blob:  # an unchanged file keeps its blob
                blob = retrying(functools.partial(repo.create_blob, rest[name].encode("utf-8")))
                written.append(blob)
            builder.insert(name, blob, pygit2.enums.FileMode.BLOB)
        tree = retrying(builder.write)
        written.append(tree)
    size = parse_body(note.parse(files["checkpoint"]).text).size
    witnessed = WITNESSED_SEP + files["witnessed"] if "witnessed" in files else ""
    message = f"gitmem checkpoint {size}: {what}\n\n{files['checkpoint']}{witnessed}"
    oid = store.create_commit(tree, [tip] if tip is not None else [], message, _AUTHOR)
    store.sync_objects([*written, oid])
    # (on a clone the tip may be the remote's ref, and the store's own is then created)
    own = tip if not store.is_clone else store.ref_target(CHECKPOINTS_REF)
    for _attempt in range(2):  # a lock left by a killed writer is broken by the first
        if store.cas(CHECKPOINTS_REF, own, oid, "gitmem checkpoint"):
            break
        if ref_tip(store) != tip:
            raise ConflictError(f"{CHECKPOINTS_REF} moved while a checkpoint was written")
    else:
        raise ConflictError(f"{CHECKPOINTS_REF} stayed locked; try again")
    _files_memo[(str(store.path), str(oid))] = dict(files)  # what files_at would read back from it
    _trees_memo[(str(store.path), str(oid))] = (tree, rest)
    return oid


_AUTHOR = ("gitmem", "gitmem")  # author and committer of every checkpoint commit
_trees_memo: dict[tuple[str, str], tuple[pygit2.Oid, dict[str, str]]] = {}


def _tree_of(store: StoreCore, tip: pygit2.Oid | None) -> tuple[pygit2.Oid, dict[str, str]] | None:
    """The tree of the checkpoint commit ``tip`` and the files it holds (memoised by commit id)."""
    if tip is None:
        return None
    key = (str(store.path), str(tip))
    hit = _trees_memo.get(key)
    if hit is None:
        commit = store.commit(tip)
        held = {}
        for entry in commit.tree:
            obj = store.repo[entry.id]
            if isinstance(obj, pygit2.Blob) and entry.name:
                held[entry.name] = obj.data.decode("utf-8", "replace")
        if len(_trees_memo) > 64:
            _trees_memo.clear()
        hit = _trees_memo[key] = (commit.tree_id, held)
    return hit
