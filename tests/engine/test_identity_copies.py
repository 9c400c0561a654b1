"""Copied version ids across scopes (docs/identity.md "Who owns a copied id across scopes"): plain-git
copies of gitmem commits, trailers and all, made in the bare store on scopes whose names sort before
and after ``main``, dated before, after or in the same second as the original. Whatever order the
index meets them in, the incremental index and a rebuild give every version the same id, and an id
belongs to one commit, or to twins of one (gitmem/engine/derive.py ``claim_rank``)."""

from __future__ import annotations

import random
from pathlib import Path

import pygit2
import pytest

from gitmem.engine.index import Index
from gitmem.model.versions import parse_trailers
from gitmem.store import Store

_SCOPES = ("aaa", "fork", "mmm", "zzz")  # around "main" both ways
_PATHS = ("a.md", "b.md", "c.md")


def _signed(c: pygit2.Object) -> tuple[object, ...]:
    assert isinstance(c, pygit2.Commit)
    a, m = c.author, c.committer
    return (a.name, a.email, a.time, a.offset, m.name, m.email, m.time, m.offset)


def _ids(store: Store) -> list[tuple[str, str, str]]:
    store.core.index.ensure_all()
    return sorted((r.id, r.scope, r.commit_id) for r in store.core.index.version_rows())


def _copy(repo: pygit2.Repository, of: pygit2.Commit, scope: str, delta: int, n: int) -> pygit2.Oid:
    """A commit on ``scope`` with ``of``'s author and message (so its trailers), committed
    ``delta`` seconds from ``of``, writing other content to the path ``of`` changed."""
    ref = f"refs/heads/{scope}"
    parent = repo.references[ref].peel(pygit2.Commit) if ref in repo.references else None
    tb = repo.TreeBuilder(parent.tree) if parent is not None else repo.TreeBuilder()
    before = of.parents[0].tree if of.parents else None
    path = next(
        p
        for p in _PATHS
        if p in of.tree and (before is None or p not in before or before[p].id != of.tree[p].id)
    )
    tb.insert(path, repo.create_blob(f"copy {n}\n".encode()), pygit2.GIT_FILEMODE_BLOB)
    # two committers: copies of one commit with one signature are twins (as a rewrite leaves)
    committer = pygit2.Signature("admin", f"admin{n % 2}@example.com", of.committer.time + delta, 0)
    parents = [parent.id] if parent is not None else []
    oid = repo.create_commit(None, of.author, committer, of.message, tb.write(), parents)
    repo.references.create(ref, oid, force=True)
    return oid


def _history(store: Store, seed: int) -> None:
    """Gitmem writes on main and other scopes, a fork of main, and copies of gitmem commits onto
    any scope (as the only change of a path), the index brought up to date after random steps and
    for random scopes, so the copies arrive in every order."""
    rng = random.Random(seed)
    repo = pygit2.Repository(str(store.path))
    own: list[pygit2.Oid] = []
    for step in range(14):
        kind = rng.random()
        scopes = store.core.scopes()
        if kind < 0.45 or not own:
            scope = "main" if not scopes or rng.random() < 0.7 else rng.choice(scopes)
            v = store.write("/" + rng.choice(_PATHS), f"step {step}\n", scope=scope)
            own.append(pygit2.Oid(hex=v.commit))  # type: ignore[union-attr]
        elif kind < 0.55 and "fork" not in scopes:
            repo.references.create("refs/heads/fork", repo[rng.choice(own)].id)
        else:
            of = repo[rng.choice(own)]
            assert isinstance(of, pygit2.Commit)
            _copy(repo, of, rng.choice(_SCOPES), rng.choice((-5, 0, 0, 5)), step)
        if rng.random() < 0.6:
            store.core.index.ensure(rng.choice(store.core.scopes()))
        elif rng.random() < 0.3:
            store.core.index.ensure_all()


@pytest.mark.parametrize("seed", range(24))
def test_a_rebuild_gives_the_ids_the_incremental_index_gave(store: Store, seed: int) -> None:
    _history(store, seed)
    before = _ids(store)
    owners: dict[str, set[str]] = {}
    for vid, _scope, commit in before:
        owners.setdefault(vid, set()).add(commit)
    repo = pygit2.Repository(str(store.path))
    for commits in owners.values():  # one commit per id, or twins of one another
        signed = {_signed(repo[c]) for c in commits}
        assert len(signed) == 1 and len({repo[c].message for c in commits}) == 1, commits
    store.core.index.rebuild()
    assert _ids(store) == before


def _two(store: Store) -> tuple[pygit2.Repository, pygit2.Commit, pygit2.Commit]:
    store.write("/a.md", "one\n")
    store.write("/a.md", "two\n")
    repo = pygit2.Repository(str(store.path))
    second = repo.references["refs/heads/main"].peel(pygit2.Commit)
    return repo, second.parents[0], second


@pytest.mark.parametrize("scope", ["aaa", "zzz"])
def test_an_earlier_claimant_counts_whether_or_not_it_holds_the_id(store: Store, scope: str) -> None:
    """Another scope's copy of main's second commit (dated later) is a copy while main's commit
    holds the id. A copy of main's first commit dated before it then takes the first id; main's
    second commit no longer fits (its memory id is gone) and loses the second id, but still
    claims it first: the other copy stays one, and nobody holds the second id. (Were the copy to
    take it, which commits hold an id would depend on which scope was derived first: a rebuild's
    answer could differ from the incremental index's.)"""
    repo, first, second = _two(store)
    late = _copy(repo, second, "fork", 5, 1)  # a root there: a create of main's memory, which fits
    store.core.index.ensure_all()
    vid2 = parse_trailers(second.message)["Gitmem-Version"]
    assert {(s, c) for v, s, c in _ids(store) if v == vid2} == {("main", str(second.id))}
    back = _copy(repo, first, scope, -5, 2)
    after = _ids(store)
    vid1 = parse_trailers(first.message)["Gitmem-Version"]
    assert {(s, c) for v, s, c in after if v == vid1} == {(scope, str(back))}
    assert not {c for v, _s, c in after if v == vid2}
    assert str(late) in {c for _v, s, c in after if s == "fork"}  # with an id of its own
    store.core.index.rebuild()
    assert _ids(store) == after


def test_a_copy_takes_the_id_once_the_earlier_claimant_is_gone(store: Store) -> None:
    """A later copy on zzz is a copy; main is reset (plain git) to before the original: the copy
    is the only claimant left, and owns the id."""
    repo, first, second = _two(store)
    late = _copy(repo, second, "zzz", 5, 1)
    vid2 = parse_trailers(second.message)["Gitmem-Version"]
    assert {(s, c) for v, s, c in _ids(store) if v == vid2} == {("main", str(second.id))}
    repo.references["refs/heads/main"].set_target(first.id)
    after = _ids(store)
    assert {(s, c) for v, s, c in after if v == vid2} == {("zzz", str(late))}
    store.core.index.rebuild()
    assert _ids(store) == after


def test_a_deleted_scope_hands_its_ids_back(store: Store) -> None:
    """The back-dated copy's scope is deleted with plain git: main's commits own their ids again."""
    repo, first, _second = _two(store)
    before = _ids(store)
    _copy(repo, first, "aaa", -5, 1)
    assert _ids(store) != before
    repo.references.delete("refs/heads/aaa")
    assert _ids(store) == before
    store.core.index.rebuild()
    assert _ids(store) == before


@pytest.mark.parametrize("scope", ["aaa", "zzz"])
def test_a_scope_moved_from_a_back_dated_copy_onto_the_original_gives_the_id_back(
    store: Store, scope: str
) -> None:
    """main's second commit claims V; a copy of it on ``scope``, dated earlier, owns V (main's
    commit is then a copy with a plain id). ``scope`` is then moved (plain git) onto main's commit
    itself: the copy is gone, that commit is the only claimant, on both scopes, and holds V on
    both (the scope still claims V, with another commit: main must be re-derived too)."""
    repo, _first, second = _two(store)
    vid = parse_trailers(second.message)["Gitmem-Version"]
    _copy(repo, second, scope, -5, 1)
    assert {s for v, s, _c in _ids(store) if v == vid} == {scope}
    repo.references[f"refs/heads/{scope}"].set_target(second.id)
    incremental = _ids(store)
    store.core.index.rebuild()
    rebuilt = _ids(store)
    assert {(s, c) for v, s, c in rebuilt if v == vid} == {("main", str(second.id)), (scope, str(second.id))}
    assert incremental == rebuilt


def test_a_scope_marked_for_re_deriving_and_then_deleted_is_dropped(store: Store) -> None:
    """fork's commit holds V; a copy on main dated earlier takes it when main is derived, which
    marks fork for re-deriving (no indexed tip): fork was deleted with plain git meanwhile. A
    marked scope is current at no tip, not even a deleted branch's: its rows (another history's)
    go, and a write that starts fork again is recorded on nothing, as a rebuild gives."""
    v = store.write("/a.md", "one\n", scope="fork")
    repo = pygit2.Repository(str(store.path))
    original = repo[pygit2.Oid(hex=v.commit)]  # type: ignore[union-attr]
    assert isinstance(original, pygit2.Commit)
    store.core.index.ensure("fork")
    back = _copy(repo, original, "main", -5, 1)
    repo.references.delete("refs/heads/fork")
    store.core.index.ensure("main")  # marks fork, then settles it: its branch is gone
    store.write("/b.md", "two\n", scope="fork")
    incremental = _ids(store)
    assert {(s, c) for vid, s, c in incremental if vid == v.id} == {("main", str(back))}  # type: ignore[union-attr]
    assert str(original.id) not in {c for _v, _s, c in incremental}
    store.core.index.rebuild()
    assert _ids(store) == incremental


_FUZZ_SEEDS = 200
_FUZZ_STEPS = 3  # each of up to _FUZZ_CHANGES changes, then compared with a rebuild
_FUZZ_CHANGES = 4
_ALL = (*_SCOPES, "main")


def _move(store: Store, repo: pygit2.Repository, rng: random.Random, made: list[pygit2.Oid], n: int) -> None:
    """One random change: a gitmem write; a copy of a commit made so far (back-dated, forward-dated
    or in the same second); a branch set with plain git onto one of them, or onto a scope's tip or
    its parent (a fork, a reset); a branch deleted."""
    scopes = store.core.scopes()
    kind = rng.random()
    if kind < 0.25 or not made:
        scope = rng.choice(scopes) if scopes and rng.random() < 0.7 else rng.choice(_ALL)
        v = store.write("/" + rng.choice(_PATHS), f"{n}\n", scope=scope)
        made.append(pygit2.Oid(hex=v.commit))  # type: ignore[union-attr]
    elif kind < 0.55:
        of = repo[rng.choice(made)]
        assert isinstance(of, pygit2.Commit)
        made.append(_copy(repo, of, rng.choice(_ALL), rng.choice((-5, 0, 5)), 2 * n + rng.randint(0, 1)))
    elif kind < 0.75:
        repo.references.create(f"refs/heads/{rng.choice(_ALL)}", rng.choice(made), force=True)
    elif kind < 0.85 and scopes:
        tip = repo.references[f"refs/heads/{rng.choice(scopes)}"].peel(pygit2.Commit)
        onto = tip.parents[0] if tip.parents and rng.random() < 0.5 else tip
        repo.references.create(f"refs/heads/{rng.choice(_ALL)}", onto.id, force=True)
    elif scopes:
        repo.references.delete(f"refs/heads/{rng.choice(scopes)}")


def _moves(store: Store, rebuilt: Index, seed: int) -> int | None:
    """Random steps of a few changes each (:func:`_move`), some scope caught up at random after
    each change, then every scope. Returns the first step after which the incremental index's
    ids differ from a rebuild's (``rebuilt``, an index of its own), or None. Every branch is
    deleted at the end: the next seed starts from an empty store."""
    rng = random.Random(seed)
    repo = pygit2.Repository(str(store.path))
    index = store.core.index
    made: list[pygit2.Oid] = []
    step: int | None = None
    try:
        for step in range(_FUZZ_STEPS):
            for change in range(rng.randint(1, _FUZZ_CHANGES)):
                _move(store, repo, rng, made, seed * 100 + step * 10 + change)
                if rng.random() < 0.5 and store.core.scopes():
                    index.ensure(rng.choice(store.core.scopes()))
            incremental = _ids(store)
            rebuilt.rebuild()
            if sorted((r.id, r.scope, r.commit_id) for r in rebuilt.version_rows()) != incremental:
                return step
        step = None
        return None
    finally:
        for scope in store.core.scopes():
            repo.references.delete(f"refs/heads/{scope}")
        if step is not None:  # a difference (or an error): the next seed starts from a right index
            index.rebuild()
        assert _ids(store) == []


def test_moved_scopes_give_the_ids_a_rebuild_gives(store: Store, tmp_path: Path) -> None:
    """Over random histories of writes, copies and plain-git branch moves and deletes, the
    incremental index gives after every step the ids a rebuild gives (docs/identity.md "Who owns a
    copied id across scopes": whenever the claimants of an id change, every scope whose answer
    may change is derived again)."""
    rebuilt = Index(store.core)
    rebuilt.path = tmp_path / "rebuilt.sqlite"
    try:
        failed = [
            (seed, step) for seed in range(_FUZZ_SEEDS) if (step := _moves(store, rebuilt, seed)) is not None
        ]
    finally:
        rebuilt.close()
    assert failed == []
