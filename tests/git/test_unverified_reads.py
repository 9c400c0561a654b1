"""``unverified_reads``: libgit2's re-hash of every object read is off only while a walk runs (and
while any of several overlapping walks runs), and back on after, also when the walk fails."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pygit2
import pytest

from gitmem.git.repo import unverified_reads
from gitmem.store import Store


def _forged(repo: pygit2.Repository) -> pygit2.Oid:
    """A loose object whose file holds another object's bytes: its id no longer matches them."""
    real = repo.create_blob(b"what the file holds\n")
    claimed = repo.create_blob(b"what the id names\n")
    objects = Path(repo.path) / "objects"
    target = objects / str(claimed)[:2] / str(claimed)[2:]
    target.chmod(0o644)
    shutil.copyfile(objects / str(real)[:2] / str(real)[2:], target)
    return claimed


def test_strict_reads_are_back_after_a_walk(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    forged = _forged(repo)
    with pytest.raises(pygit2.GitError):
        pygit2.Repository(repo.path).odb.read(forged)
    with unverified_reads():
        assert pygit2.Repository(repo.path).odb.read(forged)[1] == b"what the file holds\n"
        with unverified_reads():  # a second walk in another thread
            pass
        assert pygit2.Repository(repo.path).odb.read(forged)[1] == b"what the file holds\n"
    with pytest.raises(pygit2.GitError):
        pygit2.Repository(repo.path).odb.read(forged)
    with pytest.raises(RuntimeError), unverified_reads():
        raise RuntimeError("the walk failed")
    with pytest.raises(pygit2.GitError):
        pygit2.Repository(repo.path).odb.read(forged)


def test_overlapping_walks_in_threads_leave_strict_reads_on(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    forged = _forged(repo)
    inside = threading.Barrier(8)

    def walk() -> None:
        with unverified_reads():
            inside.wait(timeout=60)

    threads = [threading.Thread(target=walk) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with pytest.raises(pygit2.GitError):
        pygit2.Repository(repo.path).odb.read(forged)


def test_a_catch_up_leaves_strict_reads_on(store: Store, tmp_path: Path) -> None:
    for i in range(5):
        store.write(f"/n/{i}.md", f"note {i}\n")
    store.core.index.rebuild()
    repo = pygit2.Repository(str(store.path))
    forged = _forged(repo)
    with pytest.raises(pygit2.GitError):
        repo.odb.read(forged)
