"""A store is plain git: fsck-clean, readable with git log/show, clonable, and clones open read-only."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import gitmem
from gitmem.errors import ForbiddenError
from gitmem.store import Store
from tests.helpers import git


def _fill(store: Store) -> None:
    store.write("/notes/todo.md", "buy milk\n", description="Groceries")
    store.write("/notes/ünïcødé 日本.md", "text\n")
    store.write("/deep/a/b/c.txt", "deep\n")
    store.rename("/deep/a/b/c.txt", "/deep/c.txt")
    store.str_replace("/notes/todo.md", "milk", "bread")
    store.write("/gone", "x")
    store.delete("/gone")
    store.write("/team.md", "team\n", scope="team@example.com")


def test_store_passes_git_fsck_strict(store: Store) -> None:
    _fill(store)
    out = git(store.path, "fsck", "--strict", "--no-dangling", check=False)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""


def test_store_with_only_deletions_left_is_fsck_clean(store: Store) -> None:
    store.write("/a", "x")
    store.delete("/a")
    assert git(store.path, "fsck", "--strict", check=False).returncode == 0
    assert git(store.path, "ls-tree", "main").stdout == ""


def test_git_log_on_the_bare_store_shows_versions(store: Store) -> None:
    _fill(store)
    subjects = git(store.path, "log", "--format=%s", "main").stdout.splitlines()
    assert subjects == [
        "deleted /gone",
        "created /gone",
        "modified /notes/todo.md",
        "renamed /deep/a/b/c.txt to /deep/c.txt",
        "created /deep/a/b/c.txt",
        "created /notes/ünïcødé 日本.md",
        "created /notes/todo.md",
    ]
    ops = git(store.path, "log", "--format=%(trailers:key=Gitmem-Operation,valueonly)", "main").stdout.split()
    assert ops == ["deleted", "created", "modified", "modified", "created", "created", "created"]


def test_git_log_of_one_path_matches_library_history(store: Store) -> None:
    _fill(store)
    by_git = git(
        store.path, "log", "--format=%(trailers:key=Gitmem-Version,valueonly)", "main", "--", "notes/todo.md"
    ).stdout.split()
    assert by_git == [v.id for v in store.versions("/notes/todo.md")]


def test_git_show_gives_the_exact_bytes(store: Store) -> None:
    store.write("/a.md", "line1\r\nno newline at end")
    v = store.write("/a.md", "changed")
    assert v is not None

    def show(rev: str) -> bytes:
        return subprocess.run(["git", "show", rev], cwd=store.path, capture_output=True, check=True).stdout

    assert show("main~1:a.md") == b"line1\r\nno newline at end"
    assert show(f"{v.commit}:a.md") == b"changed"


def test_every_tree_entry_is_a_plain_file_or_directory(store: Store) -> None:
    _fill(store)
    modes = {line.split()[0] for line in git(store.path, "ls-tree", "-r", "-t", "main").stdout.splitlines()}
    assert modes == {"100644", "040000"}


def test_git_clone_shows_the_memories_as_files(store: Store, tmp_path: Path) -> None:
    _fill(store)
    dest = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(store.path), str(dest))
    assert (dest / "notes" / "todo.md").read_text() == store.read("/notes/todo.md").content
    assert (dest / "notes" / "ünïcødé 日本.md").read_text() == "text\n"
    assert not (dest / "gone").exists()
    assert not (dest / "team.md").exists()  # another scope is another branch
    git(dest, "checkout", "-q", "team@example.com")
    assert (dest / "team.md").read_text() == "team\n"


def test_clone_opens_read_only_for_offline_inspection(store: Store, tmp_path: Path) -> None:
    _fill(store)
    dest = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(store.path), str(dest))
    clone = gitmem.open_store(str(dest))
    assert clone.is_clone
    assert clone.read("/notes/todo.md").content == '---\ndescription: "Groceries"\n---\nbuy bread\n'
    assert [v.id for v in clone.versions("/notes/todo.md")] == [
        v.id for v in store.versions("/notes/todo.md")
    ]
    with pytest.raises(ForbiddenError):
        clone.write("/x", "y")
    clone.close()


def test_bare_mirror_clone_keeps_every_scope(store: Store, tmp_path: Path) -> None:
    _fill(store)
    dest = tmp_path / "mirror.git"
    git(tmp_path, "clone", "-q", "--mirror", str(store.path), str(dest))
    branches = git(dest, "for-each-ref", "--format=%(refname)", "refs/heads").stdout.split()
    assert branches == ["refs/heads/main", "refs/heads/team@example.com"]
    assert git(dest, "fsck", "--strict", check=False).returncode == 0
