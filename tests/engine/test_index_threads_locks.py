"""IndexDb._connect opens no descriptor of the index file beside SQLite's (an earlier version held
one while SQLite judged the file, and closed it once the connection was made). Closing any
descriptor of a file drops every POSIX advisory lock the process holds on it, those SQLite's other
connections of this process hold included ("How To Corrupt An SQLite Database File", 2.2). So a
thread's first use of a handle whose other threads have connections (the server's pool: one handle,
many threads), or a second handle of a store in one process, pulls the locks from under them; with
another process writing the index too, SQLite then fails ("disk I/O error"), which the catch-up takes
for a corrupt file: the index is removed and derived again from git, over and over (and a process's
connections run unlocked meanwhile). This checks the index file stays the same one across those rounds."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import gitmem
from gitmem.engine.index import INDEX_FILE

WRITER = """
import sys, gitmem
s = gitmem.open_store(sys.argv[1])
s.write(sys.argv[2], "written\\n")
s.close()
"""


def _inodes(store: gitmem.Store, on_new_thread: bool) -> set[int]:
    """The index file's inode after each round: another process writes, this handle writes, then
    this handle reads (on a new thread: a new connection, or on this one)."""
    for i in range(10):
        store.write(f"/k{i}", f"k {i}\n")
    index = store.core.gitmem_dir / INDEX_FILE
    seen = {os.stat(index).st_ino}
    for i in range(4):
        subprocess.run(
            [sys.executable, "-c", WRITER, str(store.path), f"/c{i}"], check=True, capture_output=True
        )
        store.write(f"/a{i}", "from this process\n")
        if on_new_thread:
            t = threading.Thread(target=store.list)
            t.start()
            t.join()
        else:
            store.list()
        seen.add(os.stat(index).st_ino)
    assert len(store.list()) == 18
    return seen


def test_control_reads_on_one_thread_keep_the_index_file(store: gitmem.Store) -> None:
    assert len(_inodes(store, on_new_thread=False)) == 1


def test_a_new_threads_connection_keeps_the_index_file(store: gitmem.Store) -> None:
    assert len(_inodes(store, on_new_thread=True)) == 1
