"""Writes and redactions racing git maintenance that gitmem itself starts (every write may repack:
``gitmem.engine.writer.maintain_quietly``), found by the redaction stress runs."""

from __future__ import annotations

import subprocess
import sys
import threading

import gitmem
from gitmem.audit import journal
from gitmem.store import Store

SWEEPER = """
import os, sys
objs = sys.argv[1]
while True:
    for d in os.listdir(objs):
        if len(d) != 2:
            continue
        p = os.path.join(objs, d)
        try:
            for f in os.listdir(p):
                os.unlink(os.path.join(p, f))
            os.rmdir(p)
        except OSError:
            pass
"""


def test_an_object_write_survives_a_fan_out_directory_removed_under_it(store: Store) -> None:
    """Before: a write failed with a raw ``OSError: failed to rename lockfile to objects/ab/...: No
    such file or directory`` when ``git repack -d`` (its ``prune-packed``: loose copies of packed
    objects go, then their emptied directories) ran in another process, as another writer's
    maintenance does: libgit2 makes the directory, then renames its temporary file into it, and
    does not retry as git does. The sweeper does to the fan-out directories what prune-packed does
    (the objects it deletes are not needed here: only the writes are checked)."""
    sweeper = subprocess.Popen([sys.executable, "-c", SWEEPER, str(store.path / "objects")])
    failures: list[OSError] = []
    try:
        for i in range(8000):
            try:
                store.core.write_blob(f"blob {i}\n".encode())
            except OSError as exc:
                failures.append(exc)
    finally:
        sweeper.kill()
        sweeper.wait()
    assert failures == []


def test_maintenance_never_repacks_while_a_rewrite_holds_the_store_lock(store: Store) -> None:
    """Before: a writer's automatic repack ran during a redaction or compaction; one that read the
    packs before the purge and wrote its pack after the purge's proof put the retired objects back
    (the compaction stress run: ``verify``: "19 deny-listed objects are still in the store"). Now
    maintenance holds the store lock shared, as a push does: skipped while a rewrite holds it."""
    for i in range(30):
        store.write(f"/f{i}.md", f"filler {i}\n")

    def loose() -> int:
        out = subprocess.run(
            ["git", f"--git-dir={store.path}", "count-objects", "-v"], capture_output=True, text=True
        ).stdout
        return int(next(x for x in out.splitlines() if x.startswith("count:")).split()[1])

    before = loose()
    assert before > 0
    held, release = threading.Event(), threading.Event()

    def rewrite() -> None:
        with gitmem.open_store(str(store.path)) as other, journal.store_lock(other.core):
            held.set()
            release.wait(30)

    t = threading.Thread(target=rewrite)
    t.start()
    try:
        assert held.wait(30)
        assert store.core.maintain(force=False) is False or not store.core.needs_maintenance()
        assert store.core.repack() is False
        assert loose() == before  # nothing was repacked under the rewrite
    finally:
        release.set()
        t.join()
    assert store.core.repack() is True
    assert loose() < before
