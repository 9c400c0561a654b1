"""A commit that states a gitmem trailer twice makes two claims (git keeps one, other tools the
other): pushes refuse it, with the key named."""

from __future__ import annotations

from pathlib import Path

from gitmem.model.versions import malformed_trailers
from gitmem.store import Store
from tests.helpers import git


def test_repeated_trailers_are_malformed() -> None:
    msg = "edit\n\nGitmem-Session: sesn_01M8RXHD602HXRAWQKATJASQ19\nGitmem-Session: sesn_01M8RXHD602HXRAWQKATJASQ1A\n"
    assert malformed_trailers(msg) == ["trailer Gitmem-Session appears 2 times"]
    assert malformed_trailers("edit\n\nGitmem-Session: sesn_01M8RXHD602HXRAWQKATJASQ19\n") == []


def test_a_push_with_a_repeated_trailer_is_refused(store: Store, tmp_path: Path) -> None:
    store.write("/a.md", "one\n")
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(store.path), str(work))
    (work / "a.md").write_text("two\n")
    git(work, "commit", "-q", "-am", "edit\n\nGitmem-Actor: user:alice\nGitmem-Actor: user:mallory")
    res = git(work, "push", "origin", "main", check=False)
    assert res.returncode != 0
    assert "trailer Gitmem-Actor appears 2 times" in res.stderr
    assert [v.content for v in [store.read("/a.md")]] == ["one\n"]
