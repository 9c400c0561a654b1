"""Merging small packs (gitmem.git.consolidate) against what else touches objects/pack: a
multi-pack index, long-lived readers, other processes writing and merging, git repack, crashes
mid-merge and a redaction."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import gitmem
from gitmem.audit.verify import verify
from gitmem.engine import pipeline
from gitmem.git import consolidate
from gitmem.git.repo import STORE_LOCK
from tests.helpers import git


@pytest.fixture(autouse=True)
def _every_write_a_pack(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lone writes keep loose objects; here every write publishes a pack of its own, as group
    commits and batches do, so that small packs pile up quickly."""
    monkeypatch.setattr(pipeline, "PACK_MIN", 1)  # group commits and batches alike


def _merge(path: Path) -> int:
    return consolidate.merge_now(str(path))


def _pack_fds() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if "objects/pack" in os.readlink(f"/proc/self/fd/{fd}"):
                n += 1
        except OSError:
            continue
    return n


def test_a_merge_drops_a_multi_pack_index_naming_a_merged_pack(workspace: Path) -> None:
    with gitmem.create_store("midx", home=workspace) as store:
        path = store.path
        store.core.writes_unchecked = -(1 << 30)
        for k in range(consolidate.SMALL_PACKS_MAX + 2):
            store.write(f"/a/{k}.md", f"a {k}\n")
        assert git(path, "multi-pack-index", "write").returncode == 0  # as git maintenance does
        assert _merge(path) > 0
        assert [store.read(f"/a/{k}.md").content for k in range(3)] == ["a 0\n", "a 1\n", "a 2\n"]
        assert verify(store.core, raise_on_failure=False).ok
    fsck = git(path, "fsck", "--full", "--strict", check=False)
    assert fsck.returncode == 0, fsck.stderr


def test_a_long_lived_handle_does_not_keep_a_descriptor_per_write(workspace: Path) -> None:
    with gitmem.create_store("fds", home=workspace) as store:
        for k in range(300):
            store.write(f"/b/{k}.md", f"b {k}\n")
            assert store.read(f"/b/{k}.md").content == f"b {k}\n"
        assert _pack_fds() <= 200  # was one more per write (the packs merged away included)
        assert [store.read(f"/b/{k}.md").content for k in (0, 150, 299)] == ["b 0\n", "b 150\n", "b 299\n"]


def test_readers_in_threads_never_fail_while_packs_are_merged(workspace: Path) -> None:
    with gitmem.create_store("readers", home=workspace) as store:
        path = store.path
        store.core.writes_unchecked = -(1 << 30)
        for k in range(8):
            store.write(f"/r/{k}.md", f"r {k}\n")
        stop = threading.Event()
        errors: list[BaseException] = []

        def reader() -> None:
            with gitmem.open_store(path) as mine:
                while not stop.is_set():
                    try:
                        for k in range(8):
                            assert mine.read(f"/r/{k}.md").content == f"r {k}\n"
                        assert len(mine.versions("/r/0.md")) >= 1
                        assert all(m.content for m in mine.list("/w/", with_content=True))  # type: ignore[union-attr]
                    except BaseException as exc:  # noqa: BLE001 - reported below
                        errors.append(exc)
                        return

        threads = [threading.Thread(target=reader) for _ in range(2)]
        for t in threads:
            t.start()
        try:
            for round_ in range(6):
                for k in range(consolidate.SMALL_PACKS_MAX):
                    store.write(f"/w/{round_}-{k}.md", f"w {k}\n")
                _merge(path)
        finally:
            stop.set()
            for t in threads:
                t.join()
        assert not errors, errors[0]
    assert git(path, "fsck", "--full", "--strict").returncode == 0


_WRITER = r"""
import sys, gitmem
from gitmem.engine import pipeline
pipeline.PACK_MIN = 1  # every write a pack, as in this file's tests
from gitmem.git import consolidate
from gitmem.git.repo import STORE_LOCK
path, tag, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with gitmem.open_store(path) as store:
    for k in range(n):
        v = store.write(f"/{tag}/{k}.md", f"{tag} {k}\n")
        print(v.id, flush=True)
        if k % 5 == 4:
            consolidate.merge_now(path)
"""


def test_writers_and_merges_in_processes_and_git_repack_lose_nothing(workspace: Path) -> None:
    with gitmem.create_store("procs", home=workspace) as store:
        path = store.path
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), f"p{i}", "40"], stdout=subprocess.PIPE, text=True
        )
        for i in range(3)
    ]
    repacks = 0
    while any(p.poll() is None for p in procs):
        res = git(path, "repack", "-d", "-q", "--geometric=2", check=False)
        repacks += res.returncode == 0
    outs = [p.communicate()[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert _merge(path) >= 0
    with gitmem.open_store(path) as store:
        for i in range(3):
            assert len(outs[i]) == 40
            for k in range(40):
                assert store.read(f"/p{i}/{k}.md").content == f"p{i} {k}\n"
        assert verify(store.core, raise_on_failure=False).ok
    assert git(path, "fsck", "--full", "--strict").returncode == 0


_KILLED_MERGE = r"""
import os, signal, sys
from gitmem.git import consolidate
path, step = sys.argv[1], sys.argv[2]
real_unlink, real_sync = os.unlink, consolidate.syncfs
seen = {"unlink": 0}
def die():
    os.kill(os.getpid(), signal.SIGKILL)
def sync(p):
    if step == "before-sync":
        die()
    real_sync(p)
    if step == "after-sync":
        die()
def unlink(p, *a, **k):
    seen["unlink"] += 1
    if step.startswith("unlink-") and seen["unlink"] == int(step[len("unlink-"):]):
        die()
    return real_unlink(p, *a, **k)
consolidate.syncfs = sync
consolidate.os.unlink = unlink
consolidate.merge_now(path)
"""


@pytest.mark.parametrize("step", ["before-sync", "after-sync", "unlink-1", "unlink-2", "unlink-5"])
def test_a_merge_killed_at_any_step_loses_nothing(workspace: Path, step: str) -> None:
    with gitmem.create_store("kill", home=workspace) as store:
        path = store.path
        store.core.writes_unchecked = -(1 << 30)
        versions = [store.write(f"/k/{k}.md", f"k {k}\n") for k in range(consolidate.SMALL_PACKS_MAX)]
    res = subprocess.run([sys.executable, "-c", _KILLED_MERGE, str(path), step], check=False)
    assert res.returncode == -signal.SIGKILL
    with gitmem.open_store(path) as store:
        for k, v in enumerate(versions):
            assert v is not None and store.read(f"/k/{k}.md", version=v.id).content == f"k {k}\n"
        store.write("/k/after.md", "after\n")
        assert _merge(path) >= 0
        assert verify(store.core, raise_on_failure=False).ok
    assert git(path, "fsck", "--full", "--strict").returncode == 0


def test_a_merge_after_a_redaction_puts_nothing_back(workspace: Path) -> None:
    with gitmem.create_store("redact", home=workspace) as store:
        path = store.path
        store.core.writes_unchecked = -(1 << 30)
        secret = store.write("/s.md", "the secret\n")
        tree = git(path, "ls-tree", "-r", "refs/heads/main").stdout.splitlines()
        (blob,) = [line.split()[2] for line in tree if line.endswith("s.md")]
        store.write("/s.md", "rotated\n")
        for k in range(consolidate.SMALL_PACKS_MAX):
            store.write(f"/n/{k}.md", f"n {k}\n")
        assert secret is not None
        store.redact(secret.id, reason="leak")
        for k in range(consolidate.SMALL_PACKS_MAX):
            store.write(f"/m/{k}.md", f"m {k}\n")
        _merge(path)
        assert git(path, "cat-file", "-e", blob, check=False).returncode != 0
        assert verify(store.core, raise_on_failure=False).ok
    assert git(path, "fsck", "--full", "--strict").returncode == 0


_KILLED_PURGE = r"""
import os, signal, sys
import gitmem
from gitmem.git import purge
path, version, step = sys.argv[1], sys.argv[2], sys.argv[3]
real_install, real_remove = purge.install_pack, purge._remove_pack
def install(*args):
    out = real_install(*args)  # the copy without the retired objects, in place
    if step == "after-sync":
        purge.intent.syncfs(args[0])
    os.kill(os.getpid(), signal.SIGKILL)
def remove(idx):
    idx.unlink()
    if step == "after-idx":
        os.kill(os.getpid(), signal.SIGKILL)
    real_remove(idx)
if step != "after-idx":
    purge.install_pack = install
purge._remove_pack = remove
with gitmem.open_store(path) as store:
    store.redact(version, reason="leak")
"""


@pytest.mark.parametrize("step", ["after-install", "after-sync", "after-idx"])
def test_a_purge_killed_while_copying_a_small_pack_is_completed_on_the_next_open(
    workspace: Path, step: str
) -> None:
    with gitmem.create_store("purgekill", home=workspace) as store:
        path = store.path
        store.core.writes_unchecked = -(1 << 30)
        secret = store.write("/s.md", "the secret\n")
        assert secret is not None
        tree = git(path, "ls-tree", "-r", "refs/heads/main").stdout.splitlines()
        (blob,) = [line.split()[2] for line in tree if line.endswith("s.md")]
        store.write("/s.md", "rotated\n")
        others = [store.write(f"/o/{k}.md", f"o {k}\n") for k in range(4)]
    res = subprocess.run([sys.executable, "-c", _KILLED_PURGE, str(path), secret.id, step], check=False)
    assert res.returncode == -signal.SIGKILL
    with gitmem.open_store(path) as store:
        store.write("/o/after.md", "after\n")  # a write recovers the interrupted redaction first
        assert [store.read(f"/o/{k}.md").content for k in range(4)] == [f"o {k}\n" for k in range(4)]
        assert all(v is not None and store.read(v.path, version=v.id) for v in others)
        assert store.read("/s.md").content == "rotated\n"
        assert git(path, "cat-file", "-e", blob, check=False).returncode != 0
        assert verify(store.core, raise_on_failure=False).ok
    assert git(path, "fsck", "--full", "--strict").returncode == 0


def test_pushes_landing_as_packs_beside_merges_lose_nothing(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with gitmem.create_store("pushes", home=workspace) as store:
        path = store.path
        store.write("/seed.md", "seed\n")
    assert git(path, "config", "receive.unpackLimit", "1").returncode == 0  # every push: a pack
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", f"file://{path}", str(work))
    stop = threading.Event()
    errors: list[BaseException] = []

    def merger() -> None:
        while not stop.is_set():
            try:
                consolidate.merge_now(str(path))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    monkeypatch.setattr(consolidate, "SMALL_PACKS_MAX", 2)
    thread = threading.Thread(target=merger)
    thread.start()
    pushed = []
    try:
        for k in range(12):
            (work / f"p{k}.md").write_text(f"pushed {k}\n")
            git(work, "add", "-A")
            git(work, "commit", "-q", "-m", f"push {k}")
            res = git(work, "push", "-q", "origin", "main", check=False)
            assert res.returncode == 0, res.stderr
            pushed.append(git(work, "rev-parse", "HEAD").stdout.strip())
    finally:
        stop.set()
        thread.join()
    assert not errors, errors[0]
    for commit in pushed:
        assert git(path, "cat-file", "-e", commit, check=False).returncode == 0
    with gitmem.open_store(path) as store:
        assert [store.read(f"/p{k}.md").content for k in range(12)] == [f"pushed {k}\n" for k in range(12)]
        assert verify(store.core, raise_on_failure=False).ok
    assert git(path, "fsck", "--full", "--strict").returncode == 0


def test_a_merge_that_cannot_run_does_not_fail_the_published_write(workspace: Path) -> None:
    with gitmem.create_store("nomerge", home=workspace) as store:
        path = store.path
        (path / "gitmem" / (STORE_LOCK + "-merge")).mkdir()  # its lock file cannot be opened
        versions = [store.write(f"/q/{k}.md", f"q {k}\n") for k in range(3 * consolidate.SMALL_PACKS_MAX)]
        assert all(v is not None for v in versions)
        assert [store.read(f"/q/{k}.md").content for k in range(3)] == ["q 0\n", "q 1\n", "q 2\n"]
        with pytest.raises(gitmem.GitmemError, match="cannot merge the small packs"):
            _merge(path)


_MERGING_WRITER = r"""
import sys, gitmem
from gitmem.engine import pipeline
pipeline.PACK_MIN = 1  # every write a pack, as in this file's tests
from gitmem.engine import pipeline
pipeline.PACK_MIN = 1  # every write a pack, as in this file's tests
from gitmem.git import consolidate
from gitmem.git.repo import STORE_LOCK
path = sys.argv[1]
with gitmem.open_store(path) as store:
    store.core.writes_unchecked = -(1 << 30)
    for k in range(400):
        store.write(f"/w/{k}.md", f"w {k}\n")
        if k % 4 == 3:
            consolidate.SMALL_PACKS_MAX = 4
            consolidate.merge_now(path)
"""


def test_verify_beside_writes_and_merges_reports_no_false_fsck_failure(workspace: Path) -> None:
    with gitmem.create_store("liveverify", home=workspace) as store:
        path = store.path
        for k in range(10):
            store.write(f"/s/{k}.md", f"s {k}\n")
    writer = subprocess.Popen([sys.executable, "-c", _MERGING_WRITER, str(path)])
    reports = []
    with gitmem.open_store(path) as store:
        while writer.poll() is None:
            reports.append(verify(store.core, raise_on_failure=False))
    assert writer.wait() == 0
    # Only fsck: the index check compares the index with git at two moments (writes go on).
    failed = [c.detail for r in reports for c in r.checks if c.name == "fsck" and not c.ok]
    assert reports and not failed, failed[:2]


def test_many_small_packs_never_start_git_gc_auto(workspace: Path) -> None:
    with gitmem.create_store("autogc", home=workspace) as store:
        path = store.path
        store.core.writes_unchecked = -(1 << 30)  # no merge: packs pile up, as under a long redaction
        for k in range(60):
            store.write(f"/g/{k}.md", f"g {k}\n")
    packs = {p.name for p in (path / "objects" / "pack").glob("*.pack")}
    assert len(packs) >= 60
    # What receive-pack runs after every push (there detached, without the store lock).
    res = git(path, "-c", "gc.autoDetach=false", "gc", "--auto")
    assert res.returncode == 0
    assert {p.name for p in (path / "objects" / "pack").glob("*.pack")} == packs
