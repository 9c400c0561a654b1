"""``copy_store`` (a dream's ``create_new``): every scope with its history, the same version and
memory ids, the ledger continued (its redactions recorded), the source only read, a copy that
verifies, and each copy a store of its own (its own id, though names may repeat)."""

from __future__ import annotations

from pathlib import Path

import pytest

import gitmem
from gitmem.audit.verify import verify
from gitmem.engine import ledger
from gitmem.store import copy_store
from tests.helpers import git


def test_a_copy_keeps_every_scope_and_its_history_and_verifies(workspace: Path) -> None:
    with gitmem.create_store("src", home=workspace) as s:
        s.write("/a.md", "one\n", session="sesn_a")
        s.write("/a.md", "two\n", session="sesn_a")
        s.write("/t.md", "team\n", scope="team")
        v = s.write("/secret.md", "gone\n")
        assert v is not None
        s.write("/keep.md", "keep\n")
        s.delete("/secret.md")
        s.redact(v.id, reason="test")
        refs = git(s.path, "for-each-ref").stdout
        with copy_store(s, "dst", home=workspace, actor="user:alice") as c:
            assert c.scopes() == ["main", "team"] and c.settings.id != s.settings.id
            assert sorted(x.id for x in c.versions()) == sorted(x.id for x in s.versions())
            assert c.read("/a.md").content == "two\n" and c.read("/t.md", scope="team").content == "team\n"
            assert c.read("/a.md").memory_id == s.read("/a.md").memory_id
            assert verify(c.core).ok
            assert [e.data.get("id") for e in ledger.entries(c.core, kind="redaction")] == [
                e.data.get("id") for e in ledger.entries(s.core, kind="redaction")
            ]  # the source's ledger, continued
            (entry,) = ledger.entries(c.core, kind="store_copied")
            assert entry.data["source_id"] == s.settings.id and entry.actor == "user:alice"
            assert set(entry.data["tips"]) == {"main", "team"}
            assert b"gone" not in git(c.path, "log", "--all", "-p").stdout.encode()
            c.write("/new.md", "only in the copy\n")
            copy_id = c.settings.id
        assert git(s.path, "for-each-ref").stdout == refs
        with pytest.raises(gitmem.errors.NotFoundError):
            s.read("/new.md")
        with copy_store(s, "dst", home=workspace) as again:  # names may repeat: another store
            assert again.settings.id not in (s.settings.id, copy_id) and again.name == "dst"
            with pytest.raises(gitmem.errors.NotFoundError):
                again.read("/new.md")
        with gitmem.open_store(copy_id, workspace) as c:
            assert c.read("/new.md").content == "only in the copy\n"


def test_a_copy_of_an_empty_store_is_an_empty_store(workspace: Path) -> None:
    with gitmem.create_store("src", home=workspace) as s, copy_store(s, "dst", home=workspace) as c:
        assert c.scopes() == [] and c.settings.id != s.settings.id
        assert len(ledger.entries(c.core, kind="store_copied")) == 1
