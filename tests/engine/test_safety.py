"""Safety rules found in review: redacted content stays out, tampering is refused, settings are fresh."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest

import gitmem
from gitmem.config import Limits
from gitmem.engine import ledger, memories
from gitmem.errors import ConfigError, ConflictError, ForbiddenError, IntegrityError, InvalidInputError
from gitmem.store import Store


def git(store: Store, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={store.path}", *args], capture_output=True, text=True, check=True
    ).stdout


def _redacted(store: Store, secret: str = "token: hunter2\n") -> str:
    old = store.write("/a.md", secret)
    store.write("/a.md", "rotated\n")
    assert old is not None
    store.redact(old.id, reason="leak")
    return secret


def test_writes_refuse_content_a_redaction_removed(store: Store) -> None:
    secret = _redacted(store)
    tip = store.core.tip("main")
    with pytest.raises(ForbiddenError, match="redacted from the store"):
        store.write("/elsewhere.md", secret)
    assert store.core.tip("main") == tip


def test_a_tag_reaching_the_history_blocks_the_redaction(store: Store) -> None:
    old = store.write("/a.md", "token: hunter2\n")
    git(store, "tag", "backup", "main")
    store.write("/a.md", "rotated\n")
    assert old is not None
    tip = store.core.tip("main")
    with pytest.raises(ForbiddenError, match="refs/tags/backup still reaches"):
        store.redact(old.id, reason="leak")
    assert store.core.tip("main") == tip and store.version(old.id).redaction is None


def test_a_truncated_ledger_is_not_extended(store: Store) -> None:
    _redacted(store)
    first = git(store, "rev-list", "--max-parents=0", ledger.LEDGER_REF).strip()
    git(store, "update-ref", ledger.LEDGER_REF, first)  # drop every entry after the first
    with pytest.raises(IntegrityError, match="truncated or rewritten"):
        ledger.append(store.core, "settings_changed", {"description": "x"})


def test_a_long_lived_store_sees_another_process_archive_it(store: Store, workspace: Path) -> None:
    store.write("/a.md", "a")
    with gitmem.open_store("notes", home=workspace) as other:
        other.update_settings(archived_at="2026-11-30T00:00:00Z")
    with pytest.raises(ForbiddenError, match="archived"):
        store.write("/b.md", "b")


def test_create_revives_only_free_well_formed_memory_ids(store: Store) -> None:
    live = store.write("/a.md", "a")
    assert live is not None
    tip = store.core.tip("main")
    with pytest.raises(InvalidInputError):
        memories.create(store.core, "/b.md", "b", memory_id="mem_x\nGitmem-Actor: service:forged")
    with pytest.raises(ConflictError, match="is live"):
        memories.create(store.core, "/b.md", "b", memory_id=live.memory_id)
    assert store.core.tip("main") == tip and len(store.versions()) == 1


def test_path_limit_can_only_be_lowered(workspace: Path) -> None:
    with pytest.raises(ConfigError, match="max_path_bytes"):
        gitmem.create_store("wide", limits=Limits(max_path_bytes=4096), home=workspace)


def test_a_purge_blocked_by_a_reader_is_finished_by_verify(store: Store) -> None:
    from gitmem.audit.verify import verify

    store.write("/a.md", "zqxsecret here\n")
    store.write("/a.md", "clean\n")
    reader = sqlite3.connect(str(store.core.index.path))
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM versions").fetchone()
    old = store.versions("/a.md")[-1]
    store.redact(old.id, reason="leak")
    assert store.core.index.purge_pending()
    reader.rollback()
    reader.close()
    assert verify(store.core, raise_on_failure=False).ok
    assert not store.core.index.purge_pending()
    for f in store.core.gitmem_dir.glob("index.sqlite*"):
        assert b"zqxsecret" not in f.read_bytes()


def test_verify_names_a_redaction_the_ledger_lost(store: Store) -> None:
    from gitmem.audit.verify import verify

    _redacted(store)
    first = git(store, "rev-list", "--max-parents=0", ledger.LEDGER_REF).strip()
    git(store, "update-ref", ledger.LEDGER_REF, first)
    (store.core.gitmem_dir / ledger.ANCHOR_FILE).unlink()  # the tamperer covers the anchor too
    report = verify(store.core, raise_on_failure=False)
    assert not report.ok
    assert any("which the ledger does not record" in c.detail for c in report.checks)
