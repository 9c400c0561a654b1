"""The one-flush write path (docs/durability.md): SIGKILL at every step of a single write, a group
commit and a batch; then a simulated power loss (the ref move or the objects lost, a torn intent
line). After each: ``git fsck --full``, ``gitmem verify``, every acknowledged write present."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pygit2
import pytest

import gitmem
from gitmem.audit.verify import verify
from gitmem.git import intent as gitrepo  # the intent log's names
from tests.helpers import git

# The child kills itself at the Nth call of one step of the publish path; it prints each version
# id as soon as the call that made it returned (acknowledged).
CHILD = r"""
import os, signal, sys, threading
import gitmem
from gitmem.git import intent
from gitmem.git import repo as gitrepo
from gitmem.engine import batch, group, index, pipeline
from gitmem.engine.batch import BatchOp, apply_batch
from gitmem.git import packwriter

path, step, when, mode = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
calls = {"n": 0}
def die():
    os.kill(os.getpid(), signal.SIGKILL)
def wrap(fn):
    def inner(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3 and when == "before":
            die()
        out = fn(*a, **k)
        if calls["n"] == 3 and when == "after":
            die()
        return out
    return inner
if step == "objects":
    gitrepo.Repo.create_commit = wrap(gitrepo.Repo.create_commit)
elif step == "intent":
    intent._entry_line = wrap(intent._entry_line)
elif step == "flush":
    intent.syncfs_fd = wrap(intent.syncfs_fd)
elif step == "ref":
    gitrepo.Repo.cas = wrap(gitrepo.Repo.cas)
elif step == "stage":  # the index record, staged on this thread while the flush runs on another
    index.Index.stage = wrap(index.Index.stage)
elif step == "record":  # the staged index record committed, after the ref moved
    index.StagedRecord.commit = wrap(index.StagedRecord.commit)
elif step == "pack":  # the pack of a group or a batch: its .pack and .idx written, not flushed
    packwriter.install_pack = wrap(packwriter.install_pack)
    pipeline.PACK_MIN = 1  # every group writes a pack (a lone write too), however threads group
if mode == "fastimport":
    pipeline.FAST_IMPORT_MIN = 32  # git fast-import writes the pack, not gitmem
store = gitmem.open_store(path)
lock = threading.Lock()
def ack(v):
    with lock:
        sys.stdout.write(v + "\n")
        sys.stdout.flush()
if mode == "single":
    for k in range(6):
        ack(store.write(f"/s/m{k}", f"single {k}\n").id)
elif mode == "group":
    def writer(i):
        for k in range(4):
            ack(store.write(f"/g{i}/m{k}", f"group {i} {k}\n").id)
    ts = [threading.Thread(target=writer, args=(i,)) for i in range(4)]
    for t in ts: t.start()
    for t in ts: t.join()
else:
    size = 3 if mode == "batch" else 40  # a pack written in-process, or by fast-import
    for b in range(4):
        ops = [BatchOp("write", f"/b{b}/m{k}", f"batch {b} {k}\n") for k in range(size)]
        for v in apply_batch(store.core, ops).versions:
            ack(v.id)
"""

STEPS = ["objects", "pack", "intent", "flush", "stage", "ref", "record"]


def _check(path: Path, acked: list[str]) -> None:
    fsck = git(path, "fsck", "--full", "--strict", "--no-dangling", check=False)
    assert fsck.returncode == 0, fsck.stderr
    with gitmem.open_store(str(path)) as store:
        report = verify(store.core)
        assert report.ok, report
        for vid in acked:
            v = store.version(vid)
            assert store.read(v.path, version=vid).content
        ids = [v.id for v in store.versions()]
        assert len(ids) == len(set(ids))
        # The index the crash left (a staged record lost, or committed) equals one rebuilt from git.
        seen = _index_view(store)
        store.core.index.rebuild()
        assert _index_view(store) == seen
        assert store.write("/after", "a write after the crash\n") is not None
    cli = subprocess.run(
        [str(Path(sys.executable).with_name("gitmem")), "verify", str(path)], capture_output=True, check=False
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr


def _index_view(store: gitmem.Store) -> tuple[object, ...]:
    versions = sorted(
        (v.id, v.memory_id, v.path, v.operation, v.content_sha256, v.size) for v in store.versions()
    )
    heads = sorted((m.path, getattr(m, "memory_id", None), getattr(m, "size", None)) for m in store.list("/"))
    return versions, heads, sorted(h.path for h in store.search("batch group single", limit=500))


def _run_child(path: Path, step: str, when: str, mode: str) -> tuple[int, list[str]]:
    res = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), step, when, mode],
        capture_output=True,
        text=True,
        check=False,
    )
    return res.returncode, [line for line in res.stdout.splitlines() if line]


@pytest.mark.parametrize("mode", ["single", "group", "batch", "fastimport"])
@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("when", ["before", "after"])
def test_sigkill_at_each_step(workspace: Path, mode: str, step: str, when: str) -> None:
    with gitmem.create_store("crash", home=workspace) as store:
        store.write("/seed", "seed\n")
        path = store.path
    code, acked = _run_child(path, step, when, mode)
    if mode == "fastimport" and step in ("objects", "pack"):
        assert code == 0  # fast-import writes the commits and the pack: nothing to kill at
    else:
        assert code == -signal.SIGKILL, (code, acked)
    _check(path, acked)


def _entries(path: Path) -> list[str]:
    return (path / gitrepo.INTENT_LOG).read_text().splitlines()[1:]


def test_power_loss_losing_the_ref_move_is_replayed(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Acknowledged writes whose ref moves never reached the disk come back after a reboot."""
    with gitmem.create_store("crash", home=workspace) as store:
        store.write("/seed", "seed\n")
        path = store.path
    code, acked = _run_child(path, "none", "-", "single")
    assert code == 0 and len(acked) == 6
    entries = [gitrepo._parse_entry(line) for line in _entries(path)]
    assert len(entries) == 7 and all(e is not None for e in entries)
    first = entries[1]  # the first of the child's writes
    assert first is not None
    # The disk as a power loss could leave it: the objects and intent lines flushed, the ref not.
    git(path, "update-ref", "refs/heads/main", str(first[1]))
    monkeypatch.setattr(gitrepo, "boot_id", lambda: "another-boot")
    with gitmem.open_store(str(path)) as store:  # the first open after the "reboot" replays
        assert {v.id for v in store.versions()} >= set(acked)
        assert store.core.tip("main") == pygit2.Oid(hex=str(entries[-1][2]))  # type: ignore[index]
    assert (path / gitrepo.INTENT_LOG).read_text() == f"{gitrepo.INTENT_HEADER}another-boot\n"
    _check(path, acked)


def test_power_loss_losing_objects_keeps_the_old_ref(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An intent line whose objects did not all reach the disk is not replayed (the write was
    never acknowledged): the ref stays where it was and never points at a missing object."""
    with gitmem.create_store("crash", home=workspace) as store:
        v = store.write("/seed", "seed\n")
        assert v is not None
        path = store.path
        tip = store.core.tip("main")
        assert tip is not None
        sha = pygit2.Oid(hex="1" * 40)
        torn = gitrepo._entry_line("refs/heads/main", tip, pygit2.Oid(hex="2" * 40), [])
    with open(path / gitrepo.INTENT_LOG, "ab") as fh:
        fh.write(gitrepo._entry_line("refs/heads/main", tip, sha, [tip]))
        fh.write(torn[:-10])  # a line cut by the crash
    monkeypatch.setattr(gitrepo, "boot_id", lambda: "another-boot")
    with gitmem.open_store(str(path)) as store:
        assert store.core.tip("main") == tip
    assert (path / gitrepo.INTENT_LOG).read_text() == f"{gitrepo.INTENT_HEADER}another-boot\n"
    _check(path, [v.id])


def test_same_boot_opens_do_not_replay(workspace: Path) -> None:
    """Within one boot the page cache holds every ref move: an intent line whose compare-and-swap
    lost its race is never applied later."""
    with gitmem.create_store("crash", home=workspace) as store:
        store.write("/seed", "seed\n")
        store.write("/seed2", "seed\n")
        path = store.path
        tip = store.core.tip("main")
        assert tip is not None
        parent = store.core.commit(tip).parents[0].id
    git(path, "update-ref", "refs/heads/main", str(parent))
    with gitmem.open_store(str(path)) as store:
        assert store.core.tip("main") == parent


def test_the_intent_log_rotates(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gitrepo, "INTENT_ROTATE_BYTES", 600)
    with gitmem.create_store("crash", home=workspace) as store:
        for k in range(12):
            store.write(f"/m{k}", f"{k}\n")
        assert os.path.getsize(path := store.path / gitrepo.INTENT_LOG) < 2000
        assert len(_entries(store.path)) < 12
        assert path.read_text().startswith(gitrepo.INTENT_HEADER)


def test_power_loss_tearing_a_loose_object_keeps_the_old_ref(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loose object cut short by the power loss: libgit2's read of one never returns (pygit2
    1.x loops), so the replay used to hang the first open after the reboot. The file is checked
    whole first; the line is not replayed, the ref stays and the torn file goes (a later write of
    the same content would otherwise find it "written" and skip it)."""
    with gitmem.create_store("torn", home=workspace) as store:
        v = store.write("/seed", "seed\n")
        assert v is not None
        path = store.path
        tip = store.core.tip("main")
        assert tip is not None
        blob = store.core.write_blob(("a torn memory " * 200).encode())
    loose = path / "objects" / str(blob)[:2] / str(blob)[2:]
    data = loose.read_bytes()
    loose.chmod(0o644)
    loose.write_bytes(data[: len(data) // 2])
    with open(path / gitrepo.INTENT_LOG, "ab") as fh:
        fh.write(gitrepo._entry_line("refs/heads/main", tip, pygit2.Oid(hex="3" * 40), [blob]))
    monkeypatch.setattr(gitrepo, "boot_id", lambda: "another-boot")
    with gitmem.open_store(str(path)) as store:
        assert store.core.tip("main") == tip
    _check(path, [v.id])
    assert not loose.exists()
    with gitmem.open_store(str(path)) as store:  # the same content written again reads whole
        again = store.write("/again", ("a torn memory " * 200))
        assert again is not None
        assert store.read("/again").content == "a torn memory " * 200


def test_power_loss_tearing_the_last_line_and_its_loose_object(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The power loss cut the last intent line (its checksum fails: never replayed) and a loose
    object it names: the line's objects are checked whole as a complete line's are, and the torn
    file goes. Before, a torn line was skipped unread and its torn object stayed (``git fsck``
    failed, and a later write of the same content found it "written", then every read of it hung)."""
    with gitmem.create_store("torn", home=workspace) as store:
        v = store.write("/seed", "seed\n")
        assert v is not None
        path = store.path
        tip = store.core.tip("main")
        assert tip is not None
        blob = store.core.write_blob(("a torn last line " * 200).encode())
        whole = store.core.write_blob(b"a whole object the torn line names\n")
    loose = path / "objects" / str(blob)[:2] / str(blob)[2:]
    data = loose.read_bytes()
    loose.chmod(0o644)
    loose.write_bytes(data[: len(data) // 2])
    line = gitrepo._entry_line("refs/heads/main", tip, pygit2.Oid(hex="3" * 40), [whole, blob])
    with open(path / gitrepo.INTENT_LOG, "ab") as fh:
        fh.write(line[:-10])  # cut in its checksum: the ids before it are whole
    assert gitrepo._parse_entry(line[:-10].decode()) is None
    monkeypatch.setattr(gitrepo, "boot_id", lambda: "another-boot")
    with gitmem.open_store(str(path)) as store:
        assert store.core.tip("main") == tip
    assert not loose.exists()
    assert (path / "objects" / str(whole)[:2] / str(whole)[2:]).exists()  # whole: kept
    _check(path, [v.id])
    with gitmem.open_store(str(path)) as store:  # the same content written again reads whole
        again = store.write("/again", ("a torn last line " * 200))
        assert again is not None
        assert store.read("/again").content == "a torn last line " * 200
