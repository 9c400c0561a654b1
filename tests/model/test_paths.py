"""Path, scope and store-name rules (docs/architecture.md#memories-and-paths), with hypothesis for the many cases."""

from __future__ import annotations

import unicodedata

import pygit2
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from gitmem.errors import InvalidInputError
from gitmem.model.paths import (
    GIT_INTERPRETED,
    validate_path,
    validate_prefix,
    validate_scope,
    validate_store_name,
)

# A segment made of safe characters: letters (any script), digits, and ._- that is not . or ..
_seg_chars = st.characters(
    whitelist_categories=("Lu", "Ll", "Lo", "Nd"), whitelist_characters="._-~ ", max_codepoint=0x2FFF
)
segments = st.text(_seg_chars, min_size=1, max_size=12).filter(
    lambda s: (
        s not in (".", "..")
        and unicodedata.normalize("NFC", s) == s
        and s.rstrip(" .").lower() not in (".git", "git~1")
    )
)
valid_paths = (
    st.lists(segments, min_size=1, max_size=6)
    .map(lambda segs: "/" + "/".join(segs))
    .filter(lambda p: not (p + "/").startswith("/.gitmem/") and len(p.encode()) <= 1024)
    .filter(lambda p: not GIT_INTERPRETED & {s.lower() for s in p.split("/")})
)


@given(valid_paths)
def test_valid_paths_are_accepted_unchanged(path: str) -> None:
    assert validate_path(path) == path


@given(
    st.lists(segments, min_size=0, max_size=3),
    st.lists(segments, min_size=0, max_size=3),
    st.sampled_from([".", ".."]),
)
def test_dot_segments_are_refused(before: list[str], after: list[str], dots: str) -> None:
    assume(not GIT_INTERPRETED & {s.lower() for s in [*before, *after]})  # refused for that first
    with pytest.raises(InvalidInputError, match="segments are not allowed"):
        validate_path("/" + "/".join([*before, dots, *after]))


@pytest.mark.parametrize("path", ["../x", "/../x", "/a/./b", "/a/../b", "/a/.."])
def test_relative_and_dot_paths_are_refused(path: str) -> None:
    with pytest.raises(InvalidInputError):
        validate_path(path)


@given(st.lists(segments, min_size=2, max_size=4), st.data())
def test_empty_segments_are_refused(segs: list[str], data: st.DataObject) -> None:
    i = data.draw(st.integers(1, len(segs) - 1))
    path = "/" + "/".join(segs[:i]) + "//" + "/".join(segs[i:])
    with pytest.raises(InvalidInputError, match="empty path segment"):
        validate_path(path)


@pytest.mark.parametrize("path", ["", "notes/a.md", "/", "/notes/", "//a"])
def test_missing_slash_trailing_slash_and_root_are_refused(path: str) -> None:
    with pytest.raises(InvalidInputError):
        validate_path(path)


@given(valid_paths, st.characters(whitelist_categories=("Cc", "Cf")), st.data())
def test_control_and_format_characters_are_refused(path: str, bad: str, data: st.DataObject) -> None:
    i = data.draw(st.integers(1, len(path)))
    with pytest.raises(InvalidInputError, match="control or format character"):
        validate_path(path[:i] + bad + path[i:])


@pytest.mark.parametrize("bad", ["\n", "\t", "\x00", "\x7f", "\u200b", "\u202e", "\ufeff", "\u2028"])
def test_specific_invisible_characters_are_refused(bad: str) -> None:
    with pytest.raises(InvalidInputError):
        validate_path(f"/notes/a{bad}b.md")


@given(valid_paths)
def test_non_nfc_paths_are_refused(path: str) -> None:
    decomposed = path + "/e\u0301"  # 'e' + combining acute: NFD of 'é'
    with pytest.raises(InvalidInputError, match="NFC"):
        validate_path(decomposed)
    assert validate_path(path + "/\u00e9") == path + "/\u00e9"


def test_path_length_limit_is_1024_utf8_bytes() -> None:
    ok = "/" + "/".join(["é" * 127] * 4) + "/abc"  # 4 segments of 254 bytes, 5 slashes, 3 bytes
    assert len(ok.encode()) == 1024
    assert validate_path(ok) == ok
    with pytest.raises(InvalidInputError, match="1025 bytes"):  # PathTooLongError: exit 5, HTTP 400
        validate_path(ok + "b")


def test_segment_limit_is_255_utf8_bytes() -> None:
    # Regression: longer names were stored, and then no clone or mount could check them out.
    assert validate_path("/" + "é" * 127 + "a") == "/" + "é" * 127 + "a"
    with pytest.raises(InvalidInputError, match="256 bytes"):
        validate_path("/dir/" + "é" * 128)


@pytest.mark.parametrize("path", ["/.gitmem", "/.gitmem/x", "/.gitmem/a/b.md"])
def test_reserved_gitmem_directory_is_refused(path: str) -> None:
    with pytest.raises(InvalidInputError, match="reserved"):
        validate_path(path)


@pytest.mark.parametrize("path", ["/.gitmemx", "/a/.gitmem/x", "/.gitmem.md", "/.hidden"])
def test_names_near_reserved_are_allowed(path: str) -> None:
    assert validate_path(path) == path


def test_paths_are_case_sensitive_and_unchanged() -> None:
    assert validate_path("/Notes/A.md") == "/Notes/A.md"
    assert validate_path("/notes/a.md") == "/notes/a.md"


@pytest.mark.parametrize("prefix", ["/", "/notes/", "/a/b/"])
def test_prefixes_must_end_with_slash(prefix: str) -> None:
    assert validate_prefix(prefix) == prefix
    if prefix != "/":
        with pytest.raises(InvalidInputError, match="must end with"):
            validate_prefix(prefix[:-1])


scope_names = st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9_@+-]{0,40}\Z")


@given(scope_names)
def test_valid_scopes_are_accepted(scope: str) -> None:
    assert validate_scope(scope) == scope


@pytest.mark.parametrize(
    "scope",
    ["", "-a", ".a", "a..b", "a.lock", "a.", "a/b", "a b", "a~", "a^", "a:b", "x" * 129, "é", "main\n"],
)
def test_invalid_scopes_are_refused(scope: str) -> None:
    with pytest.raises(InvalidInputError):
        validate_scope(scope)


@given(st.text(max_size=70))
def test_store_names_follow_the_regex(name: str) -> None:
    import re

    ok = bool(re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,62}", name)) and not name.endswith(".git")
    if ok:
        assert validate_store_name(name) == name
    else:
        with pytest.raises(InvalidInputError):
            validate_store_name(name)


@given(st.from_regex(r"\A[a-z0-9][a-z0-9._-]{0,62}\Z"))
def test_generated_store_names_are_valid(name: str) -> None:
    assume(not name.endswith(".git"))
    assert validate_store_name(name) == name


@pytest.mark.parametrize(
    "path", ["/.git", "/.git/x", "/a/.GIT", "/.Git./x", "/git~1", "/a/GIT~1 ", "/.git::$DATA", "/.git\\x"]
)
def test_git_directory_names_are_refused(path: str) -> None:
    # Regression: libgit2 refused these deep in the write path with a raw pygit2 error.
    with pytest.raises(InvalidInputError, match="git's own directory"):
        validate_path(path)


@pytest.fixture(scope="module")
def names_repo(tmp_path_factory: pytest.TempPathFactory) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path_factory.mktemp("names")), bare=True)


@given(st.text(alphabet=".gitGIT~1 :\\a", min_size=1, max_size=8))
def test_path_rules_accept_only_names_libgit2_can_store(names_repo: pygit2.Repository, name: str) -> None:
    tb = names_repo.TreeBuilder()
    try:
        tb.insert(name, names_repo.create_blob(b"x"), pygit2.enums.FileMode.BLOB)
        stored = True
    except pygit2.GitError:
        stored = False
    try:
        validate_path("/" + name)
        accepted = True
    except InvalidInputError:
        accepted = False
    assert accepted == stored


@pytest.mark.parametrize("name", ["notes\n", "a\n"])
def test_trailing_newline_is_not_a_valid_store_name(name: str) -> None:
    # Regression: the regexes ended in "$", which also matches before a final newline.
    with pytest.raises(InvalidInputError):
        validate_store_name(name)
