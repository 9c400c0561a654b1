"""Read replicas under stress (docs/git-servers.md, "A read replica"): a replica whose purge is cut
short, one that hangs, names and URLs that try to reach a shell. Real primary stores with gitmem's
hooks, real bare replicas with gitmem's replica hook, real ``git push``."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from secret_scan import find_secret, scan_store

from gitmem.push.replica import add_replica, init_replica, last_pushes, push_replicas
from gitmem.store import Store
from tests.push.test_replica import SECRET, fsck_clean, git, push_file, refs

__all__ = ["fsck_clean"]


def _setup(store: Store, tmp_path: Path) -> tuple[Path, Path, str]:
    """A primary with a replica, a clone, and a superseded version holding SECRET."""
    store.write("/a.md", "alpha", actor="user:alice")
    replica = init_replica(tmp_path / "replica.git")
    add_replica(store.core, str(replica))
    [first] = push_replicas(store.path)
    assert first.ok
    work = tmp_path / "work"
    git("clone", "-q", f"file://{store.path}", str(work))
    push_file(work, "secret.md", SECRET + b"\n", "add secret")
    push_file(work, "secret.md", b"rotated\n", "rotate")
    [created] = [v for v in store.versions() if v.path == "/secret.md" and v.operation == "created"]
    assert find_secret([replica], SECRET, git_dirs=[replica])
    return replica, work, created.id


def test_a_replica_whose_purge_failed_is_purged_by_the_next_replica_push(
    store: Store, tmp_path: Path
) -> None:
    """Before: the replica's ``git gc`` failed during the redaction's mirror push (another gc held
    its lock); the refs were already updated, so every later mirror push had nothing to send, the
    hook never ran again, and the replica served the secret for good while ``replica push`` said
    ok."""
    replica, _work, version = _setup(store, tmp_path)
    pid = replica / "gc.pid"
    pid.write_text(f"{os.getpid()} {socket.gethostname()}\n")  # a live gc: the replica's gc refuses
    store.redact(version, reason="leak", actor="user:root")
    assert scan_store(store.path, SECRET) == []
    assert refs(replica) == refs(store.path)
    assert find_secret([replica], SECRET, git_dirs=[replica])  # the purge there failed
    assert last_pushes(store.path)["replica"].ok is False  # and the primary knows it
    pid.unlink()
    [again] = push_replicas(store.path)
    assert again.ok and again.purged is not None
    assert find_secret([replica], SECRET, git_dirs=[replica]) == []
    assert refs(replica) == refs(store.path)
    fsck_clean(replica)


def _hanging(replica: Path, tmp_path: Path) -> Path:
    """Make the replica hang in every push (its pre-receive sleeps); returns the file its pid is in."""
    pid = tmp_path / "hang.pid"
    hook = replica / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\necho $$ > {pid}\nexec sleep 300\n")
    hook.chmod(0o755)
    return pid


def _gone(pid_file: Path) -> bool:
    """Whether the process whose pid is in ``pid_file`` has ended (waiting a little for the kill)."""
    import time

    pid = int(pid_file.read_text())
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().split(")")[-1].split()[0] == "Z":
                return True
        time.sleep(0.05)
    return False


def test_a_hanging_replica_costs_a_push_the_timeout_not_forever(store: Store, tmp_path: Path) -> None:
    """Before: the shim's ``git push --mirror`` had no bound, so a replica that accepted the
    connection and never answered hung every push to the primary (and held replica.lock, so
    ``replica push`` and a redaction's mirror push waited for it too)."""
    replica, work, _version = _setup(store, tmp_path)
    git(f"--git-dir={store.path}", "config", "gitmem.replicaTimeout", "2")
    pid = _hanging(replica, tmp_path)
    proc = push_file(work, "b.md", b"beta\n", "add b")  # git() gives up after 60 s
    assert "remote: gitmem: warning: replica replica not updated" in proc.stderr
    assert store.read("/b.md").content == "beta\n"
    assert _gone(pid)  # the replica side of the push was killed too, not left running
    [res] = push_replicas(store.path)
    assert not res.ok and "timed out after 2 s" in res.message
    assert _gone(pid)
    (replica / "hooks" / "pre-receive").unlink()
    [res] = push_replicas(store.path)
    assert res.ok and refs(replica) == refs(store.path)


def test_the_shim_purges_a_replica_left_pending(store: Store, tmp_path: Path) -> None:
    """A rewrite that did not purge a replica (its gc failed) is purged by the next push to the
    primary, not only by ``gitmem replica push``."""
    replica, work, version = _setup(store, tmp_path)
    gc_pid = replica / "gc.pid"
    gc_pid.write_text(f"{os.getpid()} {socket.gethostname()}\n")
    store.redact(version, reason="leak", actor="user:root")
    assert find_secret([replica], SECRET, git_dirs=[replica])
    gc_pid.unlink()
    git("fetch", "-q", "origin", cwd=work)
    git("reset", "-q", "--hard", "origin/main", cwd=work)
    proc = push_file(work, "c.md", b"gamma\n", "add c")
    assert "not updated" not in proc.stderr
    assert find_secret([replica], SECRET, git_dirs=[replica]) == []
    assert not (store.path / "gitmem" / "replica-pending" / "replica").exists()
    assert refs(replica) == refs(store.path)
    fsck_clean(replica)


def test_remote_names_and_urls_never_reach_a_shell(store: Store, tmp_path: Path) -> None:
    """A mirror remote added by hand under a name ``replica add`` refuses is skipped by the shim
    and by ``replica push``; the URL goes to git as one argument."""
    store.write("/a.md", "alpha", actor="user:alice")
    canary = tmp_path / "canary"
    odd = init_replica(tmp_path / "odd.git")
    for name in (f"x$(touch {canary})", f"y;touch {canary}", "-z"):
        git(f"--git-dir={store.path}", "config", f"remote.{name}.url", str(odd))
        git(f"--git-dir={store.path}", "config", f"remote.{name}.mirror", "true")
    add_replica(store.core, f"{tmp_path}/with space $(touch {canary}).git", name="spaced")
    init_replica(tmp_path / f"with space $(touch {canary}).git")
    work = tmp_path / "work"
    git("clone", "-q", f"file://{store.path}", str(work))
    proc = push_file(work, "b.md", b"beta\n", "add b")
    assert "skipped one" in proc.stderr and "replica spaced not updated" not in proc.stderr
    assert [r.name for r in push_replicas(store.path)] == ["spaced"]
    assert not canary.exists()
    assert refs(tmp_path / f"with space $(touch {canary}).git") == refs(store.path)
    assert refs(odd) == {}
