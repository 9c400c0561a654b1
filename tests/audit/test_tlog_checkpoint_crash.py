"""A process killed (SIGKILL) while it commits a checkpoint on ``refs/gitmem/checkpoints``
(gitmem/engine/checkpoint_ref.py: the commit written and flushed, then the ref's compare-and-swap
with git's lock protocol) leaves a store whose next append signs a checkpoint covering every entry,
past the lock file the killed writer left, and whose log verifies."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

import gitmem
from gitmem.audit import transparency
from gitmem.engine import checkpoints, ledger
from gitmem.model.tlog import note

KILLED = """
import os, signal, sys
import gitmem
from gitmem.engine import ledger
from gitmem.git import refmove, repo

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

if sys.argv[2] == "before-cas":  # the commit flushed, the ref not moved
    repo.Repo.cas = die
else:  # holding refs/gitmem/checkpoints.lock, its new value written, not renamed yet
    real = refmove.os.rename
    def rename(src, dst, *a, **k):
        if str(src).endswith("checkpoints.lock"):
            die()
        return real(src, dst, *a, **k)
    refmove.os.rename = rename
store = gitmem.open_store(sys.argv[1])
ledger.append(store.core, "flag", {"n": "killed"})
"""


@pytest.mark.parametrize("where", ["before-cas", "holding-the-lock"])
def test_a_checkpoint_commit_killed_half_way(workspace: Path, where: str) -> None:
    with gitmem.create_store("crash", home=workspace) as store:
        ledger.append(store.core, "flag", {"n": 0})
        path, before = store.path, len(ledger.entries(store.core))
    res = subprocess.run([sys.executable, "-c", KILLED, str(path), where], capture_output=True, check=False)
    assert res.returncode == -signal.SIGKILL, res.stderr
    if where == "holding-the-lock":
        assert (path / "refs" / "gitmem" / "checkpoints.lock").exists()
    with gitmem.open_store(str(path)) as store:
        core = store.core
        assert len(ledger.entries(core)) == before + 1  # the killed append's entry is durable
        entry = ledger.append(core, "flag", {"n": 2})
        files = checkpoints._files(core, checkpoints._tip(core))  # the ref itself
        assert transparency.parse_body(note.parse(files["checkpoint"]).text).size == entry.seq + 1
        assert transparency.check(core) == []
    assert not (path / "refs" / "gitmem" / "checkpoints.lock").exists()
