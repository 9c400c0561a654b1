"""The in-process pack writer (gitmem/git/packwriter.py): the packs it writes are read back whole by
git and libgit2, objects already stored are not staged again, and a group commit or a batch leaves
its versions in one pack, not in loose files."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pygit2
import pytest

import gitmem
from gitmem.engine.batch import BatchOp, apply_batch
from gitmem.git import packwriter
from gitmem.git.packwriter import Staging
from gitmem.git.repo import Repo
from tests.helpers import git

SIG = pygit2.Signature("t", "t@example.org", 1_700_000_000, 0)


def _loose(git_dir: Path) -> int:
    return sum(len(os.listdir(d)) for d in (git_dir / "objects").glob("[0-9a-f][0-9a-f]"))


def test_a_staged_pack_reads_back_in_git_and_libgit2(tmp_path: Path) -> None:
    path = tmp_path / "r.git"
    repo = Repo(pygit2.init_repository(str(path), bare=True), path)
    small = b"small\n"
    big = os.urandom(3000) * 5 + b"end\n"  # above the small-object zlib settings
    with repo.staged() as stage:
        a = repo.write_blob(small)
        b = repo.write_blob(big)
        names = [f"file-{i:04d}.md" for i in range(300)]  # a large tree (stored, not deflated)
        tree: pygit2.Tree | None = None
        for name in names:
            tree_oid = repo.update_tree(tree, [name], b if name.endswith("7.md") else a)
            assert tree_oid is not None
            obj = repo.written_object(tree_oid)
            assert isinstance(obj, pygit2.Tree)
            tree = obj
        assert tree is not None
        commit = repo.create_commit(tree.id, [], "a commit\n", ("user:a", "user:a"))
        assert stage.pending >= 4
        pack = stage.write()
    assert pack is not None and os.path.exists(pack) and os.path.exists(pack[:-5] + ".idx")
    assert _loose(path) == 0
    assert git(path, "verify-pack", pack[:-5] + ".idx").returncode == 0
    git(path, "update-ref", "refs/heads/main", str(commit))
    assert git(path, "fsck", "--full", "--strict").returncode == 0
    fresh = pygit2.Repository(str(path))
    blob = fresh[b]
    assert isinstance(blob, pygit2.Blob) and blob.data == big
    t = fresh[commit].tree
    assert len(t) == 300 and t["file-0017.md"].id == b
    repo.free()


def test_an_object_already_stored_is_staged_again_and_the_store_stays_sound(tmp_path: Path) -> None:
    # The staging repository does not ask the store whether an object exists before writing it
    # (libgit2's check refreshed the pack directory on every new object): a copy of an object the
    # store has goes into the group's pack again, which git reads and fsck accepts.
    path = tmp_path / "r.git"
    raw = pygit2.init_repository(str(path), bare=True)
    kept = raw.create_blob(b"already here\n")
    tree = raw.TreeBuilder()
    tree.insert("kept.md", kept, pygit2.enums.FileMode.BLOB)
    git(
        path,
        "update-ref",
        "refs/heads/main",
        str(raw.create_commit(None, SIG, SIG, "seed\n", tree.write(), [])),
    )
    assert git(path, "repack", "-a", "-d", "-q").returncode == 0
    stage = Staging(raw.path)
    assert stage.repo.create_blob(b"already here\n") == kept
    assert stage.pending == 1
    pack = stage.write()
    assert pack is not None and stage.pending == 0
    assert git(path, "verify-pack", pack[:-5] + ".idx").returncode == 0
    assert git(path, "fsck", "--full", "--strict").returncode == 0
    assert git(path, "repack", "-a", "-d", "-q").returncode == 0  # one copy again
    assert git(path, "count-objects", "-v").stdout.count("packs: 1") == 1
    assert pygit2.Repository(str(path))[kept].data == b"already here\n"
    stage.repo.create_blob(b"new\n")
    assert stage.pending == 1
    stage.discard()
    assert stage.pending == 0 and stage.write() is None


def test_a_batch_and_a_group_commit_write_packs_not_loose_objects(workspace: Path) -> None:
    with gitmem.create_store("packs", home=workspace) as store:
        store.write("/seed", "seed\n")
        before = _loose(store.path)
        done = apply_batch(store.core, [BatchOp("write", f"/b/m{k}", f"batch {k}\n") for k in range(10)])
        assert len(done.versions) == 10
        assert _loose(store.path) == before  # one pack, no new loose file
        errors: list[BaseException] = []

        def writer(i: int) -> None:
            try:
                for k in range(10):
                    store.write(f"/t{i}/m{k}", f"thread {i} write {k}\n")
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        ids = [v.id for v in store.versions()]
        assert len(ids) == len(set(ids)) == 1 + 10 + 60
        for i in range(6):
            assert store.read(f"/t{i}/m9").content == f"thread {i} write 9\n"
        path = store.path
    assert git(path, "fsck", "--full", "--strict").returncode == 0


def test_loose_writes_survive_a_concurrent_repack(workspace: Path) -> None:
    """``git repack -d`` prunes packed loose objects and their emptied ``objects/xx/`` directories;
    a loose write that created such a directory a moment before still lands (it is retried)."""
    with gitmem.create_store("race", home=workspace) as store:
        store.write("/seed", "seed\n")
        stop = threading.Event()

        def repack() -> None:
            while not stop.is_set():
                git(store.path, "repack", "-d", "-q", check=False)
                git(store.path, "prune-packed", check=False)

        t = threading.Thread(target=repack)
        t.start()
        try:
            written = [store.write(f"/r/m{k}", f"write {k}\n") for k in range(60)]
        finally:
            stop.set()
            t.join()
        assert all(v is not None for v in written)
        assert [store.read(f"/r/m{k}").content for k in range(60)] == [f"write {k}\n" for k in range(60)]
        path = store.path
    assert git(path, "fsck", "--full", "--strict").returncode == 0


def test_a_long_batch_is_written_in_several_packs_past_the_memory_bound(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(packwriter, "STAGE_MAX_BYTES", 2000)  # a pack every few versions
    with gitmem.create_store("bound", home=workspace) as store:
        ops = [BatchOp("write", f"/b/m{k}", f"batch {k} " + "x" * 500 + "\n") for k in range(12)]
        done = apply_batch(store.core, ops)
        assert len(done.versions) == 12
        assert len(list((store.path / "objects" / "pack").glob("*.idx"))) >= 3
        assert (store.read("/b/m11").content or "").startswith("batch 11 ")
        assert len(store.versions()) == 12
        path = store.path
    assert git(path, "fsck", "--full", "--strict").returncode == 0


def test_a_tree_past_one_stored_block_reads_back_and_repacks(tmp_path: Path) -> None:
    """Trees go into packs as stored deflate blocks (at most 64 KiB each): a tree of about 90 kB
    spans two blocks, and git, libgit2 and a repack all read it whole."""
    path = tmp_path / "r.git"
    repo = Repo(pygit2.init_repository(str(path), bare=True), path)
    with repo.staged() as stage:
        blob = repo.write_blob(b"x\n")
        builder = repo._writer.TreeBuilder()  # the staging repository: the tree goes into the pack
        for i in range(2000):
            builder.insert(f"memory-with-a-long-name-{i:05d}.md", blob, pygit2.enums.FileMode.BLOB)
        tree = builder.write()
        commit = repo.create_commit(tree, [], "a wide tree\n", ("user:a", "user:a"))
        pack = stage.write()
    assert pack is not None and _loose(path) == 0
    raw = repo.repo.odb.read(tree)[1]
    assert len(raw) > 0xFFFF  # more than one stored block
    git(path, "update-ref", "refs/heads/main", str(commit))
    assert git(path, "fsck", "--full", "--strict").returncode == 0
    assert git(path, "repack", "-a", "-d", "-q").returncode == 0
    assert git(path, "fsck", "--full", "--strict").returncode == 0
    fresh = pygit2.Repository(str(path))
    t = fresh[commit].tree
    assert len(t) == 2000 and t["memory-with-a-long-name-01999.md"].id == blob
    assert fresh.odb.read(tree)[1] == raw
    repo.free()


def test_the_loose_writer_writes_as_git_does_and_falls_back_to_the_stores_database(tmp_path: Path) -> None:
    path = tmp_path / "r.git"
    raw = pygit2.init_repository(str(path), bare=True)
    objects = os.path.join(raw.path, "objects")
    writer = packwriter.loose_writer(objects)
    oid = writer.create_blob(b"loose\n")
    assert oid == pygit2.hash(b"loose\n")
    loose = Path(objects) / str(oid)[:2] / str(oid)[2:]
    assert loose.is_file() and (loose.stat().st_mode & 0o777) == 0o444
    assert writer.create_blob(b"loose\n") == oid  # again: the same file, no error
    assert git(path, "cat-file", "-p", str(oid)).stdout == "loose\n"
    # The fallback a failed loose write takes (its objects/xx/ directory pruned under it).
    backend = packwriter._ReadThrough(objects)
    other = pygit2.hash(b"fallback\n")
    backend.write_cb(other, b"fallback\n", pygit2.enums.ObjectType.BLOB)
    assert git(path, "cat-file", "-p", str(other)).stdout == "fallback\n"
    assert git(path, "fsck", "--full", "--strict").returncode == 0


def test_writers_read_objects_another_process_packed_after_they_opened(tmp_path: Path) -> None:
    # A store handle's writers live as long as its threads; a push (or a repack) meanwhile puts
    # the tip's trees into a pack the writer has not seen. Building on them must still work.
    path = tmp_path / "r.git"
    raw = pygit2.init_repository(str(path), bare=True)
    objects = os.path.join(raw.path, "objects")
    loose, stage = packwriter.loose_writer(objects), Staging(raw.path)
    loose.create_blob(b"opened\n")  # both have read the (empty) object database once
    stage.repo.create_blob(b"opened\n")
    stage.discard()
    other = pygit2.Repository(str(path))
    tb = other.TreeBuilder()
    tb.insert("late.md", other.create_blob(b"late\n"), pygit2.enums.FileMode.BLOB)
    late = tb.write()
    assert (
        git(
            path,
            "update-ref",
            "refs/heads/main",
            str(other.create_commit(None, SIG, SIG, "late\n", late, [])),
        ).returncode
        == 0
    )
    assert git(path, "repack", "-a", "-d", "-q").returncode == 0  # the tree now lives only in a new pack
    for repo in (loose, stage.repo):
        builder = repo.TreeBuilder(late)
        builder.insert("more.md", repo.create_blob(b"more\n"), pygit2.enums.FileMode.BLOB)
        assert len(repo[builder.write()]) == 2
    assert stage.write() is not None
    assert git(path, "fsck", "--full", "--strict").returncode == 0


def _repack_after_first_rename(monkeypatch: pytest.MonkeyPatch, git_dir: Path) -> list[str]:
    """Run ``git repack -A -d`` (real git) once, right after the first file of a pack is renamed
    into ``objects/pack/``: the interleaving a loaded machine gave one run in ten, made certain."""
    renamed: list[str] = []
    rename = os.rename

    def rename_then_repack(src: str, dst: str) -> None:
        rename(src, dst)
        if os.path.basename(dst).startswith("pack-") and not renamed:
            renamed.append(dst)
            assert git(git_dir, "repack", "-A", "-d", "-q").returncode == 0

    monkeypatch.setattr(os, "rename", rename_then_repack)
    return renamed


def test_a_repack_between_a_packs_two_renames_deletes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the .pack went in first. git repack -A -d lists the packs it deletes by their .pack
    # and its pack-objects reads those it finds by their .idx: it deleted the new .pack unread,
    # its objects neither packed nor loosened, and the .idx renamed in after it named nothing
    # (a batch's whole write missing in fsck, the branch already on it). Now the .idx goes first.
    path = tmp_path / "r.git"
    pygit2.init_repository(str(path), bare=True)
    objects = {pygit2.hash(b"x%d\n" % i): (3, b"x%d\n" % i) for i in range(3)}
    pack, index, name = packwriter.encode_pack(objects)
    renamed = _repack_after_first_rename(monkeypatch, path)
    out = packwriter.install_pack(str(path / "objects" / "pack"), name, pack, index)
    fresh = pygit2.Repository(str(path))
    assert [oid in fresh for oid in objects] == [True] * 3
    assert os.path.exists(out) and os.path.exists(out[: -len(".pack")] + ".idx")
    assert renamed == [out[: -len(".pack")] + ".idx"]


def test_a_batch_whose_pack_a_repack_met_halfway_in_is_published_whole(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = gitmem.create_store("notes", home=workspace)
    store.write("/seed.md", "seed\n")
    renamed = _repack_after_first_rename(monkeypatch, store.path)
    done = apply_batch(store.core, [BatchOp("write", f"/b{k}.md", f"batch {k}\n") for k in range(3)])
    assert len(done.versions) == 3 and len(renamed) == 1
    monkeypatch.undo()
    store.close()
    assert git(store.path, "fsck", "--full", "--strict", "--no-dangling").returncode == 0
    with gitmem.open_store(str(store.path)) as again:
        assert again.read("/b2.md").content == "batch 2\n"
