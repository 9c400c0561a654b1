"""The audit ledger: chain, canonical form, tamper detection, deny-list, secret, push records."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pygit2
import pytest

import gitmem
from gitmem.audit.verify import verify
from gitmem.engine import ledger
from gitmem.errors import IntegrityError
from gitmem.store import Store
from tests.helpers import git


def _rewrite_ledger(store: Store, change: dict[int, dict[str, object]], *, rechain: bool) -> None:
    """Rewrite the ledger behind gitmem's back: entries in ``change`` get new data; with ``rechain``
    every later ``prev`` is recomputed, as a careful attacker would."""
    repo = store.core.repo
    parent: list[pygit2.Oid] = []
    prev = ""
    sig = pygit2.Signature("gitmem", "gitmem", 1_700_000_000, 0)
    for entry in ledger.entries(store.core):
        body = {
            "seq": entry.seq,
            "kind": entry.kind,
            "at": entry.at,
            "actor": entry.actor,
            "data": change.get(entry.seq, entry.data),
            "prev": prev if rechain else entry.prev,
        }
        text = ledger.canonical(body)
        msg = f"gitmem ledger: {entry.kind} #{entry.seq}\n\n{text}\n"
        parent = [repo.create_commit(None, sig, sig, msg, store.core.empty_tree(), parent)]
        prev = hashlib.sha256(text.encode()).hexdigest()
    repo.references.create(ledger.LEDGER_REF, parent[0], force=True)


def test_entries_chain_and_show_in_git_log(store: Store) -> None:
    store.update_settings(description="changed", actor="user:alice")
    store.update_settings(archived_at="2026-01-01T00:00:00Z")
    chain = ledger.entries(store.core)
    assert [e.kind for e in chain] == ["store_created", "settings_changed", "archived"]
    assert [e.seq for e in chain] == [0, 1, 2]
    assert chain[1].prev == chain[0].digest and chain[2].prev == chain[1].digest
    assert chain[1].actor == "user:alice" and chain[1].data == {
        "changes": {"description": "changed"},
        "diff": [{"key": "description", "old": "Test notes", "new": "changed"}],
    }
    log = git(store.path, "log", "--format=%s", ledger.LEDGER_REF).stdout.split("\n")
    assert log[:3] == [
        "gitmem ledger: archived #2",
        "gitmem ledger: settings_changed #1",
        "gitmem ledger: store_created #0",
    ]
    assert ledger.check_chain(store.core) == []


def test_edited_entry_breaks_the_chain(store: Store) -> None:
    store.update_settings(description="a")
    store.update_settings(description="b")
    _rewrite_ledger(store, {1: {"changes": {"description": "forged"}}}, rechain=False)
    problems = ledger.check_chain(store.core)
    assert any("does not chain" in p for p in problems)
    with pytest.raises(IntegrityError, match="ledger"):
        verify(store.core)


def test_rechained_rewrite_is_caught_by_the_anchor(store: Store) -> None:
    store.update_settings(description="a")
    store.update_settings(description="b")
    _rewrite_ledger(store, {1: {"changes": {"description": "forged"}}}, rechain=True)
    assert any("rewritten" in p for p in ledger.check_chain(store.core))
    with pytest.raises(IntegrityError) as info:
        verify(store.core)
    assert info.value.exit_code == 7


def test_non_canonical_entry_is_refused(store: Store) -> None:
    tip = ledger.ledger_tip(store.core)
    sig = pygit2.Signature("gitmem", "gitmem", 1_700_000_000, 0)
    bad = store.core.repo.create_commit(
        None, sig, sig, 'gitmem ledger: push #1\n\n{ "seq": 1 }\n', store.core.empty_tree(), [tip]
    )
    store.core.repo.references.create(ledger.LEDGER_REF, bad, force=True)
    with pytest.raises(IntegrityError):
        ledger.entries(store.core)


def test_clone_detects_a_ledger_rewritten_since_its_last_fetch(store: Store, tmp_path: Path) -> None:
    store.update_settings(description="a")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(store.path), str(clone))
    git(clone, "fetch", "-q", "origin", f"+{ledger.LEDGER_REF}:{ledger.LEDGER_REF}")
    with gitmem.open_store(str(clone)) as c:
        assert c.is_clone and verify(c.core).ok  # remembers what it saw
    _rewrite_ledger(store, {1: {"changes": {"description": "forged"}}}, rechain=True)
    ledger.remember_seen(store.core)  # the server's own anchors are forged too (names the same file)
    (store.core.gitmem_dir / ledger.ANCHOR_FILE).unlink()
    git(clone, "fetch", "-q", "origin", f"+{ledger.LEDGER_REF}:{ledger.LEDGER_REF}")
    with gitmem.open_store(str(clone)) as c, pytest.raises(IntegrityError, match="rewritten"):
        verify(c.core)


def test_secret_digest_and_denylist(store: Store) -> None:
    d1 = ledger.digest(store.core, "a" * 40)
    assert d1 == ledger.digest(store.core, "a" * 40) and d1.startswith("hmac-sha256:")
    assert (store.core.gitmem_dir / "secret").stat().st_mode & 0o777 == 0o600
    assert ledger.deny(store.core, ["a" * 40, "b" * 40], "test") == 2
    assert ledger.deny(store.core, ["a" * 40], "again") == 0
    text = (store.core.gitmem_dir / "denylist").read_text()
    assert text.splitlines() == ["# test", "a" * 40, "b" * 40]
    assert ledger.denied(store.core) == {"a" * 40, "b" * 40}


def test_record_push(store: Store) -> None:
    e = ledger.record_push(
        store.core, {"actor": "user:bob", "refs": [{"ref": "refs/heads/main", "new": "c" * 40}]}
    )
    assert (e.kind, e.actor, e.seq) == ("push", "user:bob", 1)
    assert ledger.entries(store.core, kind="push") == [e]
