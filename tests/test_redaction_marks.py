"""``[redacted: <id>]`` marks: only a redaction of the store may put one in a memory. A forged mark
would make ``verify`` report a redaction the ledger lacks (a false tampering alarm at will)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitmem.audit import redact
from gitmem.audit.verify import verify
from gitmem.errors import InvalidInputError
from gitmem.store import Store
from tests.helpers import git

FORGED = "[redacted: redact_01M8RW1613285GMSGVV7VA0B03]"


def test_a_forged_mark_is_refused_and_verify_stays_clean(store: Store) -> None:
    store.write("/a.md", "fine\n")
    before = [v.id for v in store.versions()]
    with pytest.raises(InvalidInputError, match=r"redact_01M8RW1613285GMSGVV7VA0B03.*no redaction"):
        store.write("/b.md", f"note {FORGED}\n")
    assert [v.id for v in store.versions()] == before
    verify(store.core)


def test_a_forged_mark_in_a_push_is_refused(store: Store, tmp_path: Path) -> None:
    store.write("/a.md", "fine\n")
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(store.path), str(work))
    (work / "b.md").write_text(f"pushed {FORGED}\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "forged")
    res = git(work, "push", "origin", "main", check=False)
    assert res.returncode != 0
    assert "remote: gitmem:" in res.stderr and "no redaction of this store made" in res.stderr
    verify(store.core)


def test_a_mark_a_redaction_made_may_be_written(store: Store) -> None:
    v1 = store.write("/a.md", "token sk-live-123456 and more\n")
    store.write("/a.md", "rotated\n")
    assert v1 is not None
    r = redact.redact_pattern(store.core, r"sk-live-\d+", reason="leak")
    commit = store.core.commit(store.version(v1.id).commit)
    marked = store.core.blob_data(commit.tree["a.md"].id).decode()  # what history holds now
    assert f"[redacted: {r.id}]" in marked
    store.write("/copy.md", marked)  # e.g. a clone's user copying the redacted text: allowed
    verify(store.core)


def test_gitmem_ids_in_a_note_are_not_secrets(store: Store) -> None:
    v = store.write("/a.md", "first\n")
    assert v is not None
    note = f"see {v.id} of {v.memory_id} in {store.settings.id}; a token's secret is another thing\n"
    store.write("/ids.md", note)
    assert store.read("/ids.md").content == note


def test_a_gitmem_token_secret_is_caught_by_the_guard(store: Store) -> None:
    import secrets

    from gitmem.errors import GuardRejectedError

    secret = f"gitmem_01M8RXHD602HXRAWQKATJASQ19_{secrets.token_urlsafe(32)}"
    with pytest.raises(GuardRejectedError, match="gitmem-token"):
        store.write("/tok.md", f"use {secret}\n")
