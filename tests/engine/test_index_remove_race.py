"""An opener that judges the index file stale (an older format, a corrupt file) removes
``index.sqlite``, then its ``-wal`` and ``-shm``, by name (IndexDb._remove_files), under
index.sqlite.lock held exclusive; every opener holds it shared while it opens and judges the file
(IndexDb._connect). Without that, a process opening the index between the unlinks creates the new
file and SQLite gives it a new ``-wal`` and ``-shm``, which the remover then unlinks: that process
goes on committing to a WAL no later opener finds. Linux only (/proc/self/fd shows it)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import gitmem
from gitmem.engine.index import INDEX_FILE
from tests.engine.test_index_format import _history, _to_format_3
from tests.helpers import patience

# The remover opens the stale index; with "pause" it waits after unlinking index.sqlite (before
# -wal and -shm) until the test says the other opener has opened the new file.
REMOVER = """
import sys, time, pathlib, gitmem
flags, pause = pathlib.Path(sys.argv[2]), sys.argv[3] == "pause"
real = pathlib.Path.unlink
def unlink(self, *a, **k):
    real(self, *a, **k)
    if pause and self.name == "index.sqlite":
        (flags / "removed").touch()
        while not (flags / "opened").exists():
            time.sleep(0.01)
pathlib.Path.unlink = unlink
s = gitmem.open_store(sys.argv[1])
s.versions(scope="main")
(flags / "done").touch()
s.close()
"""


def _wait(flag: Path) -> None:
    deadline = patience(60)
    while not flag.exists():
        assert time.monotonic() < deadline, f"{flag.name} never came"
        time.sleep(0.01)


def _unlinked_index_files(store_path: Path) -> list[str]:
    """This process's descriptors of unlinked index files of the store at ``store_path`` (another
    test of the same worker may hold its own store's)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(os.path.realpath(store_path / "gitmem" / INDEX_FILE)) and target.endswith(
            "(deleted)"
        ):
            out.append(target)
    return out


def _run(store: gitmem.Store, tmp_path: Path, pause: bool) -> list[str]:
    _history(store)
    path = store.path
    store.close()
    _to_format_3(path / "gitmem" / INDEX_FILE)
    flags = tmp_path / "flags"
    flags.mkdir()
    how = "pause" if pause else "run"
    remover = subprocess.Popen([sys.executable, "-c", REMOVER, str(path), str(flags), how])
    try:
        _wait(flags / ("removed" if pause else "done"))
        if pause:  # the remover is between its unlinks: it holds the lock no opener gets meanwhile
            fd = os.open(path / "gitmem" / (INDEX_FILE + ".lock"), os.O_RDWR)
            try:
                with pytest.raises(BlockingIOError):
                    fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            finally:
                os.close(fd)
        a = gitmem.open_store(str(path))
        opener = threading.Thread(target=a.versions, kwargs={"scope": "main"})
        opener.start()  # opens (creates) the new index file and its WAL, once it may
        deadline = patience(2)  # it waits for the remover (fixed), or opens in between (the defect)
        while opener.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        (flags / "opened").touch()
        _wait(flags / "done")
        opener.join()
        assert remover.wait() == 0
        a.write("/after", "a record after the race\n")
        unlinked = _unlinked_index_files(path)
        a.close()
        return unlinked
    finally:
        if remover.poll() is None:
            remover.kill()
            remover.wait()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_control_an_opener_after_the_removal_keeps_its_wal(store: gitmem.Store, tmp_path: Path) -> None:
    assert _run(store, tmp_path, pause=False) == []


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_an_opener_between_the_unlinks_keeps_its_wal(store: gitmem.Store, tmp_path: Path) -> None:
    assert _run(store, tmp_path, pause=True) == []
