"""Versions are commits: one per change, parseable trailers, filters, restore and diff."""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitmem.engine.history import diff
from gitmem.errors import InvalidInputError, NotFoundError, PathConflictError
from gitmem.store import Store
from tests.helpers import fast_workspace, git, plain_commit


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from fast_workspace(tmp_path, monkeypatch)


def test_each_change_is_one_commit_touching_one_path(store: Store) -> None:
    store.write("/a", "1")
    store.write("/b", "2")
    store.write("/a", "3")
    store.write("/a", "3")  # no-op
    store.rename("/b", "/c")
    store.delete("/a")
    log = git(store.path, "log", "--format=>%s", "--name-status", "--no-renames", "main").stdout
    commits = [[x for x in block.splitlines() if x] for block in log.split(">")[1:]]
    assert [c[0] for c in commits] == [
        "deleted /a",
        "renamed /b to /c",
        "modified /a",
        "created /b",
        "created /a",
    ]
    assert [c[1:] for c in commits] == [["D\ta"], ["D\tb", "A\tc"], ["M\ta"], ["A\tb"], ["A\ta"]]


def test_versions_are_newest_first_with_operations(store: Store) -> None:
    store.write("/a", "1")
    store.write("/a", "2")
    store.delete("/a")
    assert [v.operation for v in store.versions("/a")] == ["deleted", "modified", "created"]
    assert len({v.memory_id for v in store.versions("/a")}) == 1


def test_trailers_parse_with_git_interpret_trailers(store: Store) -> None:
    v = store.write("/notes/a.md", "x", actor="user:alice", session="sesn_1")
    assert v is not None
    message = git(store.path, "log", "-1", "--format=%B", v.commit).stdout
    parsed = subprocess.run(
        ["git", "interpret-trailers", "--parse"], input=message, capture_output=True, text=True, check=True
    ).stdout
    assert parsed.splitlines() == [
        f"Gitmem-Version: {v.id}",
        f"Gitmem-Memory: {v.memory_id}",
        "Gitmem-Operation: created",
        "Gitmem-Session: sesn_1",
        "Gitmem-Actor: user:alice",
    ]
    assert message.splitlines()[0] == "created /notes/a.md"


def test_git_log_trailer_format_lists_every_version_id(store: Store) -> None:
    ids = [store.write(f"/m{i}", str(i)).id for i in range(3)]  # type: ignore[union-attr]
    store.rename("/m0", "/renamed")
    ids.append(store.versions("/renamed")[0].id)
    out = git(store.path, "log", "--format=%(trailers:key=Gitmem-Version,valueonly)", "main").stdout
    assert [line for line in out.splitlines() if line] == list(reversed(ids))


def test_author_is_actor_and_committer_is_gitmem(store: Store) -> None:
    v = store.write("/a", "x", actor="service:bot")
    out = git(store.path, "log", "-1", "--format=%an|%cn", v.commit).stdout.strip()  # type: ignore[union-attr]
    assert out == "service:bot|gitmem"


def test_messages_never_contain_content_or_hashes(store: Store) -> None:
    v = store.write("/a", "top secret value")
    message = store.core.commit(v.commit).message  # type: ignore[union-attr]
    assert "secret" not in message and v.content_sha256 not in message  # type: ignore[union-attr]


def test_actor_defaults(store: Store) -> None:
    assert store.write("/a", "1").actor == "user:local"  # type: ignore[union-attr]
    assert store.write("/a", "2", session="s1").actor == "session:s1"  # type: ignore[union-attr]
    with pytest.raises(InvalidInputError):
        store.write("/a", "3", actor="nobody")
    with pytest.raises(InvalidInputError):
        store.write("/a", "3", session="bad session")


@pytest.mark.parametrize("attribution", [{"session": "s1\n"}, {"actor": "user:x\n"}])
def test_trailing_newline_in_session_or_actor_is_refused(store: Store, attribution: dict[str, str]) -> None:
    # Regression: "$" matched before a final newline; "s1\n" split the trailer block, so the
    # version lost its id and attribution when the index was rebuilt.
    with pytest.raises(InvalidInputError):
        store.write("/a", "x", **attribution)  # type: ignore[arg-type]
    assert store.core.tip("main") is None


def test_version_id_with_trailing_newline_is_invalid(store: Store) -> None:
    v = store.write("/a", "x")
    with pytest.raises(InvalidInputError):
        store.version(v.id + "\n")  # type: ignore[union-attr]


@pytest.fixture
def populated(store: Store) -> Store:
    store.write("/a", "1", actor="user:alice", session="s1")
    store.write("/b", "1", actor="user:bob", session="s2")
    store.write("/a", "2", actor="user:bob", session="s1")
    store.delete("/b", actor="user:alice")
    store.write("/a", "t", scope="team", actor="user:alice")
    return store


def test_filter_by_session_actor_operation(populated: Store) -> None:
    s = populated
    assert [v.path for v in s.versions(session="s1")] == ["/a", "/a"]
    assert {(v.path, v.scope) for v in s.versions(actor="user:alice")} == {
        ("/a", "main"),
        ("/b", "main"),
        ("/a", "team"),
    }
    assert [v.path for v in s.versions(operation="deleted")] == ["/b"]
    assert [v.path for v in s.versions(actor="user:alice", scope="team")] == ["/a"]
    with pytest.raises(InvalidInputError):
        s.versions(operation="edited")


def test_filter_by_memory_id_and_path_of_deleted_memory(populated: Store) -> None:
    s = populated
    mid = s.versions("/b")[0].memory_id
    assert [v.operation for v in s.versions(memory_id=mid)] == ["deleted", "created"]
    assert [v.operation for v in s.versions("/b")] == ["deleted", "created"]
    assert len(s.versions("/a", scope="team")) == 1


def test_filter_by_since_and_until(store: Store) -> None:
    plain_commit(store, {"old": b"from 2023"}, when=1_700_000_000)  # author time 1,700,000,000 (Nov 2023)
    store.write("/new", "now")
    cut = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    assert [v.path for v in store.versions(since=cut)] == ["/new"]
    assert [v.path for v in store.versions(until=cut)] == ["/old"]
    exact = dt.datetime.fromtimestamp(1_700_000_000, dt.UTC)
    assert [v.path for v in store.versions(since=exact, until=exact)] == ["/old"]


def test_version_lookup_and_unknown_ids(store: Store) -> None:
    v = store.write("/a", "1")
    assert store.version(v.id) == v  # type: ignore[union-attr]
    with pytest.raises(NotFoundError):
        store.version("memver_01ARZ3NDEKTSV4RRFFQ69G5FAV")
    with pytest.raises(InvalidInputError):
        store.version("not-a-version")


def test_read_an_old_version(store: Store) -> None:
    v1 = store.write("/a", "one")
    store.write("/a", "two")
    m = store.read("/a", version=v1.id)  # type: ignore[union-attr]
    assert (m.content, m.version_id) == ("one", v1.id)  # type: ignore[union-attr]


def test_restore_live_memory_writes_a_new_version(store: Store) -> None:
    v1 = store.write("/a", "one")
    store.write("/a", "two")
    r = store.restore(v1.id)  # type: ignore[union-attr]
    assert r is not None and r.operation == "modified" and r.memory_id == v1.memory_id  # type: ignore[union-attr]
    assert store.read("/a").content == "one"
    assert store.restore(v1.id) is None  # already in that state: no version  # type: ignore[union-attr]
    assert len(store.versions("/a")) == 3


def test_restore_renamed_memory_writes_at_current_path(store: Store) -> None:
    v1 = store.write("/a", "one")
    store.write("/a", "two")
    store.rename("/a", "/b")
    r = store.restore(v1.id)  # type: ignore[union-attr]
    assert r is not None and r.path == "/b"
    assert store.read("/b").content == "one"
    with pytest.raises(NotFoundError):
        store.read("/a")


def test_restore_deleted_memory_revives_same_memory_id(store: Store) -> None:
    v1 = store.write("/a", "one")
    store.delete("/a")
    r = store.restore(v1.id)  # type: ignore[union-attr]
    assert r is not None and r.operation == "created" and r.memory_id == v1.memory_id  # type: ignore[union-attr]
    m = store.read("/a")
    assert (m.content, m.memory_id) == ("one", v1.memory_id)  # type: ignore[union-attr]
    assert [v.operation for v in store.versions("/a")] == ["created", "deleted", "created"]


def test_restore_deleted_memory_onto_reused_path_conflicts(store: Store) -> None:
    v1 = store.write("/a", "one")
    store.delete("/a")
    store.write("/a", "someone else")
    with pytest.raises(PathConflictError):
        store.restore(v1.id)  # type: ignore[union-attr]


def test_restore_a_deletion_is_refused(store: Store) -> None:
    store.write("/a", "one")
    d = store.delete("/a")
    with pytest.raises(InvalidInputError):
        store.restore(d.id)


def test_diff_against_previous_version(store: Store) -> None:
    store.write("/a", "one\ntwo\n")
    v2 = store.write("/a", "one\nthree\n")
    assert diff(store.core, v2.id) == "--- a/a\n+++ b/a\n@@ -1,2 +1,2 @@\n one\n-two\n+three\n"  # type: ignore[union-attr]


def test_diff_of_creation_and_deletion(store: Store) -> None:
    v1 = store.write("/a", "x\n")
    d = store.delete("/a")
    assert diff(store.core, v1.id).startswith("--- /dev/null\n+++ b/a\n")  # type: ignore[union-attr]
    assert diff(store.core, d.id).startswith("--- a/a\n+++ /dev/null\n")
    assert "-x\n" in diff(store.core, d.id)


def test_diff_between_two_versions(store: Store) -> None:
    v1 = store.write("/a", "one")
    store.write("/a", "two")
    v3 = store.write("/a", "three")
    out = diff(store.core, v1.id, v3.id)  # type: ignore[union-attr]
    assert "-one\n\\ No newline at end of file\n+three\n\\ No newline at end of file\n" in out


def test_diff_lines_end_at_newline_only(store: Store) -> None:
    # Regression: splitlines() broke lines at U+2028 and marked them "No newline at end of file".
    store.write("/a", "x\u2028y\n")
    v2 = store.write("/a", "x\u2028z\n")
    assert diff(store.core, v2.id) == "--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\u2028y\n+x\u2028z\n"  # type: ignore[union-attr]


def test_diff_from_a_deletion_starts_at_dev_null(store: Store) -> None:
    store.write("/a", "x\n")
    d = store.delete("/a")
    v3 = store.write("/a", "y\n")
    assert diff(store.core, d.id, v3.id) == "--- /dev/null\n+++ b/a\n@@ -0,0 +1 @@\n+y\n"  # type: ignore[union-attr]
