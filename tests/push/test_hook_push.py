"""Real ``git push`` into stores over file:// and ``git daemon``: the hooks accept good pushes and
reject bad ones whole, leaving every ref and the object count unchanged."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

import gitmem
from gitmem import config
from gitmem.store import Store
from tests.helpers import patience


def git(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REMOTE_USER", "GL_USERNAME", "GITMEM_ACTOR")}
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def snapshot(store: Store) -> tuple[dict[str, str], int]:
    """Every ref of the store and its object count, read afresh from disk."""
    repo = pygit2.Repository(str(store.path))
    refs = {n: str(repo.references[n].target) for n in repo.references}
    return refs, sum(1 for _ in pygit2.Odb(str(store.path / "objects")))


def remote_lines(stderr: str) -> list[str]:
    return [line.rstrip() for line in stderr.splitlines() if line.startswith("remote: gitmem:")]


def commit_all(work: Path, message: str = "edit with plain git") -> str:
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", message, cwd=work)
    return git("rev-parse", "HEAD", cwd=work).stdout.strip()


@pytest.fixture
def seeded(store: Store) -> Store:
    store.write("/a.md", "alpha", actor="user:alice")
    return store


def test_push_over_file_url_lands_and_bad_pushes_change_nothing(seeded: Store, tmp_path: Path) -> None:
    work = tmp_path / "work"
    git("clone", "-q", f"file://{seeded.path}", str(work))
    (work / "a.md").write_text("alpha, edited")
    (work / "b.md").write_text("beta")
    good = commit_all(work)
    git("push", "-q", "origin", "main", cwd=work)
    assert seeded.core.tip("main") == pygit2.Oid(hex=good)
    pushed = {(v.path, v.operation, v.actor) for v in seeded.versions(scope="main") if v.commit == good}
    assert pushed == {  # nobody authenticated this push (docs/identity.md): not the author's claim
        ("/a.md", "modified", "unknown"),
        ("/b.md", "created", "unknown"),
    }

    before = snapshot(seeded)
    (work / "nul.md").write_bytes(b"a\0b")
    (work / ".gitmem").mkdir()
    (work / ".gitmem" / "x").write_text("x")
    bad = commit_all(work)
    proc = git("push", "origin", "main", cwd=work, check=False)
    assert proc.returncode != 0
    assert remote_lines(proc.stderr) == [
        f"remote: gitmem: refs/heads/main {bad[:12]}: invalid path '/.gitmem/x': paths under /.gitmem/ are reserved",
        f"remote: gitmem: refs/heads/main {bad[:12]}: /nul.md contains a NUL byte; memories are text",
        "remote: gitmem: push rejected (2 problem(s)); nothing was changed",
    ]
    assert snapshot(seeded) == before

    git("reset", "-q", "--hard", "HEAD~2", cwd=work)
    (work / "c.md").write_text("rewritten history")
    rewrite = commit_all(work)
    proc = git("push", "--force", "origin", "main", cwd=work, check=False)
    assert remote_lines(proc.stderr)[0] == (
        f"remote: gitmem: refs/heads/main {rewrite[:12]}: {good[:12]}..{rewrite[:12]} is not a fast-forward; "
        "history is rewritten only by the server (redaction, compaction)"
    )
    proc = git("push", "origin", ":main", "HEAD:refs/gitmem/mine", cwd=work, check=False)
    assert remote_lines(proc.stderr)[:2] == [
        "remote: gitmem: refs/heads/main: deleting scope 'main' is not allowed",
        "remote: gitmem: refs/gitmem/mine: refs/gitmem/mine is managed by the gitmem server and cannot be pushed",
    ]
    assert snapshot(seeded) == before


def test_push_option_actor_and_acl(seeded: Store, tmp_path: Path) -> None:
    seeded.update_settings(acl={"write": {"main": ["user:alice"]}, "trust_push_actor": True})
    work = tmp_path / "work"
    git("clone", "-q", str(seeded.path), str(work))
    (work / "a.md").write_text("by alice")
    new = commit_all(work)
    proc = git("push", "origin", "main", cwd=work, check=False)
    assert remote_lines(proc.stderr)[0] == (
        "remote: gitmem: refs/heads/main: an unidentified pusher may not write scope 'main' (acl.write['main'])"
    )
    git("push", "-q", "-o", "actor=user:alice", "origin", "main", cwd=work)
    gitmem.open_store(seeded.path).close()  # the next gitmem process records the spooled push
    record = json.loads((seeded.core.gitmem_dir / "pushes.jsonl").read_text().splitlines()[-1])
    assert (record["new"], record["actor"], record["push_options"]) == (
        new,
        "user:alice",
        ["actor=user:alice"],
    )


def test_a_foreign_hook_kept_as_legacy_still_runs(seeded: Store, tmp_path: Path) -> None:
    from gitmem.push.hookinstall import install_hooks

    marker = tmp_path / "legacy-ran"
    hook = seeded.path / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\ncat > {marker}\necho legacy says no >&2\nexit 1\n")
    hook.chmod(0o755)
    install_hooks(seeded.path)
    work = tmp_path / "work"
    git("clone", "-q", str(seeded.path), str(work))
    (work / "b.md").write_text("beta")
    new = commit_all(work)
    proc = git("push", "origin", "main", cwd=work, check=False)
    assert proc.returncode != 0 and "remote: legacy says no" in proc.stderr
    assert marker.read_text().split() == [str(seeded.core.tip("main")), new, "refs/heads/main"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def daemon(workspace: Path) -> Iterator[str]:
    base = workspace / "stores"
    port = _free_port()
    proc = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack", "--listen=127.0.0.1",
         f"--port={port}", f"--base-path={base}", str(base)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = patience(10)
        while True:  # bounded wait for the daemon to listen
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("git daemon did not start") from None
                time.sleep(0.05)
        yield f"git://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def test_push_over_git_daemon(seeded: Store, daemon: str, tmp_path: Path) -> None:
    seeded.update_settings(limits=config.Limits(max_memory_bytes=64))
    work = tmp_path / "work"
    git("clone", "-q", f"{daemon}/{seeded.id}.git", str(work))  # the directory follows the id
    (work / "notes").mkdir()
    (work / "notes" / "todo.md").write_text("buy milk")
    good = commit_all(work)
    git("push", "-q", "origin", "main", cwd=work)
    assert seeded.read("/notes/todo.md").content == "buy milk"
    assert seeded.core.tip("main") == pygit2.Oid(hex=good)

    before = snapshot(seeded)
    (work / "big.md").write_text("x" * 65)
    bad = commit_all(work)
    proc = git("push", "origin", "main", cwd=work, check=False)
    assert proc.returncode != 0
    assert remote_lines(proc.stderr) == [
        f"remote: gitmem: refs/heads/main {bad[:12]}: /big.md is 65 bytes; the limit is 64 bytes per memory",
        "remote: gitmem: push rejected (1 problem(s)); nothing was changed",
    ]
    assert snapshot(seeded) == before


def test_a_stale_clone_cannot_push_redacted_history_back(seeded: Store, tmp_path: Path) -> None:
    from gitmem.audit.redact import redact

    secret = seeded.write("/a.md", "password: hunter2", actor="user:alice")
    assert secret is not None
    seeded.write("/a.md", "alpha again", actor="user:alice")
    work = tmp_path / "work"
    git("clone", "-q", str(seeded.path), str(work))
    stale = git("rev-parse", "HEAD~1", "HEAD", cwd=work).stdout.split()
    blob = git("rev-parse", "HEAD~1:a.md", cwd=work).stdout.strip()
    redact(seeded.core, secret.id, reason="leaked password")
    before = snapshot(seeded)
    proc = git("push", "--force", "origin", "main", cwd=work, check=False)
    lines = remote_lines(proc.stderr)
    for commit in stale:
        retired = f"commit {commit} was retired by a redaction or compaction; fetch again"
        assert f"remote: gitmem: refs/heads/main {commit[:12]}: {retired}" in lines
    assert (
        f"remote: gitmem: refs/heads/main {stale[0][:12]}: /a.md is content that was redacted from this store"
        in lines
    )
    assert snapshot(seeded) == before
    assert subprocess.run(["git", "cat-file", "-e", blob], cwd=seeded.path).returncode != 0
