"""The derived index is never required for correctness: deleted, corrupt or stale, answers stay right."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import gitmem
from gitmem.engine.index import INDEX_FILE
from gitmem.store import Store
from tests.helpers import fast_workspace, git, plain_commit, version_keys


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from fast_workspace(tmp_path, monkeypatch)


def _answers(store: Store) -> tuple[object, ...]:
    listing = [(m.path, m.memory_id, m.version_id, m.content_sha256) for m in store.list()]  # type: ignore[union-attr]
    reads = [(m.path, store.read(m.path).content) for m in store.list()]
    return listing, reads, version_keys(store.versions())


def _populate(store: Store) -> None:
    store.write("/a", "one", description="first")
    store.write("/dir/b", "two")
    store.write("/a", "three")
    store.rename("/dir/b", "/c")
    store.write("/t", "team", scope="team")
    store.delete("/t", scope="team")
    store.write("/t2", "team2", scope="team")


def _reopen(store: Store, workspace: Path) -> Store:
    store.close()
    return gitmem.open_store("notes", home=workspace)


def test_deleted_index_is_rebuilt_with_same_answers(store: Store, workspace: Path) -> None:
    _populate(store)
    expected = _answers(store)
    index_file = store.core.gitmem_dir / INDEX_FILE
    store = _reopen(store, workspace)
    for suffix in ("", "-wal", "-shm"):
        Path(str(index_file) + suffix).unlink(missing_ok=True)
    assert _answers(store) == expected
    assert index_file.exists()
    store.close()


def test_corrupt_index_is_rebuilt_with_same_answers(store: Store, workspace: Path) -> None:
    _populate(store)
    expected = _answers(store)
    index_file = store.core.gitmem_dir / INDEX_FILE
    store = _reopen(store, workspace)
    for suffix in ("-wal", "-shm"):
        Path(str(index_file) + suffix).unlink(missing_ok=True)
    index_file.write_bytes(b"this is not a database" * 100)
    assert _answers(store) == expected
    store.close()


def test_stale_index_catches_up_with_commits_made_behind_its_back(store: Store) -> None:
    _populate(store)
    store.versions()  # index is current
    plain_commit(store, {"a": b"edited by bob", "new.md": b"---\ndescription: by bob\n---\n", "c": None})
    assert store.read("/a").content == "edited by bob"
    listing = {m.path: m for m in store.list()}
    assert sorted(listing) == ["/a", "/new.md"]
    assert listing["/new.md"].description == "by bob"  # type: ignore[union-attr]
    assert [v.operation for v in store.versions("/a")] == ["modified", "modified", "created"]


def test_stale_index_sees_other_store_objects_writes(store: Store, workspace: Path) -> None:
    other = gitmem.open_store("notes", home=workspace)
    store.write("/a", "1")
    other.write("/b", "2")
    store.write("/a", "3")
    assert [m.path for m in other.list()] == ["/a", "/b"]
    assert len(store.versions()) == len(other.versions()) == 3
    other.close()


def test_rebuild_gives_the_same_versions_as_incremental_indexing(store: Store) -> None:
    _populate(store)
    plain_commit(store, {"x": b"1", "y": b"2"})
    plain_commit(store, {"x": None, "z": b"1"})  # an exact-content move: a rename
    per_scope = {s: version_keys(store.versions(scope=s)) for s in ("main", "team")}
    everything = sorted(version_keys(store.versions()))
    heads = [(m.path, m.memory_id) for m in store.list()]
    n = store.core.index.rebuild()
    assert n == len(everything) == 10
    assert sorted(version_keys(store.versions())) == everything
    assert {s: version_keys(store.versions(scope=s)) for s in ("main", "team")} == per_scope
    assert [(m.path, m.memory_id) for m in store.list()] == heads


def test_plain_git_commit_of_several_files_is_one_version_per_memory(store: Store) -> None:
    store.write("/a", "one")
    mid = store.read("/a").memory_id
    commit = plain_commit(store, {"a": b"changed", "b": b"new", "d/e": b"deep"}, email="bob@example.com")
    versions = [v for v in store.versions() if v.commit == str(commit)]
    assert sorted((v.path, v.operation) for v in versions) == [
        ("/a", "modified"),
        ("/b", "created"),
        ("/d/e", "created"),
    ]
    assert {v.actor for v in versions} == {"git:bob@example.com"}
    assert len({v.id for v in versions}) == 3
    assert store.read("/a").memory_id == mid  # the existing memory keeps its id


def test_plain_git_move_is_a_rename_keeping_memory_id(store: Store) -> None:
    store.write("/a", "content")
    mid = store.read("/a").memory_id
    plain_commit(store, {"a": None, "moved/a": b"content"})
    m = store.read("/moved/a")
    assert m.memory_id == mid
    assert [(v.path, v.previous_path) for v in store.versions("/moved/a")][0] == ("/moved/a", "/a")


def test_commit_made_with_the_git_cli_is_indexed(store: Store, tmp_path: Path) -> None:
    store.write("/a", "one\n")
    work = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(store.path), str(work))
    (work / "a").write_text("two\n")
    (work / "b").write_text("bee\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "plain edit")
    git(work, "push", "-q", "origin", "HEAD:main")
    assert store.read("/a").content == "two\n"
    # The pusher (nobody authenticated it) is the actor, not the self-asserted author (docs/identity.md).
    assert {v.actor for v in store.versions() if v.operation != "created" or v.path == "/b"} == {"unknown"}


def test_index_heads_prefix_range_includes_every_codepoint(store: Store) -> None:
    # Regression: the prefix range ended at prefix + U+10FFFF, missing names that start with it.
    store.write("/notes/\U0010ffffx", "edge")
    store.write("/notes/a", "a")
    store.write("/notes0", "after")
    assert [m.path for m in store.list("/notes/")] == ["/notes/a", "/notes/\U0010ffffx"]


def test_index_ahead_of_a_stale_tip_is_not_rebuilt(store: Store, workspace: Path) -> None:
    # Regression: a writer that read the tip just before a racing writer recorded a newer commit
    # dropped and re-derived the whole scope (a full history walk per lost race).
    store.write("/a", "1")
    stale = store.core.tip("main")
    store.write("/b", "2")
    seqs = store.core.index.db.execute("SELECT seq FROM versions ORDER BY seq").fetchall()
    other = gitmem.open_store("notes", home=workspace)
    other.core.index.ensure("main", stale, known_tip=True)
    assert other.core.index.db.execute("SELECT seq FROM versions ORDER BY seq").fetchall() == seqs
    assert [m.path for m in other.list()] == ["/a", "/b"]
    other.close()


def test_submodule_entry_committed_behind_gitmems_back_is_ignored(store: Store) -> None:
    # Regression: indexing looked up the gitlink's commit id as a blob (KeyError), and every
    # list/write/versions call on the store failed from then on.
    import pygit2

    store.write("/a", "x")
    tip = store.core.tip("main")
    assert tip is not None
    tb = store.core.repo.TreeBuilder(store.core.commit(tip).tree)
    tb.insert("sub", pygit2.Oid(hex="1" * 40), pygit2.enums.FileMode.COMMIT)
    sig = pygit2.Signature("B", "b@example.com", 1_700_000_000, 0)
    store.core.repo.create_commit("refs/heads/main", sig, sig, "add a submodule\n", tb.write(), [tip])
    assert [m.path for m in store.list()] == ["/a"]
    assert store.write("/b", "y") is not None
    assert len(store.versions()) == 2


def test_non_utf8_file_name_committed_with_git_is_ignored(store: Store) -> None:
    # Regression: the name came back from libgit2 with surrogate escapes and SQLite refused it,
    # so every list/write/versions call on the store failed from then on.
    import subprocess

    import pygit2

    store.write("/a", "x")
    tip = store.core.tip("main")
    assert tip is not None
    a = store.core.commit(tip).tree["a"].id
    blob = store.core.repo.create_blob(b"z")
    listing = f"100644 blob {a}\ta\n".encode() + f"100644 blob {blob}\t".encode() + b"caf\xe9\n"
    tree = subprocess.run(["git", "mktree"], input=listing, cwd=store.path, capture_output=True, check=True)
    sig = pygit2.Signature("B", "b@example.com", 1_700_000_000, 0)
    store.core.repo.create_commit(
        "refs/heads/main", sig, sig, "latin-1 name\n", pygit2.Oid(hex=tree.stdout.decode().strip()), [tip]
    )
    assert [m.path for m in store.list()] == ["/a"]
    assert store.write("/b", "y") is not None


def test_cherry_picked_gitmem_commit_gets_its_own_version_id(store: Store, tmp_path: Path) -> None:
    # Regression: a copy of a gitmem commit's trailers reused its version id; the copy's version
    # was silently dropped (one commit, no version) and the id pointed at two commits.
    store.write("/a", "one\n")
    v2 = store.write("/a", "two\n")
    store.write("/a", "one\n")
    work = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(store.path), str(work))
    git(work, "cherry-pick", v2.commit)  # type: ignore[union-attr]
    git(work, "push", "-q", "origin", "HEAD:main")
    versions = store.versions("/a")
    assert len(versions) == 4 == len({v.id for v in versions})
    assert versions[0].actor == "unknown" and store.version(v2.id).commit == v2.commit  # type: ignore[union-attr]
    assert store.read("/a").content == "two\n"


def test_index_locked_by_another_process_is_not_deleted(store: Store) -> None:
    # Regression: "database is locked" was taken for a corrupt file, and the index was deleted
    # from under the process holding it.
    import sqlite3

    import pytest

    from gitmem.errors import ConflictError

    store.write("/a", "x")
    path = store.core.gitmem_dir / INDEX_FILE
    inode = path.stat().st_ino
    holder = sqlite3.connect(str(path), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    plain_commit(store, {"b": b"behind its back"})
    store.core.index.db.execute("PRAGMA busy_timeout=20")
    with pytest.raises(ConflictError, match="busy"):
        store.list()
    assert path.stat().st_ino == inode
    holder.execute("ROLLBACK")
    holder.close()
    assert [m.path for m in store.list()] == ["/a", "/b"]


def test_merge_pushed_with_git_counts_each_change_once(store: Store, tmp_path: Path) -> None:
    # Regression: the index walked both parents of a merge and then diffed the merge against its
    # first parent too: side-branch changes became two versions (two memory ids for one file).
    store.write("/a", "1\n")
    store.write("/b", "b\n")
    b_id = store.read("/b").memory_id
    work = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(store.path), str(work))
    git(work, "checkout", "-q", "-b", "side")
    (work / "c").write_text("side\n")
    git(work, "add", "c")
    git(work, "commit", "-q", "-m", "side adds c")
    git(work, "rm", "-q", "b")
    git(work, "commit", "-q", "-m", "side deletes b")
    git(work, "checkout", "-q", "main")
    (work / "a").write_text("2\n")
    git(work, "commit", "-q", "-am", "main edits a")
    git(work, "merge", "-q", "--no-edit", "side")
    git(work, "push", "-q", "origin", "main")
    assert [(v.operation, v.path) for v in store.versions("/c")] == [("created", "/c")]
    assert [(v.operation, v.memory_id) for v in store.versions(operation="deleted")] == [("deleted", b_id)]
    assert [m.path for m in store.list()] == ["/a", "/c"]
    assert store.core.index.rebuild() == 5


def _clone(store: Store, tmp_path: Path) -> Path:
    work = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(store.path), str(work))
    git(work, "config", "pull.rebase", "false")
    return work


def _tree_paths(store: Store) -> list[str]:
    return ["/" + p for p in git(store.path, "ls-tree", "-r", "--name-only", "main").stdout.split()]


def test_merge_resolving_a_conflict_leaves_the_heads_of_its_tree(store: Store, tmp_path: Path) -> None:
    store.write("/b", "b\n")
    work = _clone(store, tmp_path)
    git(work, "checkout", "-q", "-b", "side")
    git(work, "rm", "-q", "b")
    git(work, "commit", "-q", "-m", "side deletes b")
    git(work, "checkout", "-q", "main")
    (work / "b").write_text("kept\n")
    git(work, "commit", "-q", "-am", "main edits b")
    git(work, "merge", "-q", "-s", "ours", "--no-edit", "side")  # resolution: keep main's b
    git(work, "push", "-q", "origin", "main")
    assert [m.path for m in store.list()] == _tree_paths(store) == ["/b"]
    m = store.read("/b")
    assert (m.content, store.version(m.version_id).content_sha256) == ("kept\n", m.content_sha256)
    store.core.index.rebuild()
    assert [m.path for m in store.list()] == ["/b"]


def test_pull_merge_pushed_over_agent_writes_keeps_every_version_once(store: Store, tmp_path: Path) -> None:
    store.write("/a", "1\n")
    work = _clone(store, tmp_path)
    agent = store.write("/agent", "written meanwhile\n")  # the clone does not have it yet
    assert [m.path for m in store.list()] == ["/a", "/agent"]  # the index is at the agent's commit
    (work / "mine").write_text("local\n")
    git(work, "add", "mine")
    git(work, "commit", "-q", "-m", "local work")
    git(work, "pull", "-q", "--no-edit", "origin", "main")
    git(work, "push", "-q", "origin", "main")
    versions = store.versions()
    assert sorted(v.path for v in versions) == ["/a", "/agent", "/mine"]
    assert store.version(agent.id).path == "/agent"  # type: ignore[union-attr]
    assert [m.path for m in store.list()] == _tree_paths(store) == ["/a", "/agent", "/mine"]
    assert store.read("/agent").memory_id == agent.memory_id  # type: ignore[union-attr]
    keys = sorted(version_keys(versions))
    store.core.index.rebuild()
    assert sorted(version_keys(store.versions())) == keys
