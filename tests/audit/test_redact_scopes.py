"""The deny-list by scope (docs/redaction.md, "Deny-list and deny-patterns"): a redacted blob is
refused in every scope the redaction rewrote, by every path (library writes, pushes, session
syncs), and in no other scope, where a write of the same bytes answers as any write does (so a
token confined to that scope learns nothing of another scope's redactions). A scope that holds the
bytes again is no leftover of the purge: verify, and the purge of a copy, keep it."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitmem.audit import redact
from gitmem.audit.copy_purge import purge_and_prove
from gitmem.audit.verify import verify
from gitmem.engine import denylist
from gitmem.errors import ForbiddenError
from gitmem.git.files import blob_id
from gitmem.store import Store
from tests.engine.test_identity import clone, git

SECRET = "hunter2 is the password\n"


def _redacted_in_main(store: Store) -> str:
    v = store.write("/pw.md", SECRET, actor="user:alice")
    store.write("/pw.md", "rotated\n", actor="user:alice")
    store.write("/other.md", "kept\n", scope="side", actor="user:alice")  # a scope that never held it
    assert v is not None
    r = redact.redact(store.core, v.id, reason="leak", actor="user:admin")
    assert r.versions == [v.id]
    return blob_id(SECRET.encode())


def test_refused_in_the_scopes_the_redaction_rewrote_and_in_no_other(store: Store) -> None:
    blob = _redacted_in_main(store)
    assert denylist.read_scoped(store.path) == {blob: frozenset({"main"})}
    with pytest.raises(ForbiddenError, match="redacted"):
        store.write("/again.md", SECRET, actor="user:alice")
    for scope in ("side", "team"):  # an existing scope and a new one
        v = store.write("/guess.md", SECRET, scope=scope, actor="user:bob")
        assert v is not None and store.read("/guess.md", scope=scope).content == SECRET
    # main refuses it still, in a batch as in a write
    with pytest.raises(ForbiddenError, match="redacted"):
        store.write("/pw.md", SECRET, actor="user:alice")
    report = verify(store.core, raise_on_failure=False)
    assert report.ok, [c for c in report.checks if not c.ok]
    assert purge_and_prove(store.path) == ""  # a copy's purge keeps what team and side hold
    assert store.read("/guess.md", scope="team").content == SECRET


def test_a_redaction_of_the_scope_that_wrote_it_again_covers_that_scope_too(store: Store) -> None:
    blob = _redacted_in_main(store)
    v = store.write("/guess.md", SECRET, scope="team", actor="user:bob")
    store.write("/guess.md", "changed\n", scope="team", actor="user:bob")
    assert v is not None
    redact.redact(store.core, v.id, reason="again", actor="user:admin")
    assert denylist.read_scoped(store.path)[blob] == frozenset({"main", "team"})
    for scope in ("main", "team"):
        with pytest.raises(ForbiddenError, match="redacted"):
            store.write("/x.md", SECRET, scope=scope, actor="user:alice")
    assert git("cat-file", "-e", blob, cwd=store.path, check=False).returncode != 0
    report = verify(store.core, raise_on_failure=False)
    assert report.ok, [c for c in report.checks if not c.ok]


def test_a_push_brings_it_to_another_scope_but_never_to_main(store: Store, tmp_path: Path) -> None:
    _redacted_in_main(store)
    work = clone(store, tmp_path)
    git("config", "user.email", "bob@example.com", cwd=work)
    git("config", "user.name", "bob", cwd=work)
    (work / "pushed.md").write_text(SECRET)
    git("add", "pushed.md", cwd=work)
    git("commit", "-q", "-m", "plain git", cwd=work)
    env = {"REMOTE_USER": "bob"}
    refused = git("push", "origin", "HEAD:main", cwd=work, check=False, env=env)
    assert refused.returncode != 0 and "redacted" in refused.stderr
    git("push", "-q", "origin", "HEAD:team", cwd=work, env=env)
    assert store.read("/pushed.md", scope="team").content == SECRET
    assert "/pushed.md" not in [m.path for m in store.list("/")]
    report = verify(store.core, raise_on_failure=False)
    assert report.ok, [c for c in report.checks if not c.ok]


def _secret_on_team(store: Store, tmp_path: Path) -> Path:
    """A clone whose branch ``team`` (pushed) holds the bytes redacted from main."""
    _redacted_in_main(store)
    work = clone(store, tmp_path)
    git("config", "user.email", "bob@example.com", cwd=work)
    git("config", "user.name", "bob", cwd=work)
    (work / "pushed.md").write_text(SECRET)
    git("add", "pushed.md", cwd=work)
    git("commit", "-q", "-m", "plain git", cwd=work)
    git("push", "-q", "origin", "HEAD:team", cwd=work, env={"REMOTE_USER": "bob"})
    return work


def test_main_moved_to_the_commit_another_scope_holds_is_refused(store: Store, tmp_path: Path) -> None:
    # Before: the hook checked only the commits new to the store; team's commit, already there,
    # was never checked for main, so a fast-forward of main to it put the redacted bytes back in
    # main (and verify, excusing the blob because team reaches it, still passed).
    work = _secret_on_team(store, tmp_path)
    refused = git("push", "origin", "origin/team:main", cwd=work, check=False, env={"REMOTE_USER": "bob"})
    assert refused.returncode != 0 and "redacted" in refused.stderr
    assert "/pushed.md" not in [m.path for m in store.list("/")]


def test_a_merge_of_another_scope_into_main_is_refused(store: Store, tmp_path: Path) -> None:
    # A new merge commit whose first parent is team's commit: its diff against that parent is empty.
    work = _secret_on_team(store, tmp_path)
    git("fetch", "-q", "origin", cwd=work)
    git("checkout", "-q", "-B", "m", "origin/main", cwd=work)
    (work / "other2.md").write_text("an unrelated change\n")
    git("add", "other2.md", cwd=work)
    git("commit", "-q", "-m", "main's own", cwd=work)
    git("checkout", "-q", "-B", "merged", "origin/team", cwd=work)
    git("merge", "-q", "--no-edit", "m", cwd=work)
    refused = git("push", "origin", "merged:main", cwd=work, check=False, env={"REMOTE_USER": "bob"})
    assert refused.returncode != 0 and "redacted" in refused.stderr
    assert "/pushed.md" not in [m.path for m in store.list("/")]


def test_verify_does_not_excuse_a_blob_the_redacted_scope_reaches(store: Store, tmp_path: Path) -> None:
    # The bytes back on main by a path no hook sees (a plain git update-ref): team reaching them
    # too must not make verify's purge proof pass.
    _secret_on_team(store, tmp_path)
    team = git("rev-parse", "refs/heads/team", cwd=store.path).stdout.strip()
    git("update-ref", "refs/heads/main", team, cwd=store.path)
    report = verify(store.core, raise_on_failure=False)
    assert not report.ok


def test_verify_refuses_a_deny_list_whose_scopes_line_was_narrowed(store: Store) -> None:
    # The ledger records the scopes a redaction rewrote; a deny-list edited to scope its blob
    # elsewhere (which lets main hold it again, unrefused and excused) no longer passes verify.
    blob = _redacted_in_main(store)
    path = store.path / "gitmem" / denylist.DENYLIST
    text = path.read_text()
    assert '#@ scopes ["main"]' in text
    path.write_text(text.replace('#@ scopes ["main"]', '#@ scopes ["elsewhere"]'))
    assert denylist.read_scoped(store.path) == {blob: frozenset({"elsewhere"})}
    report = verify(store.core, raise_on_failure=False)
    assert not report.ok
    assert any("scopes" in c.detail for c in report.checks if not c.ok)
