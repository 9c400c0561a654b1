"""Memory operations through the public Store API: create, write, edits, delete, rename, list, scopes."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from gitmem import Memory, Prefix
from gitmem.errors import (
    InvalidInputError,
    NotFoundError,
    PathConflictError,
    PreconditionFailedError,
)
from gitmem.store import Store
from tests.helpers import SHA_A, commit_count, fast_workspace, snapshot


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from fast_workspace(tmp_path, monkeypatch)


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------------- create never overwrites
def test_create_refuses_existing_path_naming_it(store: Store) -> None:
    v = store.create("/notes/a.md", "one")
    before = snapshot(store)
    with pytest.raises(PathConflictError) as err:
        store.create("/notes/a.md", "two")
    assert err.value.conflicting_path == "/notes/a.md"
    assert err.value.conflicting_memory_id == v.memory_id
    assert snapshot(store) == before


def test_create_refuses_path_under_an_existing_file(store: Store) -> None:
    store.create("/notes", "a file")
    with pytest.raises(PathConflictError) as err:
        store.create("/notes/a.md", "x")
    assert err.value.conflicting_path == "/notes"


def test_create_refuses_path_that_is_a_directory_of_memories(store: Store) -> None:
    store.create("/notes/deep/a.md", "x")
    with pytest.raises(PathConflictError) as err:
        store.create("/notes", "x")
    assert err.value.conflicting_path == "/notes/deep/a.md"
    with pytest.raises(PathConflictError):
        store.write("/notes/deep", "x")  # write creates too, and must not clobber a directory


def test_write_creates_then_replaces_keeping_memory_id(store: Store) -> None:
    v1 = store.write("/a.md", "one")
    v2 = store.write("/a.md", "two")
    assert v1 is not None and v2 is not None
    assert (v1.operation, v2.operation) == ("created", "modified")
    assert v1.memory_id == v2.memory_id and v1.id != v2.id
    assert store.read("/a.md").content == "two"


def test_writing_same_content_is_a_no_op(store: Store) -> None:
    store.write("/a.md", "same")
    before = snapshot(store)
    assert store.write("/a.md", "same") is None
    assert store.write("/a.md", b"same") is None
    assert snapshot(store) == before


def test_read_returns_content_hash_size_and_ids(store: Store) -> None:
    v = store.write("/a.md", "héllo\n")
    m = store.read("/a.md")
    assert isinstance(m, Memory)
    assert (m.content, m.size, m.content_sha256) == ("héllo\n", 7, sha("héllo\n"))
    assert (m.memory_id, m.version_id, m.scope) == (v.memory_id, v.id, "main")  # type: ignore[union-attr]


def test_read_of_missing_memory_or_scope_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.read("/nope")
    store.write("/a/b", "x")
    with pytest.raises(NotFoundError):
        store.read("/a")  # a directory is not a memory
    with pytest.raises(NotFoundError):
        store.read("/a/b", scope="other")


# ---------------------------------------------------------------------- if_sha256
def test_write_with_matching_sha_succeeds(store: Store) -> None:
    store.write("/a", "one")
    assert store.write("/a", "two", if_sha256=sha("one")) is not None


def test_write_with_stale_sha_conflicts_and_writes_nothing(store: Store) -> None:
    store.write("/a", "one")
    store.write("/a", "two")
    before = snapshot(store)
    with pytest.raises(PreconditionFailedError):
        store.write("/a", "three", if_sha256=sha("one"))
    assert snapshot(store) == before


def test_stale_sha_when_already_in_requested_state_is_success_without_version(store: Store) -> None:
    store.write("/a", "one")
    store.write("/a", "two")
    n = commit_count(store)
    assert store.write("/a", "two", if_sha256=sha("one")) is None
    assert commit_count(store) == n


def test_str_replace_already_applied_with_stale_sha_is_no_op(store: Store) -> None:
    store.write("/a", "hello world")
    store.str_replace("/a", "world", "there")
    n = commit_count(store)
    # the requested end state ("hello there") already holds, so a stale precondition is not an error
    assert store.write("/a", "hello there", if_sha256=sha("hello world")) is None
    assert commit_count(store) == n


def test_if_sha256_on_missing_memory_conflicts(store: Store) -> None:
    with pytest.raises(PreconditionFailedError):
        store.write("/a", "x", if_sha256=SHA_A)


@pytest.mark.parametrize("bad", ["abc", "A" * 64, "g" * 64])
def test_malformed_if_sha256_is_invalid_input(store: Store, bad: str) -> None:
    with pytest.raises(InvalidInputError):
        store.write("/a", "x", if_sha256=bad)


def test_delete_with_stale_sha_conflicts(store: Store) -> None:
    store.write("/a", "one")
    with pytest.raises(PreconditionFailedError):
        store.delete("/a", if_sha256=SHA_A)
    assert store.read("/a").content == "one"
    assert store.delete("/a", if_sha256=sha("one")).operation == "deleted"


# ---------------------------------------------------------------------- str_replace / insert
def test_str_replace_replaces_the_single_occurrence(store: Store) -> None:
    store.write("/a", "milk\neggs\n")
    v = store.str_replace("/a", "eggs", "bread")
    assert v is not None and v.operation == "modified"
    assert store.read("/a").content == "milk\nbread\n"


def test_str_replace_not_found_says_so(store: Store) -> None:
    store.write("/a", "milk\n")
    before = snapshot(store)
    with pytest.raises(InvalidInputError, match="not found"):
        store.str_replace("/a", "cheese", "x")
    assert snapshot(store) == before


def test_str_replace_multiple_occurrences_lists_line_numbers(store: Store) -> None:
    store.write("/a", "todo: a\nx\ntodo: b\ntodo: c\n")
    with pytest.raises(InvalidInputError, match=r"3 times .*lines 1, 3, 4"):
        store.str_replace("/a", "todo", "done")


def test_str_replace_on_missing_memory_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.str_replace("/nope", "a", "b")


def test_str_replace_with_empty_old_is_refused(store: Store) -> None:
    store.write("/a", "x")
    with pytest.raises(InvalidInputError):
        store.str_replace("/a", "", "y")


@pytest.mark.parametrize(
    ("line", "expected"),
    [(0, "new\none\ntwo"), (1, "one\nnew\ntwo"), (2, "one\ntwo\nnew\n")],
)
def test_insert_after_line(store: Store, line: int, expected: str) -> None:
    store.write("/a", "one\ntwo")
    store.insert("/a", line, "new")
    assert store.read("/a").content == expected


@pytest.mark.parametrize("line", [-1, 3, 100])
def test_insert_out_of_bounds_is_refused(store: Store, line: int) -> None:
    store.write("/a", "one\ntwo")
    before = snapshot(store)
    with pytest.raises(InvalidInputError, match=r"\[0, 2\]"):
        store.insert("/a", line, "x")
    assert snapshot(store) == before


def test_insert_into_empty_memory_at_top(store: Store) -> None:
    store.write("/a", "")
    store.insert("/a", 0, "first")
    assert store.read("/a").content == "first\n"


# ---------------------------------------------------------------------- delete / rename
def test_delete_removes_memory_and_records_version(store: Store) -> None:
    v1 = store.write("/a", "x")
    v2 = store.delete("/a")
    assert v2.operation == "deleted" and v2.memory_id == v1.memory_id  # type: ignore[union-attr]
    with pytest.raises(NotFoundError):
        store.read("/a")
    with pytest.raises(NotFoundError):
        store.delete("/a")


def test_delete_last_memory_leaves_empty_listing(store: Store) -> None:
    store.write("/d/a", "x")
    store.delete("/d/a")
    assert store.list() == []
    assert store.write("/d", "now a file") is not None  # the emptied directory is gone


def test_rename_keeps_memory_id_and_content(store: Store) -> None:
    v1 = store.write("/a.md", "x")
    v2 = store.rename("/a.md", "/dir/b.md")
    assert v2 is not None and v2.memory_id == v1.memory_id  # type: ignore[union-attr]
    assert (v2.operation, v2.path, v2.previous_path) == ("modified", "/dir/b.md", "/a.md")
    assert store.read("/dir/b.md").memory_id == v1.memory_id  # type: ignore[union-attr]
    with pytest.raises(NotFoundError):
        store.read("/a.md")


def test_rename_refuses_existing_target_and_overlaps(store: Store) -> None:
    store.write("/a", "x")
    store.write("/b", "y")
    store.write("/dir/c", "z")
    before = snapshot(store)
    for target, conflicting in (("/b", "/b"), ("/b/inner", "/b"), ("/dir", "/dir/c")):
        with pytest.raises(PathConflictError) as err:
            store.rename("/a", target)
        assert err.value.conflicting_path == conflicting
    assert snapshot(store) == before


def test_rename_into_own_subpath_is_allowed(store: Store) -> None:
    store.write("/a", "x")
    assert store.rename("/a", "/a/inside") is not None
    assert store.read("/a/inside").content == "x"


def test_rename_to_same_path_is_a_no_op(store: Store) -> None:
    store.write("/a", "x")
    assert store.rename("/a", "/a") is None


def test_rename_already_done_with_sha_is_a_no_op(store: Store) -> None:
    store.write("/a", "x")
    store.rename("/a", "/b")
    n = commit_count(store)
    assert store.rename("/a", "/b", if_sha256=sha("x")) is None
    assert commit_count(store) == n
    with pytest.raises(NotFoundError):
        store.rename("/a", "/b")


# ---------------------------------------------------------------------- scopes
def test_scopes_are_isolated(store: Store) -> None:
    store.write("/a", "main text")
    store.write("/a", "team text", scope="team")
    store.write("/only-team", "t", scope="team")
    assert store.read("/a").content == "main text"
    assert store.read("/a", scope="team").content == "team text"
    assert store.read("/a").memory_id != store.read("/a", scope="team").memory_id
    with pytest.raises(NotFoundError):
        store.read("/only-team")
    assert [m.path for m in store.list()] == ["/a"]


def test_reading_a_version_through_another_scope_is_refused(store: Store) -> None:
    v = store.write("/a", "secret", scope="team")
    assert v is not None
    with pytest.raises(NotFoundError):
        store.read("/a", scope="main", version=v.id)
    assert store.read("/a", scope="team", version=v.id).content == "secret"


def test_invalid_scope_is_refused(store: Store) -> None:
    with pytest.raises(InvalidInputError):
        store.write("/a", "x", scope="bad..scope")


# ---------------------------------------------------------------------- list
def _paths(items: list[Memory | Prefix]) -> list[str]:
    return [i.path for i in items]


def test_list_depth_0_is_whole_subtree_in_path_order(store: Store) -> None:
    for p in ("/z", "/notes/b", "/notes/a", "/notes/sub/c", "/notes-archive/x"):
        store.write(p, p)
    assert _paths(store.list()) == ["/notes-archive/x", "/notes/a", "/notes/b", "/notes/sub/c", "/z"]
    assert _paths(store.list("/notes/")) == ["/notes/a", "/notes/b", "/notes/sub/c"]


def test_list_prefix_is_segment_aligned(store: Store) -> None:
    store.write("/notes/a", "1")
    store.write("/notes-archive/b", "2")
    store.write("/notesx", "3")
    assert _paths(store.list("/notes/")) == ["/notes/a"]
    with pytest.raises(InvalidInputError):
        store.list("/notes")


def test_list_depth_1_rolls_up_directories(store: Store) -> None:
    for p in ("/notes/a", "/notes/sub/b", "/notes/sub/deeper/c", "/notes/other/d"):
        store.write(p, "x")
    items = store.list("/notes/", depth=1)
    assert items == [items[0], Prefix("/notes/other/", 1), Prefix("/notes/sub/", 2)]
    assert isinstance(items[0], Memory) and items[0].path == "/notes/a"


def test_list_invalid_depth_is_refused(store: Store) -> None:
    with pytest.raises(InvalidInputError):
        store.list(depth=2)


def test_list_with_content_and_of_empty_scope(store: Store) -> None:
    assert store.list(scope="nothing-here") == []
    store.write("/a", "body")
    (m,) = store.list(with_content=True)
    assert isinstance(m, Memory) and m.content == "body"
    (m,) = store.list()
    assert isinstance(m, Memory) and m.content is None and m.size == 4


# ---------------------------------------------------------------------- descriptions
def test_description_is_written_into_front_matter(store: Store) -> None:
    store.write("/a.md", "body\n", description="Shopping list")
    m = store.read("/a.md")
    assert m.description == "Shopping list"
    assert m.content == '---\ndescription: "Shopping list"\n---\nbody\n'


def test_description_replacement_keeps_other_keys_and_body(store: Store) -> None:
    store.write("/a.md", "---\ntitle: T\ndescription: old\n---\nbody\n")
    store.write("/a.md", "---\ntitle: T\ndescription: old\n---\nbody\n", description="new")
    assert store.read("/a.md").content == '---\ntitle: T\ndescription: "new"\n---\nbody\n'


def test_description_shows_in_listing_and_follows_edits(store: Store) -> None:
    store.write("/a.md", "body\n", description="first")
    store.str_replace("/a.md", '"first"', '"second"')
    (m,) = store.list()
    assert isinstance(m, Memory) and m.description == "second"


def test_memory_without_front_matter_has_no_description(store: Store) -> None:
    store.write("/a.md", "---\nnot: closed\n")
    assert store.read("/a.md").description is None


def test_description_over_1024_chars_is_refused(store: Store) -> None:
    with pytest.raises(InvalidInputError):
        store.write("/a.md", "x", description="d" * 1025)
    assert store.write("/a.md", "x", description="d" * 1024) is not None


def test_rename_onto_own_directory_with_siblings_is_refused(store: Store) -> None:
    # Regression: the overlap check looked only at the first file under the target directory.
    store.write("/dir/c", "c")
    store.write("/dir/d", "d")
    before = snapshot(store)
    with pytest.raises(PathConflictError) as err:
        store.rename("/dir/c", "/dir")
    assert err.value.conflicting_path == "/dir/d"
    assert snapshot(store) == before
    assert store.read("/dir/d").content == "d"


def test_insert_counts_lines_by_newline_only(store: Store) -> None:
    # Regression: str.splitlines also splits at U+2028, \x0c, \x85..., unlike the line numbers
    # str_replace reports; a line is what ends with "\n".
    store.write("/a", "a\u2028b\x0cc\nd")
    store.insert("/a", 1, "new")
    assert store.read("/a").content == "a\u2028b\x0cc\nnew\nd"
    with pytest.raises(InvalidInputError, match=r"\[0, 3\]"):
        store.insert("/a", 4, "x")


def test_description_with_lone_surrogate_is_invalid_input(store: Store) -> None:
    # Regression: it raised UnicodeEncodeError (not a gitmem error) after validation.
    with pytest.raises(InvalidInputError):
        store.write("/a.md", "x", description="bad \ud800")
    assert store.core.tip("main") is None


def test_memory_with_unconstructible_front_matter_is_stored(store: Store) -> None:
    content = "---\ndate: 2024-02-30\ndescription: d\n---\nbody\n"
    assert store.write("/a.md", content) is not None
    assert store.read("/a.md").description == "d"  # the bad date beside it does not lose it (issue 26)
    assert store.core.index.rebuild() == 1


def test_reads_name_the_version_at_the_tip_they_read_when_content_comes_back(store: Store) -> None:
    """Index.head_at keeps the head row a read found, per path, for the tip and blob it was read
    at: content written back to an earlier text (the same blob) at a later tip is a new version,
    and a read says so, not the version the earlier read remembered."""
    v1 = store.write("/a.md", "one\n")
    assert store.read("/a.md").version_id == v1.id
    v2 = store.write("/a.md", "two\n")
    assert store.read("/a.md").version_id == v2.id
    v3 = store.write("/a.md", "one\n")  # the blob of v1 again
    got = store.read("/a.md")
    assert got.version_id == v3.id and got.content == "one\n"
    assert store.read("/a.md").version_id == v3.id  # now from the remembered row
    store.rename("/a.md", "/b.md")
    with pytest.raises(NotFoundError):
        store.read("/a.md")
    assert store.read("/b.md").memory_id == v1.memory_id
