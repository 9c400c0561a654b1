"""verify (each check can fail), audit timeline, and the redact/audit/verify/prune commands."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gitmem.audit import redact
from gitmem.audit import timeline as audit
from gitmem.audit.verify import verify
from gitmem.cli.app import app
from gitmem.errors import IntegrityError
from gitmem.store import Store
from tests.helpers import plain_commit

runner = CliRunner()


def cli(workspace: Path, *args: str) -> object:
    return runner.invoke(app, ["--home", str(workspace), *args])


def test_verify_passes_on_a_fresh_store(store: Store) -> None:
    store.write("/a.md", "x\n")
    report = verify(store.core)
    assert report.ok and [c.name for c in report.checks] == [
        "fsck",
        "ledger",
        "redactions purged",
        "erasures",
        "redaction marks",
        "trailers",
        "receipts",
        "settings",
        "index",
        "transparency log",
    ]


def test_verify_catches_a_redacted_blob_brought_back(store: Store) -> None:
    v = store.write("/a.md", "secret-zz\n")
    store.write("/a.md", "clean\n")
    assert v is not None
    redact.redact(store.core, v.id, reason="x")

    subprocess.run(
        ["git", f"--git-dir={store.path}", "hash-object", "-w", "--stdin"],
        input=b"secret-zz\n",
        check=True,
        capture_output=True,
    )
    with pytest.raises(IntegrityError, match="redactions purged: .*still in the store"):
        verify(store.core)


def test_verify_catches_malformed_trailers(store: Store) -> None:
    store.write("/a.md", "x\n")
    plain_commit(store, {"b.md": b"y\n"}, message="edit\n\nGitmem-Version: bogus\nGitmem-Actor: user:x\n")
    with pytest.raises(IntegrityError, match="trailers: commit .*Gitmem-Version"):
        verify(store.core)


def test_verify_catches_an_inconsistent_index(store: Store) -> None:
    store.write("/a.md", "x\n")
    store.core.index.ensure_all()
    store.core.index.db.execute("UPDATE heads SET blob=? WHERE path='/a.md'", ("0" * 40,))
    with pytest.raises(IntegrityError, match="index: index heads of scope 'main' differ"):
        verify(store.core)


def test_audit_timeline_and_filters(store: Store) -> None:
    v = store.write("/a.md", "secret\n", actor="user:alice", session="s1")
    store.write("/a.md", "clean\n", actor="user:bob")
    assert v is not None
    r = redact.redact(store.core, v.id, reason="leak", actor="user:admin")
    events = audit.audit(store.core)
    assert [e.type for e in events] == ["store_created", "created", "modified", "redaction"]
    assert events[1].detail["redaction"] == r.id
    assert [e.subject for e in audit.audit(store.core, type="redaction")] == [r.id]
    assert [e.type for e in audit.audit(store.core, actor="user:admin")] == ["redaction"]
    assert [e.subject for e in audit.audit(store.core, session="s1")] == [v.id]


def test_cli_redact_audit_verify_prune(store: Store, workspace: Path) -> None:
    v = store.write("/a.md", "secret\n")
    assert v is not None
    r = cli(workspace, "redact", "notes", v.id, "--reason", "leak")
    assert r.exit_code == 6 and "write a new version or delete" in r.stderr  # type: ignore[attr-defined]
    store.write("/a.md", "clean\n")
    r = cli(workspace, "redact", "notes", v.id, "--reason", "leak", "--actor", "user:admin", "--json")
    assert r.exit_code == 0, r.stderr  # type: ignore[attr-defined]
    out = json.loads(r.stdout)  # type: ignore[attr-defined]
    assert out["versions"] == [v.id] and out["purged"] is True
    r = cli(workspace, "audit", "notes", "--type", "redaction", "--json")
    assert [e["actor"] for e in json.loads(r.stdout)] == ["user:admin"]  # type: ignore[attr-defined]
    r = cli(workspace, "verify", "notes")
    assert r.exit_code == 0 and "ok\tledger" in r.stdout  # type: ignore[attr-defined]
    r = cli(workspace, "prune", "notes")
    assert r.exit_code == 0 and "retention.max_days is not set" in r.stdout  # type: ignore[attr-defined]
    r = cli(workspace, "redact", "notes", "--reason", "x")
    assert r.exit_code == 2  # type: ignore[attr-defined]


def test_cli_verify_exits_7_naming_the_check(store: Store, workspace: Path) -> None:
    store.write("/a.md", "x\n")
    plain_commit(store, {"b.md": b"y\n"}, message="edit\n\nGitmem-Operation: exploded\n")
    r = cli(workspace, "verify", "notes")
    assert r.exit_code == 7 and "trailers" in r.stderr  # type: ignore[attr-defined]


def test_verify_catches_a_deny_list_that_lost_entries(store: Store) -> None:
    v = store.write("/a.md", "secret-yy\n")
    store.write("/a.md", "clean\n")
    assert v is not None
    redact.redact(store.core, v.id, reason="x")
    denylist = store.core.gitmem_dir / "denylist"
    denylist.write_text("\n".join(denylist.read_text().splitlines()[:-1]) + "\n")
    with pytest.raises(IntegrityError, match="not all on the deny-list"):
        verify(store.core)


def test_cli_show_and_pattern(store: Store, workspace: Path) -> None:
    v = store.write("/a.md", "key sk-99 here\n", actor="user:alice")
    store.write("/a.md", "clean\n")
    assert v is not None
    r = cli(workspace, "redact", "notes", "--pattern", r"sk-\d+", "--reason", "keys", "--actor", "user:admin")
    assert r.exit_code == 0, r.stderr  # type: ignore[attr-defined]
    assert v.id in r.stdout  # type: ignore[attr-defined]
    r = cli(workspace, "show", "notes", v.id)
    assert r.exit_code == 0 and "redacted:" in r.stdout and "by user:admin" in r.stdout  # type: ignore[attr-defined]
    assert "sk-99" not in r.stdout  # type: ignore[attr-defined]
