"""The parse shortcuts of the witness round give what a full parse gives (docs/transparency.md#cost):
a note or checkpoint this process remembered when signing it, and a witness's answer appended with
``note.with_lines``; bad answers are refused as a full parse refuses them."""

from __future__ import annotations

import pytest

from gitmem.errors import InvalidInputError
from gitmem.model.tlog import checkpoint, note
from gitmem.model.tlog.merkle import EMPTY_ROOT

SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
SIG_LINE = "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"


def _signed(size: int) -> tuple[checkpoint.Checkpoint, note.Note]:
    cp = checkpoint.Checkpoint("example.com/log", size, bytes(range(32)) if size else EMPTY_ROOT)
    body = checkpoint.remember(cp)
    return cp, note.sign(body, [note.ed25519_signer(SKEY)])


def test_a_remembered_note_and_body_equal_a_full_parse() -> None:
    cp, n = _signed(7)
    text = note.remember(n)
    assert text == n.encode()
    assert note.parse(text) == note._parse.__wrapped__(text) == n
    assert checkpoint.parse_body(n.text) == checkpoint._parse_body.__wrapped__(n.text) == cp
    cp0, _ = _signed(0)
    assert checkpoint.parse_body(cp0.body()) == checkpoint._parse_body.__wrapped__(cp0.body())


def test_a_checkpoint_parse_body_would_refuse_is_not_remembered() -> None:
    bad = checkpoint.Checkpoint("two\nlines", 3, bytes(32))
    checkpoint.remember(bad)
    with pytest.raises(InvalidInputError):
        checkpoint.parse_body(bad.body())
    empty = checkpoint.Checkpoint("example.com/log", 0, bytes(32))  # size 0 needs the empty root
    checkpoint.remember(empty)
    with pytest.raises(InvalidInputError):
        checkpoint.parse_body(empty.body())


def test_with_lines_equals_parsing_the_whole_note() -> None:
    _, n = _signed(9)
    got = note.with_lines(n, SIG_LINE)
    assert got == note._parse.__wrapped__(n.encode() + SIG_LINE)
    assert [s.name for s in got.sigs] == ["PeterNeumann", "EnochRoot"]


@pytest.mark.parametrize(
    "answer",
    [
        "",  # no signature line
        SIG_LINE[:-1],  # no final newline
        SIG_LINE + "not a signature line\n",
        SIG_LINE.replace("rwz+", "rwz\x01"),  # a control character
        "— EnochRoot !!!!\n",  # not base64
        "— EnochRoot AAAA\n",  # too short for a key id and a signature
        SIG_LINE * (note.MAX_SIGNATURES + 1),  # too many
    ],
)
def test_with_lines_refuses_what_a_full_parse_refuses(answer: str) -> None:
    _, n = _signed(5)
    with pytest.raises(InvalidInputError):
        note.with_lines(n, answer)
    with pytest.raises(InvalidInputError):
        note._parse.__wrapped__(n.text + "\n" + answer)  # how the round joined them before


def test_with_lines_refuses_a_blank_line_a_full_parse_would_move_the_text_at() -> None:
    _, n = _signed(5)
    with pytest.raises(InvalidInputError):
        note.with_lines(n, "\n" + SIG_LINE)
    assert note._parse.__wrapped__(n.text + "\n\n" + SIG_LINE).text != n.text  # (its signature fails)
