"""gitmem.git.repo.lookup: a path lookup in a tree that libgit2 failed with "object not found" for a
moment (an object moved between the loose store and a pack by a concurrent repack) is made again;
a path that is not there is a KeyError at once, and an object that stays missing an error."""

from __future__ import annotations

from typing import Any

import pygit2
import pytest

from gitmem.git.repo import lookup


class _Flaky:
    """A tree whose first ``misses`` lookups fail as libgit2 fails one racing a repack."""

    def __init__(self, tree: pygit2.Tree, misses: int) -> None:
        self.tree, self.misses, self.calls = tree, misses, 0

    def __getitem__(self, rel: str) -> Any:
        self.calls += 1
        if self.calls <= self.misses:
            raise pygit2.GitError(
                "object not found - no match for id (184954d59071c205c41966e1beede2d2d6003a03)"
            )
        return self.tree[rel]


@pytest.fixture
def tree(tmp_path: Any) -> pygit2.Tree:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    sub = repo.TreeBuilder()
    sub.insert("m.md", repo.create_blob(b"memory\n"), pygit2.enums.FileMode.BLOB)
    top = repo.TreeBuilder()
    top.insert("notes", sub.write(), pygit2.enums.FileMode.TREE)
    t = repo[top.write()]
    assert isinstance(t, pygit2.Tree)
    return t


def test_a_lookup_lost_to_a_repack_is_made_again(tree: pygit2.Tree) -> None:
    flaky = _Flaky(tree, misses=2)
    assert lookup(flaky, "notes/m.md").data == b"memory\n"  # type: ignore[arg-type,attr-defined]
    assert flaky.calls == 3


def test_a_missing_path_and_a_missing_object_are_errors(tree: pygit2.Tree) -> None:
    flaky = _Flaky(tree, misses=0)
    with pytest.raises(KeyError):
        lookup(flaky, "notes/absent.md")  # type: ignore[arg-type]
    assert flaky.calls == 1  # not looked up again
    gone = _Flaky(tree, misses=10)
    with pytest.raises(pygit2.GitError, match="not found"):
        lookup(gone, "notes/m.md")  # type: ignore[arg-type]
    assert gone.calls == 3
