"""Push rules found in review: no back-dated commits, shrinking an over-limit store is allowed,
and a pushed trailer cannot claim a live memory's id."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

from gitmem.store import Store


def git(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture
def work(store: Store, tmp_path: Path) -> Path:
    store.write("/a.md", "alpha\n")
    store.write("/b.md", "beta\n")
    work = tmp_path / "work"
    assert git("clone", "-q", f"file://{store.path}", str(work), cwd=tmp_path).returncode == 0
    return work


def test_a_back_dated_commit_is_refused(store: Store, work: Path) -> None:
    (work / "c.md").write_text("gamma\n")
    env = dict(os.environ, GIT_AUTHOR_DATE="2001-01-01T00:00:00Z", GIT_COMMITTER_DATE="2001-01-01T00:00:00Z")
    git("add", "c.md", cwd=work)
    git("commit", "-qm", "old", cwd=work, env=env)
    tip = store.core.tip("main")
    proc = git("push", "origin", "main", cwd=work)
    assert proc.returncode != 0
    assert "commits must not be back-dated" in proc.stderr
    assert store.core.tip("main") == tip


def test_a_push_that_shrinks_an_over_limit_store_is_accepted(store: Store, work: Path) -> None:
    store.update_settings(
        limits=dataclasses.replace(store.settings.limits, max_memories=1, max_store_bytes=5)
    )
    git("rm", "-q", "a.md", cwd=work)
    git("commit", "-qm", "drop a", cwd=work)
    proc = git("push", "origin", "main", cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert [m.path for m in store.list()] == ["/b.md"]


def test_a_pushed_trailer_cannot_claim_a_live_memory_id(store: Store, work: Path) -> None:
    live = store.read("/a.md").memory_id
    version = "memver_01JAAAAAAAAAAAAAAAAAAAAAAA"
    (work / "c.md").write_text("gamma\n")
    git("add", "c.md", cwd=work)
    message = (
        f"created /c.md\n\nGitmem-Version: {version}\nGitmem-Memory: {live}\n"
        "Gitmem-Operation: created\nGitmem-Actor: user:mallory\n"
    )
    git("commit", "-qm", message, cwd=work)
    assert git("push", "origin", "main", cwd=work).returncode == 0
    assert store.read("/c.md").memory_id != live
    assert store.read("/a.md").memory_id == live
    assert {v.path for v in store.versions(memory_id=live)} == {"/a.md"}
