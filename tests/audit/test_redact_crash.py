"""Kill a redaction (SIGKILL) at each step; the next verify or open leaves it before or after, never half."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import gitmem
from gitmem.audit.verify import verify
from gitmem.engine import ledger
from gitmem.engine.opening import open_core
from tests.helpers import git

SECRET = "crash-secret-42"
BEFORE = ["objects", "journal"]
AFTER = ["ref", "denylist", "ledger", "index", "purged", "scrubbed"]

SCRIPT = """
import sys, gitmem
from gitmem.audit.redact import redact
store = gitmem.open_store(sys.argv[1])
redact(store.core, sys.argv[2], reason="crash test", actor="user:admin")
"""


def _killed_redaction(workspace: Path, step: str) -> tuple[Path, str, str]:
    with gitmem.create_store("crash", home=workspace) as store:
        store.write("/a.md", "one\n")
        v = store.write("/a.md", f"{SECRET}\n")
        store.write("/a.md", "three\n")
        assert v is not None
        path, vid, commit = store.path, v.id, store.version(v.id).commit
    env = dict(os.environ, GITMEM_FAULT=step)
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path), vid], env=env, capture_output=True, check=False
    )
    assert res.returncode == -signal.SIGKILL, res.stderr
    return path, vid, commit


@pytest.mark.parametrize("step", BEFORE + AFTER)
def test_kill_at_each_step_then_verify(workspace: Path, step: str) -> None:
    path, vid, old_commit = _killed_redaction(workspace, step)
    with gitmem.open_store(str(path)) as store:  # opening finishes or rolls back
        assert not (store.core.gitmem_dir / "journal.json").exists()
        report = verify(store.core)
        assert report.ok
        redactions = ledger.entries(store.core, kind="redaction")
        log = git(path, "log", "-p", "--all").stdout
        if step in BEFORE:
            assert redactions == []
            assert store.read("/a.md", version=vid).content == f"{SECRET}\n"
            assert store.version(vid).commit == old_commit
        else:
            assert len(redactions) == 1
            assert store.version(vid).redaction is not None
            assert SECRET not in log
            assert git(path, "cat-file", "-e", old_commit, check=False).returncode != 0
        assert store.read("/a.md").content == "three\n"
        assert store.write("/a.md", "four\n") is not None  # no lock was left behind


def test_verify_alone_completes_an_interrupted_redaction(workspace: Path) -> None:
    path, vid, _ = _killed_redaction(workspace, "ref")
    store = gitmem.store.Store(open_core(str(path)))  # no recovery on this open
    try:
        assert (store.core.gitmem_dir / "journal.json").exists()
        assert verify(store.core).recovered == "completed"
        assert store.version(vid).redaction is not None
    finally:
        store.close()
