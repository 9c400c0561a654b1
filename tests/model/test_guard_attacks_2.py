"""Adversarial checks of the guard's paragraph memo and the planners' blob cache through the real
write path: a pusher or agent first teaches a scope's memo clean paragraphs, then rewrites with
text the memo must not let through (docs/guard.md#speed)."""

from __future__ import annotations

from typing import Any

import pygit2
import pytest

from gitmem.engine import guard as engine_guard
from gitmem.engine.batch import BatchOp, apply_batch
from gitmem.errors import ForbiddenError, GitmemError, GuardRejectedError, InvalidInputError
from gitmem.model import guard_memo
from gitmem.model.guard import GuardPolicy, scan
from tests.helpers import run_threads

TOKEN = "ghp_" + "aB3dE5fG7hJ9kL2mN4pQ6rS8tU0vW1xY3zA5"  # github-token shape (36 after ghp_)
AWS_ID = "AKIA" + "Q2W3E4R5T6Y7U2I3"
EMAIL = "jane.doe@corp-mail.example.org"
PROSE = [
    "We keep notes about the build here.",
    "The deploy runs on Tuesdays and Thursdays.",
    "Ask the on-call person before a release.",
    "Dependencies are pinned in the lock file.",
]
NOTE = "\n\n".join(PROSE)


def _teach(store: Any, path: str = "/n.md", scope: str = "main", text: str = NOTE) -> None:
    """Write ``text`` and rewrite it: the second write puts its paragraphs in the scope's memo."""
    store.write(path, text, scope=scope)
    store.write(path, f"# v1\n\n{text}", scope=scope)


def _flags(store: Any, version: Any) -> str:
    return str(store.core.repo[pygit2.Oid(hex=version.commit)].message)


def test_pii_turned_on_after_paragraphs_were_remembered_still_flags(store: Any) -> None:
    store.update_settings(guard={"secrets": "reject", "pii": "off"})
    text = NOTE + f"\n\nmail {EMAIL} for access"
    _teach(store, text=text)  # the e-mail paragraph is remembered clean for secrets, pii is off
    store.update_settings(guard={"secrets": "reject", "pii": "flag"})
    version = store.write("/n.md", f"# v2\n\n{text}")
    assert "Gitmem-Flag: pii email" in _flags(store, version)


def test_a_pattern_added_after_paragraphs_were_remembered_rejects(store: Any) -> None:
    _teach(store)
    store.update_settings(guard={"patterns": [{"name": "deploy", "regex": "Tuesdays"}]})
    with pytest.raises(GuardRejectedError):
        store.write("/n.md", f"# v2\n\n{NOTE}")
    store.update_settings(guard={"deny_patterns": ["on-call person"]})
    with pytest.raises(GuardRejectedError):
        store.write("/n.md", f"# v3\n\n{NOTE}")


def test_an_allow_listed_secret_is_not_remembered_clean(store: Any) -> None:
    text = NOTE + f"\n\ntoken {TOKEN}"
    store.update_settings(guard={"allow": [TOKEN]})
    _teach(store, text=text)
    store.update_settings(guard={"allow": []})
    with pytest.raises(GuardRejectedError):
        store.write("/n.md", f"# v2\n\n{text}")


def test_a_redaction_pattern_added_after_memoizing_refuses(store: Any) -> None:
    _teach(store)
    from gitmem.audit.redact import redact_pattern

    # the pattern is remembered by a redaction of a match that is no longer live

    store.write("/gone.md", "codeword zebra-42 here")
    store.delete("/gone.md")
    redact_pattern(store.core, "zebra-42", reason="test")
    with pytest.raises((ForbiddenError, GuardRejectedError)):
        store.write("/n.md", f"# v2\n\n{NOTE}\n\nzebra-42")


def test_a_private_key_whose_header_paragraph_was_remembered_is_refused(store: Any) -> None:
    header = "-----BEGIN RSA PRIVATE KEY-----"
    footer = "-----END RSA PRIVATE KEY-----"
    body = "MIIEowIBAAKCAQEA7bq9Xz3Jr0QhV2s1Kp8Lm4Nw6Ty5Ui7Op9As2Df4Gh6Jk8Lz1Xc3Vb5Nm7Qw9Er"
    _teach(store, text=f"{NOTE}\n\n{header}\n\nthe header alone is prose\n\n{footer}")
    assert scan(f"{header}\n\n{body}\n\n{footer}", GuardPolicy()) != []
    with pytest.raises(GuardRejectedError):
        store.write("/n.md", f"# v2\n\n{NOTE}\n\n{header}\n\n{body}\n\n{footer}")


@pytest.mark.parametrize("sep", ["\r\n", "\r", "\u2028", "\u2029", "\x85", "\f", "\x00", "\ufeff", "\u200b"])
def test_odd_line_ends_around_a_remembered_paragraph(store: Any, sep: str) -> None:
    _teach(store)
    for text in (
        f"{NOTE}{sep}{TOKEN}",
        f"{PROSE[0]}{sep}{TOKEN}\n\n{NOTE}",
        NOTE.replace("\n\n", f"\n\n{sep}{TOKEN}{sep}", 1),
    ):
        assert scan(text, GuardPolicy()) != []
        with pytest.raises(InvalidInputError if sep == "\x00" else GuardRejectedError):  # NUL: not text
            store.write("/n.md", text)


def test_aws_context_in_the_previous_line_or_paragraph_matches_a_fresh_scan(store: Any) -> None:
    key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY4EXAMPLEKZ"
    for text in (
        f"aws secret\n{key}",
        f"aws secret\n\n{key}",
        f"aws secret {key}",
        f"{NOTE}\n\naws secret access key {key}",
    ):
        _teach(store, text=NOTE)
        expected = scan(f"# x\n\n{text}", GuardPolicy(secrets="flag"))
        store.update_settings(guard={"secrets": "flag"})
        version = store.write("/n.md", f"# x\n\n{text}")
        store.update_settings(guard={"secrets": "reject"})
        message = _flags(store, version)
        assert ("aws-secret-access-key" in message) == any(
            f.rule == "aws-secret-access-key" for f in expected
        )


def test_a_batch_rewriting_one_path_twice_screens_the_second(store: Any) -> None:
    _teach(store)
    with pytest.raises(GuardRejectedError):
        apply_batch(
            store.core,
            [
                BatchOp("write", "/n.md", f"# a\n\n{NOTE}"),
                BatchOp("write", "/n.md", f"# b\n\n{NOTE}\n\n{TOKEN}"),
            ],
        )
    assert TOKEN not in store.read("/n.md").content
    # renamed, then the old path recreated with a secret, then the renamed one rewritten with one
    for ops in (
        [BatchOp("rename", "/n.md", new_path="/m.md"), BatchOp("write", "/n.md", f"{NOTE}\n\n{TOKEN}")],
        [BatchOp("rename", "/n.md", new_path="/m.md"), BatchOp("write", "/m.md", f"{NOTE}\n\n{AWS_ID}")],
        [BatchOp("delete", "/n.md"), BatchOp("write", "/n.md", f"# v1\n\n{NOTE}\n\n{TOKEN}")],
    ):
        with pytest.raises(GuardRejectedError):
            apply_batch(store.core, ops)
    assert TOKEN not in store.read("/n.md").content


def test_a_batch_writing_back_the_old_content_after_a_change_is_not_skipped(store: Any) -> None:
    """The 'unchanged' shortcut compares with the planned content, not the tip's."""
    _teach(store)
    old = store.read("/n.md").content
    with pytest.raises(GuardRejectedError):
        apply_batch(
            store.core,
            [BatchOp("write", "/n.md", f"{old}\n\n{TOKEN}"), BatchOp("write", "/n.md", old)],
        )


def test_threads_sharing_one_store_never_store_a_secret(store: Any) -> None:
    _teach(store)
    errors: list[BaseException] = []
    stored: list[str] = []

    def writer(n: int) -> None:
        for k in range(15):
            secret = n % 2 == 0 and k % 3 == 0
            text = f"# t{n} {k}\n\n{NOTE}" + (f"\n\n{TOKEN}" if secret else "")
            try:
                store.write("/n.md", text)
                stored.append(text)
            except GuardRejectedError:
                if not secret:
                    errors.append(AssertionError(f"clean text refused: {n} {k}"))
            except GitmemError as exc:  # noqa: PERF203
                errors.append(exc)

    run_threads(writer, 4)
    assert not errors
    assert all(TOKEN not in t for t in stored)
    for v in store.versions("/n.md"):
        assert TOKEN not in store.core.repo[pygit2.Oid(hex=v.commit)].tree["n.md"].data.decode()


def test_a_memo_cleared_while_full_keeps_exact_findings(store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard_memo, "CLEAN_MAX", 3)
    many = "\n\n".join(f"paragraph {n} of plain prose" for n in range(10))
    _teach(store, text=many)
    memo = engine_guard._MEMOS[store.core]["main"]
    assert len(memo.secrets) <= 3
    with pytest.raises(GuardRejectedError):
        store.write("/n.md", many.replace("paragraph 9", f"paragraph 9 {TOKEN}"))


def test_another_scopes_memo_does_not_let_a_secret_through(store: Any) -> None:
    _teach(store, scope="alice")
    with pytest.raises(GuardRejectedError):
        store.write("/n.md", f"{NOTE}\n\n{TOKEN}", scope="alice")
    store.write("/n.md", NOTE, scope="bob")
    with pytest.raises(GuardRejectedError):
        store.write("/n.md", f"# b\n\n{NOTE}\n\n{TOKEN}", scope="bob")


def test_a_memo_holds_no_paragraph_past_the_store_patterns_findings_cap() -> None:
    """The store's own patterns stop collecting at MAX_FINDINGS hits: the paragraphs with the
    matches after those were not looked at, so they must not be remembered clean (docs/guard.md:
    a memo never holds a deny-listed pattern)."""
    from gitmem.model.guard import MAX_FINDINGS

    policy = GuardPolicy(deny_patterns=("codeword-[0-9]+",))
    text = "\n\n".join(f"codeword-{n}" for n in range(MAX_FINDINGS + 5))
    memo = guard_memo.CleanParagraphs()
    scan(text, policy, memo=memo)
    for n in range(MAX_FINDINGS + 5):
        assert f"codeword-{n}".encode() not in memo.secrets
