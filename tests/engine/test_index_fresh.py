"""A fresh catch-up (a rebuild, the first open of a clone) derives a scope in memory and writes its
heads, search rows and counters once at the end (gitmem/engine/index_catchup.py ``_walk_fresh``); the tree
differ follows one-entry edits and creates without parsing (gitmem/git/treediff.py ``_chain``), and
gitmem's own commit messages are recognized in one match (gitmem/engine/derive.py
``own_trailers``). Each must give exactly what the one-commit-at-a-time path gives."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pygit2
import pytest

from gitmem.engine import derive
from gitmem.engine import index_catchup as index_mod
from gitmem.git.treediff import TreeDiffer, tree_deltas
from gitmem.model.versions import format_message, parse_trailers, trailer_problems
from gitmem.store import Store
from tests.helpers import git, plain_commit


def _tables(store: Store) -> list[Any]:
    """Every derived row, search rows included (versions in their order within each scope: a
    rebuild derives scope after scope; search rows by scope and path: docids are not compared)."""
    db = store.core.index.db
    versions = db.execute(
        "SELECT id, memory_id, scope, path, prev_path, operation, actor, session, created_at, sha256, "
        "size, blob, commit_id, redaction_id FROM versions ORDER BY scope, seq"
    ).fetchall()
    heads = db.execute("SELECT * FROM heads ORDER BY scope, path").fetchall()
    stats = db.execute("SELECT scope, tip, memories, bytes FROM scopes ORDER BY scope").fetchall()
    text = db.execute(
        "SELECT d.scope, d.path, d.version_id, f.path, f.description, f.body FROM search_docs AS d "
        "JOIN search_fts AS f ON f.rowid = d.docid ORDER BY d.scope, d.path"
    ).fetchall()
    return [versions, heads, stats, text]


def _answers(store: Store) -> list[Any]:
    out: list[Any] = []
    for scope in ("main", "team"):
        listing = store.list(scope=scope)
        out.append([(m.path, m.memory_id, m.version_id, m.content_sha256) for m in listing])  # type: ignore[union-attr]
        out.append([(v.id, v.path, v.operation, v.content_sha256) for v in store.versions(scope=scope)])
        out.append(
            [(h.path, h.version_id, h.snippet) for h in store.search("note body", scope=scope, limit=50)]
        )
    return out


def _history(store: Store, tmp_path: Path) -> None:
    """Edits, renames, deletes, descriptions, plain git commits (a move, several files), a merge
    pushed with git in the middle of the history and commits after it, and a second scope that
    holds a copy of one of main's commits."""
    store.write("/a", "one\n", description="first")
    for i in range(8):
        store.write(f"/notes/n{i}.md", f"---\ndescription: note {i}\n---\nnote body {i}\n")
    store.write("/a", "two\n")
    later = int(time.time()) + 100  # edits made later keep the memory's creation time
    plain_commit(store, {"a": b"two, later\n"}, when=later)
    plain_commit(store, {"notes/n5.md": None, "n5.md": b"moved and edited\n"}, when=later + 1)
    store.read("/a")
    store.rename("/notes/n0.md", "/moved/n0.md")
    store.delete("/notes/n1.md")
    plain_commit(store, {"notes/n2.md": None, "plain.md": b"---\ndescription: plain\n---\nnote body p\n"})
    plain_commit(store, {"notes/n3.md": None, "n3-moved.md": b"---\ndescription: note 3\n---\nnote body 3\n"})
    work = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(store.path), str(work))
    git(work, "checkout", "-q", "-b", "side")
    (work / "side.md").write_text("side note body\n")
    git(work, "add", "side.md")
    git(work, "commit", "-q", "-m", "side adds a note")
    git(work, "checkout", "-q", "main")
    (work / "a").write_text("three\n")
    git(work, "commit", "-q", "-am", "main edits a")
    git(work, "merge", "-q", "--no-edit", "side")
    git(work, "push", "-q", "origin", "main")
    store.read("/a")
    store.write("/after-merge.md", "note body after the merge\n")
    store.write("/notes/n4.md", "note body edited after the merge\n")
    store.write("/t", "team note body\n", scope="team")
    v = store.write("/t2", "main two\n")
    store.delete("/t", scope="team")
    # team, and aaa (sorted before main), get local copies of a main commit's message (no receipt:
    # its trailers are checked). Made in the same second as main's commit, or the next: the earlier
    # claimant owns the id, by commit id in one second (docs/identity.md), so main's commit loses it
    # in some runs and its scope is re-derived, as a rebuild must reproduce
    message = store.core.repo[v.commit].message  # type: ignore[union-attr,attr-defined]
    plain_commit(store, {"t2": b"main two\n"}, message=message, scope="team")
    store.read("/t2", scope="team")
    plain_commit(store, {"t2": b"aaa two\n"}, message=message, scope="aaa")
    store.read("/t2", scope="aaa")


def test_fresh_rebuild_equals_incremental_indexing(store: Store, tmp_path: Path) -> None:
    _history(store, tmp_path)
    incremental, answers = _tables(store), _answers(store)
    assert incremental[1] and incremental[3]  # heads and search rows to compare
    store.core.index.rebuild()
    assert _tables(store) == incremental
    assert _answers(store) == answers


def test_fresh_rebuild_with_small_batches_and_no_kept_contents(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches flushed every 3 rows and no head content kept in memory (every head read again)."""
    _history(store, tmp_path)
    incremental = _tables(store)
    monkeypatch.setattr(index_mod, "_FLUSH_ROWS", 3)
    monkeypatch.setattr(index_mod, "_KEEP_BYTES", 0)
    store.core.index.rebuild()
    assert _tables(store) == incremental


def test_a_copy_of_an_earlier_commit_in_a_fresh_walk_is_plain_git(store: Store) -> None:
    """Within one fresh walk, a commit carrying an earlier commit's trailers (same scope) is
    derived as plain git: the in-memory rows of the walk answer the reuse check."""
    v1 = store.write("/a", "one\n")
    message = store.core.repo[v1.commit].message  # type: ignore[union-attr,attr-defined]
    plain_commit(store, {"a": b"two\n"}, message=message)
    store.read("/a")
    before = _tables(store)
    store.core.index.rebuild()
    assert _tables(store) == before
    ids = [v.id for v in store.versions("/a")]
    assert len(ids) == 2 == len(set(ids)) and v1.id in ids  # type: ignore[union-attr]


# ---------------------------------------------------------------------- trailers
_ID = "01HF7YAT00BZCWDXTSJTWQFAXG"


@pytest.mark.parametrize(
    "message",
    [
        format_message("modified", "/a/b.md", f"memver_{_ID}", f"mem_{_ID}", "service:bench", None),
        format_message("created", "/a", f"memver_{_ID}", f"mem_{_ID}", "user:alice", "sesn-1.x:y"),
        format_message("modified", "/b", f"memver_{_ID}", f"mem_{_ID}", "user:alice", None, "/a"),
        format_message(
            "deleted", "/a", f"memver_{_ID}", f"mem_{_ID}", "api:k", None, reverts=f"memver_{_ID}"
        ),
        format_message("created", "/a", f"memver_{_ID}", f"mem_{_ID}", "api:k", None, flag="secret"),
        f"s\n\nGitmem-Version: memver_{_ID}\nGitmem-Memory: mem_{_ID}\nGitmem-Operation: created\nGitmem-Actor: user:a",
        f"\n\nGitmem-Version: memver_{_ID}\nGitmem-Memory: mem_{_ID}\nGitmem-Operation: created\nGitmem-Actor: user:a\n\n",
        f"s\n\nGitmem-Version: memver_{_ID} \nGitmem-Memory: mem_{_ID}\nGitmem-Operation: created\nGitmem-Actor: user:a\n",
        f"s\n\nGitmem-Version: memver_{_ID}\nGitmem-Memory: mem_{_ID}\nGitmem-Operation: renamed\nGitmem-Actor: user:a\n",
        f"s\n\nGitmem-Version: memver_{_ID.lower()}\nGitmem-Memory: mem_{_ID}\nGitmem-Operation: created\nGitmem-Actor: user:a\n",
        f"s\n\nGitmem-Version: memver_{_ID}\nGitmem-Memory: mem_{_ID}\nGitmem-Operation: created\nGitmem-Actor: bob\n",
        f"s\n\nGitmem-Version: memver_{_ID}\nGitmem-Memory: mem_{_ID}\nGitmem-Operation: created\r\nGitmem-Actor: user:a\n",
        f"s\n\nGitmem-Version: memver_{_ID}\n\nGitmem-Memory: mem_{_ID}\nGitmem-Operation: created\nGitmem-Actor: user:a\n",
        f"s\nbody\n\nGitmem-Version: memver_{_ID}\nGitmem-Memory: mem_{_ID}\nGitmem-Operation: created\nGitmem-Actor: user:a\n",
        f"s\n\nGitmem-Version: memver_{_ID}\nGitmem-Memory: mem_{_ID}\nGitmem-Operation: created\n"
        "Gitmem-Session: -bad\nGitmem-Actor: user:a\n",
        "plain git commit\n",
        "",
    ],
)
def test_own_trailers_equals_the_general_parser(message: str) -> None:
    trailers = parse_trailers(message)
    assert derive.own_trailers(message) == (trailers, not trailer_problems(trailers))


# ---------------------------------------------------------------------- the tree differ's fast paths
def _tree(repo: pygit2.Repository, files: dict[str, pygit2.Oid]) -> pygit2.Oid:
    def write(prefix: str) -> pygit2.Oid:
        tb = repo.TreeBuilder()
        names: dict[str, pygit2.Oid | None] = {}
        for path, blob in files.items():
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix) :]
            head, sep, _ = rest.partition("/")
            names[head] = None if sep else blob
        for name, entry in names.items():
            if entry is None:
                tb.insert(name, write(prefix + name + "/"), pygit2.enums.FileMode.TREE)
            else:
                tb.insert(name, entry, pygit2.enums.FileMode.BLOB)
        return tb.write()

    return write("")


def test_creates_and_edits_one_at_a_time_match_libgit2(tmp_path: Path) -> None:
    """A store's life: files created one per commit in random order (names sharing prefixes, new
    directories), then edited one at a time, at several depths: every step is diffed by the
    fast paths and must equal libgit2's answer."""
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    rng = random.Random(5)
    blobs = [repo.create_blob(f"c{i}\n".encode()) for i in range(30)]
    paths = [f"t{t}/s{s}/memory-{i:03d}.md" for t in range(3) for s in range(3) for i in range(8)]
    paths += [f"top-{i}.md" for i in range(10)] + ["t1/a", "t1/a-b", "t1/a.md", "t1/a0"]
    rng.shuffle(paths)
    files: dict[str, pygit2.Oid] = {}
    trees = [_tree(repo, files)]
    for p in paths:
        files[p] = rng.choice(blobs)
        trees.append(_tree(repo, files))
    for _ in range(150):
        files[rng.choice(paths)] = rng.choice(blobs)
        trees.append(_tree(repo, files))
    differ = TreeDiffer(repo, keep=64)
    for old, new in zip(trees, trees[1:], strict=False):
        assert differ.deltas(old, new) == tree_deltas(repo[old], repo[new])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({"b": 0, "c": 1}, {"a": 2, "b": 3, "c": 1}),  # an entry added before one that changed
        ({"a": 0, "c": 1}, {"a": 0, "b": 2, "c": 3}),  # ... and before one that changed after it
        ({"a": 0, "c": 1}, {"a": 4, "b": 2, "c": 1}),  # ... and after one that changed
        ({"ab": 0, "b": 1}, {"a": 1, "ab": 0, "b": 1}),  # the new name a prefix of the next one
        ({"d/x": 0}, {"d/x": 0, "d/y": 1, "e/z": 2}),  # two directories gain an entry each
        ({"d/x": 0}, {"d/x": 0, "dd/y": 1}),  # a new directory
    ],
)
def test_several_changes_in_one_directory_are_not_taken_for_one(
    tmp_path: Path, before: dict[str, int], after: dict[str, int]
) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    blobs = [repo.create_blob(f"b{i}\n".encode()) for i in range(5)]
    old = _tree(repo, {p: blobs[i] for p, i in before.items()})
    new = _tree(repo, {p: blobs[i] for p, i in after.items()})
    differ = TreeDiffer(repo)
    differ.deltas(None, old)  # ``old`` parsed and cached, as the previous commit's tree
    assert differ.deltas(old, new) == tree_deltas(repo[old], repo[new])  # type: ignore[arg-type]


def test_an_added_entry_that_repeats_a_name_is_refused(tmp_path: Path) -> None:
    """The create fast path splices one entry into a known directory; a name twice is a
    malformed tree there as in a full parse."""
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    a, b = repo.create_blob(b"a\n"), repo.create_blob(b"b\n")
    old = repo.odb.write(pygit2.enums.ObjectType.TREE, b"100644 x\0" + a.raw)
    bad = repo.odb.write(pygit2.enums.ObjectType.TREE, b"100644 x\0" + a.raw + b"100644 x\0" + b.raw)
    differ = TreeDiffer(repo)
    assert differ.deltas(None, old)
    with pytest.raises(pygit2.GitError):
        differ.deltas(old, bad)
