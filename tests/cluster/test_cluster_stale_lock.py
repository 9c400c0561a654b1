"""A home SIGKILLed while moving a ref leaves that ref's lock file; once its copy is a replica,
the replication clears a lock that old (no writer of a replica's copy is alive) and brings the copy
level, where git would refuse the ref's update forever. A fresh lock is left alone."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from gitmem.cluster import replication
from gitmem.errors import IntegrityError


def _commit(repo: Path, work: Path, name: str) -> None:
    (work / name).write_text(name + "\n")
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@x"}  # fmt: skip
    for args in (["add", name], ["commit", "-qm", name], ["push", "-q", str(repo), "HEAD:refs/heads/main"]):
        subprocess.run(["git", "-C", str(work), *args], check=True, capture_output=True, env=env)


def _level(home: Path, copy: Path) -> None:
    refs = replication.refs_of(home)
    bundle = replication.make_bundle(home, replication.refs_of(copy)) or b""
    replication.apply(copy, bundle, refs, {})


def test_a_dead_writers_ref_lock_does_not_keep_a_replica_behind(tmp_path: Path) -> None:
    home, copy, work = tmp_path / "home.git", tmp_path / "copy.git", tmp_path / "work"
    subprocess.run(["git", "init", "-q", "--bare", str(home)], check=True)
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    _commit(home, work, "a.md")
    _level(home, copy)
    assert replication.refs_of(copy) == replication.refs_of(home)
    _commit(home, work, "b.md")
    lock = copy / "refs" / "heads" / "main.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("0" * 40 + "\n")  # a writer holds it (just now): left alone, the update fails
    with pytest.raises(IntegrityError):
        _level(home, copy)
    assert lock.exists()
    old = time.time() - 60  # past every stale age (gitmem/cluster/leftovers.py)
    os.utime(lock, (old, old))  # the writer died long ago
    _level(home, copy)
    assert not lock.exists()
    assert replication.refs_of(copy) == replication.refs_of(home)
