"""``gitmem clone``: offline inspection of a store; read-only commands work, writes say to push."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gitmem
from gitmem.cli.app import app
from gitmem.errors import ConflictError
from gitmem.push.clone import clone
from gitmem.store import Store

runner = CliRunner()


def git(*args: str, cwd: Path) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout


@pytest.fixture
def seeded(store: Store) -> Store:
    store.write("/notes/todo.md", "buy milk", actor="user:alice")
    store.write("/team.md", "standup 9:00", scope="team", actor="user:bob")
    return store


def test_clone_fetches_scopes_ledger_and_a_read_only_settings_copy(seeded: Store, tmp_path: Path) -> None:
    result = clone("notes", tmp_path / "c")
    assert result.scopes == ["main", "team"]
    assert "refs/gitmem/ledger" in result.gitmem_refs
    copy = tmp_path / "c" / ".git" / "gitmem" / "gitmem.yaml"
    assert copy.read_bytes() == seeded.core.settings_path.read_bytes()
    assert not os.stat(copy).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    assert not (tmp_path / "c" / ".git" / "gitmem" / "denylist").exists()
    assert (tmp_path / "c" / ".git" / "gitmem" / "ledger_seen").exists()  # anchors the ledger it saw
    assert (tmp_path / "c" / "notes" / "todo.md").read_text() == "buy milk"
    with pytest.raises(ConflictError, match="not an empty directory"):
        clone("notes", tmp_path / "c")


def test_read_only_commands_work_on_a_clone_and_writes_are_refused(seeded: Store, tmp_path: Path) -> None:
    dest = str(tmp_path / "c")
    assert runner.invoke(app, ["clone", "notes", dest]).exit_code == 0
    read = runner.invoke(app, ["read", dest, "/team.md", "--scope", "team"])
    assert (read.exit_code, read.stdout) == (0, "standup 9:00")
    ls = runner.invoke(app, ["ls", dest])
    assert ls.exit_code == 0 and "/notes/todo.md" in ls.stdout
    log = runner.invoke(app, ["log", dest, "/notes/todo.md"])
    assert log.exit_code == 0 and "user:alice" in log.stdout
    write = runner.invoke(app, ["write", dest, "/x.md", "nope"])
    assert write.exit_code == 6
    assert "is a clone for offline inspection and is read-only: commit with git and push" in write.stderr


def test_commit_in_a_clone_and_push_back(seeded: Store, tmp_path: Path) -> None:
    dest = tmp_path / "c"
    clone("notes", dest)
    (dest / "notes" / "todo.md").write_text("buy oat milk")
    git("commit", "-qam", "oat milk", cwd=dest)
    git("push", "-q", "origin", "main", cwd=dest)
    assert seeded.read("/notes/todo.md").content == "buy oat milk"
    with gitmem.open_store(str(dest)) as c:
        assert c.is_clone
        assert [v.actor for v in c.versions("/notes/todo.md")][0] == "git:tester@example.com"


def test_fetch_after_a_redaction_names_the_rewritten_scope_and_the_resync(
    seeded: Store, tmp_path: Path
) -> None:
    from gitmem.audit.redact import redact

    secret = seeded.write("/secret.md", "token: abc123", actor="user:alice")
    assert secret is not None
    seeded.write("/secret.md", "rotated", actor="user:alice")
    dest = tmp_path / "clone"
    clone(str(seeded.path), dest)
    old_head = git("rev-parse", "HEAD", cwd=dest).strip()
    redact(seeded.core, secret.id, reason="leaked token")

    result = CliRunner().invoke(app, ["fetch", str(dest)])

    assert result.exit_code == 0, result.output
    assert (
        f"main: history was rewritten on the store (a redaction or compaction; see: gitmem audit {dest})"
        in (result.output)
    )
    assert f"git rebase --onto origin/main {old_head[:12]} main" in result.output
    # Following the advice, the clone can push again.
    git("reset", "-q", "--hard", "origin/main", cwd=dest)
    (dest / "new.md").write_text("after resync\n")
    git("add", "new.md", cwd=dest)
    git("commit", "-qm", "add new.md", cwd=dest)
    git("push", "-q", "origin", "main", cwd=dest)
    assert seeded.read("/new.md").content == "after resync\n"
    assert (
        CliRunner().invoke(app, ["fetch", str(dest)]).output == "up to date\n"
    )  # the push moved origin/main
