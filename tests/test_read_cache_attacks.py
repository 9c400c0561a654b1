"""Adversarial reads against Index.head_at's per-path cache and Repo.cas's target re-check: every
read names the version that history at the scope's tip holds, whatever moved the branch."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pygit2

import gitmem
from gitmem.store import Store


def git(*args: str, cwd: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("REMOTE_USER", "GL_USERNAME", "GITMEM_ACTOR")}
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_plain_git_reset_back_to_a_tip_with_the_same_text_names_that_tips_version(store: Store) -> None:
    v1 = store.write("/a.md", "same text", actor="user:alice")
    first_tip = str(store.core.tip("main"))
    store.write("/a.md", "other text", actor="user:alice")
    v3 = store.write("/a.md", "same text", actor="user:alice")  # back to the first text: same blob
    assert store.read("/a.md").version_id == v3.id
    git("update-ref", "refs/heads/main", first_tip, cwd=store.path)  # a reset with plain git on the bare repo
    got = store.read("/a.md")
    assert got.content == "same text"
    assert got.version_id == v1.id  # v3 is not in history at this tip
    other = gitmem.open_store(store.path)
    try:
        assert other.read("/a.md").version_id == v1.id
    finally:
        other.close()


def test_plain_git_reset_back_drops_newer_memories_from_lists_and_reads(store: Store) -> None:
    store.write("/a.md", "alpha", actor="user:alice")
    first_tip = str(store.core.tip("main"))
    store.write("/b.md", "beta, written later", actor="user:alice")
    assert [m.path for m in store.list("/")] == ["/a.md", "/b.md"]
    git("update-ref", "refs/heads/main", first_tip, cwd=store.path)
    assert [m.path for m in store.list("/")] == ["/a.md"]
    assert store.search("written later") == []
