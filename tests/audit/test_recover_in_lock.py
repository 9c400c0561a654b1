"""A handle opened before another process's redaction was killed past its journal (a long-lived
``gitmem serve``, a notebook) runs the next rewrite. run_rewrite_scopes holds the store lock and
finishes that journal first: it must not flock the lock file again through a second descriptor
(a second open file description of one process conflicts with the first, so the rewrite would wait
for itself forever, holding the store lock: pushes refused, every rewrite waiting)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import gitmem
from gitmem.audit.journal import store_lock
from tests.helpers import patience

KILLED = """
import sys, gitmem
from gitmem.audit.redact import redact
s = gitmem.open_store(sys.argv[1])
redact(s.core, sys.argv[2], reason="killed", actor="user:admin")
"""

# The handle: opened first (``early``) or only after the crash (the control), then it redacts.
HANDLE = """
import os, subprocess, sys, gitmem
path, killed_vid, vid, early = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "early"
def crash():
    env = dict(os.environ, GITMEM_FAULT="ledger")
    r = subprocess.run([sys.executable, "-c", sys.argv[5], path, killed_vid], env=env, capture_output=True)
    assert r.returncode == -9, r.stderr
    assert os.path.exists(os.path.join(path, "gitmem", "journal.json"))
if early:
    s = gitmem.open_store(path)
    crash()
else:
    crash()
    s = gitmem.open_store(path)
s.redact(vid, reason="next", actor="user:admin")
assert not os.path.exists(os.path.join(path, "gitmem", "journal.json"))
from gitmem.engine import ledger
assert [e.data.get("reason") for e in ledger.entries(s.core, kind="redaction")] == ["killed", "next"]
print("redacted")
"""


def _store(workspace: Path) -> tuple[Path, str, str]:
    with gitmem.create_store("recoverlock", home=workspace) as store:
        store.write("/a.md", "one\n")
        v = store.write("/a.md", "first-secret\n")
        store.write("/a.md", "three\n")
        w = store.write("/b.md", "second-secret\n")
        store.write("/b.md", "gone\n")
        assert v is not None and w is not None
        return store.path, v.id, w.id


def _run(workspace: Path, when: str) -> tuple[bool, str]:
    path, v, w = _store(workspace)
    proc = subprocess.Popen(
        [sys.executable, "-c", HANDLE, str(path), v, w, when, KILLED],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = patience(60)
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return False, "hung"
    out, err = proc.communicate()
    return proc.returncode == 0 and b"redacted" in out, err.decode()


def test_control_a_handle_opened_after_the_crash_redacts(workspace: Path) -> None:
    ok, why = _run(workspace, "late")
    assert ok, why


def test_a_handle_opened_before_the_crash_redacts(workspace: Path) -> None:
    ok, why = _run(workspace, "early")
    assert ok, why


def test_the_store_lock_is_held_on_by_its_own_thread_and_excludes_others(workspace: Path) -> None:
    with gitmem.create_store("relock", home=workspace) as store:
        got: list[bool] = []

        def other() -> None:
            with store_lock(store.core, blocking=False) as held:
                got.append(held)

        with store_lock(store.core) as outer:
            with store_lock(store.core, blocking=False) as inner:  # no second flock of its own
                assert outer and inner
            t = threading.Thread(target=other)
            t.start()
            t.join()
        assert got == [False]  # the inner block let nothing go
        with store_lock(store.core, blocking=False) as free:
            assert free
