"""The ``description:`` key in a memory's own front matter: set/parse round trip, the rest untouched."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gitmem.model.frontmatter import parse_description, set_description

# Descriptions: any text without surrogates or characters YAML cannot carry in a JSON-style scalar.
# Descriptions: any text without lone surrogates (those are refused before they get here).
descriptions = st.text(st.characters(blacklist_categories=("Cs",)), max_size=80)
descriptions_nl = descriptions | st.text(alphabet="ab \n\t\"'#:", max_size=30)
bodies = st.text(max_size=200).filter(lambda b: not b.startswith("---"))
other_keys = st.dictionaries(
    st.from_regex(r"\A[a-ce-z][a-z_]{0,8}\Z"), st.from_regex(r"\A[a-z0-9 ]{0,10}\Z"), max_size=4
)


def _block(keys: dict[str, str]) -> str:
    return "".join(f"{k}: {v!r}\n" for k, v in keys.items())


@given(descriptions_nl, bodies)
def test_set_then_parse_gives_description_back(description: str, body: str) -> None:
    assert parse_description(set_description(body, description)) == description


@given(descriptions, bodies)
def test_file_without_front_matter_gets_a_block_and_keeps_body(description: str, body: str) -> None:
    out = set_description(body, description)
    assert out.startswith("---\ndescription: ")
    assert out.endswith(body)
    assert out.split("\n---\n", 1)[1] == body


@given(other_keys, descriptions, bodies, descriptions)
def test_replacing_keeps_other_keys_and_body_byte_for_byte(
    keys: dict[str, str], first: str, body: str, second: str
) -> None:
    before = _block(keys)
    content = f"---\n{before}description: {first!r}\nafter_key: 1\n---\n{body}"
    out = set_description(content, second)
    assert parse_description(out) == second
    lines = out.split("\n")
    assert "\n".join(lines[1 : 1 + len(keys)]) + ("\n" if keys else "") == before
    assert out.endswith(f"\nafter_key: 1\n---\n{body}")


@given(other_keys, descriptions, bodies)
def test_block_without_description_gets_the_key_added(
    keys: dict[str, str], description: str, body: str
) -> None:
    content = f"---\n{_block(keys)}---\n{body}"
    out = set_description(content, description)
    assert parse_description(out) == description
    assert out.replace(out.split("\n")[1] + "\n", "", 1) == content


def test_multiline_description_value_is_replaced_whole() -> None:
    content = "---\ntitle: x\ndescription: >\n  folded\n  text\ntags: [a]\n---\nbody\n"
    out = set_description(content, "new")
    assert out == '---\ntitle: x\ndescription: "new"\ntags: [a]\n---\nbody\n'


@pytest.mark.parametrize(
    "content",
    [
        "no front matter",
        "---\nunterminated: yes\n",
        "---\ndescription: [unclosed\n---\nbody",
        "---\n- a list\n---\n",
        "---\ntitle: only\n---\nbody",
        "--- \ndescription: x\n",
        "",
    ],
)
def test_parse_never_fails_and_gives_none_without_valid_description(content: str) -> None:
    assert parse_description(content) is None


def test_parse_reads_plain_yaml_description() -> None:
    assert parse_description("---\ndescription: Grocery list\n---\nmilk\n") == "Grocery list"
    assert parse_description("---\r\ndescription: crlf\r\n---\r\nbody") == "crlf"


def test_description_key_in_body_is_not_front_matter() -> None:
    assert parse_description("text\n---\ndescription: x\n---\n") is None


@pytest.mark.parametrize("description", ["a\x85b", "\x7f", "\ufffe", "\uffff", "\x9f", "a\u2028b"])
def test_characters_yaml_cannot_carry_raw_still_round_trip(description: str) -> None:
    # Regression: NEL was folded into a space; DEL and U+FFFE/U+FFFF made the block unreadable.
    out = set_description("body\n", description)
    assert parse_description(out) == description
    assert out.endswith("\n---\nbody\n") and out.count("\n") == 4


def test_alias_bomb_description_is_not_expanded() -> None:
    # Regression: str() of a nested alias structure is exponential (9**9 items at 9 levels).
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 5)]
    content = "---\n" + "\n".join(levels) + "\ndescription: *a4\n---\nbody\n"
    assert parse_description(content) is None


def test_non_text_descriptions_are_none_and_scalars_are_text() -> None:
    assert parse_description("---\ndescription: {a: 1}\n---\n") is None
    assert parse_description("---\ndescription: [1, 2]\n---\n") is None
    assert parse_description("---\ndescription: 42\n---\n") == "42"


@pytest.mark.parametrize(
    "other",
    [
        "date: 2024-02-30",
        "n: !!float abc",
        "t: 2001-12-14t21:59:43.10-99:00",
        "deep: " + "[" * 600 + "]" * 600,
    ],
)
def test_front_matter_yaml_that_fails_to_construct_keeps_its_description(other: str) -> None:
    # Regression: ValueError / RecursionError escaped from parsing, failing writes and indexing;
    # then the description was lost with the other key (issue 26): its own line is read alone.
    assert parse_description(f"---\n{other}\ndescription: d\n---\nbody") == "d"


@given(other_keys, descriptions, bodies, descriptions)
def test_crlf_front_matter_keeps_its_line_endings(
    keys: dict[str, str], first: str, body: str, second: str
) -> None:
    # Regression: replacing the value ate the "\r" of its line; adding the key used "\n".
    before = _block(keys).replace("\n", "\r\n")
    for content in (
        f"---\r\n{before}description: x\r\nafter: 1\r\n---\r\n{body}",
        f"---\r\n{before}---\r\n{body}",
    ):
        out = set_description(content, second)
        assert parse_description(out) == second
        assert out.endswith(f"---\r\n{body}")
        front = out[: len(out) - len(body)]
        assert "\n" not in front.replace("\r\n", "")


def test_repeated_description_keys_collapse_to_the_one_written() -> None:
    # Regression: only the first key was replaced, and YAML reads the last one.
    content = "---\ndescription: a\ntitle: t\ndescription: >\n  b\n  c\nz: 1\n---\nbody\n"
    out = set_description(content, "new")
    assert out == '---\ndescription: "new"\ntitle: t\nz: 1\n---\nbody\n'
    assert parse_description(out) == "new"


@pytest.mark.parametrize("key", ['"description"', "'description'", "description"])
def test_quoted_description_key_is_read_and_replaced(key: str) -> None:
    content = f"---\n{key}: old\nt: 1\n---\nbody"
    assert parse_description(content) == "old"
    assert set_description(content, "new") == '---\ndescription: "new"\nt: 1\n---\nbody'
