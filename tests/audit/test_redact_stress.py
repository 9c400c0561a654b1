"""Stress: writers, pushes (new forks of old commits included) and redactions at once, for a bounded
time; then ``git fsck --full`` and ``gitmem verify`` are clean, no acknowledged write is lost, and
every redacted secret is gone from the store."""

from __future__ import annotations

import random
import subprocess
import threading
import time
from pathlib import Path

import pytest

import gitmem
from gitmem.audit import redact
from gitmem.audit.verify import verify
from gitmem.errors import GitmemError
from gitmem.store import Store
from tests.helpers import CheckedThread, join_all
from tests.secret_scan import scan_store

pytestmark = pytest.mark.slow  # writers, pushes and redactions at once, then fsck and verify

DURATION = 6.0  # seconds of concurrent activity (bounded; no timing is asserted)


def _git(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_writers_pushes_and_redactions_at_once(store: Store, tmp_path: Path) -> None:
    store.write("/seed.md", "seed\n")
    store.write("/seed.md", "seed 2\n", scope="alice")
    work = tmp_path / "work"
    assert _git(tmp_path, "clone", "-q", f"file://{store.path}", str(work)).returncode == 0
    stop = threading.Event()
    acked: list[tuple[str, str, str]] = []  # (scope, version id, content)
    redacted: list[str] = []
    errors: list[BaseException] = []
    forks: list[str] = []
    lock = threading.Lock()

    def writer(scope: str, seed: int) -> None:
        rnd = random.Random(seed)
        with gitmem.open_store(str(store.path)) as s:
            i = 0
            while not stop.is_set():
                text = f"note {scope} {seed} {i}\n"
                try:
                    v = s.write(f"/w{seed}/{rnd.randrange(5)}.md", text, scope=scope, actor="user:w")
                except GitmemError as exc:  # a refusal is fine; it must not be silent corruption
                    with lock:
                        errors.append(exc)
                    continue
                if v is not None:
                    with lock:
                        acked.append((scope, v.id, text))
                i += 1

    def pusher() -> None:
        n = 0
        while not stop.is_set():
            _git(work, "fetch", "-q", "origin")
            commits = _git(work, "rev-list", "origin/main").stdout.split()
            if len(commits) > 1:
                old = random.choice(commits[1:])
                name = f"fork{n}"
                res = _git(work, "push", "-q", "origin", f"{old}:refs/heads/{name}")
                if res.returncode == 0:
                    with lock:
                        forks.append(name)
                n += 1
            time.sleep(0.05)

    def redactor() -> None:
        i = 0
        with gitmem.open_store(str(store.path)) as s:
            while not stop.is_set():
                secret = f"sk-stress-{i:04d}-zz"
                v = s.write(f"/secret{i}.md", f"key {secret}\n", actor="user:r")
                s.write(f"/secret{i}.md", "rotated\n", actor="user:r")
                assert v is not None
                time.sleep(0.1)  # let a fork of this history be pushed
                try:
                    redact.redact(s.core, v.id, reason="stress")
                    with lock:
                        redacted.append(secret)
                except GitmemError as exc:
                    with lock:
                        errors.append(exc)
                i += 1

    threads = [
        CheckedThread(writer, ("main", 1)),
        CheckedThread(writer, ("alice", 2)),
        CheckedThread(pusher),
        CheckedThread(redactor),
    ]
    for t in threads:
        t.start()
    time.sleep(DURATION)
    stop.set()
    join_all(threads, timeout=300)  # a thread that crashed fails the test here
    assert redacted, errors
    assert acked
    fsck = subprocess.run(
        ["git", f"--git-dir={store.path}", "fsck", "--full"], capture_output=True, text=True, check=False
    )
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    with gitmem.open_store(str(store.path)) as s:
        report = verify(s.core, raise_on_failure=False)
        assert report.ok, [c for c in report.checks if not c.ok]
        by_scope = {sc: {v.id: v for v in s.versions(scope=sc)} for sc in ("main", "alice")}
        for scope, vid, text in acked:  # no acknowledged write is lost
            v = by_scope[scope][vid]
            assert v.redaction is None
            # (Store.read by version id picks any scope's row when a fork shares the id: read git.)
            blob = s.core.commit(v.commit).tree[v.path[1:]]
            assert s.core.blob_data(blob.id).decode() == text
    unexpected = [e for e in errors if "redact" not in str(e) and "current content" not in str(e)]
    assert not [e for e in unexpected if type(e).__name__ == "IntegrityError"], unexpected
    for secret in redacted:
        assert scan_store(store.path, secret.encode()) == [], secret
    # every fork the hook accepted is in the store, and reads back as a branch of known history
    assert forks, "no fork of old history was pushed during the run"
    with gitmem.open_store(str(store.path)) as s:
        scopes = set(s.scopes())
    for name in forks:
        assert name in scopes, name
        tip = _git(store.path, "rev-parse", "--verify", f"refs/heads/{name}^{{commit}}")
        assert tip.returncode == 0, (name, tip.stderr)
