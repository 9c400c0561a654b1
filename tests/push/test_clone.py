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


def _stale_lock(lock: Path) -> None:
    import time

    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    old = time.time() - 120
    os.utime(lock, (old, old))


@pytest.mark.parametrize(
    "held", [("refs/remotes/origin/main",), ("refs/gitmem-incoming/ledger",), ("refs/gitmem/ledger",), ()]
)
def test_fetch_gets_past_stale_ref_locks_a_killed_process_left(
    seeded: Store, tmp_path: Path, held: tuple[str, ...]
) -> None:
    """A process killed while it moved a ref of the clone (a git fetch, libgit2) left its lock:
    before, libgit2's fetch failed on it ('failed to lock file'), and the ledger's move after the
    fetch raised a raw libgit2 error, on every fetch, for good. Stale locks are removed as in a
    store (gitmem.git.reflocks), and the fetch lands."""
    from gitmem.engine import ledger
    from gitmem.push.clone import fetch

    clone("notes", tmp_path / "c")
    seeded.write("/later.md", "later")
    ledger.append(seeded.core, "flag", {"reason": "a ledger entry to fetch"})
    gitdir = tmp_path / "c" / ".git"
    every = ("refs/remotes/origin/main", "refs/gitmem-incoming/ledger", "refs/gitmem/ledger")
    locks = [gitdir / f"{ref}.lock" for ref in held or every]  # each alone, then all three
    for lock in locks:
        _stale_lock(lock)
    result = fetch(tmp_path / "c")
    assert result.updated == ["main"]
    assert [lock for lock in locks if lock.exists()] == []
    assert git("rev-parse", "refs/remotes/origin/main", cwd=tmp_path / "c").strip() == str(
        seeded.core.tip("main")
    )
    assert git("rev-parse", "refs/gitmem/ledger", cwd=tmp_path / "c").strip() == str(
        seeded.core.ref_target(ledger.LEDGER_REF)
    )
    assert git("for-each-ref", "refs/gitmem-incoming", cwd=tmp_path / "c") == ""
    assert git("fsck", "--no-dangling", cwd=tmp_path / "c") == ""


def test_fetch_waits_for_a_live_ref_lock(seeded: Store, tmp_path: Path) -> None:
    """A young lock (a git fetch running in the clone) is waited for and left to its holder, then
    the fetch is tried again and lands."""
    import threading
    import time

    from gitmem.push.clone import fetch

    clone("notes", tmp_path / "c")
    seeded.write("/later.md", "later")
    lock = tmp_path / "c" / ".git" / "refs" / "remotes" / "origin" / "main.lock"
    lock.write_text("")
    released: list[bool] = []

    def holder() -> None:
        time.sleep(0.3)
        lock.unlink()  # raises if the fetch took the lock away from its holder
        released.append(True)

    t = threading.Thread(target=holder)
    t.start()
    try:
        assert fetch(tmp_path / "c").updated == ["main"]
    finally:
        t.join()
    assert released == [True]
    assert git("rev-parse", "refs/remotes/origin/main", cwd=tmp_path / "c").strip() == str(
        seeded.core.tip("main")
    )
